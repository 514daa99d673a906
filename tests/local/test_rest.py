"""The REST API against a real Jupyter server running real PaddlePaddle jobs."""

from __future__ import annotations

import getpass
import json
import re
import os
import subprocess
import sys
from time import time as time_now

import pytest
import requests

from catalogue import local_datasets
from paddle_ext.backends import local_files
from serverutil import Gate, JupyterServer, assert_error, job_pids, wait_for


def submit(server, **spec):
    return server.submit(**spec)


def test_two_worker_job_runs_a_real_all_reduce_and_succeeds(server):
    job = submit(server, command=["python", "train.py", "--epochs", "2"], workers=2)
    assert job["phase"] in ("Pending", "Running") and job["workers"] == 2
    lines, end = server.follow_to_end(job["name"])
    assert end["phase"] == "Succeeded"
    for rank in (0, 1):
        assert f"[worker-{rank}] rank {rank}: all_reduce check ok: sum=3 over 2 workers" in lines
        assert f"[worker-{rank}] rank {rank}: done" in lines
    final = server.api("GET", f"/jobs/{job['name']}").json()
    assert final["phase"] == "Succeeded" and final["finished"]
    assert [w["exit_code"] for w in final["worker_states"]] == [0, 0]
    listed = server.api("GET", "/jobs").json()["jobs"]
    assert job["name"] in [j["name"] for j in listed]

    plain = server.api("GET", f"/jobs/{job['name']}/logs", params={"worker": "1", "tail": "3"})
    assert plain.headers["Content-Type"].startswith("text/plain")
    assert len(plain.text.splitlines()) == 3 and "[worker-" not in plain.text


def test_follow_delivers_lines_while_the_job_runs(server, tmp_path):
    gate = Gate(tmp_path).open_after(240)  # the job runs until the stream has shown lines
    job = submit(server, command=["python", "ticker.py", "--until", str(gate), "--interval", "0.2"], workers=2)
    ticks, end = 0, None
    for event, data in server.follow(job["name"], worker="0"):
        if event == "end":
            end = json.loads(data)
            break
        if data.startswith("tick 0 "):
            ticks += 1
            if ticks == 5 and not gate.is_open:
                # five lines came through the stream and the job cannot have ended: its gate is shut
                assert server.job(job["name"])["phase"] == "Running"
                gate.open()
    assert not gate.forced, "no log lines arrived while the job ran (only at its end)"
    assert ticks >= 5 and end["phase"] == "Succeeded", (ticks, end)


def test_failing_worker_fails_the_job_and_stops_the_others(server):
    job = submit(server, command=["python", "fail_rank.py", "--rank", "1", "--code", "3"], workers=2)
    final = server.wait_for(job["name"], ("Failed",), timeout=90)
    assert final["reason"] == "WorkerFailed"
    assert "Worker 1 exited with code 3" in final["message"]
    states = {w["index"]: w for w in final["worker_states"]}
    assert states[1]["exit_code"] == 3
    assert states[0]["phase"] == "Cancelled" and "worker 1 failed" in states[0]["reason"]
    assert job_pids(server.home, job["name"]) == []


def test_cancel_leaves_no_process_behind(server, tmp_path):
    gate = Gate(tmp_path)  # never opened: only the cancel ends this job
    job = submit(server, command=["python", "ticker.py", "--until", str(gate), "--interval", "0.2"], workers=2)
    name = job["name"]
    wait_for(lambda: "tick 0 " in server.log(name) and "tick 1 " in server.log(name), 120, "both workers ticking")
    pids = job_pids(server.home, name)
    assert len(pids) >= 4, pids  # per worker: supervisor, launcher, trainer
    response = server.api("DELETE", f"/jobs/{name}")
    assert response.status_code == 202
    final = server.wait_for(name, ("Cancelled",), timeout=60)
    assert final["reason"] == "Cancelled" and final["finished"]
    alive = [pid for pid in pids if local_files.process_alive(pid)]
    assert alive == [], f"processes left behind: {alive}"
    assert server.api("DELETE", f"/jobs/{name}").json()["phase"] == "Cancelled"  # idempotent


