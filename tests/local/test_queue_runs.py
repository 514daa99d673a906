"""The embedded default's queue with real PaddlePaddle runs: with a 2-job limit a third job
waits Queued (position 1) and starts by itself when one of the running jobs ends (its
worker's supervisor starts it: nobody asks for a status meanwhile), and a queued job that
is cancelled never starts; the estimate comes from the running jobs' time limits. The running jobs are held open by gate files the test creates
(tests/local/scripts/gated.py), so the order of events is the test's, not a timer's."""

from __future__ import annotations

import dataclasses
import datetime
import json
import sys

import pytest

from paddle_ext import JobClient, JobSpec
from paddle_ext.backends.local import LocalBackend
from paddle_ext.backends.local_queue import ESTIMATE_BASIS
from paddle_ext.jobs import Phase
from paddle_ext.timestamps import to_iso

from serverutil import wait_for


@pytest.fixture
def queue_setup(tmp_path, workdir):
    home = tmp_path / "state"
    quota_file = tmp_path / "quotas.json"
    quota_file.write_text(json.dumps({"version": 1, "default": {"limits": {"running_jobs": 2}, "revision": 1}}))
    gates = tmp_path / "gates"
    gates.mkdir()
    client = JobClient(LocalBackend(home=str(home), working_dir=str(workdir), quota_file=str(quota_file),
                                    python=sys.executable, machine_gpus=None))
    yield home, gates, client
    for job in client.list():  # a failing test leaves nothing running
        if not job.done:
            (gates / job.name).touch()
            client.cancel(job.name)
    client.close()


def gated(gates, name):
    return JobSpec(name=name, command=("python", "gated.py", "--gate", str(gates / name)), workers=1)


def log_of(home, name):
    path = home / "jobs" / name / "worker-0.log"
    return path.read_text() if path.exists() else ""


def test_a_third_job_over_a_two_job_limit_waits_queued_and_starts_by_itself(queue_setup, workdir):
    home, gates, client = queue_setup
    first = client.submit(dataclasses.replace(gated(gates, "first"), max_runtime_seconds=3600))
    assert first.phase in (Phase.PENDING, Phase.RUNNING)
    assert client.submit(gated(gates, "second")).phase in (Phase.PENDING, Phase.RUNNING)
    for name in ("first", "second"):
        wait_for(lambda name=name: "gated up" in log_of(home, name), 120, f"job {name} to run")

    third = client.submit(gated(gates, "third"))
    assert (third.phase, third.queue.position, third.queue.ahead) == (Phase.QUEUED, 1, 0)
    assert third.queue.waiting_for == "a free running-job slot (2 of 2 running)"
    # The estimate: third takes first's slot at first's time limit at the latest; fourth would
    # need second's, which has no limit, so it has none.
    deadline = json.loads((home / "jobs" / "first" / "job.json").read_text())["deadline"]
    assert third.queue.estimated_start == to_iso(datetime.datetime.fromtimestamp(deadline, datetime.timezone.utc))
    assert third.queue.estimate_basis == ESTIMATE_BASIS
    fourth = client.submit(gated(gates, "fourth"))
    assert (fourth.phase, fourth.queue.position) == (Phase.QUEUED, 2)
    assert (fourth.queue.estimated_start, fourth.queue.estimate_basis) == (
        None, "no estimate: job second has no time limit (max runtime)")
    assert client.cancel("fourth").phase == Phase.CANCELLED
    assert client.get("third").queue.position == 1

    (gates / "first").touch()  # first ends; its worker's supervisor starts third
    wait_for(lambda: "gated up" in log_of(home, "third"), 120, "the queued job to start by itself")
    wait_for(lambda: client.get("first").phase == Phase.SUCCEEDED, 60, "first to read Succeeded")
    assert client.get("third").phase == Phase.RUNNING

    for name in ("second", "third"):
        (gates / name).touch()

    def both_ended():
        jobs = [client.get(name) for name in ("second", "third")]
        return jobs if all(job.done for job in jobs) else None

    ended = wait_for(both_ended, 120, "second and third to end")
    assert [job.phase for job in ended] == [Phase.SUCCEEDED, Phase.SUCCEEDED]
    cancelled = client.get("fourth")
    assert (cancelled.phase, cancelled.worker_states[0].reason) == (Phase.CANCELLED, "never started")
    assert not (home / "jobs" / "fourth" / "worker-0.json").exists() and log_of(home, "fourth") == ""
    assert not (workdir / "paddlecloud-outputs" / "fourth").exists()  # nothing of it in the user's folder
    assert (workdir / "paddlecloud-outputs" / "third").is_dir()
    assert not list((home / "jobs" / ".queue").iterdir())
