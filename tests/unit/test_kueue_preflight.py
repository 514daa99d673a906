"""The Kubernetes backend's preflight with and without Kueue: without, a job that does not fit
*now* is refused (as always); with Kueue only a job that can never start is, and one that fits
but not now is created and waits in the queue."""

from __future__ import annotations

import asyncio

import pytest

from paddle_ext.backends.kubernetes import KubernetesBackend
from paddle_ext.backends.kubernetes_status import job_from_objects
from paddle_ext.constants import KUEUE_JOB_UID_LABEL, QUEUE_ANNOTATION
from paddle_ext.errors import QuotaExceeded
from paddle_ext.jobs import Phase
from paddle_ext.kubeapi import KubeApiError
from paddle_ext.quota.model import Limits
from paddle_ext.quota.queues import Queue, QueuePolicy, queue_annotation
from paddle_ext.spec import JobSpec
from decimal import Decimal

from mergepatch import merge_patch
from paddle_ext.jobkinds import job_objects
from paddle_ext.manifests import ManifestSettings

TEAM = Queue("paddlecloud-team-vision", "team vision's queue", "group:vision",
             {"gpus": Decimal(8), "cpu": None, "memory": None})


def resource_quota(used_gpus: int) -> dict:
    return {"metadata": {"name": "paddlecloud-quota",
                         "annotations": {QUEUE_ANNOTATION: queue_annotation(TEAM, QueuePolicy(borrowing=Limits(gpus=4)))}},
            "spec": {"hard": {"requests.nvidia.com/gpu": "12", "pods": "40"}},
            "status": {"hard": {"requests.nvidia.com/gpu": "12", "pods": "40"},
                       "used": {"requests.nvidia.com/gpu": str(used_gpus), "pods": "3"}}}


class Api:
    """What the preflight reads: the namespace's ResourceQuota, nodes (or a 403), no jobs."""

    def __init__(self, used_gpus: int, node_gpus: int | None):
        self.quota = resource_quota(used_gpus)
        self.node_gpus = node_gpus

    async def get(self, path, **params):
        if path.endswith("/resourcequotas"):
            return {"items": [self.quota]}
        if path == "/api/v1/nodes":
            if self.node_gpus is None:
                raise KubeApiError(403, "nodes is forbidden")
            return {"items": [{"metadata": {"name": "n"}, "status": {"allocatable": {"nvidia.com/gpu": str(self.node_gpus)}}}]}
        raise AssertionError(path)

    async def list(self, path, **params):
        return {"items": []}


def backend(api, queue_name):
    return KubernetesBackend(api=api, namespace="paddlecloud-alice", user="alice", queue_name=queue_name)


async def test_without_kueue_a_job_that_does_not_fit_now_is_refused_as_before():
    with pytest.raises(QuotaExceeded, match="Needs 4 GPUs; your quota is 12 and 10 are in use"):
        await backend(Api(used_gpus=10, node_gpus=8), "").preflight(JobSpec(name="j", command=["x"], workers=2,
                                                                              gpus_per_worker=2))


async def test_with_kueue_a_job_that_fits_but_not_now_passes_to_be_queued():
    await backend(Api(used_gpus=10, node_gpus=8), "default").preflight(
        JobSpec(name="j", command=["x"], workers=2, gpus_per_worker=2))


async def test_with_kueue_a_job_over_the_queues_reach_is_refused_at_once_with_numbers():
    with pytest.raises(QuotaExceeded, match=r"Needs 16 GPUs; team vision's queue can admit at most 12 \(8 guaranteed"):
        await backend(Api(used_gpus=0, node_gpus=8), "default").preflight(
            JobSpec(name="j", command=["x"], workers=2, gpus_per_worker=8))


async def test_with_kueue_more_gpus_per_worker_than_a_node_has_is_refused_when_nodes_can_be_read():
    spec = JobSpec(name="j", command=["x"], workers=1, gpus_per_worker=10)
    with pytest.raises(QuotaExceeded, match="Needs 10 GPUs per worker; the largest node has 8"):
        await backend(Api(used_gpus=0, node_gpus=8), "default").preflight(spec)
    await backend(Api(used_gpus=0, node_gpus=None), "default").preflight(spec)  # cannot tell: queued


