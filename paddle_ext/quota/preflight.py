"""Will a job fit the namespace's ResourceQuotas? Pure arithmetic, friendly messages.

The API server enforces ResourceQuotas, but for a Job it does so only when the Job
controller creates pods, long after `submit` returned. This preflight refuses up
front, with a message that says what is asked, what is allowed and what is in use.
"""

from __future__ import annotations

from decimal import Decimal

from ..errors import QuotaExceeded
from ..spec import JobSpec, parse_quantity
from .model import RUNNING_JOBS_ANNOTATION, holders

GPU_RESOURCE = "nvidia.com/gpu"

# Resource names in ResourceQuota terms -> words for users.
RESOURCE_WORDS = {
    "requests.nvidia.com/gpu": "GPUs",
    "limits.nvidia.com/gpu": "GPUs",
    "requests.cpu": "CPUs",
    "limits.cpu": "CPUs",
    "cpu": "CPUs",
    "requests.memory": "memory",
    "limits.memory": "memory",
    "memory": "memory",
    "pods": "pods",
    "count/pods": "pods",
    "count/jobs.batch": "jobs",
}


def job_request(spec: JobSpec, gpu_resource: str = GPU_RESOURCE) -> dict[str, Decimal]:
    """What the whole job adds to a namespace, keyed by ResourceQuota resource names."""
    workers = Decimal(spec.workers)
    cpu = parse_quantity(spec.cpu) * workers
    memory = parse_quantity(spec.memory) * workers
    gpus = Decimal(spec.gpus_per_worker) * workers
    return {
        "requests.cpu": cpu, "limits.cpu": cpu, "cpu": cpu,
        "requests.memory": memory, "limits.memory": memory, "memory": memory,
        f"requests.{gpu_resource}": gpus, f"limits.{gpu_resource}": gpus,
        "pods": workers, "count/pods": workers, "count/jobs.batch": Decimal(1),
    }


def format_amount(resource: str, amount: Decimal) -> str:
    if "memory" in resource:
        for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if amount >= size:
                value = (amount / size).quantize(Decimal("0.01")).normalize()
                return f"{format(value, 'f')}{unit}"
        return format(amount.normalize(), "f")
    return format(amount.normalize(), "f")


def first_overflow(request: dict[str, Decimal], quota: dict) -> tuple[str, Decimal, Decimal, Decimal] | None:
    """(resource, requested, limit, in use) of the first resource that `request` would
    push over the ResourceQuota `quota` (a dict with `status.hard`/`status.used`), or None."""
    status = quota.get("status") or {}
    hard = status.get("hard") or (quota.get("spec") or {}).get("hard") or {}
    used = status.get("used") or {}
    for resource, limit_text in sorted(hard.items()):
        if not request.get(resource):
            continue
        limit = parse_quantity(limit_text)
        in_use = parse_quantity(used.get(resource, "0"))
        if in_use + request[resource] > limit:
            return resource, request[resource], limit, in_use
    return None


def check_resource_quotas(spec: JobSpec, quotas: list[dict], gpu_resource: str = GPU_RESOURCE,
                          running: list | None = None) -> None:
    """Raise QuotaExceeded for the first ResourceQuota the job would overflow.

    `running` (model.JobUsage of the namespace's running jobs), when given, names in
    the message the jobs that hold the resource.
    """
    request = job_request(spec, gpu_resource)
    for quota in quotas:
        overflow = first_overflow(request, quota)
        if overflow:
            resource, amount, limit, in_use = overflow
            words = RESOURCE_WORDS.get(resource, resource)
            raise QuotaExceeded(
                f"Needs {format_amount(resource, amount)} {words} ({resource}); "
                f"your quota is {format_amount(resource, limit)} and "
                f"{format_amount(resource, in_use)} are in use{_holders(resource, running)}."
            )


_USAGE_FIELDS = (("gpu", "gpus"), ("cpu", "cpu"), ("memory", "memory"), ("pods", "pods"))


def _holders(resource: str, running: list | None) -> str:
    """' by jobs a, b' for the running jobs that hold some of `resource` ('' if unknown)."""
    field = next((f for key, f in _USAGE_FIELDS if key in resource), None)
    return holders(field, running or []) if field else ""


def running_jobs_cap(quotas: list[dict]) -> int | None:
    """The running-jobs cap from the `paddlecloud.io/running-jobs` annotation of the
    namespace's ResourceQuotas (the smallest, if several set it); None if none does."""
    caps = []
    for quota in quotas:
        value = ((quota.get("metadata") or {}).get("annotations") or {}).get(RUNNING_JOBS_ANNOTATION)
        if value is not None and str(value).strip().isdigit():
            caps.append(int(value))
    return min(caps) if caps else None


def parse_quota_rejection(message: str) -> str:
    """Turn the API server's 'exceeded quota' 403 text into one sentence for users.

    API text: 'pods "x" is forbidden: exceeded quota: compute, requested:
    requests.nvidia.com/gpu=2, used: requests.nvidia.com/gpu=1, limited: requests.nvidia.com/gpu=2'
    """
    if "exceeded quota" not in message:
        return message
    parts = {}
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
    if not requested:
        return "The namespace's quota does not allow this: " + message.split("exceeded quota:", 1)[1].strip()
    resource = next(iter(requested))
    words = RESOURCE_WORDS.get(resource, resource)
    limit = parts.get("limited", {}).get(resource, "?")
    in_use = parts.get("used", {}).get(resource, "0")
    return (f"Needs {requested[resource]} more {words} ({resource}); "
            f"your quota is {limit} and {in_use} are in use.")