def test_server_restart_keeps_running_job_and_log_follow(tmp_path, workdir):
    """The job outlives its server: it goes on writing while no server runs, the next server
    sees it Running and follows it to the end with every line exactly once. The job runs
    until the test opens its gate, so no step of this depends on the machine's speed."""
    gate = Gate(tmp_path).open_after(300)
    first = JupyterServer(tmp_path, workdir).start()
    try:
        name = submit(first, command=["python", "ticker.py", "--until", str(gate), "--interval", "0.1"],
                      workers=2)["name"]
        wait_for(lambda: "tick 0 2" in first.log(name) and "tick 1 2" in first.log(name), 120,
                 "both workers ticking")
    finally:
        first.stop()
    log = tmp_path / "jobs" / name / "worker-1.log"
    size = log.stat().st_size
    wait_for(lambda: log.stat().st_size > size, 60, "the job to go on writing while no server runs")
    second = JupyterServer(tmp_path, workdir).start()
    try:
        assert second.job(name)["phase"] == "Running"
        lines, end = [], None
        for event, data in second.follow(name):
            if event == "end":
                end = json.loads(data)
                break
            lines.append(data)
            if not gate.is_open and any(line.startswith("[worker-1] tick 1 ") for line in lines):
                gate.open()
        assert not gate.forced, "the second server's stream showed no line of worker 1"
        assert end is not None and end["phase"] == "Succeeded", end
        for rank in (0, 1):
            ticks = [int(line.split()[-1]) for line in lines if line.startswith(f"[worker-{rank}] tick {rank} ")]
            assert len(ticks) > 3 and ticks == list(range(len(ticks))), f"worker {rank}: {ticks}"
            assert lines.count(f"[worker-{rank}] ticker {rank} done") == 1
    finally:
        gate.open()
        second.stop_and_check()


@pytest.mark.parametrize("spec, field", [
    ({"command": ["python", "t.py"], "workers": 0}, "workers"),
    ({"command": ["python", "t.py"], "gpus_per_worker": -1}, "gpus_per_worker"),
    ({"command": ["python", "t.py"], "shell": True}, "shell"),
    ({"command": ["python", "t.py"], "name": "MyJob"}, "name"),
    ({"command": ["python", "t.py"], "name": "a/b"}, "name"),
    ({"command": []}, "command"),
    ({"command": ["python", "t.py"], "workers": 99}, "workers"),
    ({"command": ["python", "t.py"], "datasets": ["nope"]}, "datasets"),
])
def test_bad_specs_get_400_naming_the_field(server, spec, field):
    body = assert_error(server.api("POST", "/jobs", json=spec), 400, "bad_spec")
    assert field in body["fields"] and field in body["message"]


def test_body_that_is_not_json(server):
    body = assert_error(server.api("POST", "/jobs", data="{not json"), 400, "bad_spec")
    assert "not valid JSON" in body["message"] and "spec" in body["fields"]


def test_unknown_job_404_and_taken_name_409(server):
    for method, path in (("GET", ""), ("GET", "/logs"), ("GET", "/code"), ("GET", "/metrics"), ("DELETE", "")):
        body = assert_error(server.api(method, f"/jobs/no-such-job{path}"), 404, "not_found")
        assert "no-such-job" in body["message"], (method, path, body)
    name = f"taken-{os.urandom(3).hex()}"
    spec = {"name": name, "command": ["python", "ticker.py", "--count", "1"]}
    assert server.api("POST", "/jobs", json=spec).status_code == 201
    body = assert_error(server.api("POST", "/jobs", json=spec), 409, "name_taken")
    assert body["message"] == f"A job named '{name}' already exists; choose another name."
    body = assert_error(server.api("GET", f"/jobs/{name}/logs", params={"worker": "5"}), 400, "bad_request")
    assert body["message"] == f"Job '{name}' has workers 0 to 0; there is no worker 5."
    assert_error(server.api("GET", f"/jobs/{name}/logs", params={"tail": "x"}), 400, "bad_request")
    assert_error(server.api("GET", "/no-such-path"), 404, "not_found")


