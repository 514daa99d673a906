"""Kubernetes objects for a JobSpec: pure functions from (spec, settings) to dicts.

Default kind: a headless Service plus an Indexed `batch/v1` Job of the same name.
Pods set `subdomain` to the Service, so worker i is `<job>-<i>.<job>` in DNS and
worker 0 hosts Paddle's master. Optional kind: Kubeflow's `kubeflow.org/v1`
PaddleJob (training-operator 1.9), which sets the master itself.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from .constants import (CANCELLED_ANNOTATION, COMPLETION_INDEX_LABEL, CONTAINER_NAME, GPU_RESOURCE, JOB_LABEL,
                        JOB_NAME_ENV, KIND_LABEL, KUEUE_QUEUE_LABEL, MANAGED_BY, MANAGED_BY_LABEL, MASTER_PORT,
                        SPEC_ANNOTATION, USER_LABEL)
from .launch import launch_argv
from .spec import JobSpec

SHM_SIZE = "1Gi"  # /dev/shm for Paddle's data loaders


@dataclasses.dataclass(frozen=True)
class ManifestSettings:
    """Deployment settings that shape every job's objects (from KubernetesBackend config)."""

    namespace: str
    image: str
    kind: str = "job"  # "job" or "paddlejob"
    user: str = ""
    master_port: int = MASTER_PORT
    gpu_resource: str = GPU_RESOURCE
    datasets: tuple[dict, ...] = ()
    gpu_node_selector: tuple[tuple[str, str], ...] = ()
    gpu_tolerations: tuple[dict, ...] = ()
    ttl_seconds_after_finished: int | None = None
    queue_name: str = ""
    run_as_user: int = 1000
    service_account: str = ""
    pod_annotations: tuple[tuple[str, str], ...] = ()


def labels(spec: JobSpec, settings: ManifestSettings) -> dict[str, str]:
    result = {
        "app.kubernetes.io/name": "paddlecloud-job",
        "app.kubernetes.io/instance": spec.name,
        "app.kubernetes.io/component": "worker",
        **MANAGED_BY,
        JOB_LABEL: spec.name,
        KIND_LABEL: settings.kind,
    }
    if settings.user:
        result[USER_LABEL] = settings.user
    if settings.queue_name:
        result[KUEUE_QUEUE_LABEL] = settings.queue_name
    return result


def selector_labels(name: str) -> dict[str, str]:
    """Labels that pick a job's pods (and only them)."""
    return {JOB_LABEL: name}


def label_selector(name: str | None = None) -> str:
    """The label selector for one job's objects, or for all of ours."""
    return f"{JOB_LABEL}={name}" if name else f"{MANAGED_BY_LABEL}={MANAGED_BY[MANAGED_BY_LABEL]}"


def resources(spec: JobSpec, settings: ManifestSettings) -> dict:
    amounts = {"cpu": spec.cpu, "memory": spec.memory}
    if spec.gpus_per_worker:
        amounts[settings.gpu_resource] = str(spec.gpus_per_worker)
    # requests = limits: a Guaranteed pod, and GPUs must be equal anyway
    return {"requests": dict(amounts), "limits": dict(amounts)}


def catalogue_volumes(names, catalogue: tuple[dict, ...] | list[dict]) -> tuple[list[dict], list[dict]]:
    """(volumes, volumeMounts) for datasets `names`: read-only, at the catalogue's paths.

    A catalogue entry: {"name", "mount_path", "volume": <a Kubernetes volume source,
    e.g. {"persistentVolumeClaim": {"claimName": "datasets"}}>, "sub_path": optional}.
    Job pods and notebook pods both mount datasets through this function.
    """
    entries = {dataset["name"]: dataset for dataset in catalogue}
    volumes, mounts = [], []
    for name in names:
        entry = entries[name]
        volume_name = f"dataset-{name}"
        source = dict(entry["volume"])
        if "persistentVolumeClaim" in source:
            source["persistentVolumeClaim"] = {**source["persistentVolumeClaim"], "readOnly": True}
        volumes.append({"name": volume_name, **source})
        mount = {"name": volume_name, "mountPath": entry["mount_path"], "readOnly": True}
        if entry.get("sub_path"):
            mount["subPath"] = entry["sub_path"]
        mounts.append(mount)
    return volumes, mounts


def dataset_volumes(spec: JobSpec, settings: ManifestSettings) -> tuple[list[dict], list[dict]]:
    return catalogue_volumes(spec.datasets, settings.datasets)


def pod_security_context(settings: ManifestSettings) -> dict:
    return {
        "runAsNonRoot": True,
        "runAsUser": settings.run_as_user,
        "runAsGroup": settings.run_as_user,
        "fsGroup": settings.run_as_user,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict:
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _env(spec: JobSpec, with_index: bool) -> list[dict]:
    env = [{"name": JOB_NAME_ENV, "value": spec.name}, {"name": "PYTHONUNBUFFERED", "value": "1"}]
    if with_index:
        # Declared explicitly so "$(JOB_COMPLETION_INDEX)" expands in the command.
        env.append({"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
            "fieldPath": f"metadata.labels['{COMPLETION_INDEX_LABEL}']"}}})
    env += [{"name": key, "value": value} for key, value in sorted(spec.env.items())]
    return env


