"""Kubernetes objects for a JobSpec: pure functions from (spec, settings) to dicts.

Default kind: a headless Service plus an Indexed `batch/v1` Job of the same name.
Pods set `subdomain` to the Service, so worker i is `<job>-<i>.<job>` in DNS and
worker 0 hosts Paddle's master. Optional kind: Kubeflow's `kubeflow.org/v1`
PaddleJob (training-operator 1.9), which sets the master itself. Which kind a site
uses, and all else about each kind, is in `jobkinds`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from .constants import (COMPLETION_INDEX_ENV, COMPLETION_INDEX_LABEL, CONTAINER_NAME, DEFAULT_JOB_KIND, GPU_RESOURCE,
                        JOB_LABEL, JOB_NAME_ENV, KIND_LABEL, KUEUE_MAX_EXEC_LABEL, KUEUE_QUEUE_LABEL, MANAGED_BY, MANAGED_BY_LABEL,
                        MASTER_PORT, OUTPUT_DIR_ENV, OUTPUTS_FOLDER, USER_LABEL)
from .constants import (INDEX_FAILURE_COUNT_ANNOTATION, KUBEFLOW_INDEX_LABEL, LOG_COPY_DIR_ENV, LOG_COPY_FOLDER,
                        MAX_UNPACKED_BYTES, MAX_UNPACKED_FILES, POD_UID_ENV, RESTART_ENV, RUN_AS_GROUP, RUN_AS_USER,
                        WORKER_INDEX_ENV)
from .restarts import USER_EXIT_CODES
from .jobs import outputs_record
from .launch import launch_argv, trainers_per_worker
from .spec import JobSpec

SHM_SIZE = "1Gi"  # /dev/shm for Paddle's data loaders
# Every emptyDir we make has a size: the job's folder (its code, unpacked: at most
# MAX_UNPACKED_BYTES, plus what the job writes beside it) and outputs that are not
# kept. Past it the kubelet evicts the pod rather than let it fill the node's disk.
WORKDIR_SIZE = "8Gi"
UNKEPT_OUTPUTS_SIZE = "8Gi"
LAUNCH_LOG_DIR = "/tmp/paddlecloud-launch"  # Paddle's launcher writes its own logs; keep them out of the code
CODE_MOUNT = "/var/run/paddlecloud/code"
CODE_KEY = "code.tar.gz"
UNKEPT_OUTPUTS = "/tmp/paddlecloud-outputs"
INDEX_REFERENCE = f"$({COMPLETION_INDEX_ENV})"  # expanded by Kubernetes in the worker's command
NO_OUTPUTS_NOTE = ("This cluster keeps no job outputs: it has no shared workspace, so what workers write "
                   "is gone with their pods. Write results to a dataset volume or ask an admin for a workspace.")


@dataclasses.dataclass(frozen=True)
class ManifestSettings:
    """Deployment settings that shape every job's objects (from KubernetesBackend config)."""

    namespace: str
    image: str
    kind: str = DEFAULT_JOB_KIND  # a name in jobkinds.JOB_KINDS
    user: str = ""
    master_port: int = MASTER_PORT
    gpu_resource: str = GPU_RESOURCE
    datasets: tuple[dict, ...] = ()
    gpu_node_selector: tuple[tuple[str, str], ...] = ()
    gpu_tolerations: tuple[dict, ...] = ()
    ttl_seconds_after_finished: int | None = None
    queue_name: str = ""
    run_as_user: int = RUN_AS_USER
    service_account: str = ""
    pod_annotations: tuple[tuple[str, str], ...] = ()
    workdir: str = ""  # the folder the job runs in, the same absolute path as in the notebook
    code_configmap: str = ""  # the ConfigMap that carries the code; empty: the job runs from the workspace
    workspace: dict | None = None  # a shared (ReadWriteMany) volume source, mounted as in notebooks
    workspace_mount: str = ""
    # The job's image carries this package's helper programs (trainer_logs, job_folder), as the
    # site's worker images do (images/worker): the job runs them with `python -m` instead of
    # carrying them in its command (see helper_command).
    helpers_in_image: bool = False