@pytest.mark.parametrize("method, path", [
    ("GET", "/jobs"), ("POST", "/jobs"), ("GET", "/jobs/x"), ("DELETE", "/jobs/x"),
    ("GET", "/jobs/x/logs"), ("GET", "/options"), ("GET", "/quota"),
])
def test_unauthenticated_requests_get_403(server, method, path):
    before = server.api("GET", "/jobs").json()["jobs"]
    response = requests.request(method, server.url + "/paddle/api" + path, timeout=30,
                                json={"command": ["x"]} if method == "POST" else None)
    assert_error(response, 403, "forbidden")
    bad_token = requests.request(method, server.url + "/paddle/api" + path, timeout=30,
                                 headers={"Authorization": "token wrong"},
                                 json={"command": ["x"]} if method == "POST" else None)
    assert_error(bad_token, 403, "forbidden")
    assert server.api("GET", "/jobs").json()["jobs"] == before


def test_options_by_value(server):
    """The session's server has no images, datasets or quota configured: the documented defaults."""
    assert server.api("GET", "/options").json() == {
        "backend": "local", "images": [], "datasets": [],
        "bounds": {"workers": {"min": 1, "max": 8}, "gpus_per_worker": {"min": 0, "max": 0},
                   "cpu": {"max": "16"}, "memory": {"max": "64Gi"}, "max_restarts": {"min": 0, "max": 10}},
        "defaults": {"workers": 1, "gpus_per_worker": 0, "cpu": "1", "memory": "2Gi", "image": None,
                     "command": ["python", "train.py", "--epochs", "3"], "max_restarts": 0},
        "outputs_note": "",
        "job_image": "",
    }
    quota = server.api("GET", "/quota").json()
    assert (quota["user"], quota["limits"], quota["sources"]) == (getpass.getuser(), {}, {})


def test_metrics_endpoint_is_incremental_while_the_job_runs(server, tmp_path):
    gate = Gate(tmp_path).open_after(240)  # steps 0-5 come before it, 6-11 after
    job = submit(server, command=["python", "report_steps.py", "--steps", "12", "--interval", "0.1",
                                  "--gate", str(gate), "--gate-at", "6"], workers=2)
    name, cursor, seen, while_running = job["name"], None, [], 0

    def poll():
        nonlocal cursor, while_running
        response = server.api("GET", f"/jobs/{name}/metrics", params={"since": cursor} if cursor else {})
        assert response.status_code == 200, response.text
        page = response.json()
        assert set(page) == {"job", "phase", "done", "cursor", "names", "points"}
        seen.extend((p["worker"], p["step"]) for p in page["points"])
        cursor = page["cursor"]
        if not gate.is_open and len(seen) == 12:  # the first six steps of both workers, the job held at its gate
            assert page["phase"] == "Running" and not page["done"], page
            while_running = len(seen)
            gate.open()
        return page["done"]

    wait_for(poll, 240, f"job {name}'s metrics to be done", interval=0.5)
    assert not gate.forced and while_running == 12, "the first points did not come while the job ran"
    assert sorted(seen) == [(w, s) for w in (0, 1) for s in range(12)], "each point exactly once"
    final = server.api("GET", f"/jobs/{name}/metrics").json()
    assert final["names"] == ["acc", "loss"] and len(final["points"]) == 24
    point = next(p for p in final["points"] if p["worker"] == 1 and p["step"] == 3)
    assert point["values"] == {"loss": 1.25, "acc": 0.25} and point["rank"] == 1 and point["source"] == "report"
    assert server.api("GET", f"/jobs/{name}/metrics", params={"since": cursor}).json()["points"] == []

    body = assert_error(server.api("GET", f"/jobs/{name}/metrics", params={"since": "7"}), 400, "bad_request")
    assert "cursor from an earlier answer" in body["message"]


