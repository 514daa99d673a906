"""The admin's side of the Kueue queues (module `queues`): what each of our ClusterQueues holds
now, for the overview and the quota page, and which of them the quota model no longer wants.
Pure, no I/O: the quota service reads and deletes (hub.quota_sync).

**Ours** is a ClusterQueue with our label (constants.MANAGED_BY), an owner annotation
("group:<g>" or "user:<u>", as `queues.cluster_queue` writes it) and the name `queues.dns_name`
gives that owner: a queue someone else made, or one whose name merely looks like ours, is
neither listed nor ever deleted.

**Which to delete.** A team queue is wanted while its group has a quota that sets GPUs, CPU or
memory (`queues.team_queues`); a personal queue while a hub user's queue is their own
(`queues.queue_for`: a personal override, or no team queue). Ours and not wanted: deleted, but
only when it holds no workload (none admitted, reserving quota or pending in its status). Kueue
itself keeps a ClusterQueue that still has admitted workloads (its finalizer
`kueue.x-k8s.io/resource-in-use` stays until they end), and a terminating queue admits nothing,
so its pending jobs would wait for ever; a busy queue is kept and tried again at the next sync,
once its members' LocalQueues point elsewhere and its jobs have ended.
"""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import Iterable, Mapping

from ..constants import GPU_RESOURCE, MANAGED_BY, QUEUE_OWNER_ANNOTATION, QUEUE_TITLE_ANNOTATION
from ..quantity import parse_quantity
from .model import QuotaConfig
from .queues import TEAM_PREFIX, UNLIMITED, USER_PREFIX, dns_name, queue_for, team_queues

KINDS = {"group": ("team", TEAM_PREFIX), "user": ("user", USER_PREFIX)}  # owner prefix -> (row kind, name prefix)
WORKLOAD_COUNTS = ("admittedWorkloads", "reservingWorkloads", "pendingWorkloads")


@dataclasses.dataclass(frozen=True)
class QueueOwner:
    kind: str  # "team" or "user"
    name: str  # the hub group's or user's name


@dataclasses.dataclass(frozen=True)
class QueueRow:
    """One of our ClusterQueues as the overview lists it. GPU numbers are whole GPUs;
    `guaranteed_gpus` None: no limit. `idle_gpus`: the guarantee its own jobs do not use now,
    which the cohort may lend to others (whether someone borrows it is not read)."""

    name: str
    kind: str
    owner: str
    title: str
    guaranteed_gpus: int | None
    used_gpus: int
    borrowed_gpus: int
    idle_gpus: int | None
    admitted: int
    pending: int

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def owner_of(cluster_queue: Mapping) -> QueueOwner | None:
    """Who one of our ClusterQueues is for; None when it is not ours (module docstring)."""
    metadata = cluster_queue.get("metadata") or {}
    labels = metadata.get("labels") or {}
    if any(labels.get(key) != value for key, value in MANAGED_BY.items()):
        return None
    owner = str((metadata.get("annotations") or {}).get(QUEUE_OWNER_ANNOTATION) or "")
    prefix, _, name = owner.partition(":")
    if prefix not in KINDS or not name:
        return None
    kind, name_prefix = KINDS[prefix]
    if metadata.get("name") != dns_name(name_prefix, name):
        return None
    return QueueOwner(kind, name)


def _count(status: Mapping, key: str) -> int:
    try:
        return max(int(status.get(key) or 0), 0)
    except (TypeError, ValueError):
        return 0


def _gpus(text) -> Decimal:
    try:
        return parse_quantity(text) if text is not None else Decimal(0)
    except ValueError:
        return Decimal(0)


def gpu_usage(cluster_queue: Mapping, gpu_resource: str = GPU_RESOURCE) -> tuple[int, int]:
    """(GPUs in use by its admitted workloads, of them borrowed beyond its guarantee), over all
    flavors of `status.flavorsUsage`."""
    used = borrowed = Decimal(0)
    for flavor in (cluster_queue.get("status") or {}).get("flavorsUsage") or ():
        for resource in flavor.get("resources") or ():
            if resource.get("name") == gpu_resource:
                used += _gpus(resource.get("total"))
                borrowed += _gpus(resource.get("borrowed"))
    return int(used), int(borrowed)