class ScopedApi:
    """Kueue lists: every namespace's refused (a notebook's account), its own namespace's allowed."""

    def __init__(self):
        self.asked = []

    async def list(self, path, **params):
        self.asked.append(path)
        if "/namespaces/" not in path:
            raise KubeApiError(403, "forbidden")
        return {"items": [{"metadata": {"name": path.rsplit("/", 1)[-1]}}]}


SUSPENDED = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {"suspend": True}}


async def test_the_kueue_view_falls_back_to_the_own_namespace_and_does_not_ask_again():
    api = ScopedApi()
    jobs = backend(api, "default")
    view = await jobs._kueue_view([SUSPENDED])
    assert not view.complete and [w["metadata"]["name"] for w in view.workloads] == ["workloads"]
    assert view.cluster_queues == ()
    asked = len(api.asked)
    await jobs._kueue_view([SUSPENDED])
    # the three refused cluster-wide lists are not asked again; the namespace's two are
    assert sorted(api.asked[asked:]) == ["/apis/kueue.x-k8s.io/v1beta2/namespaces/paddlecloud-alice/localqueues",
                                         "/apis/kueue.x-k8s.io/v1beta2/namespaces/paddlecloud-alice/workloads"]


async def test_no_kueue_objects_are_read_without_kueue_or_without_a_queued_job():
    api = ScopedApi()
    assert await backend(api, "")._kueue_view([SUSPENDED]) is None
    assert await backend(api, "default")._kueue_view([{**SUSPENDED, "spec": {}}]) is None
    assert api.asked == []


class OwnWorkloadApi:
    """A namespace's Workloads selected by Kueue's job-uid label: `workload` for the job's uid."""

    def __init__(self, workload: dict):
        self.workload = workload
        self.asked: list[tuple[str, dict]] = []

    async def list(self, path, **params):
        self.asked.append((path, params))
        uid = self.workload["metadata"]["labels"][KUEUE_JOB_UID_LABEL]
        return {"items": [self.workload] if params.get("labelSelector") == f"{KUEUE_JOB_UID_LABEL}={uid}" else []}


PREEMPTED = ("Preempted to accommodate a workload (UID: x, JobUID: y) due to reclamation within the cohort; "
             "preemptor path: /paddlecloud/paddlecloud-team-audio")


