"""The quota service's usage and admin cancel on Kubernetes, for each job kind: jobs are
listed and suspended at the kind's own API path, as its kind says (an API double that
records requests and applies merge patches)."""

from __future__ import annotations

import json

import pytest

from mergepatch import merge_patch
from paddle_ext.constants import SPEC_ANNOTATION
from paddle_ext.hub.usage import KubernetesUsage
from paddle_ext.jobkinds import JOB_KINDS, job_objects
from paddle_ext.manifests import ManifestSettings
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
