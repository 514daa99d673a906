"""Admission Fair Sharing inside one team queue, for real (issue 23): three members of one
team's ClusterQueue (weights 1, 1, 2) queue equal backlogs of short 1-GPU jobs on the KWOK GPU
nodes, and Kueue gives each a share of the GPU-seconds near their weight's.

A file of its own, apart from test_kueue.py (whose fixtures and helpers it uses): at about three
minutes it is the longest test of the cluster tier's KWOK part, whose worker processes each take
whole files (pytest-xdist's loadfile), so apart it runs beside the other Kueue tests, not after them.
"""

from __future__ import annotations

import datetime
from decimal import Decimal

from cluster_helpers import wait_for
from measures import MEASURE

from paddle_ext.quota import queues

import test_kueue
from test_kueue import GPU, GROUP, VERSION, condition_time, namespace_workloads, queued_job

# test_kueue's fixtures, used here as they are: the admin's CustomObjectsApi, the hub's team queues.
custom = test_kueue.custom
teams = test_kueue.teams

FAIR_WEIGHTS = {"ann": 1, "ben": 1, "cho": 2}  # the configured weights of three members of one team
FAIR_QUOTA = 4  # the team's GPUs: four 1-GPU jobs at a time, no borrowing (a cohort of its own)
FAIR_BACKLOG = 60  # jobs each member queues at once; the measured window ends before any runs out
FAIR_WINDOW = 80  # the window: from the first admission until this many jobs of the three have finished
# How long KWOK runs each job's pod, the same stream for each member: of mixed lengths, so GPUs free
# one at a time and each goes to whoever is then furthest below their share (jobs of one length
# end together and Kueue gives all the GPUs freed in one second to the same member).
FAIR_JOBS = ("2s", "3s", "4s", "5s")
# A share of the GPU-seconds, at most this far from the weight's: issue 23's 10 percentage points.
# Released before Kueue had made every Workload, runs missed by up to 0.134 (cho's jobs came
# late); since the test waits for them, runs on this 2-core machine missed by 0.039 and 0.028
# alone, 0.019 in a whole CI run and 0.015, 0.043 and 0.012 beside the cluster tier's real-node
# part. Without fair sharing it misses by 0.32. Each run prints its shares.
FAIR_TOLERANCE = 0.10


def gpu_seconds(spans: list[tuple[datetime.datetime, datetime.datetime | None, int]],
                start: datetime.datetime, end: datetime.datetime) -> float:
    """GPU-seconds inside [start, end] of (admitted, finished or None: still running, GPUs) spans."""
    total = 0.0
    for admitted, finished, gpus in spans:
        lo, hi = max(admitted, start), min(finished or end, end)
        total += max((hi - lo).total_seconds(), 0.0) * gpus
    return total


def spans_of(workloads: list[dict]) -> list[tuple[datetime.datetime, datetime.datetime | None, int]]:
    """(quota reserved, finished, GPUs) of the Workloads Kueue has admitted."""
    out = []
    for wl in workloads:
        admitted = condition_time(wl, "QuotaReserved")
        if admitted is not None:
            gpus = sum(int(ps.get("resourceUsage", {}).get(GPU, 0))
                       for ps in wl["status"]["admission"]["podSetAssignments"])
            out.append((admitted, condition_time(wl, "Finished"), gpus))
    return out


def test_gpu_seconds_count_only_the_window():
    t = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    s = datetime.timedelta(seconds=1)
    spans = [(t, t + 4 * s, 1), (t + 2 * s, None, 2), (t + 10 * s, t + 12 * s, 1)]
    assert gpu_seconds(spans, t + s, t + 6 * s) == 3 + 2 * 4  # clipped at both ends; the third is outside


