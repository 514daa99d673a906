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
    3. else the global default an admin saved;
    4. else the site default: the deployment's own (the chart's `settings.default_quota`),
       never stored with the rest, so saving any entry keeps it (it may be unset: unlimited).

So a user override can lower a limit below the group's; a group can only raise a
user above the default, never lower them (groups grant, users decide).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
from decimal import Decimal
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

from ..constants import GPU_RESOURCE, QUOTA_SOURCES_ANNOTATION, RUNNING_JOBS_ANNOTATION
from ..errors import InvalidFields, PaddleCloudError, QuotaExceeded
from ..jobs import Job, Phase
from ..quantity import LARGEST_COUNT, check_quantity, format_quantity, parse_quantity
from ..spec import DEFAULT_CPU, DEFAULT_GPUS_PER_WORKER, DEFAULT_MEMORY, DEFAULT_WORKERS, JobSpec, is_whole_number
from ..timestamps import parse_time

FIELDS = ("gpus", "cpu", "memory", "pods", "running_jobs")
RESOURCE_FIELDS = ("gpus", "cpu", "memory", "pods")  # what pods hold; running_jobs counts jobs
INT_FIELDS = ("gpus", "pods", "running_jobs")
QUANTITY_FIELDS = ("cpu", "memory")
REVISION_KEY = "revision"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,127}\Z")

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
    # The deployment's default (rule 4): set by the store that loads the config, not stored.
    site_default: Limits = Limits()

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

def _check_int(value: Any) -> tuple[int | None, str | None]:
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,100}", value.strip()):
        value = int(value.strip())  # form input: "4", "-1"
    if not is_whole_number(value):
        return None, f"must be a whole number (got {value!r})"
    if value < 0:
        return None, f"must not be negative (got {value})"
    if value > LARGEST_COUNT:  # what a ResourceQuota can hold unchanged
        return None, f"must be at most {LARGEST_COUNT} (got {value})"
    return value, None


def _check_quantity(value: Any) -> tuple[str | None, str | None]:
    if is_whole_number(value) or isinstance(value, float):
        value = format(Decimal(str(value)).normalize(), "f")
    if not isinstance(value, str):
        return None, f"must be a quantity such as \"8\", \"500m\" or \"32Gi\" (got {value!r})"
    text = value.strip()
    if text.startswith("-"):
        return None, f"must not be negative (got '{text}')"
    try:
        check_quantity(text)  # what the API server keeps unchanged in a ResourceQuota
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


def format_amount(field: str, amount: Decimal) -> str:
    return format_quantity(amount, binary=field == "memory")


@dataclasses.dataclass(frozen=True)
class Effective:
    """A user's effective limits, and where each came from ("user", "group:<name>", "default", "site")."""

    limits: Limits
    sources: Mapping[str, str]



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
            continue
        site = getattr(config.site_default, field)
        if site is not None:
            values[field], sources[field] = site, "site"
    return Effective(Limits(**values), sources)




# ------------------------------------------------------------------ what jobs and notebooks hold

@dataclasses.dataclass(frozen=True)
class JobUsage:
    """What one job (or notebook) holds, or asks for, all its workers together."""

    name: str
    gpus: Decimal = Decimal(0)
    cpu: Decimal = Decimal(0)
    memory: Decimal = Decimal(0)
    pods: Decimal = Decimal(0)

    @classmethod
    def of(cls, name: str, spec: Mapping[str, Any]) -> JobUsage:
        """From a job spec as JSON (JobSpec.to_dict()); absent fields take JobSpec's defaults.
        A value of the wrong type, negative or out of bounds (a spec read back from a place
        its user can write) counts as nothing rather than raising."""
        workers = Decimal(_count(spec.get("workers", DEFAULT_WORKERS)))
        return cls(name=name, gpus=workers * _count(spec.get("gpus_per_worker", DEFAULT_GPUS_PER_WORKER)),
                   cpu=workers * _amount_or_zero(spec.get("cpu", DEFAULT_CPU)),
                   memory=workers * _amount_or_zero(spec.get("memory", DEFAULT_MEMORY)), pods=workers)

    @classmethod
    def of_spec(cls, spec: JobSpec) -> JobUsage:
        return cls.of(spec.name or "this job", spec.to_dict())


