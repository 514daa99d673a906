"""The quota service's usage and admin cancel on Kubernetes, for each job kind: jobs are
listed and suspended at the kind's own API path, as its kind says (an API double that
records requests and applies merge patches). Every user's usage at once: a few cluster-wide
lists whatever the number of users, read as each user's namespace alone reads (an API double
that filters a cluster's objects by namespace and selectors)."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import re

import pytest

from mergepatch import merge_patch
from serverutil import wait_for_async
from paddle_ext.capacity import LIVE_PODS_SELECTOR
from paddle_ext.constants import JOB_LABEL, QUOTA_NAME, SPEC_ANNOTATION
from paddle_ext.errors import NoNamespace
from paddle_ext.hub.usage import KubernetesUsage
from paddle_ext.jobkinds import JOB_KINDS, job_objects
from paddle_ext.kubeapi import KubeApiError
from paddle_ext.manifests import ManifestSettings
from paddle_ext.quota.model import Effective, Limits
from paddle_ext.spec import JobSpec

NS = "paddlecloud-alice"
JOB_PATHS = {"job": f"/apis/batch/v1/namespaces/{NS}/jobs",
             "paddlejob": f"/apis/kubeflow.org/v1/namespaces/{NS}/paddlejobs"}


class RecordingApi:
    """The KubeApi calls the backend makes, over one job object; everything else is empty."""

    def __init__(self, job_path: str, job: dict):
        self.job_path, self.job = job_path, job
        self.calls: list[tuple[str, str]] = []

    def _object(self, path: str) -> dict:
        if path == self.job_path:
            return {"items": [self.job]}
        if path == f"{self.job_path}/{self.job['metadata']['name']}":
            return self.job
        return {"items": []}

    async def get(self, path: str, **params) -> dict:
        self.calls.append(("get", path))
        return self._object(path)

    async def list(self, path: str, **params) -> dict:
        self.calls.append(("list", path))
        return self._object(path)

    async def patch(self, path: str, body: dict) -> dict:
        self.calls.append(("patch", path))
        self.job = merge_patch(self.job, body)
        return self.job

    async def delete(self, path: str, **params) -> dict:
        self.calls.append(("delete", path))
        return {}


def running_job(kind: str) -> dict:
    spec = JobSpec(name="train", command=["python", "t.py"], workers=2, gpus_per_worker=1)
    job = job_objects(spec, ManifestSettings(namespace=NS, image="img", kind=kind, user="alice"),
                      {SPEC_ANNOTATION: json.dumps(spec.to_dict())})[-1]
    job["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    return job


@pytest.mark.parametrize("kind", sorted(JOB_KINDS))
async def test_usage_lists_the_sites_kind_of_jobs(kind):
    api = RecordingApi(JOB_PATHS[kind], running_job(kind))
    usage = KubernetesUsage(api, "paddlecloud-{username}", "nvidia.com/gpu", job_kind=kind)
    (job,) = await usage.jobs("alice")
    assert (job.name, job.workers, job.spec["gpus_per_worker"]) == ("train", 2, 1)
    assert ("list", JOB_PATHS[kind]) in api.calls


@pytest.mark.parametrize("kind", sorted(JOB_KINDS))
async def test_an_admins_cancel_suspends_the_job_as_its_kind_says(kind):
    api = RecordingApi(JOB_PATHS[kind], running_job(kind))
    usage = KubernetesUsage(api, "paddlecloud-{username}", "nvidia.com/gpu", job_kind=kind)
    cancelled = await usage.cancel("alice", "train")
    assert cancelled.phase == "Cancelled"
    assert ("patch", f"{JOB_PATHS[kind]}/train") in api.calls
    assert JOB_KINDS[kind].is_suspended(api.job)
    service_deleted = ("delete", f"/api/v1/namespaces/{NS}/services/train") in api.calls
    assert service_deleted == JOB_KINDS[kind].with_service


def test_usage_defaults_to_the_default_kind():
    usage = KubernetesUsage(RecordingApi("", {}), "paddlecloud-{username}", "nvidia.com/gpu")
    assert usage.backend("alice").job_kind == "job"


# ------------------------------------------------------------------ every user at once

TEMPLATE = "paddlecloud-{username}"


def _field(obj: dict, dotted: str):
    for key in dotted.split("."):
        obj = (obj or {}).get(key)
    return obj


def _matches_labels(obj: dict, selector: str) -> bool:
    labels = obj["metadata"].get("labels") or {}
    for key, names, equal_key, value in re.findall(r"([\w./-]+) in \(([^)]*)\)|([\w./-]+)=([^,]*)", selector):
        if key and labels.get(key) not in names.split(","):
            return False
        if equal_key and labels.get(equal_key) != value:
            return False
    return True


def _matches_fields(obj: dict, selector: str) -> bool:
    for term in filter(None, selector.split(",")):
        key, op, value = re.fullmatch(r"([\w.]+)(!=|=)(.*)", term).groups()
        if (_field(obj, key) == value) != (op == "="):
            return False
    return True


class ClusterApi:
    """A cluster's objects behind the KubeApi reads: a collection, cluster-wide or in one
    namespace, filtered by label and field selectors as the API server filters it. Records
    every request; with `namespaced_only`, refuses cluster-wide lists (403), as a service
    account that may read only in some namespaces is refused."""

    def __init__(self, objects: dict[str, list[dict]], namespaced_only: bool = False):
        self.objects, self.namespaced_only = objects, namespaced_only
        self.requests: list[str] = []  # the paths read

    async def get(self, path: str, **params) -> dict:
        self.requests.append(path)
        parts = path.strip("/").split("/")
        namespace = parts[parts.index("namespaces") + 1] if "namespaces" in parts else None
        if namespace is None and self.namespaced_only:
            raise KubeApiError(403, f'{parts[-1]} is forbidden: User "system:serviceaccount:hub:hub" cannot list '
                                    f'resource "{parts[-1]}" at the cluster scope', "Forbidden")
        items = [obj for obj in self.objects.get(parts[-1], [])
                 if namespace in (None, obj["metadata"].get("namespace"))
                 and _matches_labels(obj, params.get("labelSelector", ""))
                 and _matches_fields(obj, params.get("fieldSelector", ""))]
        return {"items": copy.deepcopy(items)}

    list = get

    async def patch(self, path: str, body: dict) -> dict:
        raise AssertionError(f"reading usage changed {path}")

    async def delete(self, path: str, **params) -> dict:
        raise AssertionError(f"reading usage deleted {path}")


def user_job(user: str, name: str, created: str = "2026-01-01T00:00:00Z", condition: str = "") -> dict:
    spec = JobSpec(name=name, command=["python", "t.py"], workers=2, gpus_per_worker=1)
    job = job_objects(spec, ManifestSettings(namespace=f"paddlecloud-{user}", image="img", user=user),
                      {SPEC_ANNOTATION: json.dumps(spec.to_dict())})[-1]
    job["metadata"]["creationTimestamp"] = created
    job["status"] = {"conditions": [{"type": condition, "status": "True", "lastTransitionTime": created}]
                     } if condition else {}
    return job


def worker_pod(user: str, job: str, index: int, phase: str = "Running") -> dict:
    return {"metadata": {"name": f"{job}-{index}", "namespace": f"paddlecloud-{user}",
                         "creationTimestamp": "2026-01-01T00:00:01Z",
                         "labels": {"app.kubernetes.io/managed-by": "paddlecloud", JOB_LABEL: job,
                                    "batch.kubernetes.io/job-completion-index": str(index)}},
            "spec": {"containers": [{"name": "paddle", "resources": {"requests": {"cpu": "1", "memory": "1Gi",
                                                                                   "nvidia.com/gpu": "1"}}}]},
            "status": {"phase": phase, "containerStatuses": [{"name": "paddle", "state": {"running": {}}}]}}


def cluster(users: list[str]) -> dict[str, list[dict]]:
    """Each user: a running job of 2 workers, a succeeded one and a ResourceQuota; the last user
    also a job Kubernetes refuses to create pods for; a namespace of no hub user has a job too."""
    objects: dict[str, list[dict]] = {"jobs": [], "pods": [], "events": [], "resourcequotas": []}
    for user in users + ["stranger"]:
        objects["jobs"] += [user_job(user, "train"), user_job(user, "done", "2025-12-01T00:00:00Z", "Complete")]
        objects["pods"] += [worker_pod(user, "train", i) for i in (0, 1)]
        objects["pods"] += [worker_pod(user, "done", i, "Succeeded") for i in (0, 1)]
        objects["resourcequotas"].append({
            "metadata": {"name": QUOTA_NAME, "namespace": f"paddlecloud-{user}"},
            "status": {"hard": {"requests.nvidia.com/gpu": "8", "requests.cpu": "16"},
                       "used": {"requests.nvidia.com/gpu": "2", "requests.cpu": "2"}}})
    objects["jobs"].append(user_job(users[-1], "refused", "2026-01-02T00:00:00Z"))
    objects["events"].append({"metadata": {"namespace": f"paddlecloud-{users[-1]}"}, "reason": "FailedCreate",
                              "message": 'pods "refused-0" is forbidden: violates PodSecurity',
                              "involvedObject": {"name": "refused"}})
    return objects


def users(count: int) -> list[str]:
    return [f"user{i}" for i in range(count)]


def as_dicts(answers: dict) -> dict:
    return {user: [job.to_dict() for job in found] if isinstance(found, list) else found.to_dict()
            for user, found in answers.items()}


async def test_every_users_jobs_are_read_in_the_same_few_requests_however_many_users():
    counts = []
    for count in (5, 50):
        api = ClusterApi(cluster(users(count)))
        usage = KubernetesUsage(api, TEMPLATE, "nvidia.com/gpu")
        found = await usage.jobs_of(users(count), concurrency=8)
        counts.append(len(api.requests))
        # jobs, the live pods, the finished pods of the open jobs (one list for up to 50 names),
        # FailedCreate events (a job has no pods)
        assert sorted(api.requests) == ["/api/v1/events", "/api/v1/pods", "/api/v1/pods", "/apis/batch/v1/jobs"]
        each = {user: await KubernetesUsage(ClusterApi(cluster(users(count))), TEMPLATE, "nvidia.com/gpu").jobs(user)
                for user in users(count)}
        assert as_dicts(found) == as_dicts(each)  # as each user's own namespace reads them
    assert counts[0] == counts[1]
    assert [(job.name, job.phase) for job in found["user49"]] == [
        ("refused", "Failed"), ("train", "Running"), ("done", "Succeeded")]


async def test_every_users_quota_report_is_read_in_the_same_few_requests_however_many_users():
    effective = Effective(Limits(gpus=8), {})
    for count in (5, 50):
        api = ClusterApi(cluster(users(count)))
        usage = KubernetesUsage(api, TEMPLATE, "nvidia.com/gpu")
        found = await usage.reports({user: effective for user in users(count)}, concurrency=8)
        assert len(api.requests) == 5  # the four above (the live pods read once for both), ResourceQuotas
        each = {user: await KubernetesUsage(ClusterApi(cluster(users(count))), TEMPLATE, "nvidia.com/gpu").report(
            user, effective) for user in users(count)}
        assert as_dicts(found) == as_dicts(each)
    assert found["user0"].used["gpus"] == 2 and found["user0"].running == ("train",)


class PodEndsBetweenReads(ClusterApi):
    """A cluster where `pod` (namespace, name) fails just after the live pods are read."""

    def __init__(self, objects: dict[str, list[dict]], pod: tuple[str, str]):
        super().__init__(objects)
        self.pod = pod

    async def get(self, path: str, **params) -> dict:
        found = await super().get(path, **params)
        if path == "/api/v1/pods" and params.get("fieldSelector") == LIVE_PODS_SELECTOR:
            for pod in self.objects["pods"]:
                if (pod["metadata"]["namespace"], pod["metadata"]["name"]) == self.pod:
                    pod["status"]["phase"] = "Failed"
        return found

    list = get


def cluster_with_a_node(names: list[str]) -> dict[str, list[dict]]:
    """cluster(names) with one 16-GPU node that every pod (each with a uid) runs on."""
    objects = cluster(names)
    objects["nodes"] = [{"metadata": {"name": "node-1"}, "status": {"allocatable": {
        "nvidia.com/gpu": "16", "cpu": "64", "memory": "512Gi"}}}]
    for at, pod in enumerate(objects["pods"]):
        pod["metadata"]["uid"] = f"uid-{at}"
        pod["spec"]["nodeName"] = "node-1"
    return objects


async def test_the_overview_reads_the_live_pods_once_for_jobs_and_nodes_and_a_pod_that_ends_meanwhile_once():
    objects = cluster_with_a_node(users(3))
    api = PodEndsBetweenReads(copy.deepcopy(objects), ("paddlecloud-user0", "train-1"))
    found, capacity = await KubernetesUsage(api, TEMPLATE, "nvidia.com/gpu").jobs_and_capacity(users(3), concurrency=8)
    assert sorted(api.requests) == ["/api/v1/events", "/api/v1/nodes", "/api/v1/pods", "/api/v1/pods",
                                    "/apis/batch/v1/jobs"]
    assert capacity["total"]["used"]["gpus"] == 8  # the live read: 4 namespaces' 2 running workers
    objects["pods"][1]["status"]["phase"] = "Failed"  # user0's train-1, as the finished read found it
    each = {user: await KubernetesUsage(ClusterApi(copy.deepcopy(objects)), TEMPLATE, "nvidia.com/gpu").jobs(user)
            for user in users(3)}
    assert as_dicts(found) == as_dicts(each)


async def test_users_without_a_namespace_get_no_jobs_and_one_without_a_valid_name_an_error():
    api = ClusterApi(cluster(["alice"]))
    usage = KubernetesUsage(api, TEMPLATE, "nvidia.com/gpu")
    found = await usage.jobs_of(["alice", "newcomer", "a" * 60], concurrency=8)
    assert [job.name for job in found["alice"]] == ["refused", "train", "done"]
    assert found["newcomer"] == []
    assert isinstance(found["a" * 60], NoNamespace)
    reports = await usage.reports({"newcomer": Effective(Limits(), {}), "a" * 60: Effective(Limits(), {})}, concurrency=8)
    assert reports["newcomer"].running == () and isinstance(reports["a" * 60], NoNamespace)


async def test_where_the_service_may_not_list_across_namespaces_each_user_is_read_and_it_says_why_once(caplog):
    api = ClusterApi(cluster(users(3)), namespaced_only=True)
    usage = KubernetesUsage(api, TEMPLATE, "nvidia.com/gpu")
    expected = as_dicts({user: await KubernetesUsage(ClusterApi(cluster(users(3))), TEMPLATE, "nvidia.com/gpu").jobs(user)
                         for user in users(3)})
    with caplog.at_level(logging.WARNING, logger="paddle_ext.hub.usage"):
        assert as_dicts(await usage.jobs_of(users(3), concurrency=8)) == expected
        reports = await usage.reports({user: Effective(Limits(), {}) for user in users(3)}, concurrency=8)
    assert reports["user0"].used["gpus"] == 2
    assert "/apis/batch/v1/namespaces/paddlecloud-user2/jobs" in api.requests
    (warning,) = [record.getMessage() for record in caplog.records]
    assert "cannot list resource \"jobs\" at the cluster scope" in warning and "cluster-wide" in warning


class WatchedClusterApi(ClusterApi):
    """ClusterApi whose watches stay open and quiet: the copies stay as first listed."""

    async def stream(self, path: str, params=None):
        self.requests.append(f"watch {path}")
        await asyncio.Event().wait()
        yield b""  # never: makes this an async generator


async def test_a_watching_service_reads_pods_nodes_and_quotas_from_its_copies_and_pages_read_the_same():
    objects = cluster_with_a_node(users(3))
    effective = {user: Effective(Limits(gpus=8), {}) for user in users(3)}
    listing = KubernetesUsage(ClusterApi(copy.deepcopy(objects)), TEMPLATE, "nvidia.com/gpu")
    listed = await listing.jobs_and_capacity(users(3), concurrency=8), await listing.reports(effective, concurrency=8)
    api = WatchedClusterApi(copy.deepcopy(objects))
    usage = KubernetesUsage(api, TEMPLATE, "nvidia.com/gpu")
    usage.start_watching()
    try:
        watched = {f"watch /api/v1/{plural}" for plural in ("pods", "nodes", "resourcequotas")}
        await wait_for_async(lambda: watched <= set(api.requests), timeout=10, what="the three watches started")
        api.requests.clear()
        for _ in range(2):
            (jobs, capacity), reports = (await usage.jobs_and_capacity(users(3), concurrency=8),
                                         await usage.reports(effective, concurrency=8))
            assert as_dicts(jobs) == as_dicts(listed[0][0]) and capacity == listed[0][1]
            assert as_dicts(reports) == as_dicts(listed[1])
        # per page: jobs, the finished pods of open jobs, FailedCreate events; no live pods, nodes, quotas
        assert sorted(api.requests) == sorted(["/api/v1/events", "/api/v1/pods", "/apis/batch/v1/jobs"] * 4)
    finally:
        await usage.stop_watching()