def test_members_of_one_team_queue_get_gpu_time_by_their_weights(teams, custom, batch_v1, record_property):
    """Three members of one team queue (Admission Fair Sharing, weights 1, 1, 2) each queue an
    equal backlog of short 1-GPU jobs; over a window where all three still have jobs waiting,
    each one's share of the GPU-seconds (from the Workloads' admission and finish times) is
    within FAIR_TOLERANCE of weight / total weight (0.25, 0.25, 0.5). Measured on the shared
    2-core machine (this test alone, the queue released once every Workload was made):
    0.271 / 0.257 / 0.472 and 0.265 / 0.274 / 0.461. Without fair sharing
    Kueue takes them first come, first served, by age and name, and this fails: one run with
    the team queue's admissionScope left out measured 0.401 / 0.421 / 0.178."""
    policy = queues.QueuePolicy(fair_sharing=True, weights={u: Decimal(w) for u, w in FAIR_WEIGHTS.items()})
    _, cq = teams.make("fair", gpus=FAIR_QUOTA, policy=policy)
    assert cq["spec"]["admissionScope"] == {"admissionMode": queues.ADMISSION_FAIR_SHARING}
    name = cq["metadata"]["name"]
    members = {user: teams.member(name, user, policy.weight(user)) for user in FAIR_WEIGHTS}
    # The queue holds while the backlogs are made (a few hundred API calls on a busy machine):
    # the run starts with every job queued, so nothing is admitted before all are there.
    custom.patch_cluster_custom_object(GROUP, VERSION, "clusterqueues", name, {"spec": {"stopPolicy": "Hold"}})
    try:
        for i in range(FAIR_BACKLOG):  # in turns: equal streams, none of them first
            for ns in members.values():
                batch_v1.create_namespaced_job(ns, queued_job(f"j{i:03d}", 1, 1,
                                                                   complete_after=FAIR_JOBS[i % len(FAIR_JOBS)]))

        def workloads() -> dict[str, list[dict]]:
            return {user: namespace_workloads(custom, ns)
                    for user, ns in members.items()}

        # Kueue makes each job's Workload in its own time. Released before all of them exist, the
        # queue chooses among those made first: in one run it admitted none of cho's jobs for the
        # first 44 s while two of the four GPUs stood idle (with this wait: 1, 1 and 2 from the start).
        wait_for(lambda: all(len(wls) == FAIR_BACKLOG for wls in workloads().values()), timeout=180, interval=2,
                 what=f"Kueue to have made the {FAIR_BACKLOG} Workloads of each member",
                 message=lambda: {u: len(wls) for u, wls in workloads().items()})
        custom.patch_cluster_custom_object(GROUP, VERSION, "clusterqueues", name, {"spec": {"stopPolicy": "None"}})

        def finished(seen) -> list[datetime.datetime]:
            return sorted(t for wls in seen.values() for wl in wls if (t := condition_time(wl, "Finished")))

        def enough():
            seen = workloads()
            return seen if len(finished(seen)) >= FAIR_WINDOW else None

        # The shares come from the Workloads' own condition times, not from when they are looked
        # at: a look every 5 s (each lists every member's Workloads, pod templates and all).
        seen = wait_for(enough, timeout=300, interval=5, what=f"{FAIR_WINDOW} of the members' jobs to finish",
                        message=lambda: {u: len([w for w in wls if condition_time(w, "Finished")])
                                         for u, wls in workloads().items()})
        spans = {user: spans_of(wls) for user, wls in seen.items()}
        start = min(a for s in spans.values() for a, _, _ in s)
        end = finished(seen)[FAIR_WINDOW - 1]
        # every member still had jobs waiting at the window's end: the shares are what the queue chose
        waiting = {user: FAIR_BACKLOG - len([a for a, _, _ in s if a <= end]) for user, s in spans.items()}
        assert all(n > 0 for n in waiting.values()), waiting
        used = {user: gpu_seconds(s, start, end) for user, s in spans.items()}
        total, weights = sum(used.values()), sum(FAIR_WEIGHTS.values())
        shares = {user: round(used[user] / total, 3) for user in used}
        wanted = {user: w / weights for user, w in FAIR_WEIGHTS.items()}
        # in every run's output (tests/measures.py): the spread under load is on record (goal: 0.10)
        record_property(MEASURE, f"fairness: GPU-second shares over {(end - start).total_seconds():.0f} s: {shares} "
                        f"(weights {wanted}; largest miss {max(abs(shares[u] - wanted[u]) for u in wanted):.3f})")
        assert all(abs(shares[u] - wanted[u]) <= FAIR_TOLERANCE for u in wanted), (shares, wanted, used)
    finally:
        for ns in members.values():  # free the team's GPUs for the next test at once
            batch_v1.delete_collection_namespaced_job(ns, propagation_policy="Background")
