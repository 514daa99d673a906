"""The quota model: limits, who gets which, and whether a job fits. Pure, no I/O.

Five limits, each optional (None = not set here / unlimited):

    gpus          int    GPUs requested by all of a user's running pods together
    cpu           str    CPU requested by them together (a Kubernetes quantity: "8", "500m")
    memory        str    memory requested by them together ("32Gi")
    pods          int    pods (job workers, and the notebook itself on Kubernetes)
    running_jobs  int    jobs not yet finished

A `QuotaConfig` holds a global default, per-group limits and per-user overrides.

Resolution rule, the same for every field on its own:

    1. the user's own override, if it sets the field;
    2. else the most generous value among the user's groups that set it;
    3. else the global default (which may be unset: unlimited).

So a user override can lower a limit below the group's; a group can only raise a
user above the default, never lower them (groups grant, users decide).
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from decimal import Decimal
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from ..errors import InvalidFields, PaddleCloudError, QuotaExceeded
from ..spec import JobSpec, parse_quantity

FIELDS = ("gpus", "cpu", "memory", "pods", "running_jobs")
INT_FIELDS = ("gpus", "pods", "running_jobs")
QUANTITY_FIELDS = ("cpu", "memory")
REVISION_KEY = "revision"
GPU_RESOURCE = "nvidia.com/gpu"
# The running-jobs cap on Kubernetes: an annotation on the user's ResourceQuota,
# read by KubernetesBackend.preflight (the API server cannot count *running* jobs:
# `count/jobs.batch` counts finished Jobs too until their TTL removes them).
RUNNING_JOBS_ANNOTATION = "paddlecloud.io/running-jobs"
QUOTA_NAME = "paddlecloud-quota"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,127}$")

WORDS = {"gpus": "GPUs", "cpu": "CPU", "memory": "memory", "pods": "pods", "running_jobs": "running jobs"}


class QuotaInputError(InvalidFields):
    """A quota update (PUT body) is invalid."""

    code = "bad_quota"
    what = "quota"


@dataclasses.dataclass(frozen=True)
class Limits:
    """Optional limits; None means 'not set here'."""

    gpus: int | None = None
    cpu: str | None = None
    memory: str | None = None
    pods: int | None = None
    running_jobs: int | None = None

    def to_dict(self) -> dict:
        """Every field, unset ones as None."""
        return {field: getattr(self, field) for field in FIELDS}

    def set_fields(self) -> dict:
        """Only the fields that are set."""
        return {field: value for field, value in self.to_dict().items() if value is not None}

    @property
    def empty(self) -> bool:
        return not self.set_fields()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Limits:
        """From stored or user data; validated like a PUT body (no revision key)."""
        return merge(cls(), parse_patch(data or {}))


@dataclasses.dataclass(frozen=True)
class Entry:
    """A stored set of limits and the config version at which it last changed."""

    limits: Limits = Limits()
    revision: int = 0

    def to_dict(self) -> dict:
        return {"limits": self.limits.set_fields(), REVISION_KEY: self.revision}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Entry:
        data = data or {}
        return cls(Limits.from_dict(data.get("limits")), int(data.get(REVISION_KEY, 0)))


@dataclasses.dataclass(frozen=True)
class QuotaConfig:
    """Default, group and user limits, and a version that grows with every change."""

    default: Entry = Entry()
    groups: Mapping[str, Entry] = dataclasses.field(default_factory=dict)
    users: Mapping[str, Entry] = dataclasses.field(default_factory=dict)
    version: int = 0

    def __post_init__(self):
        object.__setattr__(self, "groups", MappingProxyType(dict(self.groups)))
        object.__setattr__(self, "users", MappingProxyType(dict(self.users)))

    def to_dict(self) -> dict:
        return {
            "version": self.version,
            "default": self.default.to_dict(),
            "groups": {name: entry.to_dict() for name, entry in sorted(self.groups.items())},
            "users": {name: entry.to_dict() for name, entry in sorted(self.users.items())},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> QuotaConfig:
        data = data or {}
        return cls(
            default=Entry.from_dict(data.get("default")),
            groups={name: Entry.from_dict(entry) for name, entry in (data.get("groups") or {}).items()},
            users={name: Entry.from_dict(entry) for name, entry in (data.get("users") or {}).items()},
            version=int(data.get("version", 0)),
        )

    def entry(self, kind: str, name: str | None = None) -> Entry:
        if kind == "default":
            return self.default
        return (self.groups if kind == "groups" else self.users).get(name, Entry())


# ------------------------------------------------------------------ validation

def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_int(value: Any) -> tuple[int | None, str | None]:
    if isinstance(value, str) and re.fullmatch(r"\s*-?[0-9]+\s*", value):
        value = int(value)  # form input: "4", "-1"
    if not _is_int(value):
        return None, f"must be a whole number (got {value!r})"
    if value < 0:
        return None, f"must not be negative (got {value})"
    return value, None


def _check_quantity(value: Any) -> tuple[str | None, str | None]:
    if _is_int(value) or isinstance(value, float):
        value = format(Decimal(str(value)).normalize(), "f")
    if not isinstance(value, str):
        return None, f"must be a quantity such as \"8\", \"500m\" or \"32Gi\" (got {value!r})"
    text = value.strip()
    if text.startswith("-"):
        return None, f"must not be negative (got '{text}')"
    try:
        parse_quantity(text)
    except ValueError as exc:
        return None, str(exc)
    return text, None


def parse_patch(body: Any, allow_revision: bool = False) -> dict:
    """Validate a PUT body: {field: value or null}. Returns the normalized patch, with
    the optional expected `revision` under REVISION_KEY. Raises QuotaInputError naming
    every rejected field."""
    if not isinstance(body, Mapping):
        raise QuotaInputError({"body": "must be a JSON object such as {\"gpus\": 2}"})
    allowed = FIELDS + ((REVISION_KEY,) if allow_revision else ())
    problems: dict[str, str] = {}
    patch: dict[str, Any] = {}
    for key, value in body.items():
        if key not in allowed:
            problems[str(key)] = f"unknown field (allowed: {', '.join(allowed)})"
        elif key == REVISION_KEY:
            if value is not None:
                number, problem = _check_int(value)
                if problem:
                    problems[key] = problem
                else:
                    patch[key] = number
        elif value is None:
            patch[key] = None
        else:
            checked, problem = (_check_int if key in INT_FIELDS else _check_quantity)(value)
            if problem:
                problems[key] = problem
            else:
                patch[key] = checked
    if problems:
        raise QuotaInputError(problems)
    return patch


def check_name(kind: str, name: str) -> None:
    """User and group names in URLs: refuse what no hub would create."""
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise QuotaInputError({kind: f"'{name}' is not a valid {kind} name"})


def merge(limits: Limits, patch: Mapping[str, Any]) -> Limits:
    """Fields in `patch` replace (None clears); fields left out keep their value."""
    return dataclasses.replace(limits, **{k: v for k, v in patch.items() if k in FIELDS})


def apply_update(config: QuotaConfig, kind: str, name: str | None, patch: Mapping[str, Any]) -> QuotaConfig:
    """The config after a PUT: the entry merged, stamped with the new version.

    `kind` is "default", "groups" or "users". Raises QuotaConflict when `patch` carries
    a `revision` that is not the entry's current one (someone changed it meanwhile).
    """
    current = config.entry(kind, name)
    expected = patch.get(REVISION_KEY)
    if expected is not None and expected != current.revision:
        raise QuotaConflict(kind, name)
    version = config.version + 1
    entry = Entry(merge(current.limits, patch), version)
    if kind == "default":
        return dataclasses.replace(config, default=entry, version=version)
    entries = dict(getattr(config, kind))
    if entry.limits.empty:
        entries.pop(name, None)  # nothing left to override: forget the entry
    else:
        entries[name] = entry
    return dataclasses.replace(config, **{kind: entries}, version=version)


class QuotaConflict(PaddleCloudError):
    """A stale update: the entry changed since the editor read it."""

    code = "conflict"
    status = 409

    def __init__(self, kind: str, name: str | None):
        what = "the default quota" if kind == "default" else f"the quota of {kind[:-1]} '{name}'"
        super().__init__(f"Someone else changed {what} since you loaded it; reload to see their change and try again.")


# ------------------------------------------------------------------ resolution

def _amount(field: str, value: Any) -> Decimal:
    return parse_quantity(value) if field in QUANTITY_FIELDS else Decimal(value)


@dataclasses.dataclass(frozen=True)
class Effective:
    """A user's effective limits, and where each came from ("user", "group:<name>", "default")."""

    limits: Limits
    sources: Mapping[str, str]

    def to_dict(self) -> dict:
        return {"limits": self.limits.to_dict(), "sources": dict(self.sources)}