def _count(value: Any) -> int:
    return value if is_whole_number(value) and 0 <= value <= LARGEST_COUNT else 0


def _amount_or_zero(value: Any) -> Decimal:
    try:
        amount = check_quantity(value)
    except (ValueError, ArithmeticError):
        return Decimal(0)
    return amount if amount >= 0 else Decimal(0)


def total(running: Iterable[JobUsage]) -> dict[str, Decimal]:
    """Each resource field summed over `running`."""
    running = list(running)
    return {field: sum((getattr(job, field) for job in running), Decimal(0)) for field in RESOURCE_FIELDS}


def usage_values(in_use: Mapping[str, Decimal], running_jobs: int) -> dict:
    """Usage as JSON values: whole numbers for gpus and pods, quantities for cpu and memory."""
    values: dict[str, Any] = {field: format_amount(field, in_use.get(field, Decimal(0))) for field in QUANTITY_FIELDS}
    values.update({field: int(in_use.get(field, Decimal(0))) for field in ("gpus", "pods")})
    values["running_jobs"] = running_jobs
    return {field: values[field] for field in FIELDS}


# ------------------------------------------------------------------ the fit check, one for every path

@dataclasses.dataclass(frozen=True)
class Overflow:
    """The first resource a request would push over its limit."""

    field: str
    need: Decimal
    limit: Decimal
    in_use: Decimal
    holders: tuple[str, ...] = ()


def first_overflow(request: JobUsage, limits: Limits, in_use: Mapping[str, Decimal],
                   running: Sequence[JobUsage] = ()) -> Overflow | None:
    """Does `request` fit next to `in_use` within `limits`? The first field that does
    not, naming the `running` jobs that hold some of it; None if everything fits."""
    for field in RESOURCE_FIELDS:
        limit, need = getattr(limits, field), getattr(request, field)
        if limit is None or not need:
            continue
        limit_amount, used = _amount(field, limit), in_use.get(field, Decimal(0))
        if used + need > limit_amount:
            holders = tuple(job.name for job in running if getattr(job, field))
            return Overflow(field, need, limit_amount, used, holders)
    return None


def refusal(overflow: Overflow, subject: str = "") -> str:
    """The one sentence for every quota refusal: 'Needs 4 GPUs; your quota is 2 and 2
    are in use by job resnet-3.' (`subject`, e.g. 'This server', goes in front)."""
    field = overflow.field

    def amount(value: Decimal) -> str:
        return format_amount(field, value)

    verb = "is" if field in QUANTITY_FIELDS else "are"
    needs = f"{subject} needs" if subject else "Needs"
    held = ""
    if overflow.holders:
        names = overflow.holders
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        held = f" by job{'s' if len(names) > 1 else ''} {shown}"
    return (f"{needs} {amount(overflow.need)} {WORDS[field]}; your quota is {amount(overflow.limit)} "
            f"and {amount(overflow.in_use)} {verb} in use{held}.")


def running_jobs_refusal(cap: int, running: Sequence[JobUsage]) -> str | None:
    if len(running) + 1 <= cap:
        return None
    names = ", ".join(job.name for job in running[:3]) + (" ..." if len(running) > 3 else "")
    held = f" ({names})" if running else ""
    return (f"Your quota allows {cap} running job{'s' if cap != 1 else ''} and {len(running)} "
            f"{'are' if len(running) != 1 else 'is'} running{held}; wait for one to finish or cancel one.")


def check_fits(request: JobUsage, limits: Limits, running: Sequence[JobUsage],
               in_use: Mapping[str, Decimal] | None = None, subject: str = "") -> None:
    """Raise QuotaExceeded with the one quota message when `request` (a job, or with
    `subject` a notebook server) does not fit. `in_use` defaults to what `running` holds;
    on Kubernetes it is the ResourceQuota's own count, which includes the notebook."""
    if limits.running_jobs is not None:
        message = running_jobs_refusal(limits.running_jobs, running)
        if message:
            raise QuotaExceeded(message)
    overflow = first_overflow(request, limits, total(running) if in_use is None else in_use, running)
    if overflow:
        raise QuotaExceeded(refusal(overflow, subject))


