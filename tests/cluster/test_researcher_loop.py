"""The researcher's loop on real pods (issue 11): code written in a notebook reaches real
workers however the job is launched, records what it ran, and keeps its outputs."""

from __future__ import annotations

import requests

from cluster_helpers import wait_for
from kubehub import MY_TRAIN, SMALL, in_notebook, job_story, ns, python_in_notebook, wait_job, write_file


def test_the_researchers_own_code_reaches_real_workers_from_every_way_of_launching(hub, core_v1, real_cluster):
    """A script and the module it imports, written in the notebook and nowhere else, run as
    jobs launched by the widget, the Python API, the %%paddle_train magic in the pod's IPython
    (the script as the cell), the CLI inside the pod and REST. The folder is on the shared
    home: the jobs run there and keep their outputs beside it. The magic's and REST's jobs have
    2 workers, the others 1: the code reaches every worker the same way whatever launched the
    job, and the real node's 2 CPUs run 4 of these workers at a time."""
    token = hub.admin_token
    hub.ensure_running("bob", token)
    write_file(hub, "bob", "project/my_train.py", MY_TRAIN)
    write_file(hub, "bob", "project/model.py", "VERSION = 'v1'\n")
    small = f"cpu={SMALL['cpu']!r}, memory={SMALL['memory']!r}"
    in_project = "import os; os.chdir('/home/jovyan/project'); "
    names = {
        "widget": python_in_notebook(real_cluster, "bob", in_project + (
            "from paddle_ext.widgets import JobLauncher; "
            f"launcher = JobLauncher(workers=1, command=['python', 'my_train.py'], {small}); "
            "print(launcher.launch().name)")),
        "python": python_in_notebook(real_cluster, "bob", in_project + (
            "from paddle_ext import JobClient, JobSpec; "
            f"print(JobClient().submit(JobSpec(command=['python', 'my_train.py'], workers=1, {small})).name)")),
    }
    cli = in_notebook(real_cluster, "bob", "sh", "-c", "cd /home/jovyan/project && paddlecloud submit --workers 1 "
                      f"--cpu {SMALL['cpu']} --memory {SMALL['memory']} -- python my_train.py")
    assert cli.returncode == 0 and "Warning" not in cli.stderr, cli.stderr[-3000:]
    names["cli"] = cli.stdout.strip().splitlines()[-1]
    rest = requests.post(f"{hub.url}/user/bob/paddle/api/jobs", params={"workdir": "project"}, timeout=120,
                         headers={"Authorization": f"token {token}"},
                         json={"command": ["python", "my_train.py"], "workers": 2, **SMALL})
    assert rest.status_code == 201, rest.text
    names["rest"] = rest.json()["name"]
    # Last: the cell's script it writes into the folder would travel with the jobs after it.
    names["magic"] = python_in_notebook(real_cluster, "bob", in_project + (
        "from IPython.core.interactiveshell import InteractiveShell; shell = InteractiveShell.instance(); "
        "shell.run_line_magic('load_ext', 'paddle_ext'); "
        f"print(shell.run_cell_magic('paddle_train', '--workers 2 --no-follow --cpu {SMALL['cpu']} "
        f"--memory {SMALL['memory']}', {MY_TRAIN!r}).name)"))

    headers = {"Authorization": f"token {token}"}
    base = f"{hub.url}/user/bob"
    workers = {way: 2 if way in ("rest", "magic") else 1 for way in names}
    for way, name in names.items():
        job = wait_job(hub, "bob", name)
        assert job["phase"] == "Succeeded", f"{way}: {job_story(hub, 'bob', name)}"  # a str: shown whole
        files = 2 + (way == "magic")  # the cell's own script, paddlecloud_cells/<job>.py, travels too
        assert job["code"]["workdir"] == "/home/jovyan/project" and job["code"]["files"] == files, (way, job["code"])
        logs = requests.get(f"{base}/paddle/api/jobs/{name}/logs", headers=headers, timeout=60).text.splitlines()
        assert job["workers"] == workers[way], (way, job["workers"])
        prefix = "[worker-{}] " if workers[way] > 1 else ""  # a merged log names workers when it has several
        assert all(f"{prefix.format(rank)}rank {rank}: model v1" in logs for rank in range(workers[way])), \
            (way, logs[-20:])
        metrics = requests.get(f"{base}/paddle/api/jobs/{name}/metrics", headers=headers, timeout=60).json()
        assert sorted((p["worker"], p["values"]["loss"]) for p in metrics["points"]) == \
            [(rank, 0.5 + rank) for rank in range(workers[way])], way
        assert job["outputs"] == {"path": f"/home/jovyan/project/paddlecloud-outputs/{name}", "kept": True,
                                  "note": ""}

    # The outputs outlive the pods: readable from the notebook once they are gone.
    name = names["rest"]
    core_v1.delete_collection_namespaced_pod(ns("bob"), label_selector=f"paddlecloud.io/job={name}")
    wait_for(lambda: not core_v1.list_namespaced_pod(ns("bob"), label_selector=f"paddlecloud.io/job={name}").items,
             timeout=120, what="the job's pods gone")
    result = requests.get(f"{base}/api/contents/project/paddlecloud-outputs/{name}/result.txt", headers=headers,
                          timeout=30)
    assert result.status_code == 200 and result.json()["content"] == "checkpoint of model v1\n"