def requeued_and_succeeded() -> tuple[dict, dict]:
    """A 2-worker Job that Succeeded, and its Workload: preempted once, then readmitted."""
    done = {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "paddlecloud-alice", "uid": "job-uid-j", "labels": {},
                         "annotations": {}},
            "spec": {"completionMode": "Indexed", "completions": 2, "parallelism": 2, "suspend": False,
                     "template": {"spec": {"containers": [{"name": "paddle"}]}}},
            "status": {"succeeded": 2, "conditions": [{"type": "Complete", "status": "True"}]}}
    earlier = [{"type": kind, "status": "False", "reason": "QuotaReserved", "message": "Previously: " + PREEMPTED,
                "lastTransitionTime": "2026-01-01T12:00:00Z"} for kind in ("Evicted", "Preempted")]
    workload = {"metadata": {"name": "job-j", "namespace": "paddlecloud-alice", "uid": "wl",
                             "labels": {KUEUE_JOB_UID_LABEL: "job-uid-j"},
                             "ownerReferences": [{"kind": "Job", "name": "j", "uid": "job-uid-j"}]},
                "spec": {"queueName": "default", "podSets": [{"name": "main", "count": 2, "template": {"spec": {
                    "containers": [{"name": "paddle", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}}}]},
                "status": {"conditions": [{"type": "Finished", "status": "True", "reason": "Succeeded"}, *earlier],
                           "schedulingStats": {"evictions": [{"reason": "Preempted", "count": 1}]}}}
    return done, workload


async def test_a_job_that_succeeded_after_a_requeue_still_reads_it_from_its_own_workload():
    """Kueue keeps a finished job's Workload, and with it the eviction count: a job preempted,
    readmitted and then Succeeded still says it was sent back once (the backend used to skip
    the read once the job had ended, and the status forgot the preemption)."""
    done, workload = requeued_and_succeeded()
    api = OwnWorkloadApi(workload)
    view = await backend(api, "default")._own_workloads(done)
    assert [path for path, _ in api.asked] == ["/apis/kueue.x-k8s.io/v1beta2/namespaces/paddlecloud-alice/workloads"]
    job = job_from_objects(done, [], [], kueue=view)
    assert job.phase == Phase.SUCCEEDED and (job.requeues, job.restarts, job.attempt) == (1, 0, 2), job.to_dict()
    assert job.attempt_line() == "attempt 2 of 2: preempted: team audio reclaimed its GPUs"
    assert await backend(api, "")._own_workloads(done) is None  # no Kueue: nothing read


class ListingApi:
    """A namespace holding `jobs` and `workloads`, as a listing reads them; its LocalQueue
    "default" (to team vision's ClusterQueue) counts `pending` Workloads waiting (None: there is
    no LocalQueue object)."""

    def __init__(self, jobs: list[dict], workloads: list[dict], pending: int | None = None):
        self.jobs, self.workloads, self.pending = jobs, workloads, pending
        self.asked: list[str] = []

    async def get(self, path, **params):
        self.asked.append(path)
        if path.endswith("/localqueues/default") and self.pending is not None:
            return {**LOCAL_QUEUE, "status": {"pendingWorkloads": self.pending}}
        if path.endswith("/events"):
            return {"items": []}
        raise KubeApiError(404, "not found")

    async def list(self, path, **params):
        self.asked.append(path)
        if path.endswith("/jobs"):
            return {"items": self.jobs}
        if path.endswith("/workloads"):
            return {"items": self.workloads}
        if path.endswith("/localqueues"):
            return {"items": [LOCAL_QUEUE]}
        if path.endswith(("/clusterqueues", "/pods")):
            return {"items": []}
        raise AssertionError(path)


LOCAL_QUEUE = {"metadata": {"name": "default", "namespace": "paddlecloud-alice"}, "spec": {"clusterQueue": TEAM.name}}
LOCAL_QUEUE_PATH = "/apis/kueue.x-k8s.io/v1beta2/namespaces/paddlecloud-alice/localqueues/default"
EVERY_WORKLOAD = "/apis/kueue.x-k8s.io/v1beta2/workloads"


def queued_and_waiting() -> tuple[dict, dict]:
    """A suspended 1-worker Job and its Workload, waiting in team vision's queue."""
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "q", "namespace": "paddlecloud-alice", "uid": "job-uid-q",
                        "creationTimestamp": "2026-01-01T12:00:00Z", "labels": {}, "annotations": {}},
           "spec": {"completionMode": "Indexed", "completions": 1, "parallelism": 1, "suspend": True,
                    "template": {"spec": {"containers": [{"name": "paddle"}]}}},
           "status": {}}
    workload = {"metadata": {"name": "job-q", "namespace": "paddlecloud-alice", "uid": "wl-q",
                             "creationTimestamp": "2026-01-01T12:00:01Z",
                             "ownerReferences": [{"kind": "Job", "name": "q", "uid": "job-uid-q"}]},
                "spec": {"queueName": "default", "podSets": [{"name": "main", "count": 1, "template": {"spec": {
                    "containers": [{"name": "paddle", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}}}]},
                "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                           "message": "waiting", "lastTransitionTime": "2026-01-01T12:00:02Z"}]}}
    return job, workload


class JobsAfterWorkloadsApi(ListingApi):
    """Its jobs' list answers only once every namespace's Workloads have been asked for: a
    listing that reads them one after the other never ends (the wait fails after 30 s)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.every_workload_asked = asyncio.Event()

    async def list(self, path, **params):
        if path == EVERY_WORKLOAD:
            self.every_workload_asked.set()
        elif path.endswith("/jobs"):
            await asyncio.wait_for(self.every_workload_asked.wait(), 30)
        return await super().list(path, **params)


async def test_a_listing_reads_every_workload_with_its_jobs_when_the_users_queue_says_some_wait():
    """Every namespace's Workloads are a long listing's longest read: when the user's LocalQueue
    counts Workloads waiting, that read starts with the jobs' (held here until it has)."""
    queued, workload = queued_and_waiting()
    api = JobsAfterWorkloadsApi([queued], [workload], pending=1)
    [job] = await backend(api, "default").list()
    assert job.phase == Phase.QUEUED and job.queue.position == 1, job.to_dict()
    assert api.asked.count(EVERY_WORKLOAD) == 1


class WorkloadsAfterPodsApi(ListingApi):
    """Every namespace's Workloads answer only once the jobs' pods have been asked for: a
    listing that reads the pods only after the Workloads never ends (the wait fails after 30 s)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pods_asked = asyncio.Event()

    async def list(self, path, **params):
        if path.endswith("/pods"):
            self.pods_asked.set()
        elif path == EVERY_WORKLOAD:
            await asyncio.wait_for(self.pods_asked.wait(), 30)
        return await super().list(path, **params)


async def test_a_listing_reads_its_jobs_pods_while_every_workload_still_comes():
    """The pods need only the jobs: they are read as soon as the jobs are, not after the
    Workloads (held here until the pods are asked for)."""
    queued, workload = queued_and_waiting()
    api = WorkloadsAfterPodsApi([queued], [workload], pending=1)
    [job] = await backend(api, "default").list()
    assert job.phase == Phase.QUEUED and job.queue.position == 1, job.to_dict()


async def test_a_queue_count_that_lags_still_gives_a_queued_job_its_place():
    """Kueue's count says none wait (not yet updated, or no LocalQueue object): the listing reads
    the Workloads once its jobs show one queued, as before."""
    queued, workload = queued_and_waiting()
    for pending in (0, None):
        api = ListingApi([queued], [workload], pending=pending)
        [job] = await backend(api, "default").list()
        assert job.phase == Phase.QUEUED and job.queue.position == 1, job.to_dict()
        jobs = "/apis/batch/v1/namespaces/paddlecloud-alice/jobs"
        assert api.asked.index(EVERY_WORKLOAD) > max(api.asked.index(jobs), api.asked.index(LOCAL_QUEUE_PATH))
        assert api.asked.count(EVERY_WORKLOAD) == 1


async def test_a_listing_reads_the_requeues_of_jobs_that_are_not_queued_from_the_namespaces_workloads():
    """`paddlecloud list`'s RESTARTS column says '0+1' for a job preempted, readmitted and then
    Succeeded (the listing used to read Kueue only while a job was queued)."""
    done, workload = requeued_and_succeeded()
    api = ListingApi([done], [workload])
    [job] = await backend(api, "default").list()
    assert (job.phase, job.requeues, job.restarts) == (Phase.SUCCEEDED, 1, 0), job.to_dict()
    assert api.asked == ["/apis/batch/v1/namespaces/paddlecloud-alice/jobs", LOCAL_QUEUE_PATH,
                         "/apis/kueue.x-k8s.io/v1beta2/namespaces/paddlecloud-alice/workloads"]
    api = ListingApi([done], [workload])
    [job] = await backend(api, "").list()
    assert job.requeues == 0 and len(api.asked) == 1  # no Kueue: nothing more read


class JobApi:
    """One job (`job`), no pods, events or Kueue objects; records each patch and merges it in."""

    def __init__(self, job: dict):
        self.job, self.patches = job, []

    async def get(self, path, **params):
        if path.endswith("/jobs/j"):
            return self.job
        return {"items": []}

    async def list(self, path, **params):
        return {"items": []}

    async def patch(self, path, body):
        assert path.endswith("/jobs/j")
        self.patches.append(body)
        self.job = merge_patch(self.job, body)
        return self.job

    async def delete(self, path, **params):
        return {}


@pytest.mark.parametrize("queue_name", ["default", ""])
async def test_cancel_of_a_job_kueue_manages_sets_a_one_second_deadline_kueue_cannot_undo(queue_name):
    """Kueue resumes a suspended job whose Workload is admitted; under Kueue cancel also sets
    activeDeadlineSeconds to 1, so the Job controller ends the job whatever Kueue does. Whether
    Kueue manages it is the job's own queue label (the backend's setting may have changed)."""
    spec = JobSpec(name="j", command=["x"], workers=2, max_runtime_seconds=600)
    queued = job_objects(spec, ManifestSettings(namespace="paddlecloud-alice", image="img", queue_name="q"))[-1]
    api = JobApi({**queued, "status": {}})
    cancelled = await backend(api, queue_name).cancel("j")
    assert cancelled.phase == Phase.CANCELLED
    (patch,) = api.patches
    assert patch["spec"] == {"suspend": True, "activeDeadlineSeconds": 1}

    plain = job_objects(spec, ManifestSettings(namespace="paddlecloud-alice", image="img"))[-1]
    api = JobApi({**plain, "status": {}})
    await backend(api, queue_name).cancel("j")
    (patch,) = api.patches
    assert patch["spec"] == {"suspend": True}  # without Kueue suspend stops it, as before
