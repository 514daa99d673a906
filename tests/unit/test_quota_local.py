"""The local backend's quota: preflight against the user's running jobs and the shared
quota file, `quota()` as /paddle/api/quota and `paddlecloud quota` show it. Jobs here are
real job folders (job.json written as the backend writes it) whose workers never started,
so they count as running (Pending) without starting PaddlePaddle."""

from __future__ import annotations

import datetime
import json
import time

import pytest

from paddle_ext import cli
from paddle_ext.backends import local_files as files
from paddle_ext.backends.local import LocalBackend
from paddle_ext.errors import QuotaExceeded
from paddle_ext.jobs import Phase, Reason, Step
from paddle_ext.quota.store import LocalQuotaStore
from paddle_ext.spec import JobSpec


def add_job(home, name, workers=1, gpus=0, cpu="1", memory="2Gi", created=None, finished=None):
    job_dir = home / "jobs" / name
    job_dir.mkdir(parents=True)
    spec = JobSpec(command=("python", "train.py"), name=name, workers=workers, gpus_per_worker=gpus,
                   cpu=cpu, memory=memory)
    files.write_json(files.job_file(str(job_dir)), {"spec": spec.to_dict(), "created": created or files.now_iso(),
                                                    "workdir": str(home), "env": {}, "deadline": None})
    if finished:
        for index in range(workers):
            files.write_json(files.exit_file(str(job_dir), index), {"exit_code": 0, "finished": finished})


@pytest.fixture
def setup(tmp_path, monkeypatch):
    home = tmp_path / "alice"
    quota_file = tmp_path / "hub" / "quotas.json"
    for key in ("JUPYTERHUB_API_URL", "JUPYTERHUB_API_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")
    monkeypatch.setenv("PADDLECLOUD_HOME", str(home))
    monkeypatch.setenv("PADDLECLOUD_QUOTA_FILE", str(quota_file))
    monkeypatch.setenv("PADDLECLOUD_USER_GROUPS", "ml")
    monkeypatch.chdir(tmp_path)  # a job's outputs folder is made beside the code it runs, never in the checkout
    store = LocalQuotaStore(str(quota_file))
    backend = LocalBackend(max_gpus_per_worker=8)
    return home, store, backend


async def submit(backend, **kw):
    return await backend.submit(JobSpec(command=("python", "train.py"), **kw))


async def test_a_job_that_can_never_fit_is_refused_one_that_fits_later_waits_queued(setup):
    home, store, backend = setup
    store.update_sync("users", "alice", {"gpus": 2, "running_jobs": 2})
    add_job(home, "resnet-3", workers=2, gpus=1)
    with pytest.raises(QuotaExceeded) as info:
        await submit(backend, workers=4, gpus_per_worker=1)
    assert info.value.message == "Needs 4 GPUs; your quota is 2, so the job could never start. Ask for less."
    assert sorted(p.name for p in (home / "jobs").iterdir() if not p.name.startswith(".")) == ["resnet-3"]

    first = await submit(backend, name="first", workers=1, gpus_per_worker=1)
    assert (first.phase, first.reason) == (Phase.QUEUED, Reason.QUEUED)
    assert (first.queue.queue, first.queue.position, first.queue.ahead) == ("this machine's queue", 1, 0)
    assert first.queue.waiting_for == "1 more GPU (2 of 2 in use)"
    assert first.queue.estimated_start is None and first.queue.estimate_basis == (
        "no estimate: job resnet-3 has no time limit (max runtime)")
    assert [p.step for p in first.progress] == [Step.QUEUED]
    assert first.progress[0].detail.startswith("Queued · position 1 in this machine's queue · needs 1 more GPU")
    add_job(home, "other", workers=1)
    second = await submit(backend, name="second", workers=1)  # no GPUs, but no free running-job slot
    assert (second.phase, second.queue.position, second.queue.waiting_for) == (
        Phase.QUEUED, 2, "a free running-job slot (2 of 2 running)")
    assert not any((home / "jobs" / name / "worker-0.json").exists() for name in ("first", "second"))
    assert (await backend.quota()).running == ("other", "resnet-3")  # waiting holds nothing

    cancelled = await backend.cancel("first")  # out of the line, never started; the next moves up
    assert (cancelled.phase, cancelled.queue) == (Phase.CANCELLED, None)
    assert cancelled.worker_states[0].reason == "never started"
    assert sorted(p.name for p in (home / "jobs" / ".queue").iterdir()) == ["second"]
    assert not (home / "jobs" / "first" / "worker-0.json").exists()
    assert (await backend.get("second")).queue.position == 1
    listed = {job.name: job for job in await backend.list()}
    assert (listed["second"].phase, listed["second"].queue.position, listed["first"].phase) == (
        Phase.QUEUED, 1, Phase.CANCELLED)


