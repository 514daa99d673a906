"""Restarts on the real node (issue 24): a worker pod deleted mid-run restarts both workers
(the Indexed Job's backoffLimitPerIndex and podFailurePolicy, paddle_ext.worker making the
peer exit with the restart code) and the job Succeeds with one restart; a script that exits
1 fails at once with none; a job that loses a worker in every attempt fails once its
`max_restarts` are spent, with the count and the last reason in `paddlecloud status`. The pod
is deleted when its log says the script paused at step PAUSE_AT (a gate the script never leaves in
the attempts that pause), never after a timer.

Needs the real node and worker images built from this tree (paddle_ext.worker is in the
worker image); without a shared workspace each pod has an output folder of its own, so the
restarted workers start from step 0 and say so ("attempt 2: no checkpoint")."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import kubernetes

from cluster_helpers import wait_for
from test_k8s_backend import SMALL, WORKER, backend, job_pods, wait_phase

INDEX = "batch.kubernetes.io/job-completion-index"
PAUSE_AT = 10  # the first step of the second epoch: the first pod lost mid-run, not at its start
TRAIN = ["python", "train.py", "--epochs", "2", "--steps", "10", "--checkpoint-every", "10",
         "--pause-at", str(PAUSE_AT), "--pause-file", "/tmp/never"]


def pod_of(core_v1, namespace, name, index):
    live = [p for p in job_pods(core_v1, namespace, name)
            if p.metadata.labels[INDEX] == str(index) and p.status.phase in ("Pending", "Running")
            and not p.metadata.deletion_timestamp]
    return live[0] if len(live) == 1 else None


def log_of(core_v1, namespace, pod) -> str:
    try:
        return core_v1.read_namespaced_pod_log(pod.metadata.name, namespace, container="paddle")
    except kubernetes.client.ApiException:
        return ""


def lines_with(lines: list[str], text: str) -> list[int]:
    """Where `text` occurs in `lines`, by line number."""
    return [number for number, line in enumerate(lines) if text in line]


def paused(core_v1, namespace, name, old=frozenset()):
    """Both workers' pods (none of the pods `old`, by uid), once both logs say the script paused
    at step PAUSE_AT."""
    pods = [pod_of(core_v1, namespace, name, i) for i in (0, 1)]
    if all(pods) and not {p.metadata.uid for p in pods} & old and all(f"rank {i}: paused at step {PAUSE_AT}" in log_of(core_v1, namespace, pods[i]) for i in (0, 1)):
        return pods
    return None


async def test_a_worker_pod_deleted_mid_run_restarts_both_workers_and_the_job_succeeds(real_cluster, core_v1,
                                                                                       namespace):
    jobs = backend(real_cluster, namespace)
    try:
        await jobs.submit(JobSpec_(name="resumes", workers=2, max_restarts=2,
                                   command=TRAIN))
        pods = wait_for(lambda: paused(core_v1, namespace, "resumes"), timeout=600, interval=1,
                        what=f"both workers paused at step {PAUSE_AT}")
        core_v1.delete_namespaced_pod(pods[1].metadata.name, namespace)
        job = await wait_phase(jobs, "resumes", ("Succeeded", "Failed"), timeout=900)
        assert job.phase == "Succeeded", job.message
        assert (job.restarts, job.attempt) == (1, 2), job.to_dict()
        assert job.last_restart_reason.startswith("worker "), job.last_restart_reason
        new = {p.metadata.labels[INDEX]: p for p in job_pods(core_v1, namespace, "resumes")
               if p.status.phase == "Succeeded"}
        assert set(new) == {"0", "1"} and all(p.metadata.uid != pods[1].metadata.uid for p in new.values())
        for index, pod in new.items():
            log = log_of(core_v1, namespace, pod)
            assert "attempt 2" in log and f"rank {index}: done" in log, log[-2000:]  # PADDLECLOUD_RESTART=1
        # The product's log keeps every attempt whose pod is kept, each line once, with the restart
        # marked: worker 0's first pod (it stopped for its lost peer) is kept; worker 1's was deleted.
        marker = f"--- attempt 2 of 3: {job.last_restart_reason}; restarting ---"
        first = [line async for line in jobs.logs("resumes", worker=0)]
        paused_at, marked, done = (lines_with(first, text) for text in (f"rank 0: paused at step {PAUSE_AT}", marker, "rank 0: done"))
        assert len(paused_at) == len(marked) == len(done) == 1 and paused_at[0] < marked[0] < done[0], first[-40:]
        second = [line async for line in jobs.logs("resumes", worker=1)]
        assert second[0] == marker and len(lines_with(second, marker)) == 1, second[:5]
        assert lines_with(second, "rank 1: done") and not lines_with(second, f"rank 1: paused at step {PAUSE_AT}"), second[-20:]
    finally:
        await jobs.close()


async def test_a_script_that_exits_1_fails_at_once_with_no_restart(real_cluster, namespace):
    jobs = backend(real_cluster, namespace)
    try:
        await jobs.submit(JobSpec_(name="buggy", workers=2, max_restarts=2,
                                   command=["python", "train.py", "--epochs", "1", "--exit-code", "1",
                                            "--fail-rank", "1"]))
        job = await wait_phase(jobs, "buggy", ("Succeeded", "Failed"), timeout=600)
        assert (job.phase, job.reason, job.restarts) == ("Failed", "WorkerFailed", 0), job.to_dict()
        assert job.message.startswith("Worker 1 exited with code 1"), job.message
    finally:
        await jobs.close()


async def test_a_job_that_loses_a_worker_in_every_attempt_fails_after_max_restarts_with_the_count(
        real_cluster, core_v1, namespace, project_folder):
    """max_restarts 1: worker 1's pod deleted at the gate of attempt 1 (both workers restart) and
    again at the gate of attempt 2 (--pause-attempts 2: both attempts wait at PAUSE_AT until the
    test has deleted the pod; /tmp/never is never made). The job fails with 1 restart of at most
    1, the cause named, and `paddlecloud status` says the same."""
    jobs = backend(real_cluster, namespace)
    try:
        await jobs.submit(JobSpec_(name="unlucky", workers=2, max_restarts=1,
                                   command=[*TRAIN, "--pause-attempts", "2"]))
        seen: frozenset[str] = frozenset()
        for attempt in (1, 2):
            pods = wait_for(lambda old=seen: paused(core_v1, namespace, "unlucky", old), timeout=600, interval=1,
                            what=f"both workers of attempt {attempt} paused at step {PAUSE_AT}")
            seen |= {p.metadata.uid for p in pods}
            if attempt == 2:  # the restarted workers run as attempt 2 ($PADDLECLOUD_RESTART=1)
                assert all("attempt 2" in log_of(core_v1, namespace, p) for p in pods)
            core_v1.delete_namespaced_pod(pods[1].metadata.name, namespace)
        job = await wait_phase(jobs, "unlucky", ("Succeeded", "Failed"), timeout=600)
        assert (job.phase, job.reason, job.restarts, job.max_restarts) == ("Failed", "WorkerFailed", 1, 1), \
            job.to_dict()
        assert job.message.startswith("Worker 1 was stopped before it finished: its pod was deleted"), job.message
        assert job.message.endswith(" Restarted 1 of at most 1 times."), job.message
        assert job.last_restart_reason == "worker 1 was stopped: its pod was deleted", job.last_restart_reason
        status = cli(real_cluster, namespace, project_folder, "status", "unlucky")
        assert status.returncode == 0, status.stderr
        assert "Phase:    Failed" in status.stdout and "Restarted 1 of at most 1 times." in status.stdout, status.stdout
        # when: the kubelet's Killing event of the deleted pod (its own pod is gone)
        assert re.search(r"Restarts: 1 of at most 1 \(now attempt 2 of 2: worker 1 was stopped: its pod was deleted "
                         r"at \d\d:\d\d UTC\)", status.stdout), status.stdout
    finally:
        await jobs.close()


def cli(cluster, namespace, folder, *args) -> subprocess.CompletedProcess:
    """`paddlecloud ARGS` on the Kubernetes backend, as a user in a notebook runs it."""
    env = {**os.environ, "KUBECONFIG": cluster.kubeconfig, "PADDLECLOUD_BACKEND": "kubernetes",
           "PADDLECLOUD_IMAGES": json.dumps([{"name": WORKER}])}
    return subprocess.run([sys.executable, "-m", "paddle_ext.cli", "--namespace", namespace, *args],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=300)


def JobSpec_(**fields):  # noqa: N802 (a JobSpec with the real node's small requests)
    from paddle_ext.spec import JobSpec

    return JobSpec(**{**SMALL, **fields})
