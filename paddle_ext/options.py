"""What a deployment offers: one declaration gives both the launcher's form and the
check every submit goes through (pure).

`JobOptions.to_dict()` is `GET /paddle/api/options`; `JobOptions.check(spec)` refuses
what is not offered, naming the field, whichever way the spec arrived.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Mapping

from .errors import SpecError
from .quantity import parse_quantity
from .constants import DEFAULT_MAX_RESTARTS, SITE_MAX_RESTARTS
from .spec import DEFAULT_CPU, DEFAULT_GPUS_PER_WORKER, DEFAULT_MEMORY, DEFAULT_WORKERS, JobSpec


@dataclasses.dataclass(frozen=True)
class ImageChoice:
    name: str
    description: str = ""

    @classmethod
    def of(cls, entry: Mapping[str, Any]) -> ImageChoice:
        return cls(str(entry["name"]), str(entry.get("description", "")))


@dataclasses.dataclass(frozen=True)
class DatasetChoice:
    name: str
    description: str = ""
    mount_path: str = ""

    @classmethod
    def of(cls, entry: Mapping[str, Any]) -> DatasetChoice:
        """From a catalogue entry (which also says where the data comes from)."""
        return cls(str(entry["name"]), str(entry.get("description", "")), str(entry.get("mount_path", "")))


@dataclasses.dataclass(frozen=True)
class JobOptions:
    backend: str
    images: tuple[ImageChoice, ...] = ()
    datasets: tuple[DatasetChoice, ...] = ()
    max_workers: int = 8
    max_gpus_per_worker: int = 8
    max_cpu: str = "16"
    max_memory: str = "64Gi"
    max_restarts: int = SITE_MAX_RESTARTS  # the most restarts a job may ask for here
    default_max_restarts: int = DEFAULT_MAX_RESTARTS  # what a job that names none gets
    default_command: tuple[str, ...] = ()
    outputs_note: str = ""  # said in the launcher when this deployment may not keep job outputs
    # The image a job runs in when it names none and no list is offered; "" where jobs run in
    # the server's own Python environment (the local backend).
    job_image: str = ""

    @classmethod
    def build(cls, backend: str, images: Iterable[Mapping] = (), datasets: Iterable[Mapping] = (),
              **bounds: Any) -> JobOptions:
        return cls(backend, tuple(ImageChoice.of(i) for i in images),
                   tuple(DatasetChoice.of(d) for d in datasets), **bounds)

    @property
    def default_image(self) -> str | None:
        return self.images[0].name if self.images else None

    def defaults(self) -> dict:
        return {
            "workers": min(DEFAULT_WORKERS, self.max_workers),
            "gpus_per_worker": DEFAULT_GPUS_PER_WORKER,
            "cpu": DEFAULT_CPU,
            "memory": DEFAULT_MEMORY,
            "image": self.default_image,
            "command": list(self.default_command),
            "max_restarts": min(self.default_max_restarts, self.max_restarts),
        }

    def to_dict(self) -> dict:
        return {
            "backend": self.backend,
            "images": [dataclasses.asdict(image) for image in self.images],
            "datasets": [dataclasses.asdict(dataset) for dataset in self.datasets],
            "bounds": {
                "workers": {"min": 1, "max": self.max_workers},
                "gpus_per_worker": {"min": 0, "max": self.max_gpus_per_worker},
                "cpu": {"max": self.max_cpu},
                "memory": {"max": self.max_memory},
                "max_restarts": {"min": 0, "max": self.max_restarts},
            },
            "defaults": self.defaults(),
            "outputs_note": self.outputs_note,
            "job_image": self.job_image,
        }

    def check(self, spec: JobSpec) -> None:
        """Raise SpecError naming each field that asks for more than is offered here."""
        problems = {}
        for field, most in (("workers", self.max_workers), ("gpus_per_worker", self.max_gpus_per_worker),
                            ("max_restarts", self.max_restarts)):
            value = getattr(spec, field)
            if value is not None and value > most:
                problems[field] = f"must be at most {most} here (got {value})"
        for field, largest in (("cpu", self.max_cpu), ("memory", self.max_memory)):
            amount = getattr(spec, field)
            if parse_quantity(amount) > parse_quantity(largest):
                problems[field] = f"must be at most {largest} per worker here (got {amount})"
        offered = [image.name for image in self.images]
        if spec.image is not None and offered and spec.image not in offered:
            problems["image"] = f"'{spec.image}' is not offered here (choose one of: {', '.join(offered)})"
        known = {dataset.name for dataset in self.datasets}
        unknown = [name for name in spec.datasets if name not in known]
        if unknown:
            available = ", ".join(sorted(known)) or "none are configured"
            problems["datasets"] = f"unknown dataset {', '.join(unknown)} (available: {available})"
        if problems:
            raise SpecError(problems)

    def complete(self, spec: JobSpec) -> JobSpec:
        """`spec` with what it left to the site filled in (its restarts)."""
        if spec.max_restarts is None:
            spec = dataclasses.replace(spec, max_restarts=self.defaults()["max_restarts"])
        return spec