def literal(text: str) -> str:
    """`text` as Kubernetes will pass it on: it expands `$(VAR)` in commands, args and env
    values, and `$$` stands for `$`. User text runs as written, as it does locally."""
    return text.replace("$", "$$")


@functools.cache
def program(module: str) -> str:
    """A standard-library-only module of this package (trainer_logs, job_folder) as a
    `python -c` program, so any worker image with a Python runs it (one without paddle_ext
    too). It rides in every Job, pod and Kueue Workload of such a job, and every listing
    reads those: as plain source trainer_logs was 13 of a Job's 15.5 KB, so it goes without
    docstrings and comments, compressed (about 3.7 KB), behind a line naming it."""
    import base64
    import importlib.resources  # (only a job's submit needs these)
    import zlib

    source = importlib.resources.files(__package__).joinpath(f"{module}.py").read_text(encoding="utf-8")
    packed = base64.b64encode(zlib.compress(without_docstrings(source).encode(), 9)).decode("ascii")
    return f"# paddle_ext/{module}.py\nimport base64, zlib; exec(zlib.decompress(base64.b64decode('{packed}')))"


def helper_command(module: str, settings: ManifestSettings) -> list[str]:
    """`python` running a helper program of this package (trainer_logs, job_folder): from the
    image where it carries them, else as `program(module)` in the command itself. The
    programs were about 4.7 of a Job's 12.6 KiB, and of a Kueue Workload's and every pod's
    too, which every listing reads and the API server sends."""
    if settings.helpers_in_image:
        return ["python", "-m", f"{__package__}.{module}"]
    return ["python", "-c", literal(program(module))]


def without_docstrings(source: str) -> str:
    """Python source without its docstrings and comments (`ast.unparse` keeps no comments)."""
    import ast

    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                node.body = node.body[1:] or [ast.Pass()]
    return ast.unparse(tree)


def worker_command(spec: JobSpec, settings: ManifestSettings, master: str | None, rank: str | None,
                   host: str | None = None) -> list[str]:
    """The launcher's command line with the user's command kept literal, run under the
    trainer log relay (paddle_ext.trainer_logs): each trainer's lines reach the container's
    output as they are printed, every local rank's, instead of the launcher's copy of local
    rank 0's every ~2 s. The launcher and its arguments are unchanged."""
    argv = launch_argv(spec, master, rank, log_dir=LAUNCH_LOG_DIR, host=host)
    own = len(argv) - len(spec.command)
    launcher = argv[:own] + [literal(arg) for arg in argv[own:]]
    ranks = str(trainers_per_worker(spec.gpus_per_worker))
    return [*helper_command("trainer_logs", settings), LAUNCH_LOG_DIR, ranks, "--", *launcher]


def restartable(spec: JobSpec) -> bool:
    return bool(spec.max_restarts)


def peer_port(settings: ManifestSettings) -> int:
    """Where restartable workers answer each other (paddle_ext.worker): next to the master's."""
    return settings.master_port + 1


def peer_watch_command(spec: JobSpec, settings: ManifestSettings, command: list[str]) -> list[str]:
    """`command` under paddle_ext.worker, which makes a lost peer restart every worker."""
    return ["python", "-m", "paddle_ext.worker", "--index", INDEX_REFERENCE, "--workers", str(spec.workers),
            "--peer", f"{spec.name}-{{i}}.{spec.name}", "--port", str(peer_port(settings)), "--", *command]


def restart_policy(spec: JobSpec) -> dict[str, Any]:
    """The Indexed Job's part in restarts (paddle_ext.restarts has the rule): each index may
    fail `max_restarts` times (and the job fails when one fails once more); the user's own
    exit codes fail the job at once; disruptions (eviction, preemption) do not count; a
    failed pod is replaced only once it has stopped."""
    if not restartable(spec):
        # Any failed worker fails the job; disruptions (preemption, eviction) do not count.
        return {"backoffLimit": 0, "podFailurePolicy": {"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
        ]}}
    return {
        "backoffLimitPerIndex": spec.max_restarts,
        "maxFailedIndexes": 0,
        "podReplacementPolicy": "Failed",
        "podFailurePolicy": {"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            {"action": "FailJob", "onExitCodes": {"containerName": CONTAINER_NAME, "operator": "In",
                                                  "values": list(USER_EXIT_CODES)}},
        ]},
    }


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