def pod_spec(spec: JobSpec, settings: ManifestSettings, command: list[str], with_index: bool) -> dict:
    volumes, mounts = dataset_volumes(spec, settings)
    volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_SIZE}})
    mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    container = {
        "name": CONTAINER_NAME,
        "image": spec.image or settings.image,
        "command": command,
        "env": _env(spec, with_index),
        "ports": [{"name": "paddle-master", "containerPort": settings.master_port}],
        "resources": resources(spec, settings),
        "securityContext": container_security_context(),
        "volumeMounts": mounts,
    }
    pod = {
        "restartPolicy": "Never",
        "securityContext": pod_security_context(settings),
        "containers": [container],
        "volumes": volumes,
        "enableServiceLinks": False,
    }
    if settings.service_account:
        pod["serviceAccountName"] = settings.service_account
    if spec.gpus_per_worker:
        if settings.gpu_node_selector:
            pod["nodeSelector"] = dict(settings.gpu_node_selector)
        if settings.gpu_tolerations:
            pod["tolerations"] = [dict(t) for t in settings.gpu_tolerations]
    return pod


def _metadata(spec: JobSpec, settings: ManifestSettings, annotations: dict | None = None) -> dict:
    metadata = {"name": spec.name, "namespace": settings.namespace, "labels": labels(spec, settings)}
    if annotations:
        metadata["annotations"] = annotations
    return metadata


def headless_service(spec: JobSpec, settings: ManifestSettings) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(spec, settings),
        "spec": {
            "clusterIP": "None",
            "selector": selector_labels(spec.name),
            # Workers must find the master before any pod is Ready.
            "publishNotReadyAddresses": True,
            "ports": [{"name": "paddle-master", "port": settings.master_port,
                       "targetPort": settings.master_port}],
        },
    }


def indexed_job(spec: JobSpec, settings: ManifestSettings, spec_json: str = "") -> dict:
    master = f"{spec.name}-0.{spec.name}:{settings.master_port}"
    command = launch_argv(spec, master, "$(JOB_COMPLETION_INDEX)")
    job_spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": spec.workers,
        "parallelism": spec.workers,
        # Any failed worker fails the job; disruptions (preemption, eviction) do not count.
        "backoffLimit": 0,
        "podFailurePolicy": {"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
        ]},
        "template": {
            "metadata": {"labels": labels(spec, settings),
                         **({"annotations": dict(settings.pod_annotations)} if settings.pod_annotations else {})},
            "spec": {**pod_spec(spec, settings, command, with_index=True), "subdomain": spec.name},
        },
    }
    if spec.max_runtime_seconds:
        job_spec["activeDeadlineSeconds"] = spec.max_runtime_seconds
    if settings.ttl_seconds_after_finished is not None:
        job_spec["ttlSecondsAfterFinished"] = settings.ttl_seconds_after_finished
    if settings.queue_name:
        job_spec["suspend"] = True  # Kueue admits (unsuspends) it when the quota allows
    annotations = {SPEC_ANNOTATION: spec_json} if spec_json else None
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": _metadata(spec, settings, annotations),
            "spec": job_spec}


def paddle_job(spec: JobSpec, settings: ManifestSettings, spec_json: str = "") -> dict:
    """Kubeflow training-operator v1.9 PaddleJob: the operator sets PADDLE_MASTER and rank."""
    command = launch_argv(spec, None, None)
    run_policy: dict[str, Any] = {"backoffLimit": 0, "cleanPodPolicy": "Running"}
    if spec.max_runtime_seconds:
        run_policy["activeDeadlineSeconds"] = spec.max_runtime_seconds
    if settings.ttl_seconds_after_finished is not None:
        run_policy["ttlSecondsAfterFinished"] = settings.ttl_seconds_after_finished
    if settings.queue_name:
        run_policy["suspend"] = True
    annotations = {SPEC_ANNOTATION: spec_json} if spec_json else None
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PaddleJob",
        "metadata": _metadata(spec, settings, annotations),
        "spec": {
            "runPolicy": run_policy,
            "paddleReplicaSpecs": {"Worker": {
                "replicas": spec.workers,
                "restartPolicy": "Never",
                "template": {
                    "metadata": {"labels": labels(spec, settings)},
                    "spec": pod_spec(spec, settings, command, with_index=False),
                },
            }},
        },
    }


def indexed_job_objects(spec: JobSpec, settings: ManifestSettings, spec_json: str = "") -> list[dict]:
    return [headless_service(spec, settings), indexed_job(spec, settings, spec_json)]


def paddle_job_objects(spec: JobSpec, settings: ManifestSettings, spec_json: str = "") -> list[dict]:
    return [paddle_job(spec, settings, spec_json)]


@dataclasses.dataclass(frozen=True)
class JobKind:
    """How one kind of job lives in the API: where it is, what to create, how to suspend it."""

    name: str
    api_version: str
    plural: str
    build: Callable[[JobSpec, ManifestSettings, str], list[dict]]
    with_service: bool  # the headless Service is created apart and made owned by the job

    def suspend_patch(self, cancelled_at: str) -> dict:
        """A merge patch that marks the job cancelled and stops it from making pods."""
        suspend = {"runPolicy": {"suspend": True}} if self.name == "paddlejob" else {"suspend": True}
        return {"metadata": {"annotations": {CANCELLED_ANNOTATION: cancelled_at}}, "spec": suspend}


JOB_KINDS = {
    "job": JobKind("job", "batch/v1", "jobs", indexed_job_objects, with_service=True),
    "paddlejob": JobKind("paddlejob", "kubeflow.org/v1", "paddlejobs", paddle_job_objects, with_service=False),
}


def job_objects(spec: JobSpec, settings: ManifestSettings, spec_json: str = "") -> list[dict]:
    """Everything to create for a job, in creation order."""
    return JOB_KINDS[settings.kind].build(spec, settings, spec_json)