def resolve(config: QuotaConfig, username: str, groups: Iterable[str]) -> Effective:
    """Apply the resolution rule (module docstring) field by field."""
    user = config.users.get(username, Entry()).limits
    group_limits = sorted((name, config.groups[name].limits) for name in set(groups) if name in config.groups)
    values, sources = {}, {}
    for field in FIELDS:
        own = getattr(user, field)
        if own is not None:
            values[field], sources[field] = own, "user"
            continue
        best = None
        for name, limits in group_limits:
            value = getattr(limits, field)
            if value is not None and (best is None or _amount(field, value) > _amount(field, best[1])):
                best = (name, value)
        if best is not None:
            values[field], sources[field] = best[1], f"group:{best[0]}"
            continue
        default = getattr(config.default.limits, field)
        if default is not None:
            values[field], sources[field] = default, "default"
    return Effective(Limits(**values), sources)


def resource_quota_hard(limits: Limits, gpu_resource: str = GPU_RESOURCE) -> dict[str, str]:
    """Effective limits in ResourceQuota terms. GPUs are an extended resource, for which
    quotas allow only `requests.`; CPU and memory are quota'd on requests too (what the
    scheduler reserves; the LimitRange in tenancy.py supplies requests to containers
    that name none). `running_jobs` has no ResourceQuota form: see RUNNING_JOBS_ANNOTATION."""
    hard = {}
    if limits.gpus is not None:
        hard[f"requests.{gpu_resource}"] = str(limits.gpus)
    if limits.cpu is not None:
        hard["requests.cpu"] = limits.cpu
    if limits.memory is not None:
        hard["requests.memory"] = limits.memory
    if limits.pods is not None:
        hard["pods"] = str(limits.pods)
    return hard


