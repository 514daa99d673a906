"""The kinds of Kubernetes object a job can be, each one entry of JOB_KINDS (pure).

A kind says what to create for a job, how to suspend it, how its success and failure
read from the object, and which RBAC rule managing it takes. Everything else that
depends on the kind reads this registry: the backend's `job_kind` setting, the hub's
settings check, the notebook's Role (tenancy), the quota service's usage and cancel;
the chart's `settings.job_kind` enum and ClusterRoles are checked against it
(tests/unit/test_jobkinds.py).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from .constants import (CANCELLED_ANNOTATION, COMPLETION_INDEX_LABEL, FAILED_ANNOTATION,
                        KUBEFLOW_INDEX_LABEL, KUEUE_QUEUE_LABEL)
from .manifests import ManifestSettings, indexed_job_objects, paddle_job_objects
from .spec import JobSpec

# What a notebook's backend does with its own jobs (the notebook's Role and the chart's
# notebook ClusterRole grant it for every kind).
NOTEBOOK_JOB_VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")
# What the hub's quota service does with every user's jobs: read them (usage, the admin
# overview) and suspend them (an admin's cancel). The chart's hub ClusterRole grants it.
HUB_JOB_VERBS = ("get", "list", "patch")


def true_conditions(obj: dict) -> dict[str, dict]:
    """The object's status conditions that hold, by type."""
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("status") == "True"}


def _dig(obj: dict, path: tuple[str, ...]) -> dict:
    for key in path:
        obj = obj.get(key) or {}
    return obj


def _nest(path: tuple[str, ...], leaf: dict) -> dict:
    for key in reversed(path):
        leaf = {key: leaf}
    return leaf


