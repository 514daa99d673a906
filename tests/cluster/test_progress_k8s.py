"""Launch progress per worker from real API objects (control plane + KWOK nodes).

KWOK runs no containers and its nodes write no kubelet events, so Queued, Scheduling
and Running are checked here against a real API server, scheduler and job controller;
the Pulling/Starting steps of real containers are checked by the `real_cluster` tests,
which skip (one line) where this machine cannot run the real node (fail in CI).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest

from cluster_helpers import GPU_TOLERATION, own_gpu_nodes, wait_for, wait_for_async
from paddle_ext import tenancy
from paddle_ext.backends.kubernetes import KubernetesBackend
from paddle_ext.constants import SPEC_ANNOTATION
from paddle_ext.jobkinds import job_objects
from paddle_ext.manifests import ManifestSettings
from paddle_ext.spec import JobSpec

COMPLETE_AFTER = "kwok.paddlecloud.io/complete-after"
REAL_WORKER_IMAGE = os.environ.get("PADDLECLOUD_TEST_WORKER_IMAGE", "docker.io/paddlecloud/paddle-worker:3.3.1-cpu")


def backend(cluster, namespace, **config) -> KubernetesBackend:
    config = {"images": [{"name": "paddle:3.3.1-cpu"}], "gpu_tolerations": [GPU_TOLERATION], **config}
    return KubernetesBackend(kubeconfig=cluster.kubeconfig, namespace=namespace, **config)


async def watch_steps(jobs: KubernetesBackend, name: str, until, timeout: float = 60) -> list[list[str]]:
    """Each distinct progress snapshot ([step per worker]) seen until `until(job)` holds."""
    seen: list[list[str]] = []
    deadline = time.monotonic() + timeout
    while True:
        job = await jobs.get(name)
        steps = [str(p.step) for p in job.progress]
        if not seen or seen[-1] != steps:
            seen.append(steps)
        if until(job):
            return seen
        if time.monotonic() > deadline:
            raise AssertionError(f"progress of {name} never got there; saw {seen}, last {job.progress}")
        await asyncio.sleep(0.2)


def ordered(snapshots: list[list[str]]) -> bool:
    order = ["Queued", "Scheduling", "Pulling", "Starting", "Running", "Finished"]
    for worker in range(len(snapshots[0])):
        numbers = [order.index(s[worker]) for s in snapshots]
        if numbers != sorted(numbers):
            return False
    return True


async def test_a_queued_job_moves_from_queued_to_running_for_every_worker(cluster, batch_v1, namespace):
    """Kueue's way: a suspended Job (queue_name set) is Queued until admitted (here: the test
    unsuspends it, as Kueue would), then each worker is scheduled and runs."""
    jobs = backend(cluster, namespace, queue_name="team-queue", pod_annotations={COMPLETE_AFTER: "20s"})
    try:
        await jobs.submit(JobSpec(name="queued", command=["python", "train.py"], workers=2,
                                  gpus_per_worker=1))  # GPU pods: on the KWOK nodes, which run no container
        job = await jobs.get("queued")
        assert [(p.step, p.detail) for p in job.progress] == [
            ("Queued", "the job is queued, waiting for cluster capacity")] * 2
        # Nothing admits it: once the job controller has handled the suspended Job (it sets the
        # Suspended condition), the job has no pods and stays queued. An event, not a fixed sleep.
        await wait_for_async(lambda: any(
            c.type == "Suspended" and c.status == "True"
            for c in batch_v1.read_namespaced_job("queued", namespace).status.conditions or ()),
            timeout=60, what="the job controller to mark the queued Job Suspended")
        assert not batch_v1.read_namespaced_job("queued", namespace).status.active
        assert [str(p.step) for p in (await jobs.get("queued")).progress] == ["Queued", "Queued"]

        batch_v1.patch_namespaced_job("queued", namespace, {"spec": {"suspend": False}})
        # (the pods may already exist at the first look after admission)
        seen = [["Queued", "Queued"]] + await watch_steps(jobs, "queued",
                                                          lambda j: all(p.step == "Running" for p in j.progress))
        print("progress snapshots:", seen)
        assert seen[-1] == ["Running", "Running"] and ordered(seen)
        running = (await jobs.get("queued")).progress
        assert all(p.node.startswith("kwok-gpu-") and p.detail == f"on node {p.node}" for p in running)
    finally:
        await jobs.close()


def most_free_gpus(core_v1) -> int:
    """Counted here, from the nodes and the pods other tests of the session may still run."""
    used: dict[str, int] = {}
    for pod in core_v1.list_pod_for_all_namespaces().items:
        if pod.spec.node_name and pod.status.phase not in ("Succeeded", "Failed"):
            for container in pod.spec.containers:
                gpus = int(((container.resources and container.resources.requests) or {}).get("nvidia.com/gpu", 0))
                used[pod.spec.node_name] = used.get(pod.spec.node_name, 0) + gpus
    return max(int((node.status.allocatable or {}).get("nvidia.com/gpu", 0)) - used.get(node.metadata.name, 0)
               for node in core_v1.list_node().items)


async def test_an_unschedulable_gpu_job_says_how_many_gpus_it_waits_for(cluster, core_v1, namespace):
    jobs = backend(cluster, namespace, max_gpus_per_worker=16)
    try:
        await jobs.submit(JobSpec(name="too-big", command=["python", "train.py"], workers=2, gpus_per_worker=16))
        await watch_steps(jobs, "too-big", lambda j: all(p.detail.startswith("waiting for 16") for p in j.progress),
                          timeout=30)
        async def steady_look():  # a look while no other test's GPU pod started or ended (they run for seconds)
            free = most_free_gpus(core_v1)
            job = await jobs.get("too-big")
            return (free, job) if most_free_gpus(core_v1) == free else None

        free, job = await wait_for_async(steady_look, timeout=60, what="a look while the free GPUs stay the same")
        assert 0 < free <= 8  # a KWOK GPU node has 8
        assert [(p.step, p.detail) for p in job.progress] == [
            ("Scheduling", f"waiting for 16 GPUs; the most free on any node is {free}")] * 2
    finally:
        await jobs.close()


async def test_pods_the_quota_refuses_leave_workers_queued_with_the_quota_message(cluster, core_v1, batch_v1,
                                                                                  namespace):
    core_v1.create_namespaced_resource_quota(namespace, tenancy.resource_quota(
        namespace, {"requests.nvidia.com/gpu": "2"}))
    wait_for(lambda: core_v1.read_namespaced_resource_quota("paddlecloud-quota", namespace).status.hard,
             what="quota status")
    # Created behind the preflight's back (e.g. by kubectl), so the job controller meets the quota.
    spec = JobSpec(name="over", command=["python", "train.py"], workers=1, gpus_per_worker=4)
    service, job = job_objects(spec, ManifestSettings(namespace=namespace, image="img"),
                               {SPEC_ANNOTATION: json.dumps(spec.to_dict())})
    batch_v1.create_namespaced_job(namespace, job)
    jobs = backend(cluster, namespace)
    try:
        await watch_steps(jobs, "over", lambda j: "quota" in j.progress[0].detail, timeout=30)
        (progress,) = (await jobs.get("over")).progress
        assert progress.step == "Queued"
        assert progress.detail == ("the namespace's quota does not admit it: "
                                   "Needs 4 GPUs; your quota is 2 and 0 are in use.")
    finally:
        await jobs.close()


async def test_cli_status_shows_the_steps(cluster, core_v1, namespace):
    env = {**os.environ, "KUBECONFIG": cluster.kubeconfig, "PADDLECLOUD_BACKEND": "kubernetes"}

    def cli(*args):
        result = subprocess.run([sys.executable, "-m", "paddle_ext.cli", *args, "--namespace", namespace],
                                env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return result

    with own_gpu_nodes(core_v1, namespace, 2) as (selector, toleration):
        jobs = backend(cluster, namespace, pod_annotations={COMPLETE_AFTER: "5m"}, gpu_node_selector=selector,
                       gpu_tolerations=[GPU_TOLERATION, toleration])
        try:
            await jobs.submit(JobSpec(name="big", command=["python", "t.py"], workers=3, gpus_per_worker=8))
        finally:
            await jobs.close()
        await check_two_placed_one_waiting(cli)


async def check_two_placed_one_waiting(cli):
    # two workers fit (8 GPUs per node, 2 nodes); the third waits
    def placed():
        result = json.loads(cli("status", "big", "--json").stdout)
        steps = sorted(p["step"] for p in result["progress"])
        return result if steps == ["Running", "Running", "Scheduling"] and "most free" in str(result) else None

    result = await asyncio.to_thread(lambda: wait_for(placed, timeout=60, interval=0.5, what="two workers running, one waiting"))
    waiting = next(p for p in result["progress"] if p["step"] == "Scheduling")
    assert waiting["detail"] == "waiting for 8 GPUs; the most free on any node is 0"
    assert {"name", "phase", "workers", "reason", "message", "created", "finished"} <= set(result)
    text = (await asyncio.to_thread(cli, "status", "big")).stdout
    assert "Progress: Queued > Scheduling > Pulling > Starting > Running > Finished" in text
    assert f"worker-{waiting['index']}  [2/6 Scheduling] waiting for 8 GPUs; the most free on any node is 0" in text
    await asyncio.to_thread(cli, "cancel", "big")


# ------------------------------------------------------------------ real containers

@pytest.fixture
def real_node(real_cluster) -> str:
    """The node that runs containers (KWOK's run none)."""
    return real_cluster.real_node_name


async def test_real_containers_go_through_pulling_and_starting_to_running(cluster, batch_v1, namespace, real_node):
    """On a real kubelet: every worker reaches Running, after Scheduling; a first pull
    shows Pulling, then 'image pulled ... (<size>)' while starting."""
    jobs = backend(cluster, namespace, queue_name="hold", image=REAL_WORKER_IMAGE, images=[])
    try:
        await jobs.submit(JobSpec(name="real", command=["python", "-c", "import time; time.sleep(30)"], workers=2,
                                  cpu="400m", memory="1Gi"))
        # A suspended Job's scheduling directives may change: pin it to the real node, then admit it.
        batch_v1.patch_namespaced_job("real", namespace, {"spec": {"template": {"spec": {
            "nodeSelector": {"kubernetes.io/hostname": real_node}}}}})
        batch_v1.patch_namespaced_job("real", namespace, {"spec": {"suspend": False}})
        details: list[str] = []

        def running(job):
            details.extend(p.detail for p in job.progress)
            return all(p.step == "Running" for p in job.progress)

        seen = await watch_steps(jobs, "real", running, timeout=600)
        print("progress snapshots:", seen)
        assert ordered(seen) and seen[-1] == ["Running", "Running"]
        assert all(p.node == real_node for p in (await jobs.get("real")).progress)
        pulled = [d for d in details if d.startswith("image pulled") or d == "the image is already on the node"]
        assert pulled or any(d.startswith("pulling image") for d in details), details
    finally:
        await jobs.close()
