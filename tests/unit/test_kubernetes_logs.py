"""Following a worker's log on Kubernetes (`WorkerLogs`), against fakes of what the backend
hands it: a stream that drops and is re-attached repeats no line, and a finished job ends
the follow."""

from __future__ import annotations

import logging

from paddle_ext.backends.kubernetes_logs import WorkerLogs
from paddle_ext.constants import COMPLETION_INDEX_LABEL
from paddle_ext.jobs import Job, Phase


def pod(phase: str) -> dict:
    return {"metadata": {"name": "train-0-abc", "uid": "u1", "labels": {COMPLETION_INDEX_LABEL: "0"}},
            "status": {"phase": phase, "containerStatuses": [{"state": {"running": {}}}]}}


def logs_of(pods: list[dict], bodies: list[bytes], jobs: list[Phase]) -> tuple[WorkerLogs, list]:
    """WorkerLogs whose n-th listing, log stream and job read answer pods[n], bodies[n], jobs[n]."""
    asked = []

    async def list_pods(selector):
        return [pods.pop(0)]

    async def job_state(name):
        return Job(name, jobs.pop(0), 1, {})

    async def stream(path, params):
        asked.append((path, dict(params)))
        yield bodies.pop(0)

    async def call(*args, **kwargs):
        raise AssertionError("no pod read expected")

    logs = WorkerLogs(namespace="team", pods=list_pods, job_state=job_state, call=call, stream=stream,
                      log=logging.getLogger("test"), retry_seconds=0, idle_check_seconds=60, reconnect_seconds=1)
    return logs, asked


async def test_a_reattached_follow_repeats_no_line_and_ends_with_the_job():
    logs, asked = logs_of([pod("Running"), pod("Succeeded")], [b"one\ntwo\n", b"one\ntwo\nthree"],
                          [Phase.RUNNING, Phase.SUCCEEDED])
    job = Job("train", Phase.RUNNING, 1, {})
    chunks = [chunk async for chunk in logs.worker_log_chunks(job, 0, None, follow=True)]
    assert b"".join(chunks) == b"one\ntwo\nthree\n"
    assert [path for path, _ in asked] == ["/api/v1/namespaces/team/pods/train-0-abc/log"] * 2
    assert asked[0][1]["follow"] is True and asked[0][1]["tailLines"] is None


async def test_a_read_without_follow_reads_once_with_the_tail():
    logs, asked = logs_of([pod("Running")], [b"last\n"], [])
    job = Job("train", Phase.RUNNING, 1, {})
    assert [chunk async for chunk in logs.worker_log_chunks(job, 0, 1, follow=False)] == [b"last\n"]
    assert asked[0][1]["tailLines"] == 1 and asked[0][1]["follow"] is False