def test_model_fit_progress_of_a_real_paddle_run_becomes_metrics(server):
    """paddle.Model.fit's own log lines, from the installed PaddlePaddle, read as points."""
    job = submit(server, command=["python", "fit_model.py"], workers=2)
    server.wait_for(job["name"], ("Succeeded",), timeout=180)
    page = server.api("GET", f"/jobs/{job['name']}/metrics").json()
    assert [(p["worker"], p["epoch"], p["step"]) for p in page["points"]] == [
        (0, 1, 2), (0, 1, 4), (0, 2, 6), (0, 2, 8)]
    assert page["names"] == ["acc", "loss", "step_time_ms"]
    assert all(p["source"] == "paddle" and 0 < p["values"]["loss"] < 5 for p in page["points"])

    mine = server.api("GET", f"/jobs/{job['name']}/logs", params={"mine": "1"}).text.splitlines()
    everything = server.api("GET", f"/jobs/{job['name']}/logs").text.splitlines()
    assert "[worker-0] user line: done" in mine and "[worker-1] user line: done" in mine
    assert not any("LAUNCH" in line or "FLAGS" in line for line in mine)
    assert len(everything) > len(mine) + 50 and any("LAUNCH INFO" in line for line in everything)
    assert server.api("GET", f"/jobs/{job['name']}").json()["progress"] == [
        {"index": i, "step": "Finished", "detail": "Succeeded", "node": "", "number": 4, "of": 4,
         "steps": ["Queued", "Starting", "Running", "Finished"]} for i in (0, 1)]


# Shell metacharacters: run through a shell, these would expand, run `touch` or redirect.
SHELL_WORDS = ["a b", "$HOME", "${PATH}", "`touch pwned-backtick`", "$(touch pwned-subshell)", ";", "touch",
               "pwned-semicolon", "|", "cat", ">", "pwned-redirect", "*", "&&", "'quoted'", '"double"', "\\"]
CONFIG = """
c.LocalBackend.max_gpus_per_worker = 2
c.JobBackend.datasets = %s
"""


def probes(lines: list[str]) -> dict[str, dict]:
    """The PROBE record of each worker's log (probe.py), by its `[worker-I]` prefix."""
    found = {}
    for line in lines:
        prefix, marker, record = line.partition("PROBE ")
        if marker:
            found[prefix.strip()] = json.loads(record)
    return found