# ------------------------------------------------------------------ the same limits as Kubernetes sees them

def resource_quota_hard(limits: Limits, gpu_resource: str = GPU_RESOURCE) -> dict[str, str]:
    """Limits in ResourceQuota terms. GPUs are an extended resource, for which quotas allow
    only `requests.`; CPU and memory are quota'd on requests too (what the scheduler
    reserves; the namespace's LimitRange supplies requests to containers that name none).
    `running_jobs` has no ResourceQuota form: see quota_annotations."""
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


def quota_annotations(effective: Effective) -> dict[str, str]:
    """What a ResourceQuota cannot say itself: the running-jobs cap and where each limit comes from."""
    annotations = {}
    if effective.limits.running_jobs is not None:
        annotations[RUNNING_JOBS_ANNOTATION] = str(effective.limits.running_jobs)
    if effective.sources:
        annotations[QUOTA_SOURCES_ANNOTATION] = json.dumps(dict(effective.sources), sort_keys=True)
    return annotations


def quota_field(resource: str, gpu_resource: str = GPU_RESOURCE) -> str | None:
    """The quota field a ResourceQuota resource name counts ('requests.cpu' -> 'cpu')."""
    if resource in ("pods", "count/pods"):
        return "pods"
    base = resource.split(".", 1)[1] if resource.startswith(("requests.", "limits.")) else resource
    if base in QUANTITY_FIELDS:
        return base
    if base == gpu_resource:
        return "gpus"
    return None


def resource_quota_terms(quota: Mapping[str, Any], gpu_resource: str = GPU_RESOURCE
                         ) -> tuple[Limits, dict[str, Decimal]]:
    """(limits, in use) of one ResourceQuota as the API server reports it (`status.hard`,
    `status.used`). Where several resources count one field (requests.cpu, limits.cpu),
    the one with the least room left wins."""
    status = quota.get("status") or {}
    hard = status.get("hard") or (quota.get("spec") or {}).get("hard") or {}
    used = status.get("used") or {}
    tightest: dict[str, tuple[Decimal, Decimal]] = {}
    for resource, limit_text in hard.items():
        field = quota_field(resource, gpu_resource)
        if field is None:
            continue
        limit, in_use = parse_quantity(limit_text), parse_quantity(used.get(resource, "0"))
        if field not in tightest or limit - in_use < tightest[field][0] - tightest[field][1]:
            tightest[field] = (limit, in_use)
    values: dict[str, Any] = {}
    for field, (limit, _) in tightest.items():
        values[field] = format_amount(field, limit) if field in QUANTITY_FIELDS else int(limit)
    return Limits(**values), {field: in_use for field, (_, in_use) in tightest.items()}


def running_jobs_cap(quotas: Iterable[Mapping[str, Any]]) -> int | None:
    """The running-jobs cap from the namespace's ResourceQuotas (the smallest, if several set it)."""
    caps = []
    for quota in quotas:
        value = ((quota.get("metadata") or {}).get("annotations") or {}).get(RUNNING_JOBS_ANNOTATION)
        if value is not None and str(value).strip().isdigit():
            caps.append(int(value))
    return min(caps) if caps else None


