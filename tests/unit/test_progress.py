"""Launch progress per worker, locally and from Kubernetes objects (pure).

Kubelet event messages below are written as kubelet v1.35.4 writes them
(pkg/kubelet/images/image_manager.go: "Pulling image %q", "Successfully pulled image %q
in %v (%v including waiting). Image size: %v bytes.", "Container image %q already
present on machine"); the cluster tier checks the rest against a real API server."""

from __future__ import annotations

import json

import pytest

from paddle_ext.backends.kubernetes_progress import human_bytes, pulled_detail, related_events, worker_progress
from paddle_ext.backends.kubernetes_status import job_from_objects
from paddle_ext.constants import SPEC_ANNOTATION
from paddle_ext.jobkinds import job_objects
from paddle_ext.jobs import Phase, Step, WorkerState
from paddle_ext.manifests import ManifestSettings
from paddle_ext.progress import describe, local_progress
from paddle_ext.spec import JobSpec

UNSCHEDULABLE = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                  "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."}]


def make_job(workers=2, gpus=0, suspend=False):
    spec = JobSpec(name="j", command=["python", "t.py"], workers=workers, gpus_per_worker=gpus)
    _, job = job_objects(spec, ManifestSettings(namespace="ns", image="reg/paddle:3"),
                         {SPEC_ANNOTATION: json.dumps(spec.to_dict())})
    job["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    job["status"] = {}
    if suspend:
        job["spec"]["suspend"] = True
    return job


def pod(index, phase="Pending", node="", state=None, conditions=None):
    return {
        "metadata": {"name": f"j-{index}-abcde", "uid": f"uid-{index}", "creationTimestamp": "2026-01-01T00:00:01Z",
                     "labels": {"batch.kubernetes.io/job-completion-index": str(index), "paddlecloud.io/job": "j"}},
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase, "conditions": conditions or [],
                   "containerStatuses": [{"name": "paddle", "state": state}] if state else []},
    }


def event(reason, message, about_pod=None, kind="Pod", name=None, uid=None):
    involved = {"kind": kind, "name": name or (about_pod["metadata"]["name"] if about_pod else "j"),
                "uid": uid if uid is not None else (about_pod["metadata"]["uid"] if about_pod else "job-uid")}
    return {"reason": reason, "message": message, "involvedObject": involved, "type": "Normal",
            "lastTimestamp": "2026-01-01T00:00:02Z"}


def steps(job):
    return [(p.step, p.detail) for p in job.progress]


# ------------------------------------------------------------------ local

@pytest.mark.parametrize("state, step, detail", [
    (WorkerState(0, Phase.PENDING), Step.STARTING, "starting its processes"),
    (WorkerState(0, Phase.RUNNING), Step.RUNNING, "its processes are running"),
    (WorkerState(0, Phase.SUCCEEDED, 0), Step.FINISHED, "Succeeded"),
    (WorkerState(0, Phase.FAILED, 3, "exited with code 3"), Step.FINISHED, "Failed: exited with code 3"),
])
def test_local_progress(state, step, detail):
    progress = local_progress(state)
    assert (progress.step, progress.detail) == (step, detail)


def test_describe_and_json():
    progress = local_progress(WorkerState(1, Phase.RUNNING))
    assert describe(progress) == "worker-1  [3/4 Running] its processes are running"
    assert progress.to_dict() == {"index": 1, "step": "Running", "detail": "its processes are running", "node": "",
                                  "number": 3, "of": 4, "steps": ["Queued", "Starting", "Running", "Finished"]}
    queued = job_from_objects(make_job(suspend=True), [], []).progress[0]
    assert describe(queued) == "worker-0  [1/6 Queued] the job is queued, waiting for cluster capacity"
    assert queued.to_dict()["steps"] == ["Queued", "Scheduling", "Pulling", "Starting", "Running", "Finished"]


# ------------------------------------------------------------------ Kubernetes

def test_suspended_job_is_queued_for_every_worker():
    job = job_from_objects(make_job(suspend=True), [], [])
    assert steps(job) == [(Step.QUEUED, "the job is queued, waiting for cluster capacity")] * 2
    assert job.to_dict()["progress"][0]["step"] == "Queued"


def test_quota_refusal_queues_with_the_quota_message():
    refused = event("FailedCreate", 'pods "j-0-x" is forbidden: exceeded quota: paddlecloud-quota, requested: '
                    "requests.nvidia.com/gpu=4, used: requests.nvidia.com/gpu=0, limited: requests.nvidia.com/gpu=2",
                    kind="Job", name="j")
    job = job_from_objects(make_job(gpus=4), [], [refused])
    assert job.progress[0].step == Step.QUEUED
    assert job.progress[0].detail == ("the namespace's quota does not admit it: "
                                      "Needs 4 GPUs; your quota is 2 and 0 are in use.")


