"""Whether a GPU notebook can be placed now, and if not, a message that says why (pure;
nodes, pods and jobs as API dicts in, a GpuRoom out).

A notebook is interactive: a researcher left on a spawn page for hours while the GPU nodes
are full is worse off than one told at once, with the numbers and when GPUs are expected
back. Kueue does not manage notebook pods, so there is no queue to wait in; the spawner
(paddle_ext.hub.spawner) refuses the spawn with `GpuRoom.message` instead.

Counted are the schedulable nodes the notebook pod may be placed on (its node selector and
tolerations: capacity.node_accepts). "Expected back" is the earliest time one such node has
the GPUs free, as the running jobs holding GPUs there reach their time limit (the job's
start time plus its activeDeadlineSeconds); a job without one frees nothing that can be
foretold.
"""

from __future__ import annotations

import dataclasses
import datetime

from ..capacity import FINISHED_POD_PHASES, node_accepts, node_usage, pod_requests
from ..constants import DEFAULT_JOB_KIND, GPU_RESOURCE
from ..jobkinds import JOB_KINDS, JobKind
from ..timestamps import parse_time


@dataclasses.dataclass(frozen=True)
class GpuRoom:
    """What the nodes a notebook may use have for its GPUs."""

    needed: int  # the GPUs the notebook asks for
    nodes: int  # schedulable nodes with GPUs that the notebook's pod may be placed on
    capacity: int  # their GPUs together
    in_use: int  # of those, held by pods now
    most_free: int  # the most free on one of them
    largest: int  # the most GPUs one of them has
    expected_back: datetime.datetime | None  # when one of them has `needed` free, if foreseeable
    message: str | None  # for the user, when it does not fit now; None when it does

    @property
    def fits(self) -> bool:
        return self.message is None


def notebook_gpus(pod_spec: dict, gpu_resource: str = GPU_RESOURCE) -> int:
    """The GPUs a notebook pod with this spec asks for."""
    return pod_requests({"spec": pod_spec}, gpu_resource).gpus


def _gpus(count: int) -> str:
    return f"{count} GPU" if count == 1 else f"{count} GPUs"


def job_ends(jobs: list[dict], now: datetime.datetime, kind: JobKind | None = None) -> dict[str, datetime.datetime]:
    """Each running job's end at the latest (start time + activeDeadlineSeconds), by the job's uid;
    jobs without a time limit or not yet started are left out."""
    kind = kind or JOB_KINDS[DEFAULT_JOB_KIND]
    ends = {}
    for job in jobs:
        uid = (job.get("metadata") or {}).get("uid")
        deadline = kind.deadline_seconds(job)
        started = parse_time((job.get("status") or {}).get("startTime"))
        if uid and deadline is not None and started is not None:
            ends[uid] = max(started + datetime.timedelta(seconds=int(deadline)), now)
    return ends


def _pod_end(pod: dict, ends: dict[str, datetime.datetime]) -> datetime.datetime | None:
    owners = (pod.get("metadata") or {}).get("ownerReferences") or []
    times = [ends[owner["uid"]] for owner in owners if owner.get("uid") in ends]
    return min(times) if times else None


def _node_back(need: int, free: int, held: list[tuple[int, datetime.datetime | None]]) -> datetime.datetime | None:
    """When a node with `free` GPUs free has `need`, as its pods' jobs reach their limits (soonest first)."""
    for end, gpus in sorted((end, gpus) for gpus, end in held if end is not None):
        free += gpus
        if free >= need:
            return end
    return None


def when(moment: datetime.datetime, now: datetime.datetime) -> str:
    """'at 16:30 UTC on 2026-12-02 (in about 1 h 20 min)'."""
    minutes = max(0, round((moment - now).total_seconds() / 60))
    hours, rest = divmod(minutes, 60)
    delay = (f"{hours} h {rest} min" if hours and rest else f"{hours} h" if hours else f"{rest} min")
    at = moment.astimezone(datetime.timezone.utc).strftime("%H:%M UTC on %Y-%m-%d")
    return f"at {at} (in about {delay})"


def gpu_room(nodes: list[dict], pods: list[dict], jobs: list[dict], pod_spec: dict, now: datetime.datetime,
             gpu_resource: str = GPU_RESOURCE, kind: JobKind | None = None) -> GpuRoom | None:
    """Whether a node the notebook pod (`pod_spec`) may use has the GPUs it asks for free now;
    None for a notebook that asks for no GPU. `pods`: the cluster's pods (finished ones are
    skipped); `jobs`: the running jobs of the site's kind (for their time limits)."""
    need = notebook_gpus(pod_spec, gpu_resource)
    if need <= 0:
        return None
    usable = [node for node in nodes if node_accepts(node, pod_spec)]
    usage = [u for u in node_usage(usable, pods, gpu_resource) if u.schedulable and u.capacity.gpus > 0]
    capacity = sum(u.capacity.gpus for u in usage)
    in_use = sum(min(u.used.gpus, u.capacity.gpus) for u in usage)
    most_free = max((u.free_gpus for u in usage), default=0)
    largest = max((u.capacity.gpus for u in usage), default=0)

    def room(message: str | None, back: datetime.datetime | None = None) -> GpuRoom:
        return GpuRoom(need, len(usage), capacity, in_use, most_free, largest, back, message)

    if most_free >= need:
        return room(None)
    head = f"No node has {_gpus(need)} free for this notebook now: "
    if not usage:
        return room(head + "no node it may be placed on has GPUs. Pick a profile without GPUs, or ask an admin.")
    if largest < need:
        return room(f"No node has {_gpus(need)} for this notebook: the largest GPU node it may be placed on has "
                    f"{_gpus(largest)}. Pick a profile with fewer GPUs.")
    nodes_word = "the GPU node has" if len(usage) == 1 else f"the {len(usage)} GPU nodes have"
    used = "all in use" if in_use >= capacity else f"{in_use} in use, at most {most_free} free on one node"
    ends = job_ends(jobs, now, kind)
    held: dict[str, list[tuple[int, datetime.datetime | None]]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        gpus = pod_requests(pod, gpu_resource).gpus
        if node and gpus and (pod.get("status") or {}).get("phase") not in FINISHED_POD_PHASES:
            held.setdefault(node, []).append((gpus, _pod_end(pod, ends)))
    backs = [b for u in usage if u.capacity.gpus >= need
             for b in [_node_back(need, u.free_gpus, held.get(u.name, []))] if b is not None]
    back = min(backs, default=None)
    expected = (f"GPUs are expected back {when(back, now)}, when a running job reaches its time limit."
                if back is not None else
                "No running job that holds them has a time limit, so when GPUs come back is not known.")
    return room(f"{head}{nodes_word} {_gpus(capacity)}, {used}. {expected} "
                "Try again later, or pick a profile without GPUs.", back)