@dataclasses.dataclass(frozen=True)
class JobKind:
    """How one kind of job lives in the API: where it is, what to create, how to suspend
    it, how it reads, and the RBAC rule that manages it.

    A new kind (e.g. Volcano's `batch.volcano.sh/v1alpha1` Job) is one entry of JOB_KINDS:
    its `name` (the `job_kind` setting), `description`, where it is (`api_version`, `plural`),
    a `build` function in `manifests` (the job's objects, the job last, a headless Service
    first when `with_service`), where its spec keeps suspend and activeDeadlineSeconds
    (`policy_path`), the workers' pod template (`template_path`) and their count
    (`workers_path`), the condition types of success and failure, and the pods' worker-index
    label. Its tests: its objects compared whole (test_manifests), its status read
    (test_kubernetes_status), and the chart's enum and ClusterRoles, which must list it
    (test_jobkinds fails until they do).
    """

    name: str
    description: str
    api_version: str  # "group/version"
    plural: str
    build: Callable[[JobSpec, ManifestSettings, dict | None], list[dict]]
    with_service: bool  # the headless Service is created apart and made owned by the job
    policy_path: tuple[str, ...]  # in `spec`: where suspend and activeDeadlineSeconds are
    template_path: tuple[str, ...]  # in `spec`: the workers' pod template
    workers_path: tuple[str, ...]  # in `spec`: how many workers
    succeeded_condition: str
    failed_condition: str
    index_label: str  # on each pod: its worker's index

    @property
    def api_group(self) -> str:
        return self.api_version.rpartition("/")[0]

    def rule(self, verbs: tuple[str, ...]) -> dict:
        """The RBAC rule that allows `verbs` on this kind's objects."""
        return {"apiGroups": [self.api_group], "resources": [self.plural], "verbs": list(verbs)}

    # ---- patches

    def suspend_patch(self, cancelled_at: str, queued_by_kueue: bool = False) -> dict:
        """A merge patch that marks the job cancelled and stops it (see `stop_patch`)."""
        return self.stop_patch(CANCELLED_ANNOTATION, cancelled_at, queued_by_kueue)

    def fail_patch(self, message: str, queued_by_kueue: bool = False) -> dict:
        """A merge patch that marks the job failed (with why) and stops it (see `stop_patch`)."""
        return self.stop_patch(FAILED_ANNOTATION, message, queued_by_kueue)

    def stop_patch(self, annotation: str, value: str, queued_by_kueue: bool) -> dict:
        """A merge patch that sets `annotation` (why the job stopped) and stops the job.

        `suspend: true` alone stops a job only where nothing resumes it. Kueue's job
        reconciler unsuspends every job whose Workload is admitted (it stops a job only when
        its Workload is evicted or deactivated, which takes write access to Workloads that
        users do not have), so a cancelled admitted job would run on. For a job Kueue
        manages the patch also sets activeDeadlineSeconds to 1: whatever Kueue does, the
        job's own controller then ends it (a resumed job's deadline counts from its resume,
        so it fails DeadlineExceeded a second later and its pods are deleted), and Kueue,
        seeing it finished, marks its Workload Finished and frees the quota. The annotation
        keeps it reading Cancelled (or Failed with our message), not DeadlineExceeded."""
        policy: dict = {"suspend": True}
        if queued_by_kueue:
            policy["activeDeadlineSeconds"] = 1
        return {"metadata": {"annotations": {annotation: value}}, "spec": _nest(self.policy_path, policy)}

    # ---- reading the object

    def policy(self, job: dict) -> dict:
        return _dig(job.get("spec") or {}, self.policy_path)

    def is_suspended(self, job: dict) -> bool:
        return bool(self.policy(job).get("suspend"))

    def deadline_seconds(self, job: dict) -> int | None:
        return self.policy(job).get("activeDeadlineSeconds")

    def pod_spec(self, job: dict) -> dict:
        return _dig(job.get("spec") or {}, (*self.template_path, "spec"))

    def workers(self, job: dict) -> int | None:
        spec = job.get("spec") or {}
        *path, key = self.workers_path
        return _dig(spec, tuple(path)).get(key)

    def succeeded(self, job: dict) -> dict | None:
        """The condition that says every worker succeeded, if it holds."""
        return true_conditions(job).get(self.succeeded_condition)

    def failed(self, job: dict) -> dict | None:
        """The condition that says the job failed, if it holds."""
        return true_conditions(job).get(self.failed_condition)

    def has_succeeded(self, job: dict) -> bool:
        return self.succeeded(job) is not None

    def has_failed(self, job: dict) -> bool:
        return self.failed(job) is not None

    def has_finished(self, job: dict) -> bool:
        """The job itself has ended, as Kubernetes sees it (succeeded or failed)."""
        return self.has_succeeded(job) or self.has_failed(job)


def queued_by_kueue(job: dict) -> bool:
    """Kueue manages the job (it carries Kueue's queue label): Kueue suspends and resumes it."""
    return KUEUE_QUEUE_LABEL in ((job.get("metadata") or {}).get("labels") or {})


JOB_KINDS = {kind.name: kind for kind in (
    JobKind("job", "an Indexed batch/v1 Job + headless Service (any cluster)", "batch/v1", "jobs",
            indexed_job_objects, with_service=True, policy_path=(), template_path=("template",),
            workers_path=("completions",), succeeded_condition="Complete", failed_condition="Failed",
            index_label=COMPLETION_INDEX_LABEL),
    JobKind("paddlejob", "a Kubeflow training-operator PaddleJob", "kubeflow.org/v1", "paddlejobs",
            paddle_job_objects, with_service=False, policy_path=("runPolicy",),
            template_path=("paddleReplicaSpecs", "Worker", "template"),
            workers_path=("paddleReplicaSpecs", "Worker", "replicas"), succeeded_condition="Succeeded",
            failed_condition="Failed", index_label=KUBEFLOW_INDEX_LABEL),
)}
INDEX_LABELS = tuple(kind.index_label for kind in JOB_KINDS.values())


def job_objects(spec: JobSpec, settings: ManifestSettings, annotations: dict | None = None) -> list[dict]:
    """Everything to create for a job, in creation order (the code's ConfigMap apart)."""
    return JOB_KINDS[settings.kind].build(spec, settings, annotations)