def test_what_workers_get_env_datasets_gpus_and_the_quota_by_value(server, tmp_path, workdir):
    """A deployment whose admin allows 2 GPUs per local worker and offers two datasets (a
    Jupyter config file, as docs/admin/embedded.md shows). A 2-worker job with 2 GPUs each, env and a
    dataset: the quota counts it by value while it runs, the workers see exactly the env,
    the dataset's path and arguments they were given (no shell), and GPU-hours grow with
    the real time it ran."""
    # Without the admin's setting a local job gets no GPU.
    body = assert_error(server.api("POST", "/jobs", json={"command": ["python", "probe.py"], "gpus_per_worker": 1}),
                        400, "bad_spec")
    assert body["fields"] == {"gpus_per_worker": "must be at most 0 here (got 1)"}

    config, data, home = tmp_path / "config", tmp_path / "data", tmp_path / "home"
    for folder in (config, data, home):
        folder.mkdir()
    (config / "jupyter_server_config.py").write_text(CONFIG % json.dumps(local_datasets(data)))
    gpus = JupyterServer(home, workdir, env={"JUPYTER_CONFIG_DIR": str(config)}).start()
    gate = Gate(tmp_path).open_after(300)
    try:
        options = gpus.api("GET", "/options").json()
        assert options["bounds"]["gpus_per_worker"] == {"min": 0, "max": 2}
        assert options["datasets"] == [{k: d[k] for k in ("name", "description", "mount_path")}
                                       for d in local_datasets(data)]
        before = time_now()
        job = gpus.submit(command=["python", "probe.py", *SHELL_WORDS], workers=2, gpus_per_worker=2, cpu="500m",
                          memory="1Gi", datasets=["image-net"],
                          env={"PROBE_GREETING": "hello world", "PROBE_EMPTY": "", "PROBE_GATE": str(gate)})
        name = job["name"]
        gpus.wait_for(name, ("Running",))
        running_since = time_now()
        quota = gpus.api("GET", "/quota").json()
        assert {k: v for k, v in quota.items() if k != "gpu_hours"} == {
            "user": getpass.getuser(), "limits": {}, "sources": {},
            "used": {"gpus": 4, "cpu": "1", "memory": "2Gi", "pods": 2, "running_jobs": 1}, "running": [name]}
        # Running jobs count up to now: 4 GPUs for 4.5 s make the first 0.01 GPU-hours.
        wait_for(lambda: gpus.api("GET", "/quota").json()["gpu_hours"]["7d"] > 0, 120,
                 "GPU-hours of the running job")
        # every trainer's line while they run: 2 workers x 2 local ranks (not only local rank 0's)
        wait_for(lambda: len(probes(gpus.log(name).splitlines())) == 4, 120, "all four trainers' PROBE lines")
        gate.open()
        held_until = time_now()
        final = gpus.wait_for(name, ("Succeeded",), timeout=120)
        after = time_now()

        workers = probes(gpus.log(name).splitlines())
        assert set(workers) == {f"[worker-{i}] [local-rank-{j}]" for i in (0, 1) for j in (0, 1)}, workers
        for prefix, seen in workers.items():
            worker, local_rank = (int(x) for x in re.findall(r"\d+", prefix))
            assert seen["rank"] == str(2 * worker + local_rank), (prefix, seen["rank"])  # Paddle's global rank
            assert seen["argv"] == SHELL_WORDS, (prefix, seen["argv"])
            assert seen["cwd"] == str(workdir)
            assert {k: v for k, v in seen["env"].items() if k.startswith("PROBE_")} == {
                "PROBE_GREETING": "hello world", "PROBE_EMPTY": "", "PROBE_GATE": str(gate)}
            assert seen["env"]["PADDLECLOUD_DATASET_IMAGE_NET"] == f"{data}/imagenet"
            assert "PADDLECLOUD_DATASET_MNIST" not in seen["env"]  # only the datasets the job asked for
            assert seen["env"]["PADDLECLOUD_JOB_NAME"] == name
            assert seen["env"]["PADDLECLOUD_OUTPUT_DIR"] == final["outputs"]["path"]
        assert not list(workdir.glob("pwned*")), "a shell ran the command"

        # GPU-hours: 4 GPUs over the job's real run, at least while the test held it running,
        # at most from before the submit to after the end (rounded to 0.01).
        hours = gpus.api("GET", "/quota").json()["gpu_hours"]
        assert hours["7d"] == hours["30d"] > 0
        assert 4 * (held_until - running_since) / 3600 - 0.005 <= hours["7d"] <= 4 * (after - before) / 3600 + 0.005
        cli = subprocess.run([sys.executable, "-m", "paddle_ext.cli", "quota"], capture_output=True, text=True,
                             timeout=120, env={**os.environ, "PADDLECLOUD_HOME": str(home)})
        assert cli.returncode == 0, cli.stderr
        assert cli.stdout.splitlines()[-1] == (f"GPU-hours: {hours['7d']} in the last 7 days, "
                                               f"{hours['30d']} in the last 30 days")
        assert not gate.forced
    finally:
        gate.open()
        gpus.stop_and_check()