def quota_annotations(limits: Limits) -> dict[str, str]:
    return {} if limits.running_jobs is None else {RUNNING_JOBS_ANNOTATION: str(limits.running_jobs)}


# ------------------------------------------------------------------ usage and preflight

@dataclasses.dataclass(frozen=True)
class JobUsage:
    """What one running job holds."""

    name: str
    gpus: int
    cpu: Decimal
    memory: Decimal
    pods: int

    @classmethod
    def of(cls, name: str, spec: Mapping[str, Any]) -> JobUsage:
        workers = int(spec.get("workers", 1))
        return cls(name=name, gpus=workers * int(spec.get("gpus_per_worker", 0)),
                   cpu=workers * parse_quantity(spec.get("cpu", "1")),
                   memory=workers * parse_quantity(spec.get("memory", "2Gi")), pods=workers)


def job_usage(spec: JobSpec) -> JobUsage:
    return JobUsage.of(spec.name or "this job", spec.to_dict())


def format_quantity(field: str, amount: Decimal) -> str:
    if field == "memory":
        for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if amount >= size:
                value = (amount / size).quantize(Decimal("0.01")).normalize()
                return f"{format(value, 'f')}{unit}"
    return format(amount.normalize(), "f")


def usage_totals(running: Iterable[JobUsage]) -> dict:
    """{"gpus", "cpu", "memory", "pods", "running_jobs"} of the running jobs, as JSON values."""
    running = list(running)
    return {
        "gpus": sum(job.gpus for job in running),
        "cpu": format_quantity("cpu", sum((job.cpu for job in running), Decimal(0))),
        "memory": format_quantity("memory", sum((job.memory for job in running), Decimal(0))),
        "pods": sum(job.pods for job in running),
        "running_jobs": len(running),
    }