def quota_sources(quotas: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Where each limit comes from, as the quota service recorded it on the ResourceQuota."""
    sources: dict[str, str] = {}
    for quota in quotas:
        text = ((quota.get("metadata") or {}).get("annotations") or {}).get(QUOTA_SOURCES_ANNOTATION)
        try:
            recorded = json.loads(text) if text else {}
        except ValueError:
            continue
        if isinstance(recorded, dict):
            sources.update({k: str(v) for k, v in recorded.items() if k in FIELDS})
    return sources


def parse_quota_rejection(message: str, gpu_resource: str = GPU_RESOURCE) -> str:
    """The API server's 'exceeded quota' 403 text as the one quota sentence.

    API text: 'pods "x" is forbidden: exceeded quota: compute, requested:
    requests.nvidia.com/gpu=2, used: requests.nvidia.com/gpu=1, limited: requests.nvidia.com/gpu=2'
    """
    if "exceeded quota" not in message:
        return message
    parts: dict[str, dict[str, str]] = {}
    for key in ("requested", "used", "limited"):
        marker = f"{key}: "
        start = message.find(marker)
        if start < 0:
            continue
        rest = message[start + len(marker):]
        end = min((rest.find(f", {k}:") for k in ("requested", "used", "limited") if rest.find(f", {k}:") >= 0),
                  default=len(rest))
        parts[key] = dict(item.split("=", 1) for item in rest[:end].split(",") if "=" in item)
    requested = parts.get("requested", {})
    resource = next(iter(requested), None)
    field = quota_field(resource, gpu_resource) if resource else None
    try:
        overflow = Overflow(field, parse_quantity(requested[resource]),
                            parse_quantity(parts.get("limited", {})[resource]),
                            parse_quantity(parts.get("used", {}).get(resource, "0")))
    except (KeyError, ValueError, TypeError):
        overflow = None
    if field is None or overflow is None:
        return "The namespace's quota does not allow this: " + message.split("exceeded quota:", 1)[1].strip()
    return refusal(overflow)


# ------------------------------------------------------------------ GPU-hours and the report users see

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
    hours = 0.0
    for record in records:
        begin = max(record.created, start)
        end = min(record.finished or now, now)
        if record.gpus and end > begin:
            hours += record.gpus * (end - begin).total_seconds() / 3600
    return round(hours, 2)


def job_record(job: Job) -> JobRecord | None:
    if job.phase == Phase.QUEUED:  # waiting in line holds no GPUs
        return None
    try:
        start = parse_time(job.created)
    except (ValueError, TypeError, AttributeError):
        return None
    if start is None:
        return None
    # A finished job without an end time (its records were lost) counts as zero hours; one
    # whose end time cannot be read (a user-written annotation) counts until now.
    try:
        end = parse_time(job.finished) or (start if job.done else None)
    except (ValueError, TypeError, AttributeError):
        end = None
    return JobRecord(job.name, int(JobUsage.of(job.name, job.spec).gpus), start, end)


@dataclasses.dataclass(frozen=True)
class QuotaReport:
    """A user's limits, where each comes from, what is in use and GPU-hours: the same on
    every backend (`paddlecloud quota`, GET /paddle/api/quota, the launcher's quota line
    and the quota service read these fields)."""

    user: str
    limits: Limits
    sources: Mapping[str, str]
    used: Mapping[str, Any]  # FIELDS -> JSON values (usage_values)
    running: tuple[str, ...]
    gpu_hours: Mapping[str, float]  # {"7d": ..., "30d": ...}

    def to_dict(self) -> dict:
        return {"user": self.user, "limits": self.limits.set_fields(), "sources": dict(self.sources),
                "used": dict(self.used), "running": list(self.running), "gpu_hours": dict(self.gpu_hours)}


def report(user: str, effective: Effective, jobs: Iterable[Job], now: datetime.datetime,
           in_use: Mapping[str, Decimal] | None = None) -> QuotaReport:
    """The report from a user's jobs. `in_use` overrides what the jobs' specs add up to
    where something else counts better (on Kubernetes: the ResourceQuota, notebook included)."""
    jobs = list(jobs)
    running = [JobUsage.of(job.name, job.spec) for job in jobs if job.holds_resources]
    counted = {**total(running), **(in_use or {})}
    records = [record for record in map(job_record, jobs) if record]
    return QuotaReport(user=user, limits=effective.limits, sources=dict(effective.sources),
                       used=usage_values(counted, len(running)), running=tuple(job.name for job in running),
                       gpu_hours={"7d": gpu_hours(records, now, 7), "30d": gpu_hours(records, now, 30)})
