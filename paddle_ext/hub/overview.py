"""The admin overview's document: every running job of every user with its resources and
age, GPU-hours per user and per group, and the cluster's capacity (pure).

`GET /services/quota/api/overview` answers `overview(...)`; the quota service gathers
the inputs (hub users, their jobs, nodes) and this module only arranges them.
"""

from __future__ import annotations

import datetime
from typing import Iterable, Mapping

from ..jobs import Job
from ..quota.model import JobUsage, format_amount, gpu_hours, job_record
from ..timestamps import parse_time

WINDOWS = {"7d": 7, "30d": 30}


def age_text(seconds: float) -> str:
    """3m, 2h 5m, 3d 4h."""
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{max(minutes, 0)}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {minutes}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h"


def job_row(user: str, job: Job, now: datetime.datetime) -> dict:
    """One running job as the overview lists it: all its workers' resources together."""
    usage = JobUsage.of(job.name, job.spec)
    created = parse_time(job.created)
    age = (now - created).total_seconds() if created else 0.0
    return {"user": user, "name": job.name, "phase": str(job.phase), "workers": job.workers,
            "gpus": int(usage.gpus), "cpu": format_amount("cpu", usage.cpu),
            "memory": format_amount("memory", usage.memory), "created": job.created,
            "age_seconds": int(age), "age": age_text(age), "backend": job.backend}


def user_gpu_hours(jobs: Iterable[Job], now: datetime.datetime) -> dict[str, float]:
    records = [record for record in map(job_record, jobs) if record]
    return {window: gpu_hours(records, now, days) for window, days in WINDOWS.items()}


def group_gpu_hours(users: Iterable[Mapping]) -> list[dict]:
    """GPU-hours per group: the sum over its members (a user in two groups counts in both)."""
    groups: dict[str, dict] = {}
    for user in users:
        for group in user.get("groups") or ():
            entry = groups.setdefault(group, {"group": group, "members": [], **{w: 0.0 for w in WINDOWS}})
            entry["members"].append(user["user"])
            for window in WINDOWS:
                entry[window] = round(entry[window] + float(user.get(window) or 0), 2)
    return [groups[name] for name in sorted(groups)]


def overview(capacity: dict, user_jobs: Mapping[str, tuple[list[str], list[Job]]], now: datetime.datetime,
             errors: Mapping[str, str] | None = None, queues: Mapping | None = None) -> dict:
    """The document. `user_jobs`: user -> (their groups, their jobs); `capacity`: the
    cluster source's {"source", "nodes", "total"}; `errors`: user -> why their jobs
    could not be read; `queues`: with Kueue, {"rows": queue_admin.QueueRow dicts, "error"?}
    (the section is left out without Kueue)."""
    rows, hours = [], []
    for user in sorted(user_jobs):
        groups, jobs = user_jobs[user]
        rows += [job_row(user, job, now) for job in jobs if not job.done]
        hours.append({"user": user, "groups": sorted(groups), **user_gpu_hours(jobs, now)})
    rows.sort(key=lambda row: (row["created"] or "", row["user"], row["name"]))
    document = {
        "capacity": capacity,
        "jobs": rows,
        "gpu_hours": {"windows": list(WINDOWS), "users": hours, "groups": group_gpu_hours(hours)},
        "errors": [{"user": user, "message": message} for user, message in sorted((errors or {}).items())],
    }
    if queues is not None:
        document["queues"] = dict(queues)
    return document
