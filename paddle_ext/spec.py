"""JobSpec: what a user asks to run. Validated on construction, immutable, no I/O."""

from __future__ import annotations

import dataclasses
import json
import re
from types import MappingProxyType
from typing import Any, Mapping

from .constants import (COMPLETION_INDEX_ENV, GPU_DEVICE_ENV, GPU_RUNTIME_ENV_PREFIX, JOB_NAME_ENV, LAUNCHER_ENV,
                        OUTPUT_DIR_ENV, RESTART_ENV)
from .constants import DEFAULT_CPU, DEFAULT_GPUS_PER_WORKER, DEFAULT_MEMORY, DEFAULT_WORKERS  # noqa: F401 (re-exported)
from .errors import SpecError
from .grammars import ENV_NAME_PATTERN, JOB_NAME_PATTERN, MAX_JOB_NAME_LENGTH
from .quantity import LARGEST_COUNT, check_quantity, parse_quantity  # noqa: F401 (parse_quantity: re-exported)

DATASET_NAME_PATTERN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
# Environment variables every worker gets from us or that rewire Paddle's launcher.
RESERVED_ENV = frozenset((JOB_NAME_ENV, OUTPUT_DIR_ENV, COMPLETION_INDEX_ENV, RESTART_ENV, *LAUNCHER_ENV))
# An image reference as container runtimes parse it (the distribution/reference grammar);
# Kubernetes accepts any string, and a node would leave a pod it cannot parse waiting forever.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = (r"(?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*"
           r"[a-zA-Z0-9]))*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?")
IMAGE_PATTERN = re.compile(
    rf"(?P<name>(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*)(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?")
MAX_IMAGE_NAME_LENGTH = 255
# Kubernetes' limit on the workers of an Indexed Job.
MAX_WORKERS = 100_000
# A deadline longer than this is no deadline; leave max_runtime_seconds out instead.
MAX_RUNTIME_SECONDS = 366 * 24 * 3600
# The most restarts any site may allow one job (a site sets its own, lower, maximum).
MAX_RESTARTS = 1000
# The command and environment travel in the job's annotations (256 KiB in all, on
# Kubernetes) and in one exec (128 KiB per argument on Linux).
MAX_COMMAND_AND_ENV_BYTES = 64 * 1024