def test_a_folder_off_the_workspace_travels_as_a_snapshot_that_later_edits_do_not_change(hub, real_cluster):
    """From a folder outside the shared home the job gets a snapshot: editing the script
    after submit changes nothing; the digest is of what ran; `paddlecloud code` gives it
    back; ignored files stay behind; a folder over the cap is refused, naming it."""
    from paddle_ext.workspace import CodeSnapshot, CodeFile

    hub.ensure_running("bob", hub.admin_token)
    setup = ("import os, pathlib; p = pathlib.Path('/tmp/snap'); p.mkdir(exist_ok=True); "
             f"(p / 'my_train.py').write_text({MY_TRAIN!r}); (p / 'model.py').write_text('VERSION = \"v1\"\\n'); "
             "(p / 'scratch.tmp').write_text('not code'); (p / '.paddlecloudignore').write_text('*.tmp\\n'); "
             "os.chdir(p); from paddle_ext import JobClient, JobSpec; "
             f"job = JobClient().submit(JobSpec(command=['python', 'my_train.py'], workers=2, cpu={SMALL['cpu']!r}, "
             f"memory={SMALL['memory']!r})); "
             "(p / 'model.py').write_text('VERSION = \"v2, edited after submit\"\\n'); print(job.name)")
    name = python_in_notebook(real_cluster, "bob", setup)
    job = wait_job(hub, "bob", name)
    assert job["phase"] == "Succeeded", job_story(hub, "bob", name)
    logs = requests.get(f"{hub.url}/user/bob/paddle/api/jobs/{name}/logs", timeout=60,
                        headers={"Authorization": f"token {hub.admin_token}"}).text
    assert "rank 0: model v1" in logs and "rank 1: model v1" in logs and "v2" not in logs
    assert job["outputs"]["kept"] is False
    assert job["outputs"]["note"].startswith("Outputs are kept for jobs run from a folder under /home/jovyan")
    back = in_notebook(real_cluster, "bob", "sh", "-c", f"paddlecloud code {name} --output /tmp/back >/dev/null && "
                       "cd /tmp/back && for f in $(ls -A | sort); do echo $f; sha256sum $f | cut -c1-64; done")
    assert back.returncode == 0, back.stderr
    listing = back.stdout.split()
    files = dict(zip(listing[0::2], listing[1::2]))
    assert sorted(files) == [".paddlecloudignore", "model.py", "my_train.py"]  # scratch.tmp stayed behind
    ran = CodeSnapshot(job["code"]["workdir"], tuple(
        CodeFile(path, 0, sha256) for path, sha256 in sorted(files.items())))
    assert ran.digest == job["code"]["digest"] and job["code"]["stored"]

    too_big = ("import os, pathlib; p = pathlib.Path('/tmp/big'); p.mkdir(exist_ok=True); "
               "(p / 'train.py').write_text('print(1)'); (p / 'weights.bin').write_bytes(os.urandom(2_000_000)); "
               "os.chdir(p); from paddle_ext import JobClient, JobSpec\n"
               "try:\n    JobClient().submit(JobSpec(command=['python', 'train.py']))\n"
               "except Exception as exc:\n    print(type(exc).__name__, exc.status, exc.message)")
    refused = python_in_notebook(real_cluster, "bob", too_big)
    assert refused.startswith("CodeTooLarge 400 The folder /tmp/big is 1.9 MiB compressed, over the 768.0 KiB")
    assert "weights.bin (1.9 MiB)" in refused