def test_unschedulable_gpu_worker_says_how_many_and_the_most_free():
    pods = [pod(0, conditions=UNSCHEDULABLE), pod(1, conditions=UNSCHEDULABLE)]
    job = job_from_objects(make_job(gpus=16), pods, [], max_free_gpus=8)
    assert steps(job) == [(Step.SCHEDULING, "waiting for 16 GPUs; the most free on any node is 8")] * 2
    assert job_from_objects(make_job(gpus=16), pods, []).progress[0].detail == "waiting for 16 GPUs"
    cpu = job_from_objects(make_job(), pods, []).progress[0]
    assert cpu.detail == "no node can take it yet: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu"
    assert job_from_objects(make_job(), [pod(0)], []).progress[0].detail == "waiting for the scheduler to pick a node"


def test_pulling_then_pulled_with_size_then_running():
    waiting = {"waiting": {"reason": "ContainerCreating"}}
    p0 = pod(0, node="node-a", state=waiting)
    p1 = pod(1, node="node-b", state=waiting)
    pulling = [event("Scheduled", "Successfully assigned ns/j-0-abcde to node-a", p0),
               event("Pulling", 'Pulling image "reg/paddle:3"', p0),
               event("Pulling", 'Pulling image "reg/paddle:3"', p1),
               event("Pulled", 'Successfully pulled image "reg/paddle:3" in 2.345s (2.345s including waiting). '
                     "Image size: 1234567890 bytes.", p1)]
    job = job_from_objects(make_job(), [p0, p1], pulling)
    assert steps(job) == [(Step.PULLING, "pulling image reg/paddle:3 on node node-a"),
                          (Step.STARTING, "image pulled in 2.345s (1.2 GB)")]
    assert job.progress[0].node == "node-a"
    running = pod(0, "Running", "node-a", {"running": {"startedAt": "2026-01-01T00:00:09Z"}})
    assert job_from_objects(make_job(), [running, p1], pulling).progress[0].step == Step.RUNNING


def test_image_already_present_and_pull_errors():
    p0 = pod(0, node="node-a", state={"waiting": {"reason": "ContainerCreating"}})
    present = [event("Pulled", 'Container image "reg/paddle:3" already present on machine', p0)]
    assert job_from_objects(make_job(1), [p0], present).progress[0].detail == "the image is already on the node"
    assert job_from_objects(make_job(1), [p0], []).progress[0].detail == "starting on node node-a"
    backoff = pod(0, node="node-a", state={"waiting": {"reason": "ImagePullBackOff",
                                                         "message": 'Back-off pulling image "reg/paddle:3"'}})
    progress = job_from_objects(make_job(1), [backoff], []).progress[0]
    assert progress.step == Step.PULLING and "cannot pull image reg/paddle:3: Back-off pulling" in progress.detail


def test_finished_and_cancelled_workers():
    done = job_from_objects(make_job(1), [pod(0, "Succeeded", "n", {"terminated": {"exitCode": 0}})], [])
    assert steps(done) == [(Step.FINISHED, "Succeeded")]
    failed = job_from_objects(make_job(1), [pod(0, "Failed", "n", {"terminated": {"exitCode": 3,
                                                                                   "reason": "Error"}})], [])
    assert steps(failed) == [(Step.FINISHED, "Failed: Error")]
    cancelled = make_job(1, suspend=True)
    cancelled["metadata"]["annotations"]["paddlecloud.io/cancelled"] = "2026-01-01T00:01:00Z"
    assert steps(job_from_objects(cancelled, [], [])) == [(Step.FINISHED, "Cancelled: no pod")]


def test_related_events_pick_the_job_and_its_pods_only():
    mine = pod(0)
    other = {"metadata": {"name": "j-2-xyz", "uid": "other"}}
    events = [event("Pulling", "x", mine), event("Pulling", "y", other), event("FailedCreate", "z", kind="Job", name="j"),
              event("FailedCreate", "w", kind="Job", name="j-2"),
              event("Pulling", "old pod with the same name", kind="Pod", name="j-0-abcde", uid="older-uid")]
    assert [e["message"] for e in related_events("j", [mine], events)] == ["x", "z"]


@pytest.mark.parametrize("size, text", [(999, "999 B"), (1500, "1.5 kB"), (2_155_178, "2.2 MB"),
                                        (12 * 10**12, "12.0 TB")])
def test_human_bytes(size, text):
    assert human_bytes(size) == text


def test_pulled_detail_without_a_size():
    assert pulled_detail('Successfully pulled image "x" in 1m2.5s (1m3s including waiting)') == "image pulled in 1m2.5s"


def test_worker_progress_without_a_pod_and_not_suspended():
    progress = worker_progress(0, None, WorkerState(0, Phase.PENDING), [], image="i", suspended=False,
                               quota_message=None, gpus=0, max_free_gpus=None)
    assert (progress.step, progress.detail) == (Step.QUEUED, "waiting for its pod to be created")