MAX_NAMES_IN_SELECTOR = 50  # a longer set of names is asked for as all of ours (URLs stay short)


def jobs_selector(names: list[str]) -> str:
    """The label selector for the objects of these jobs, one or more (of all of ours, when
    they are many)."""
    if len(names) > MAX_NAMES_IN_SELECTOR:
        return label_selector()
    return label_selector(names[0]) if len(names) == 1 else f"{JOB_LABEL} in ({','.join(sorted(names))})"


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


def pod_security_context(run_as_user: int = RUN_AS_USER) -> dict:
    """Every pod we run (jobs, notebooks, the hub and its proxy: the chart's pc.podSecurityContext
    is checked equal), as Pod Security "restricted" requires. One group for all of them, the
    images' (see RUN_AS_GROUP): what a job writes in the shared home stays the notebook's to edit."""
    return {
        "runAsNonRoot": True,
        "runAsUser": run_as_user,
        "runAsGroup": RUN_AS_GROUP,
        "fsGroup": RUN_AS_GROUP,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict:
    """Every container we run (the chart's pc.containerSecurityContext is checked equal)."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def runs_in_workspace(settings: ManifestSettings) -> bool:
    """The job's folder is on the shared workspace: it runs there, no code travels."""
    if not (settings.workspace and settings.workdir and settings.workspace_mount):
        return False
    mount = settings.workspace_mount.rstrip("/") + "/"
    return (settings.workdir.rstrip("/") + "/").startswith(mount)


def outputs(spec: JobSpec, settings: ManifestSettings) -> dict:
    """Where the job's $PADDLECLOUD_OUTPUT_DIR is, and whether it outlives the pods."""
    if runs_in_workspace(settings):
        return outputs_record(f"{settings.workdir.rstrip('/')}/{OUTPUTS_FOLDER}/{spec.name}", kept=True)
    note = NO_OUTPUTS_NOTE if not settings.workspace else (
        f"Outputs are kept for jobs run from a folder under {settings.workspace_mount}; this one ran from "
        f"{settings.workdir}, so what its workers write is gone with their pods.")
    return outputs_record(f"{UNKEPT_OUTPUTS}/{spec.name}", kept=False, note=note)


def log_copy_dir(outputs_path: str, index: str) -> str:
    """Where worker `index` keeps a copy of each of its pods' output, beside the job's kept
    outputs (paddle_ext.trainer_logs.OutputCopy writes them, the backend's log reader reads them)."""
    return f"{outputs_path.rstrip('/')}/{LOG_COPY_FOLDER}/worker-{index}"


def code_configmap(spec: JobSpec, settings: ManifestSettings, archive_base64: str) -> dict:
    """The job's code, immutable; the backend makes the job its owner."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "immutable": True,
            "metadata": {"name": settings.code_configmap, "namespace": settings.namespace,
                         "labels": labels(spec, settings)},
            "binaryData": {CODE_KEY: archive_base64}}


def workspace_parts(spec: JobSpec, settings: ManifestSettings) -> tuple[list[dict], list[dict], dict | None]:
    """(volumes, mounts, init container) that put the job's folder in place: the shared
    workspace where the folder lives, or an emptyDir at the same path filled from the code."""
    if not settings.workdir:
        return [], [], None
    volumes, mounts, archive = [], [], ""
    if runs_in_workspace(settings):
        volumes.append({"name": "workspace", **settings.workspace})
        mounts.append({"name": "workspace", "mountPath": settings.workspace_mount})
    else:
        volumes.append({"name": "workdir", "emptyDir": {"sizeLimit": WORKDIR_SIZE}})
        mounts.append({"name": "workdir", "mountPath": settings.workdir})
    if not outputs(spec, settings)["kept"]:  # made by the init container, written by the worker
        volumes.append({"name": "outputs", "emptyDir": {"sizeLimit": UNKEPT_OUTPUTS_SIZE}})
        mounts.append({"name": "outputs", "mountPath": UNKEPT_OUTPUTS})
    init_mounts = list(mounts)
    if settings.code_configmap and not runs_in_workspace(settings):
        volumes.append({"name": "code", "configMap": {"name": settings.code_configmap}})
        init_mounts.append({"name": "code", "mountPath": CODE_MOUNT, "readOnly": True})
        archive = f"{CODE_MOUNT}/{CODE_KEY}"
    init = {
        "name": "prepare",
        "image": spec.image or settings.image,
        # Unpack the code (if it travels) into the job's folder, checked and capped as in the
        # notebook (paddle_ext.job_folder); make the output folder.
        "command": [*helper_command("job_folder", settings), literal(archive), literal(settings.workdir),
                    literal(outputs(spec, settings)["path"]), str(MAX_UNPACKED_BYTES), str(MAX_UNPACKED_FILES)],
        "resources": resources(spec, settings),  # as the worker's: the pod's request stays the worker's
        "securityContext": container_security_context(),
        "volumeMounts": init_mounts,
    }
    return volumes, mounts, init


def _field(path: str) -> dict:
    return {"valueFrom": {"fieldRef": {"fieldPath": path}}}


def log_copy_env(spec: JobSpec, settings: ManifestSettings, index_label: str) -> list[dict]:
    """Where the job's outputs are kept: what makes each worker keep a copy of its pod's output
    there, so that the log of a deleted pod (a preemption, a requeue) can still be read."""
    kept = outputs(spec, settings)
    if not kept["kept"]:
        return []
    return [{"name": WORKER_INDEX_ENV, **_field(f"metadata.labels['{index_label}']")},
            {"name": POD_UID_ENV, **_field("metadata.uid")},
            {"name": LOG_COPY_DIR_ENV, "value": log_copy_dir(literal(kept["path"]), f"$({WORKER_INDEX_ENV})")}]


def _env(spec: JobSpec, settings: ManifestSettings, with_index: bool) -> list[dict]:
    env = [{"name": JOB_NAME_ENV, "value": spec.name}, {"name": "PYTHONUNBUFFERED", "value": "1"},
           {"name": OUTPUT_DIR_ENV, "value": literal(outputs(spec, settings)["path"])}]
    env += log_copy_env(spec, settings, COMPLETION_INDEX_LABEL if with_index else KUBEFLOW_INDEX_LABEL)
    if with_index:
        # Declared explicitly so "$(JOB_COMPLETION_INDEX)" expands in the command.
        env.append({"name": COMPLETION_INDEX_ENV, "valueFrom": {"fieldRef": {
            "fieldPath": f"metadata.labels['{COMPLETION_INDEX_LABEL}']"}}})
        if restartable(spec):  # the attempt: how often this worker's index has failed
            env.append({"name": RESTART_ENV, "valueFrom": {"fieldRef": {
                "fieldPath": f"metadata.annotations['{INDEX_FAILURE_COUNT_ANNOTATION}']"}}})
    env += [{"name": key, "value": literal(value)} for key, value in sorted(spec.env.items())]
    return env


def pod_spec(spec: JobSpec, settings: ManifestSettings, command: list[str], with_index: bool) -> dict:
    volumes, mounts = dataset_volumes(spec, settings)
    volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_SIZE}})
    mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    folder_volumes, folder_mounts, init = workspace_parts(spec, settings)
    volumes += folder_volumes
    mounts += folder_mounts
    container = {
        "name": CONTAINER_NAME,
        "image": spec.image or settings.image,
        "command": command,
        "env": _env(spec, settings, with_index),
        "ports": [{"name": "paddle-master", "containerPort": settings.master_port}],
        "resources": resources(spec, settings),
        "securityContext": container_security_context(),
        "volumeMounts": mounts,
    }
    if settings.workdir:
        container["workingDir"] = settings.workdir
    pod = {
        "restartPolicy": "Never",
        "securityContext": pod_security_context(settings.run_as_user),
        "containers": [container],
        "volumes": volumes,
        "enableServiceLinks": False,
    }
    if init is not None:
        pod["initContainers"] = [init]
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
    if settings.queue_name and spec.max_runtime_seconds:
        metadata["labels"][KUEUE_MAX_EXEC_LABEL] = str(spec.max_runtime_seconds)
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


def indexed_job(spec: JobSpec, settings: ManifestSettings, annotations: dict | None = None) -> dict:
    # Worker i advertises its own DNS name; worker 0's equals the master's host, which is
    # what makes Paddle's launcher start the master there (it compares the two strings).
    master = f"{spec.name}-0.{spec.name}:{settings.master_port}"
    command = worker_command(spec, settings, master, INDEX_REFERENCE, host=f"{spec.name}-{INDEX_REFERENCE}.{spec.name}")
    template_spec = pod_spec(spec, settings, command, with_index=True)
    if restartable(spec):
        container = template_spec["containers"][0]
        container["command"] = peer_watch_command(spec, settings, container["command"])
        container["ports"].append({"name": "paddle-peers", "containerPort": peer_port(settings)})
    job_spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": spec.workers,
        "parallelism": spec.workers,
        **restart_policy(spec),
        "template": {
            "metadata": {"labels": labels(spec, settings),
                         **({"annotations": dict(settings.pod_annotations)} if settings.pod_annotations else {})},
            "spec": {**template_spec, "subdomain": spec.name},
        },
    }
    if spec.max_runtime_seconds:
        job_spec["activeDeadlineSeconds"] = spec.max_runtime_seconds
    if settings.ttl_seconds_after_finished is not None:
        job_spec["ttlSecondsAfterFinished"] = settings.ttl_seconds_after_finished
    if settings.queue_name:
        job_spec["suspend"] = True  # Kueue admits (unsuspends) it when the quota allows
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": _metadata(spec, settings, annotations),
            "spec": job_spec}


def paddle_job(spec: JobSpec, settings: ManifestSettings, annotations: dict | None = None) -> dict:
    """Kubeflow training-operator v1.9 PaddleJob: the operator sets PADDLE_MASTER and rank."""
    command = worker_command(spec, settings, None, None)
    # With restarts: the operator's ExitCode policy retries a pod whose exit code is 128 or more
    # (a signal) and not one with 1-127 (the user's own); it replaces the failed pod only.
    run_policy: dict[str, Any] = {"backoffLimit": (spec.max_restarts or 0) * spec.workers, "cleanPodPolicy": "Running"}
    if spec.max_runtime_seconds:
        run_policy["activeDeadlineSeconds"] = spec.max_runtime_seconds
    if settings.ttl_seconds_after_finished is not None:
        run_policy["ttlSecondsAfterFinished"] = settings.ttl_seconds_after_finished
    if settings.queue_name:
        run_policy["suspend"] = True
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PaddleJob",
        "metadata": _metadata(spec, settings, annotations),
        "spec": {
            "runPolicy": run_policy,
            "paddleReplicaSpecs": {"Worker": {
                "replicas": spec.workers,
                "restartPolicy": "ExitCode" if restartable(spec) else "Never",
                "template": {
                    "metadata": {"labels": labels(spec, settings)},
                    "spec": pod_spec(spec, settings, command, with_index=False),
                },
            }},
        },
    }


def indexed_job_objects(spec: JobSpec, settings: ManifestSettings, annotations: dict | None = None) -> list[dict]:
    return [headless_service(spec, settings), indexed_job(spec, settings, annotations)]


def paddle_job_objects(spec: JobSpec, settings: ManifestSettings, annotations: dict | None = None) -> list[dict]:
    return [paddle_job(spec, settings, annotations)]

