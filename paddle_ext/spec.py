"""JobSpec: what a user asks to run. Validated on construction, immutable, no I/O."""

from __future__ import annotations

import dataclasses
import re
import secrets
from types import MappingProxyType
from typing import Any, Mapping

from .errors import SpecError
from .quantity import parse_quantity

# Job names become Kubernetes object names, pod hostnames (<job>-<i>) and a Service
# name, so they follow RFC 1035 labels and leave room for the worker suffix.
NAME_PATTERN = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
MAX_NAME_LENGTH = 50
ENV_NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DATASET_NAME_PATTERN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# The defaults, read by the Python API, the CLI, the REST API, the launcher's form and the
# quota model alike. One worker: distributed training is a deliberate choice, and a job
# takes no more of a shared quota than it asks for.
DEFAULT_WORKERS = 1
DEFAULT_GPUS_PER_WORKER = 0
DEFAULT_CPU = "1"
DEFAULT_MEMORY = "2Gi"

FIELDS = (
    "name", "command", "workers", "gpus_per_worker", "cpu", "memory",
    "image", "datasets", "env", "max_runtime_seconds",
)


def generate_name(command: tuple[str, ...] = ()) -> str:
    """A fresh job name, derived from the script name when there is one: train-x7k2p."""
    stem = "job"
    for arg in command:
        if arg.endswith(".py"):
            base = arg.rsplit("/", 1)[-1][: -len(".py")].lower()
            base = re.sub(r"[^a-z0-9]+", "-", base).strip("-")
            if base and base[0].isalpha():
                stem = base[:30]
            break
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    return f"{stem}-{''.join(secrets.choice(alphabet) for _ in range(5))}"


def is_whole_number(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_name(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        return "must be a string"
    if len(value) > MAX_NAME_LENGTH:
        return f"must be at most {MAX_NAME_LENGTH} characters (got {len(value)})"
    if not NAME_PATTERN.match(value):
        return (
            "must use only lowercase letters, digits and '-', start with a letter "
            f"and end with a letter or digit (got '{value}')"
        )
    return None


def _check_command(value: Any) -> str | None:
    if not isinstance(value, (list, tuple)) or not value:
        return "must be a non-empty list of arguments, e.g. [\"python\", \"train.py\"]"
    if not all(isinstance(arg, str) for arg in value):
        return "every argument must be a string"
    if not value[0].strip():
        return "the program (first argument) must not be empty"
    return None


def _check_count(value: Any, minimum: int) -> str | None:
    if not is_whole_number(value):
        return f"must be a whole number (got {value!r})"
    if value < minimum:
        return f"must be at least {minimum} (got {value})"
    return None


def _check_quantity(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"must be a string quantity such as \"2\" or \"500m\" (got {value!r})"
    try:
        amount = parse_quantity(value)
    except ValueError as exc:
        return str(exc)
    if amount <= 0:
        return f"must be greater than zero (got '{value}')"
    return None


def _check_image(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or any(c.isspace() for c in value):
        return f"must be an image reference without spaces (got {value!r})"
    return None


def _check_datasets(value: Any) -> str | None:
    if not isinstance(value, (list, tuple)):
        return "must be a list of dataset names"
    for item in value:
        if not isinstance(item, str) or not DATASET_NAME_PATTERN.match(item):
            return f"'{item}' is not a dataset name (lowercase letters, digits and '-')"
    if len(set(value)) != len(value):
        return "names a dataset more than once"
    return None


def _check_env(value: Any) -> str | None:
    if not isinstance(value, Mapping):
        return "must be a mapping of variable names to string values"
    for key, item in value.items():
        if not isinstance(key, str) or not ENV_NAME_PATTERN.match(key):
            return f"'{key}' is not a valid environment variable name"
        if not isinstance(item, str):
            return f"the value of {key} must be a string (got {item!r})"
    return None


def _check_runtime(value: Any) -> str | None:
    if value is None:
        return None
    return _check_count(value, 1)


_CHECKS = {
    "name": _check_name,
    "command": _check_command,
    "workers": lambda v: _check_count(v, 1),
    "gpus_per_worker": lambda v: _check_count(v, 0),
    "cpu": _check_quantity,
    "memory": _check_quantity,
    "image": _check_image,
    "datasets": _check_datasets,
    "env": _check_env,
    "max_runtime_seconds": _check_runtime,
}


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """A distributed training job: `workers` processes (pods), each running `command`
    under `paddle.distributed.launch` with `gpus_per_worker` trainers.

    Raises SpecError naming every rejected field and the rule it broke.
    """

    command: tuple[str, ...]
    name: str | None = None
    workers: int = DEFAULT_WORKERS
    gpus_per_worker: int = DEFAULT_GPUS_PER_WORKER
    cpu: str = DEFAULT_CPU
    memory: str = DEFAULT_MEMORY
    image: str | None = None
    datasets: tuple[str, ...] = ()
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    max_runtime_seconds: int | None = None

    def __post_init__(self):
        problems = {}
        for field in FIELDS:
            problem = _CHECKS[field](getattr(self, field))
            if problem:
                problems[field] = problem
        if problems:
            raise SpecError(problems)
        object.__setattr__(self, "command", tuple(self.command))
        object.__setattr__(self, "datasets", tuple(self.datasets))
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))

    @classmethod
    def from_dict(cls, data: Any) -> JobSpec:
        """Build from JSON-like data; unknown fields and wrong types are rejected."""
        if not isinstance(data, Mapping):
            raise SpecError({"spec": "must be a JSON object"})
        unknown = sorted(set(data) - set(FIELDS))
        problems = {key: f"unknown field (allowed: {', '.join(FIELDS)})" for key in unknown}
        if "command" not in data:
            problems["command"] = "is required"
        if problems:
            raise SpecError(problems)
        return cls(**{key: data[key] for key in FIELDS if key in data})

    def with_name(self, name: str | None = None) -> JobSpec:
        """This spec with `name` set (a generated one if none is given or set)."""
        return dataclasses.replace(self, name=name or self.name or generate_name(self.command))

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "command": list(self.command),
            "workers": self.workers,
            "gpus_per_worker": self.gpus_per_worker,
            "cpu": self.cpu,
            "memory": self.memory,
            "image": self.image,
            "datasets": list(self.datasets),
            "env": dict(self.env),
            "max_runtime_seconds": self.max_runtime_seconds,
        }
