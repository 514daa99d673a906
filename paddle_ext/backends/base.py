"""The JobBackend contract shared by the local and Kubernetes backends.

A backend turns JobSpecs into running jobs and reports on them. Methods are async so
the Jupyter server never blocks; `paddle_ext.client.JobClient` offers the same calls
synchronously. Backends raise only `paddle_ext.errors.PaddleCloudError` subclasses for
anything a user should see.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, AsyncIterator

from traitlets import Dict, Integer, List, Unicode, default
from traitlets.config import LoggingConfigurable

from ..errors import SpecError
from ..quota.model import JobUsage
from ..spec import JobSpec, parse_quantity

PHASES = ("Pending", "Running", "Succeeded", "Failed", "Cancelled")
FINISHED_PHASES = ("Succeeded", "Failed", "Cancelled")


@dataclasses.dataclass(frozen=True)
class WorkerState:
    index: int
    phase: str  # Pending, Running, Succeeded, Failed, Cancelled
    exit_code: int | None = None
    reason: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Job:
    """A job as users see it (`status --json`, REST)."""

    name: str
    phase: str
    workers: int
    spec: dict
    reason: str = ""
    message: str = ""
    created: str | None = None
    finished: str | None = None
    worker_states: tuple[WorkerState, ...] = ()
    backend: str = ""

    @property
    def done(self) -> bool:
        return self.phase in FINISHED_PHASES

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["worker_states"] = [w.to_dict() for w in self.worker_states]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Job:
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in fields}
        values["worker_states"] = tuple(WorkerState(**w) for w in data.get("worker_states", ()))
        return cls(**values)


def check_against_options(spec: JobSpec, options: dict) -> None:
    """Reject what this deployment does not offer: bounds, images, datasets (pure)."""
    problems = {}
    bounds = options.get("bounds", {})
    for field in ("workers", "gpus_per_worker"):
        limits = bounds.get(field, {})
        value = getattr(spec, field)
        if "max" in limits and value > limits["max"]:
            problems[field] = f"must be at most {limits['max']} here (got {value})"
    for field in ("cpu", "memory"):
        limits = bounds.get(field, {})
        if "max" in limits and parse_quantity(getattr(spec, field)) > parse_quantity(limits["max"]):
            problems[field] = f"must be at most {limits['max']} per worker here (got {getattr(spec, field)})"
    images = [image["name"] for image in options.get("images", [])]
    if spec.image is not None and images and not options.get("allow_any_image") and spec.image not in images:
        problems["image"] = f"'{spec.image}' is not offered here (choose one of: {', '.join(images)})"
    known = {dataset["name"] for dataset in options.get("datasets", [])}
    unknown = [name for name in spec.datasets if name not in known]
    if unknown:
        offered = ", ".join(sorted(known)) or "none are configured"
        problems["datasets"] = f"unknown dataset {', '.join(unknown)} (available: {offered})"
    if problems:
        raise SpecError(problems)


class JobBackend(LoggingConfigurable):
    """Base class. Subclasses implement submit/list/get/cancel/logs/usage."""

    name = "base"

    images = List(
        Dict(),
        help="""Images users may pick: [{"name": "registry/paddle:3.3.1-gpu", "description": "..."}].
        The first one is the default.""",
    ).tag(config=True)

    datasets = List(
        Dict(),
        help="""The shared dataset catalogue: [{"name": "imagenet", "description": "...",
        "mount_path": "/datasets/imagenet", ...backend-specific source}].""",
    ).tag(config=True)

    max_workers = Integer(8, help="Most workers one job may ask for.").tag(config=True)
    max_gpus_per_worker = Integer(8, help="Most GPUs one worker may ask for.").tag(config=True)
    max_cpu = Unicode("16", help="Most CPU one worker may ask for (a Kubernetes quantity).").tag(config=True)
    max_memory = Unicode("64Gi", help="Most memory one worker may ask for (a Kubernetes quantity).").tag(config=True)
    default_workers = Integer(2, help="Workers preselected in the launcher.").tag(config=True)
    default_cpu = Unicode("1", help="CPU per worker preselected in the launcher.").tag(config=True)
    default_memory = Unicode("2Gi", help="Memory per worker preselected in the launcher.").tag(config=True)
    default_command = List(
        Unicode(), help="Command preselected in the launcher."
    ).tag(config=True)

    @default("images")
    def _default_images(self):
        return _json_env("PADDLECLOUD_IMAGES", [])

    @default("datasets")
    def _default_datasets(self):
        return _json_env("PADDLECLOUD_DATASETS", [])

    @default("default_command")
    def _default_command(self):
        return ["python", "train.py", "--epochs", "3"]

    def options(self) -> dict:
        """The launcher's form spec (also served at /paddle/api/options)."""
        return {
            "backend": self.name,
            "images": list(self.images),
            "datasets": [
                {k: v for k, v in d.items() if k in ("name", "description", "mount_path")}
                for d in self.datasets
            ],
            "bounds": {
                "workers": {"min": 1, "max": self.max_workers},
                "gpus_per_worker": {"min": 0, "max": self.max_gpus_per_worker},
                "cpu": {"max": self.max_cpu},
                "memory": {"max": self.max_memory},
            },
            "defaults": {
                "workers": min(self.default_workers, self.max_workers),
                "gpus_per_worker": 0,
                "cpu": self.default_cpu,
                "memory": self.default_memory,
                "image": self.images[0]["name"] if self.images else None,
                "command": list(self.default_command),
            },
        }

    def validate(self, spec: JobSpec) -> JobSpec:
        """Check the spec against this deployment and give it a name."""
        check_against_options(spec, self.options())
        return spec.with_name()

    async def submit(self, spec: JobSpec) -> Job:
        raise NotImplementedError

    async def list(self) -> list[Job]:
        raise NotImplementedError

    async def get(self, name: str) -> Job:
        raise NotImplementedError

    async def cancel(self, name: str) -> Job:
        raise NotImplementedError

    def logs(self, name: str, worker: int | None = None, tail: int | None = None,
             follow: bool = False) -> AsyncIterator[str]:
        """Log lines without newlines; merged logs of several workers carry `[worker-I] `."""
        raise NotImplementedError

    async def quota(self) -> dict:
        """{"limits": {...}, "used": {...}} for the current user."""
        raise NotImplementedError

    async def running_usage(self) -> list[JobUsage]:
        """What each unfinished job holds, for quota checks and messages."""
        return [JobUsage.of(job.name, job.spec) for job in await self.list() if not job.done]

    async def close(self) -> None:
        """Release connections."""


