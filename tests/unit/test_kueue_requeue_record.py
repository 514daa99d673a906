"""The Kubernetes backend records a requeue on the pending Workload when it reads a preempted
job (so Kueue gives the readmitted workers their attempt), and a reader who may not write it
still reads the job (the notebook's role has no patch on Workloads)."""

from __future__ import annotations

import pytest

from paddle_ext.backends.kubernetes import KubernetesBackend
from paddle_ext.jobs import Phase
from paddle_ext.kubeapi import KubeApiError
from test_kubernetes_queue import LOCAL_QUEUES, preempted, suspended_job

NS = "paddlecloud-alice"
WORKLOADS = "/apis/kueue.x-k8s.io/v1beta2/workloads"


class Api:
    def __init__(self, workload: dict, refuse_patch: bool = False):
        self.workload, self.refuse_patch = workload, refuse_patch
        self.patched: list[tuple[str, dict]] = []

    async def get(self, path, **params):
        if path == f"/apis/batch/v1/namespaces/{NS}/jobs/mine":
            return suspended_job("mine")
        if path.endswith("/events"):
            return {"items": []}
        raise AssertionError(path)

    async def list(self, path, **params):
        if path == WORKLOADS:
            return {"items": [self.workload]}
        if path.endswith("/localqueues"):
            return {"items": list(LOCAL_QUEUES)}
        return {"items": []}  # pods (none while queued), ClusterQueues

    async def patch(self, path, body):
        if self.refuse_patch:
            raise KubeApiError(403, 'workloads.kueue.x-k8s.io "job-mine" is forbidden')
        self.patched.append((path, body))
        return {}


def backend(api):
    return KubernetesBackend(api=api, namespace=NS, user="alice", queue_name="default")


@pytest.mark.parametrize("refuse", [False, True])
async def test_reading_a_preempted_job_records_its_requeue_on_the_pending_workload(refuse):
    workload = preempted("mine", count=1)
    workload["metadata"]["resourceVersion"] = "7"
    api = Api(workload, refuse_patch=refuse)
    job = await backend(api).get("mine")
    assert (job.phase, job.requeues, job.attempt) == (Phase.QUEUED, 2, 3)
    assert job.message.startswith("Preempted: team audio reclaimed its GPUs; requeued.")
    if refuse:  # may not write it: the job still reads, the workers will not know the attempt
        assert api.patched == []
        return
    ((path, body),) = api.patched
    assert path == f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NS}/workloads/job-mine"
    assert body["metadata"] == {"resourceVersion": "7"}
    assert body["spec"]["podSets"][0]["template"]["metadata"]["annotations"] == {
        "paddlecloud.io/requeues": "2", "paddlecloud.io/requeue-reason": "preempted: team audio reclaimed its GPUs"}
    # Recorded already: the next reading writes nothing.
    api.workload = {**workload, "spec": body["spec"]}
    await backend(api).get("mine")
    assert len(api.patched) == 1
