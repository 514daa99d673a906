"""Following a worker's log on Kubernetes (`WorkerLogs`), against fakes of what the backend
hands it: a stream that drops and is re-attached repeats no line, and a finished job ends
the follow."""

from __future__ import annotations

import dataclasses
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


def attempt_logs(listings: list[list[dict]], bodies: dict[str, list[bytes]], jobs: list[Phase],
                 job: Job | None = None) -> tuple[WorkerLogs, list]:
    """WorkerLogs whose n-th pod listing answers listings[n] (the last one again after), whose
    log of pod P answers bodies[P] in turn, and whose n-th job read answers jobs[n] (`job` in
    that phase, where given)."""
    asked = []

    async def list_pods(selector):
        return listings.pop(0) if len(listings) > 1 else listings[0]

    async def job_state(name):
        return dataclasses.replace(job, phase=jobs.pop(0)) if job else Job(name, jobs.pop(0), 2, {})

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
                               [Phase.RUNNING, Phase.SUCCEEDED], RESTARTED)
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


# ---------------------------------------------------------------- attempts whose pods are gone

PREEMPTED = Job("train", Phase.RUNNING, 2, {"max_restarts": 1}, requeues=1,
                last_restart_reason="preempted: team lender reclaimed its capacity")
REQUEUE_MARKER = b"--- attempt 2 of 3: preempted: team lender reclaimed its capacity; restarting ---\n"


def kept_outputs(tmp_path, job: Job, copies: dict[str, bytes], index: int = 0) -> Job:
    """`job` with its outputs kept in tmp_path, where worker `index` left `copies` (file name -> text)."""
    folder = tmp_path / "out" / "logs" / f"worker-{index}"
    folder.mkdir(parents=True)
    for name, text in copies.items():
        (folder / name).write_bytes(text)
    return dataclasses.replace(job, outputs={"path": str(tmp_path / "out"), "kept": True, "note": ""})


def copy_of(pod_name: str, started: str = "20260101T000000.500000Z") -> str:
    return f"{started}-{pod_name}.log"


async def test_a_deleted_attempt_is_read_from_its_copy_before_the_live_pod_each_line_once(tmp_path):
    job = kept_outputs(tmp_path, PREEMPTED, {copy_of("train-0-a"): b"step 1\nstep 10: paused\n",
                                             copy_of("train-0-b", "20260101T000100.500000Z"): b"resumed\n"})
    pods = [worker_pod("train-0-b", 0, 0, "2026-01-01T00:01:00Z", running=True)]
    logs, asked = attempt_logs([pods], {"train-0-b": [b"resumed\n"]}, [])
    text = b"".join([chunk async for chunk in logs.worker_log_chunks(job, 0, None, follow=False)])
    assert text == b"step 1\nstep 10: paused\n" + REQUEUE_MARKER + b"resumed\n"
    assert [pod for pod, _ in asked] == ["train-0-b"]  # a kept pod is read from Kubernetes, not its copy


async def test_a_pod_deleted_during_a_follow_ends_with_its_copys_last_lines_never_repeating_one(tmp_path):
    job = kept_outputs(tmp_path, PREEMPTED, {copy_of("train-0-a"): b"one\ntwo\nthree\n"})
    running = worker_pod("train-0-a", 0, 0, "2026-01-01T00:00:00Z", running=True)
    new = worker_pod("train-0-b", 0, 0, "2026-01-01T00:01:00Z", exit_code=0)
    logs, asked = attempt_logs([[running], [new]], {"train-0-a": [b"one\n"], "train-0-b": [b"resumed\ndone\n"]},
                               [Phase.RUNNING, Phase.SUCCEEDED], job)
    start = dataclasses.replace(job, requeues=0, last_restart_reason="")  # the preemption came later
    text = b"".join([chunk async for chunk in logs.worker_log_chunks(start, 0, None, follow=True)])
    assert text == b"one\ntwo\nthree\n" + REQUEUE_MARKER + b"resumed\ndone\n"
    assert [(pod, params["follow"]) for pod, params in asked] == [("train-0-a", True), ("train-0-b", True)]