def _json_env(name: str, fallback):
    """Configuration handed to notebook pods by the hub as JSON in an environment variable."""
    text = os.environ.get(name)
    if not text:
        return fallback
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"${name} is not valid JSON: {exc}") from exc


def service_account_dir() -> str:
    """Where the pod's service-account token, CA and namespace are mounted.

    PADDLECLOUD_SERVICEACCOUNT_DIR overrides the standard path; the cluster tests use
    it to run a notebook pod's command as a local process with the pod's identity."""
    return os.environ.get("PADDLECLOUD_SERVICEACCOUNT_DIR", "/var/run/secrets/kubernetes.io/serviceaccount")


def in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and os.path.exists(
        os.path.join(service_account_dir(), "token")
    )


def default_backend_name() -> str:
    """PADDLECLOUD_BACKEND, else `kubernetes` inside a cluster, else `local`."""
    return os.environ.get("PADDLECLOUD_BACKEND") or ("kubernetes" if in_cluster() else "local")


def make_backend(name: str | None = None, **kwargs: Any) -> JobBackend:
    name = name or default_backend_name()
    if name == "local":
        from .local import LocalBackend

        return LocalBackend(**kwargs)
    if name == "kubernetes":
        from .kubernetes import KubernetesBackend

        return KubernetesBackend(**kwargs)
    raise ValueError(f"unknown backend '{name}' (choose local or kubernetes)")


def prefix_line(worker: int, line: str, workers: int) -> str:
    """The merged-log form of a line: `[worker-I] ` when the job has several workers."""
    return f"[worker-{worker}] {line}" if workers > 1 else line