async def test_queued_jobs_in_paddlecloud_list_and_status(setup, capsys):
    home, store, backend = setup
    store.update_sync("users", "alice", {"running_jobs": 1})
    add_job(home, "busy")
    await submit(backend, name="waiting", max_runtime_seconds=60)
    assert cli.main(["list", "--backend", "local"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert rows["waiting"].split()[1:3] == ["Queued", "1"]
    assert rows["waiting"].endswith("Queued    position 1 · needs a free running-job slot (1 of 1 running)")
    assert cli.main(["status", "waiting", "--backend", "local"]) == 0
    out = capsys.readouterr().out
    assert "Phase:    Queued\n" in out
    assert ("Queue:    position 1 in this machine's queue · needs a free running-job slot (1 of 1 running) · "
            "no estimate: job busy has no time limit (max runtime)\n") in out
    assert "  worker-0  [1/4 Queued] Queued · position 1 in this machine's queue" in out
    assert cli.main(["status", "waiting", "--backend", "local", "--json"]) == 0
    queue = json.loads(capsys.readouterr().out)["queue"]
    assert queue == {"queue": "this machine's queue", "position": 1, "ahead": 0,
                     "waiting_for": "a free running-job slot (1 of 1 running)", "estimated_start": None,
                     "estimate_basis": "no estimate: job busy has no time limit (max runtime)"}


async def test_a_job_whose_starter_died_after_it_left_the_queue_fails_and_frees_its_slot(setup):
    home, store, backend = setup
    store.update_sync("users", "alice", {"running_jobs": 1})
    add_job(home, "stalled")
    meta_path = home / "jobs" / "stalled" / "job.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "admitted": time.time() - 60}))  # long before 2 x start_timeout
    # "waiting" queues behind the stalled job; the same submit's status call sees the stall,
    # fails that job and starts "waiting", whose supervisor never comes up (python is /bin/true).
    starter = LocalBackend(python="/bin/true", start_timeout_seconds=0.2)
    await submit(starter, name="waiting")
    listed = {job.name: job for job in await starter.list()}
    assert listed["stalled"].phase == Phase.FAILED
    assert listed["stalled"].message.startswith("The job left the queue, but what was starting it stopped")
    assert listed["waiting"].phase == Phase.FAILED and "did not start" in listed["waiting"].message
    assert not list((home / "jobs" / ".queue").iterdir())


async def test_group_limits_from_the_environment_and_a_finished_job_frees_its_share(setup):
    home, store, backend = setup
    store.update_sync("default", None, {"cpu": "2"})
    store.update_sync("groups", "ml", {"cpu": "8"})
    add_job(home, "done", workers=2, cpu="4", finished=files.now_iso())
    add_job(home, "busy", workers=1, cpu="4")
    job = await submit(backend, workers=2, cpu="3")
    assert (job.phase, job.queue.waiting_for) == (Phase.QUEUED, "2 more CPU (4 of 8 in use)")
    with pytest.raises(QuotaExceeded, match=r"^Needs 10 CPU; your quota is 8, so the job could never start"):
        await submit(backend, workers=2, cpu="5")


async def test_quota_report_and_cli_table(setup, capsys):
    home, store, backend = setup
    store.update_sync("default", None, {"running_jobs": 3, "memory": "16Gi"})
    store.update_sync("groups", "ml", {"gpus": 4})
    hour_ago = (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)).isoformat()
    add_job(home, "resnet-3", workers=2, gpus=1, memory="4Gi", created=hour_ago)
    report = (await backend.quota()).to_dict()
    assert report["user"] == "alice"
    assert report["limits"] == {"gpus": 4, "memory": "16Gi", "running_jobs": 3}
    assert report["sources"] == {"gpus": "group:ml", "memory": "default", "running_jobs": "default"}
    assert report["used"] == {"gpus": 2, "cpu": "2", "memory": "8Gi", "pods": 2, "running_jobs": 1}
    assert report["running"] == ["resnet-3"]
    assert 1.9 < report["gpu_hours"]["7d"] < 2.2 and report["gpu_hours"]["30d"] == report["gpu_hours"]["7d"]

    assert cli.main(["quota", "--backend", "local"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["RESOURCE", "USED", "LIMIT", "FROM"]
    assert lines[1].split() == ["gpus", "2", "4", "group:ml"]
    assert lines[2].split() == ["cpu", "2", "unlimited"]
    assert lines[3].split() == ["memory", "8Gi", "16Gi", "default"]
    assert lines[5].split() == ["running_jobs", "1", "3", "default"]
    assert lines[6] == "running jobs: resnet-3"
    assert lines[7].startswith("GPU-hours: 2") and "in the last 30 days" in lines[7]

    assert cli.main(["quota", "--backend", "local", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["limits"]["gpus"] == 4