async def test_a_tail_reads_the_live_pod_and_only_where_none_is_left_the_last_copy(tmp_path):
    job = kept_outputs(tmp_path, PREEMPTED, {copy_of("train-0-a"): b"a1\na2\n",
                                             copy_of("train-0-b", "20260101T000100.500000Z"): b"b1\nb2\nb3\n"})
    live = worker_pod("train-0-c", 0, 0, "2026-01-01T00:02:00Z", running=True)
    logs, asked = attempt_logs([[live]], {"train-0-c": [b"c2\n"]}, [])
    assert b"".join([chunk async for chunk in logs.worker_log_chunks(job, 0, 1, follow=False)]) == b"c2\n"
    logs, asked = attempt_logs([[]], {}, [])
    assert b"".join([chunk async for chunk in logs.worker_log_chunks(job, 0, 2, follow=False)]) == b"b2\nb3\n"
    assert asked == []


async def test_without_copies_or_kept_outputs_only_the_kept_pods_are_read(tmp_path, monkeypatch):
    pods = [worker_pod("train-0-b", 0, 0, "2026-01-01T00:01:00Z", running=True)]
    missing = dataclasses.replace(PREEMPTED, outputs={"path": str(tmp_path / "nowhere"), "kept": True, "note": ""})
    unkept = kept_outputs(tmp_path, PREEMPTED, {copy_of("train-0-a"): b"old\n"})
    unkept = dataclasses.replace(unkept, outputs={**unkept.outputs, "kept": False})
    for job in (missing, unkept, PREEMPTED):
        logs, _ = attempt_logs([pods], {"train-0-b": [b"now\n"]}, [])
        assert b"".join([chunk async for chunk in logs.worker_log_chunks(job, 0, None, follow=False)]) == b"now\n"
    readable = dataclasses.replace(unkept, outputs={**unkept.outputs, "kept": True})

    def refused(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("paddle_ext.backends.kubernetes_logs.os.listdir", refused)
    logs, _ = attempt_logs([pods], {"train-0-b": [b"now\n"]}, [])
    assert b"".join([chunk async for chunk in logs.worker_log_chunks(readable, 0, None, follow=False)]) == b"now\n"


async def test_a_symbolic_link_or_a_stranger_file_among_the_copies_is_never_read(tmp_path):
    secret = tmp_path / "secret"
    secret.write_bytes(b"not yours\n")
    job = kept_outputs(tmp_path, PREEMPTED, {"notes.txt": b"mine\n", copy_of("UPPER"): b"bad name\n"})
    (tmp_path / "out" / "logs" / "worker-0" / copy_of("train-0-a")).symlink_to(secret)
    pods = [worker_pod("train-0-b", 0, 0, "2026-01-01T00:01:00Z", running=True)]
    logs, _ = attempt_logs([pods], {"train-0-b": [b"now\n"]}, [])
    assert b"".join([chunk async for chunk in logs.worker_log_chunks(job, 0, None, follow=False)]) == b"now\n"
    # nor is a folder of copies that is a link out of the outputs
    elsewhere = tmp_path / "elsewhere" / "worker-0"
    elsewhere.mkdir(parents=True)
    (elsewhere / copy_of("train-0-a")).write_bytes(b"not yours\n")
    outputs = tmp_path / "out2"
    outputs.mkdir()
    (outputs / "logs").symlink_to(tmp_path / "elsewhere")
    linked = dataclasses.replace(job, outputs={"path": str(outputs), "kept": True, "note": ""})
    logs, _ = attempt_logs([pods], {"train-0-b": [b"now\n"]}, [])
    assert b"".join([chunk async for chunk in logs.worker_log_chunks(linked, 0, None, follow=False)]) == b"now\n"


def test_attempts_put_the_copies_of_gone_pods_in_their_place_among_the_kept_ones():
    from paddle_ext.backends.kubernetes_logs import attempts, parse_copy_name

    kept = [worker_pod("train-0-a", 0, 0, "2026-01-01T00:00:00Z", exit_code=137),
            worker_pod("train-0-c", 0, 1, "2026-01-01T00:02:00Z", running=True)]
    copies = [parse_copy_name(copy_of(name, started)) for name, started in (
        ("train-0-a", "20260101T000000.100000Z"), ("train-0-b", "20260101T000100.100000Z"),
        ("train-0-c", "20260101T000200.100000Z"))]
    assert attempts(kept, copies) == [kept[0], copies[1], kept[1]]
    assert [parse_copy_name(name) for name in ("x.log", "20260101T000000Z-a.log", copy_of("a/b"), copy_of("-a"))] \
        == [None] * 4
