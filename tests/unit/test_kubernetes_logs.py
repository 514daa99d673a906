"""Following a worker's log on Kubernetes (`WorkerLogs`), against fakes of what the backend
hands it: a stream that drops and is re-attached repeats no line, and a finished job ends
the follow."""

from __future__ import annotations

import logging

from paddle_ext.backends.kubernetes_logs import WorkerLogs
from paddle_ext.constants import COMPLETION_INDEX_LABEL, CONTAINER_NAME, INDEX_FAILURE_COUNT_ANNOTATION
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


# ---------------------------------------------------------------- every attempt's log

def worker_pod(name: str, index: int, failures: int | None, created: str, *, running: bool = False,
               exit_code: int = 0, evicted: bool = False) -> dict:
    """A worker pod of job `train` as the Job controller makes it (its index's failure count
    annotated where restarts are on), running or ended with `exit_code`."""
    annotations = {} if failures is None else {INDEX_FAILURE_COUNT_ANNOTATION: str(failures)}
    state = {"running": {}} if running else {"terminated": {"exitCode": exit_code, "finishedAt": created}}
    conditions = [{"type": "DisruptionTarget", "status": "True"}] if evicted else []
    phase = "Running" if running else ("Succeeded" if exit_code == 0 and not evicted else "Failed")
    return {"metadata": {"name": name, "uid": name, "creationTimestamp": created, "annotations": annotations,
                         "labels": {COMPLETION_INDEX_LABEL: str(index)}},
            "status": {"phase": phase, "conditions": conditions, "containerStatuses": [{"state": state}]}}


def attempt_logs(listings: list[list[dict]], bodies: dict[str, list[bytes]], jobs: list[Phase]) -> tuple[WorkerLogs, list]:
    """WorkerLogs whose n-th pod listing answers listings[n] (the last one again after), whose
    log of pod P answers bodies[P] in turn, and whose n-th job read answers jobs[n]."""
    asked = []

    async def list_pods(selector):
        return listings.pop(0) if len(listings) > 1 else listings[0]

    async def job_state(name):
        return Job(name, jobs.pop(0), 2, {})

    async def stream(path, params):
        pod_name = path.split("/")[-2]
        asked.append((pod_name, dict(params)))
        yield bodies[pod_name].pop(0)

    async def call(*args, **kwargs):
        raise AssertionError("no pod read expected")

    logs = WorkerLogs(namespace="team", pods=list_pods, job_state=job_state, call=call, stream=stream,
                      log=logging.getLogger("test"), retry_seconds=0, idle_check_seconds=60, reconnect_seconds=1)
    return logs, asked


RESTARTED = Job("train", Phase.RUNNING, 2, {"max_restarts": 2}, restarts=1,
                last_restart_reason="worker 1 was stopped: its pod was deleted")


async def test_a_restarted_workers_log_holds_every_kept_attempt_in_order_with_a_marker_between():
    pods = [worker_pod("train-0-a", 0, 0, "2026-01-01T00:00:00Z", exit_code=137),
            worker_pod("train-1-a", 1, 0, "2026-01-01T00:00:01Z", exit_code=200),
            worker_pod("train-0-b", 0, 1, "2026-01-01T00:01:00Z", running=True)]
    logs, asked = attempt_logs([pods], {"train-0-a": [b"step 1\nstep 2\n"], "train-0-b": [b"resumed\n"]}, [])
    text = b"".join([chunk async for chunk in logs.worker_log_chunks(RESTARTED, 0, None, follow=False)])
    assert text == (b"step 1\nstep 2\n"
                    b"--- attempt 2 of 3: worker 0 was killed by signal 9; restarting ---\n"
                    b"resumed\n")
    assert [pod for pod, _ in asked] == ["train-0-a", "train-0-b"]


async def test_a_worker_whose_first_pod_is_gone_begins_with_the_marker_and_the_jobs_reason():
    """A deleted pod leaves nothing to read or to name it: the job's own view says why."""
    pods = [worker_pod("train-0-a", 0, 0, "2026-01-01T00:00:00Z", exit_code=200),
            worker_pod("train-1-b", 1, 1, "2026-01-01T00:01:00Z", running=True)]
    logs, _ = attempt_logs([pods], {"train-1-b": [b"resumed\n"]}, [])
    text = b"".join([chunk async for chunk in logs.worker_log_chunks(RESTARTED, 1, None, follow=False)])
    assert text == b"--- attempt 2 of 3: worker 1 was stopped: its pod was deleted; restarting ---\nresumed\n"


async def test_a_tail_reads_the_current_attempt_only():
    pods = [worker_pod("train-0-a", 0, 0, "2026-01-01T00:00:00Z", exit_code=137),
            worker_pod("train-0-b", 0, 1, "2026-01-01T00:01:00Z", running=True)]
    logs, asked = attempt_logs([pods], {"train-0-b": [b"last\n"]}, [])
    assert [chunk async for chunk in logs.worker_log_chunks(RESTARTED, 0, 1, follow=False)] == [b"last\n"]
    assert asked == [("train-0-b", {"container": CONTAINER_NAME, "follow": False, "tailLines": 1})]


async def test_a_follow_across_a_restart_reads_the_old_pods_rest_then_the_marker_then_the_new_pod():
    running = worker_pod("train-0-a", 0, 0, "2026-01-01T00:00:00Z", running=True)
    ended = worker_pod("train-0-a", 0, 0, "2026-01-01T00:00:00Z", exit_code=137)
    new = worker_pod("train-0-b", 0, 1, "2026-01-01T00:01:00Z", exit_code=0)
    logs, asked = attempt_logs([[running], [ended, new]],
                               {"train-0-a": [b"one\n", b"one\ntwo\n"], "train-0-b": [b"resumed\ndone\n"]},
                               [Phase.RUNNING, Phase.SUCCEEDED])
    text = b"".join([chunk async for chunk in logs.worker_log_chunks(RESTARTED, 0, None, follow=True)])
    assert text == b"one\ntwo\n--- attempt 2 of 3: worker 0 was killed by signal 9; restarting ---\nresumed\ndone\n"
    assert [(pod, params["follow"]) for pod, params in asked] == [
        ("train-0-a", True), ("train-0-a", False), ("train-0-b", True)]


async def test_an_evicted_pod_replaced_without_a_restart_is_marked_as_a_replacement():
    """A disruption is not a restart (the podFailurePolicy ignores it): the failure count stays."""
    pods = [worker_pod("train-0-a", 0, None, "2026-01-01T00:00:00Z", evicted=True, exit_code=143),
            worker_pod("train-0-b", 0, None, "2026-01-01T00:01:00Z", running=True)]
    logs, _ = attempt_logs([pods], {"train-0-a": [b"before\n"], "train-0-b": [b"after\n"]}, [])
    job = Job("train", Phase.RUNNING, 1, {})
    text = b"".join([chunk async for chunk in logs.worker_log_chunks(job, 0, None, follow=False)])
    assert text == b"before\n--- the worker's pod was evicted or preempted; its replacement's log follows ---\nafter\n"