FIELDS = (
    "name", "command", "workers", "gpus_per_worker", "cpu", "memory",
    "image", "datasets", "env", "max_runtime_seconds", "max_restarts",
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
    import secrets  # here: hashlib and random cost every command otherwise

    return f"{stem}-{''.join(secrets.choice(alphabet) for _ in range(5))}"


def is_job_name(value: Any) -> bool:
    """A name a job could have (anything else, e.g. from a URL, names no job)."""
    return isinstance(value, str) and len(value) <= MAX_JOB_NAME_LENGTH and bool(JOB_NAME_PATTERN.fullmatch(value))


def is_whole_number(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_name(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        return "must be a string"
    if len(value) > MAX_JOB_NAME_LENGTH:
        return f"must be at most {MAX_JOB_NAME_LENGTH} characters (got {len(value)})"
    if not JOB_NAME_PATTERN.fullmatch(value):
        return (
            "must use only lowercase letters, digits and '-', start with a letter "
            f"and end with a letter or digit (got '{value}')"
        )
    return None


def text_problem(value: str) -> str | None:
    """What an operating system or Kubernetes would refuse in a string handed to a process."""
    if "\0" in value:
        return "must not contain NUL characters (\\0)"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid Unicode text (it contains a lone surrogate)"
    return None


def _check_command(value: Any) -> str | None:
    if not isinstance(value, (list, tuple)) or not value:
        return "must be a non-empty list of arguments, e.g. [\"python\", \"train.py\"]"
    if not all(isinstance(arg, str) for arg in value):
        return "every argument must be a string"
    if not value[0].strip():
        return "the program (first argument) must not be empty"
    if value[0].startswith("-"):
        return f"the program (first argument) must not start with '-' (got '{value[0]}')"
    for index, arg in enumerate(value):
        problem = text_problem(arg)
        if problem:
            return f"argument {index} {problem}"
    return None


def _check_count(value: Any, minimum: int, maximum: int = LARGEST_COUNT) -> str | None:
    if not is_whole_number(value):
        return f"must be a whole number (got {value!r})"
    if value < minimum:
        return f"must be at least {minimum} (got {value})"
    if value > maximum:
        return f"must be at most {maximum} (got {value})"
    return None


def _check_quantity(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"must be a string quantity such as \"2\" or \"500m\" (got {value!r})"
    try:
        amount = check_quantity(value)
    except ValueError as exc:
        return str(exc)
    if amount <= 0:
        return f"must be greater than zero (got '{value}')"
    return None


def _check_image(value: Any) -> str | None:
    if value is None:
        return None
    match = IMAGE_PATTERN.fullmatch(value) if isinstance(value, str) else None
    if not match:
        return (f"must be an image reference such as registry.example.com/team/paddle:3.3.1-gpu "
                f"(got {value!r})")
    first, slash, _ = match["name"].partition("/")
    if slash and not ("." in first or ":" in first or first == "localhost") and not re.fullmatch(_COMPONENT, first):
        # Runtimes read 'UPPER/x' as a repository on Docker Hub, whose names are lowercase.
        return f"repository names must be lowercase (got {value!r})"
    if len(match["name"]) > MAX_IMAGE_NAME_LENGTH:
        return f"the image name must be at most {MAX_IMAGE_NAME_LENGTH} characters (got {len(match['name'])})"
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
        if not isinstance(key, str) or not ENV_NAME_PATTERN.fullmatch(key):
            return f"{key!r} is not a valid environment variable name"
        if key in RESERVED_ENV:
            return f"{key} is set by PaddleCloud or read by Paddle's launcher; choose another name"
        if key in GPU_DEVICE_ENV:
            return f"{key} picks GPU devices, which the cluster does for the GPUs a job asks for (gpus_per_worker)"
        if not isinstance(item, str):
            return f"the value of {key} must be a string (got {item!r})"
        problem = text_problem(item)
        if problem:
            return f"the value of {key} {problem}"
    return None


def _check_runtime(value: Any) -> str | None:
    if value is None:
        return None
    return _check_count(value, 1, MAX_RUNTIME_SECONDS)


def _check_gpu_env(env: Mapping[str, str], gpus_per_worker: int) -> str | None:
    """The GPU runtime's variables (NVIDIA_*) only on jobs that ask for GPUs: without any they
    could make the runtime show a worker GPUs it never asked for."""
    names = sorted(key for key in env if key.startswith(GPU_RUNTIME_ENV_PREFIX))
    if names and not gpus_per_worker:
        return (f"{', '.join(names)}: {GPU_RUNTIME_ENV_PREFIX}* variables tell the GPU runtime which GPUs to show; "
                "a job without GPUs may not set them (ask for GPUs with gpus_per_worker)")
    return None


def _check_size(command: Any, env: Any) -> str | None:
    """The command and environment together, as they are recorded with the job."""
    size = len(json.dumps([list(command), dict(env)]))
    if size > MAX_COMMAND_AND_ENV_BYTES:
        return (f"the command and env take {size} bytes together; the most a job may carry is "
                f"{MAX_COMMAND_AND_ENV_BYTES} (put long inputs in a file)")
    return None


def _check_restarts(value: Any) -> str | None:
    if value is None:
        return None  # the site's default, filled in when the job is submitted
    return _check_count(value, 0, MAX_RESTARTS)


_CHECKS = {
    "name": _check_name,
    "command": _check_command,
    "workers": lambda v: _check_count(v, 1, MAX_WORKERS),
    "gpus_per_worker": lambda v: _check_count(v, 0),
    "cpu": _check_quantity,
    "memory": _check_quantity,
    "image": _check_image,
    "datasets": _check_datasets,
    "env": _check_env,
    "max_runtime_seconds": _check_runtime,
    "max_restarts": _check_restarts,
}


def check_field(field: str, value: Any) -> str | None:
    """What is wrong with `value` for the JobSpec field `field` (None: nothing)."""
    return _CHECKS[field](value)


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
    # How many times all workers may be restarted together after a worker is lost, killed or
    # evicted (None: the site's default, set when the job is submitted). See paddle_ext.restarts.
    max_restarts: int | None = None

    def __post_init__(self):
        problems = {}
        for field in FIELDS:
            problem = _CHECKS[field](getattr(self, field))
            if problem:
                problems[field] = problem
        if "command" not in problems and "env" not in problems:
            problem = _check_size(self.command, self.env)
            if problem:
                problems["command"] = problem
        if "env" not in problems and "gpus_per_worker" not in problems:
            problem = _check_gpu_env(self.env, self.gpus_per_worker)
            if problem:
                problems["env"] = problem
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
            "max_restarts": self.max_restarts,
        }