def holders(field: str, running: list[JobUsage]) -> str:
    """' by jobs a, b' for the running jobs that hold some of `field` ('' if none)."""
    names = [job.name for job in running if getattr(job, field)]
    if not names:
        return ""
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f" by job{'s' if len(names) > 1 else ''} {shown}"


def check_job(spec: JobSpec, limits: Limits, running: Iterable[JobUsage]) -> None:
    """Raise QuotaExceeded, with numbers and the jobs holding the resources, when the
    job does not fit next to `running` within `limits`."""
    running = list(running)
    if limits.running_jobs is not None and len(running) + 1 > limits.running_jobs:
        names = ", ".join(job.name for job in running[:3]) + (" ..." if len(running) > 3 else "")
        held = f" ({names})" if running else ""
        raise QuotaExceeded(
            f"Your quota allows {limits.running_jobs} running job{'s' if limits.running_jobs != 1 else ''} "
            f"and {len(running)} {'are' if len(running) != 1 else 'is'} running{held}; "
            "wait for one to finish or cancel one.")
    wanted = job_usage(spec)
    for field in ("gpus", "cpu", "memory", "pods"):
        limit = getattr(limits, field)
        need = Decimal(getattr(wanted, field))
        if limit is None or need == 0:
            continue
        limit_amount = _amount(field, limit)
        in_use = sum((Decimal(getattr(job, field)) for job in running), Decimal(0))
        if in_use + need > limit_amount:
            fmt = (lambda a: format_quantity(field, a))
            raise QuotaExceeded(
                f"Needs {fmt(need)} {WORDS[field]}; your quota is {fmt(limit_amount)} and "
                f"{fmt(in_use)} {'is' if field in QUANTITY_FIELDS else 'are'} in use"
                f"{holders(field, running)}.")


def parse_time(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    value = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc)


@dataclasses.dataclass(frozen=True)
class JobRecord:
    """A job's GPU footprint over time: `finished` None while it runs."""

    name: str
    gpus: int
    created: datetime.datetime
    finished: datetime.datetime | None


def gpu_hours(records: Iterable[JobRecord], now: datetime.datetime, days: int) -> float:
    """GPU-hours used in the `days` before `now`: each job's GPUs times the part of
    [created, finished or now] that falls in the window."""
    start = now - datetime.timedelta(days=days)
    total = 0.0
    for record in records:
        begin = max(record.created, start)
        end = min(record.finished or now, now)
        if record.gpus and end > begin:
            total += record.gpus * (end - begin).total_seconds() / 3600
    return round(total, 2)


def job_record(name: str, spec: Mapping[str, Any], created: str | None, finished: str | None) -> JobRecord | None:
    start = parse_time(created)
    if start is None:
        return None
    gpus = int(spec.get("workers", 1)) * int(spec.get("gpus_per_worker", 0))
    return JobRecord(name, gpus, start, parse_time(finished))


def usage_report(jobs: Iterable[Any], now: datetime.datetime) -> dict:
    """Usage of a user's jobs (backend Job objects): running totals, the running jobs,
    and GPU-hours of the last 7 and 30 days."""
    jobs = list(jobs)
    running = [JobUsage.of(job.name, job.spec) for job in jobs if not job.done]
    # A finished job without an end time (its records were lost) counts as zero hours.
    records = [r for r in (job_record(job.name, job.spec, job.created,
                                      job.finished or (job.created if job.done else None)) for job in jobs) if r]
    return {
        "used": usage_totals(running),
        "running": [job.name for job in running],
        "gpu_hours": {"7d": gpu_hours(records, now, 7), "30d": gpu_hours(records, now, 30)},
    }
