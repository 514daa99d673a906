"""The embedded default's queue: which waiting jobs start now, where each stands and what
it waits for (pure, no I/O; `local.LocalBackend` reads the job folders and acts).

One line per machine (per state folder), first in, first out, strictly: a job starts only
when every job queued before it has started, so the order the positions promise is the
order jobs start in (a small job never overtakes a big one; nobody waits forever).

A job is measured against `Room`: the user's quota (running jobs, GPUs, CPU, memory,
pods; the same limits the preflight checks) and the GPUs this machine has. A job that
could never start, even on an idle machine, is refused at once (`never_fits`); one that
fits, but not next to what runs now, waits.

Estimated start: the running jobs are assumed to run until their time limit
(`max_runtime_seconds`, counted from their start); replaying the queue against those
ends, each waiting job starts at the first end that leaves room for it and then holds
what it asks for until its own limit. A job behind one that has no time limit gets no
estimate (None). The estimate is the latest such a start could be if the limits hold and
nothing else is submitted; jobs that end sooner start the line sooner.
"""

from __future__ import annotations

import dataclasses
import datetime
from decimal import Decimal
from typing import Mapping, Sequence

from ..jobs import QueueState
from ..quota.model import RESOURCE_FIELDS, WORDS, JobUsage, Limits, _amount, format_amount, total
from ..timestamps import to_iso

QUEUE_NAME = "this machine's queue"
ESTIMATE_BASIS = ("the time limits (max runtime) of the jobs running and queued before it; "
                  "it starts sooner when they end sooner")
NO_ESTIMATE = "no estimate: job {name} has no time limit (max runtime)"


@dataclasses.dataclass(frozen=True)
class Room:
    """What jobs may hold together: the user's quota and this machine's GPUs (None: not counted)."""

    limits: Limits = Limits()
    machine_gpus: int | None = None


@dataclasses.dataclass(frozen=True)
class Holder:
    """A running (or starting) job: what it holds and when it ends at the latest
    (epoch seconds; None: no time limit)."""

    usage: JobUsage
    ends: float | None = None


@dataclasses.dataclass(frozen=True)
class Waiting:
    """A queued job: what it asks for and its time limit (seconds; None: none)."""

    usage: JobUsage
    runtime: int | None = None


def _caps(room: Room) -> dict[str, Decimal]:
    """Each resource's cap: the quota's, and for GPUs the smaller of quota and machine."""
    caps = {field: _amount(field, getattr(room.limits, field)) for field in RESOURCE_FIELDS
            if getattr(room.limits, field) is not None}
    if room.machine_gpus is not None:
        caps["gpus"] = min(caps.get("gpus", Decimal(room.machine_gpus)), Decimal(room.machine_gpus))
    return caps


def never_fits(request: JobUsage, room: Room) -> str | None:
    """Why `request` could not start even with nothing else running, in one sentence with
    the numbers; None when it could."""
    gpus = request.gpus
    if room.machine_gpus is not None and gpus > room.machine_gpus:
        return (f"Needs {gpus} GPUs; this machine has {room.machine_gpus}, so the job could never start. "
                "Ask for fewer workers or GPUs per worker.")
    if room.limits.running_jobs is not None and room.limits.running_jobs < 1:
        return "Your quota allows no running jobs, so the job could never start."
    for field, cap in _caps(room).items():
        need = getattr(request, field)
        if need > cap:
            return (f"Needs {format_amount(field, need)} {WORDS[field]}; your quota is {format_amount(field, cap)}, "
                    "so the job could never start. Ask for less.")
    return None


def shortage(request: JobUsage, room: Room, running: Sequence[JobUsage]) -> str | None:
    """What `request` waits for next to `running`, in words that follow 'needs'
    ('4 more GPUs (6 of 8 in use)', 'a free running-job slot (2 of 2 running)');
    None when it fits now."""
    if room.limits.running_jobs is not None and len(running) + 1 > room.limits.running_jobs:
        return f"a free running-job slot ({len(running)} of {room.limits.running_jobs} running)"
    used = total(running)
    for field, cap in _caps(room).items():
        need = getattr(request, field)
        if need and used[field] + need > cap:
            more = used[field] + need - cap
            word = WORDS[field][:-1] if field in ("gpus", "pods") and more == 1 else WORDS[field]
            return (f"{format_amount(field, more)} more {word} "
                    f"({format_amount(field, used[field])} of {format_amount(field, cap)} in use)")
    return None


def admit(queued: Sequence[JobUsage], running: Sequence[JobUsage], room: Room) -> list[str]:
    """The queued jobs (in queue order) that start now: from the head, each that fits next to
    what runs and what this call starts, up to the first that does not (strict FIFO)."""
    started: list[JobUsage] = []
    for job in queued:
        if shortage(job, room, [*running, *started]) is not None:
            break
        started.append(job)
    return [job.name for job in started]


def estimated_starts(queued: Sequence[Waiting], running: Sequence[Holder], room: Room, now: float
                     ) -> dict[str, float | str]:
    """Each queued job's estimated start (epoch seconds), or the name of the job without a
    time limit that keeps it from having one. Replays `admit` at each latest end."""
    holders = list(running)
    waiting = list(queued)
    result: dict[str, float | str] = {}
    moment = now
    while waiting:
        starting = admit([w.usage for w in waiting], [h.usage for h in holders], room)
        for name in starting:
            job = next(w for w in waiting if w.usage.name == name)
            waiting.remove(job)
            result[name] = moment
            holders.append(Holder(job.usage, moment + job.runtime if job.runtime else None))
        if not waiting:
            break
        ending = [h.ends for h in holders if h.ends is not None]
        if not ending:
            unbounded = next((h.usage.name for h in holders if h.ends is None), "")
            for job in waiting:
                result[job.usage.name] = unbounded
            break
        moment = max(moment, min(ending))
        holders = [h for h in holders if h.ends is None or h.ends > moment]
    return result


def queue_states(queued: Sequence[Waiting], running: Sequence[Holder], room: Room, now: float
                 ) -> dict[str, QueueState]:
    """Where each queued job (in queue order) stands: position, jobs ahead, what it waits
    for and its estimated start."""
    starts = estimated_starts(queued, running, room, now)
    holding = [h.usage for h in running]
    states = {}
    for position, job in enumerate(queued, start=1):
        waits = shortage(job.usage, room, holding)
        if waits is None:
            ahead = position - 1
            waits = (f"the {ahead} job{'s' if ahead != 1 else ''} ahead of it to start" if ahead
                     else "its workers to be started")
        start = starts.get(job.usage.name)
        if isinstance(start, float | int):
            estimate, basis = to_iso(datetime.datetime.fromtimestamp(max(start, now), datetime.timezone.utc)), ESTIMATE_BASIS
        else:
            estimate, basis = None, NO_ESTIMATE.format(name=start) if start else "no estimate"
        states[job.usage.name] = QueueState(QUEUE_NAME, position, position - 1, waits, estimate, basis)
    return states


def queue_order(entries: Mapping[str, int]) -> list[str]:
    """Queued job names in the order they joined (their sequence numbers; name breaks ties)."""
    return sorted(entries, key=lambda name: (entries[name], name))