def guaranteed_gpus(cluster_queue: Mapping, gpu_resource: str = GPU_RESOURCE) -> int | None:
    """The nominal GPU quota over all flavors; None when it is `queues.UNLIMITED` (or absent)."""
    total, found = Decimal(0), False
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or ():
        for flavor in group.get("flavors") or ():
            for resource in flavor.get("resources") or ():
                if resource.get("name") == gpu_resource:
                    total += _gpus(resource.get("nominalQuota"))
                    found = True
    return None if not found or total >= UNLIMITED["gpus"] else int(total)


def queue_row(cluster_queue: Mapping, owner: QueueOwner, gpu_resource: str = GPU_RESOURCE) -> QueueRow:
    status = cluster_queue.get("status") or {}
    metadata = cluster_queue.get("metadata") or {}
    used, borrowed = gpu_usage(cluster_queue, gpu_resource)
    guaranteed = guaranteed_gpus(cluster_queue, gpu_resource)
    idle = None if guaranteed is None else max(guaranteed - (used - borrowed), 0)
    title = str((metadata.get("annotations") or {}).get(QUEUE_TITLE_ANNOTATION) or metadata.get("name"))
    return QueueRow(name=str(metadata.get("name")), kind=owner.kind, owner=owner.name, title=title,
                    guaranteed_gpus=guaranteed, used_gpus=used, borrowed_gpus=borrowed, idle_gpus=idle,
                    admitted=_count(status, "admittedWorkloads"), pending=_count(status, "pendingWorkloads"))


def queue_rows(cluster_queues: Iterable[Mapping], gpu_resource: str = GPU_RESOURCE) -> list[QueueRow]:
    """A row per ClusterQueue of ours (others are left out): teams first, then users, by name."""
    rows = []
    for cq in cluster_queues:
        owner = owner_of(cq)
        if owner is not None:
            rows.append(queue_row(cq, owner, gpu_resource))
    return sorted(rows, key=lambda row: (row.kind != "team", row.owner))


def wanted_queues(config: QuotaConfig, users: Mapping[str, Iterable[str]]) -> set[str]:
    """The ClusterQueue names the quota model wants: every team queue, and the personal queue of
    each hub user (user -> their groups) whose queue is their own."""
    wanted = {queue.name for queue in team_queues(config)}
    for username, groups in users.items():
        queue = queue_for(config, username, groups)
        if queue.owner == f"user:{username}":
            wanted.add(queue.name)
    return wanted


@dataclasses.dataclass(frozen=True)
class Prune:
    """What to do with our queues the model no longer wants: `delete` (name -> the
    resourceVersion read, the delete's precondition), `keep` (name -> why not yet)."""

    delete: Mapping[str, str]
    keep: Mapping[str, str]


def busy(cluster_queue: Mapping) -> str | None:
    """Why a queue may not be deleted now (its workloads, in words); None when it is empty."""
    status = cluster_queue.get("status") or {}
    counts = {key: _count(status, key) for key in WORKLOAD_COUNTS}
    if not any(counts.values()):
        return None
    admitted = max(counts["admittedWorkloads"], counts["reservingWorkloads"])
    return f"{admitted} admitted and {counts['pendingWorkloads']} pending workloads"


def queues_to_prune(cluster_queues: Iterable[Mapping], wanted: set[str]) -> Prune:
    """Of our ClusterQueues (`owner_of`) the ones not in `wanted`: empty ones to delete, busy
    ones to keep until the next sync. Queues not ours are never named."""
    delete, keep = {}, {}
    for cq in cluster_queues:
        metadata = cq.get("metadata") or {}
        name = metadata.get("name")
        if owner_of(cq) is None or name in wanted or metadata.get("deletionTimestamp"):
            continue
        why = busy(cq)
        if why is None:
            delete[name] = str(metadata.get("resourceVersion") or "")
        else:
            keep[name] = why
    return Prune(delete, keep)
