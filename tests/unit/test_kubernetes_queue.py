"""Where a Kueue-queued job stands in line (backends/kubernetes_queue, pure) and how its status
reads (kubernetes_status.job_from_objects with a KueueView)."""

from __future__ import annotations

import datetime
from decimal import Decimal

from paddle_ext.backends import kubernetes_queue as kq
from paddle_ext.backends.kubernetes_queue import KueueView
from paddle_ext.backends.kubernetes_status import job_from_objects
from paddle_ext.jobs import Phase
from paddle_ext.progress import queue_detail
from paddle_ext.timestamps import clock

CQ = "paddlecloud-team-vision"
NOW = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.timezone.utc)


def at(minutes: int) -> str:
    return (NOW + datetime.timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def workload(name, ns="paddlecloud-alice", created=-60, priority=None, gpus=8, count=1, conditions=(),
             admitted_to=None, max_seconds=None):
    container = {"name": "paddle", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)}}}
    wl = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
          "metadata": {"name": f"job-{name}", "namespace": ns, "uid": f"uid-{name}", "creationTimestamp": at(created),
                       "ownerReferences": [{"kind": "Job", "name": name, "uid": f"job-uid-{name}"}]},
          "spec": {"queueName": "default", "podSets": [{"name": "main", "count": count,
                                                         "template": {"spec": {"containers": [container]}}}]},
          "status": {"conditions": list(conditions)}}
    if priority is not None:
        wl["spec"]["priority"] = priority
    if admitted_to:
        wl["status"]["admission"] = {"clusterQueue": admitted_to}
    if max_seconds is not None:
        wl["spec"]["maximumExecutionTimeSeconds"] = max_seconds
    return wl


def cond(kind, status="True", reason="", message="", minutes=-30):
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": at(minutes)}


def running(name, gpus, ends_in_minutes=None, ns="paddlecloud-bob"):
    """Admitted 30 minutes ago; its deadline `ends_in_minutes` from NOW (None: no runtime limit)."""
    seconds = None if ends_in_minutes is None else (30 + ends_in_minutes) * 60
    return workload(name, ns=ns, gpus=gpus, admitted_to=CQ, max_seconds=seconds,
                    conditions=[cond("QuotaReserved"), cond("Admitted")])


LOCAL_QUEUES = tuple({"metadata": {"name": "default", "namespace": ns}, "spec": {"clusterQueue": CQ}}
                     for ns in ("paddlecloud-alice", "paddlecloud-bob", "paddlecloud-carol"))
SHORT = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor paddlecloud, {} more needed"


def suspended_job(name, ns="paddlecloud-alice"):
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns, "uid": f"job-uid-{name}", "creationTimestamp": at(-60),
                         "labels": {}, "annotations": {}},
            "spec": {"completionMode": "Indexed", "completions": 2, "parallelism": 2, "suspend": True,
                     "template": {"spec": {"containers": [{"name": "paddle", "resources": {}}]}}},
            "status": {}}


# ------------------------------------------------------------------ order and position

def test_the_line_is_priority_first_then_oldest_first_like_best_effort_fifo():
    wls = [workload("old", created=-50), workload("new", created=-10), workload("urgent", created=-5, priority=100),
           workload("lowest", created=-90, priority=-1), running("busy", 8)]
    order = [w["metadata"]["name"] for w in KueueView(tuple(wls), LOCAL_QUEUES).lines[CQ]]
    assert order == ["job-urgent", "job-old", "job-new", "job-lowest"]  # the admitted one is not waiting


def test_an_eviction_for_not_starting_in_time_goes_to_the_back_preemption_keeps_its_place():
    timed_out = workload("timedout", created=-100, conditions=[cond("Evicted", reason="PodsReadyTimeout", minutes=-1)])
    preempted = workload("preempted", created=-100, conditions=[cond("Evicted", reason="Preempted", minutes=-1)])
    other = workload("other", created=-50)
    order = [w["metadata"]["name"] for w in KueueView((timed_out, preempted, other), LOCAL_QUEUES).lines[CQ]]
    assert order == ["job-preempted", "job-other", "job-timedout"]


def test_only_the_jobs_own_queue_counts_and_position_is_one_based():
    local_queues = LOCAL_QUEUES + (
        {"metadata": {"name": "default", "namespace": "paddlecloud-dave"}, "spec": {"clusterQueue": "paddlecloud-team-audio"}},)
    mine = workload("mine", created=-10)
    wls = (workload("a", created=-40), workload("elsewhere", ns="paddlecloud-dave", created=-50), mine)
    waiting = KueueView(wls, local_queues).lines[CQ]
    assert kq.position(mine, waiting) == 2
    assert kq.position(workload("unknown", ns="paddlecloud-zed"), waiting) is None


def test_waiting_for_in_plain_words():
    assert kq.waiting_for([("nvidia.com/gpu", Decimal(4))], "team vision's queue", 2) == \
        "needs 4 more GPUs in team vision's queue; 2 jobs ahead of yours"
    assert kq.waiting_for([("nvidia.com/gpu", Decimal(1)), ("memory", Decimal(2 ** 33))], "alice's queue", 0) == \
        "needs 1 more GPU and 8Gi more memory in alice's queue; no job ahead of yours"
    assert kq.waiting_for([], "team vision's queue", None) == "waits for its turn in team vision's queue"
    # QueueState.waiting_for: what follows "needs" in every view, the queue named apart
    assert kq.needed([("nvidia.com/gpu", Decimal(4))]) == "4 more GPUs" and kq.needed([]) == "its turn"


def test_shortfalls_read_kueues_own_count():
    wl = workload("w", conditions=[cond("QuotaReserved", "False", "Pending", SHORT.format(4))])
    assert kq.shortfalls(wl) == [("nvidia.com/gpu", Decimal(4))]
    assert kq.shortfalls(workload("w")) == []


def test_queue_titles_from_the_annotation_or_our_names():
    cqs = [{"metadata": {"name": CQ, "annotations": {"paddlecloud.io/queue-title": "team Vision's queue"}}}]
    assert kq.queue_title(CQ, cqs) == "team Vision's queue"
    assert kq.queue_title(CQ) == "team vision's queue"
    assert kq.queue_title("paddlecloud-user-alice") == "alice's queue"
    assert kq.queue_title("research") == "queue research"


# ------------------------------------------------------------------ estimate

def test_the_estimate_takes_the_soonest_deadlines_until_enough_is_freed():
    runs = [(Decimal(4), NOW + datetime.timedelta(minutes=50)), (Decimal(4), NOW + datetime.timedelta(minutes=10)),
            (Decimal(8), NOW + datetime.timedelta(minutes=30))]
    assert kq.estimate_start(Decimal(4), runs, NOW) == NOW + datetime.timedelta(minutes=10)
    assert kq.estimate_start(Decimal(12), runs, NOW) == NOW + datetime.timedelta(minutes=30)
    assert kq.estimate_start(Decimal(17), runs, NOW) is None  # they do not hold enough
    assert kq.estimate_start(Decimal(4), [(Decimal(8), None)], NOW) is None  # no runtime limit
    assert kq.estimate_start(Decimal(0), runs, NOW) == NOW


def test_a_deadline_is_admission_plus_the_maximum_execution_time():
    assert kq.deadline(running("r", 8, ends_in_minutes=20)) == NOW + datetime.timedelta(minutes=20)
    assert kq.deadline(running("r", 8)) is None


# ------------------------------------------------------------------ the status a user reads

def view(*wls, complete=True, cluster_queues=()):
    return KueueView(tuple(wls), LOCAL_QUEUES, tuple(cluster_queues), NOW, complete)


def test_a_suspended_job_with_a_pending_workload_reads_queued_with_its_place():
    mine = workload("mine", created=-10, gpus=8, count=2,
                    conditions=[cond("QuotaReserved", "False", "Pending", SHORT.format(4))])
    kueue = view(workload("first", ns="paddlecloud-bob", created=-40, gpus=4), workload("second", created=-20, gpus=4),
                 mine, running("r1", 8, ends_in_minutes=15), running("r2", 4, ends_in_minutes=5))
    job = job_from_objects(suspended_job("mine"), [], [], kueue=kueue)
    assert job.phase == Phase.QUEUED and job.reason == "Queued"
    assert (job.queue.position, job.queue.ahead, job.queue.queue) == (3, 2, "team vision's queue")
    assert job.queue.waiting_for == "4 more GPUs"  # the words after "needs" (the REST contract)
    assert queue_detail(job.queue) == f"position 3 in team vision's queue · needs 4 more GPUs · starts ~{at(15)[11:16]} UTC (estimate)"
    assert job.message == "Queued: needs 4 more GPUs in team vision's queue; 2 jobs ahead of yours."
    # 4 short + 8 ahead = 12 GPUs: r2 (4, in 5 min) then r1 (8, in 15 min)
    assert job.queue.estimated_start == at(15) and "maximum runtime" in job.queue.estimate_basis
    assert job.to_dict()["queue"]["position"] == 3 and job.to_dict()["phase"] == "Queued"


def test_without_every_namespaces_workloads_the_position_is_not_claimed():
    mine = workload("mine", conditions=[cond("QuotaReserved", "False", "Pending", SHORT.format(4))])
    job = job_from_objects(suspended_job("mine"), [], [], kueue=view(mine, complete=False))
    assert job.queue.position is None and job.queue.estimated_start is None
    assert job.queue.waiting_for == "4 more GPUs"
    assert queue_detail(job.queue) == "in team vision's queue · needs 4 more GPUs"


def test_a_suspended_job_without_a_workload_yet_is_queued_without_a_place():
    job = job_from_objects(suspended_job("mine"), [], [], kueue=view())
    assert job.phase == Phase.QUEUED and job.queue is None
    assert job_from_objects(suspended_job("mine"), [], []).phase == Phase.QUEUED


def test_a_job_preempted_by_a_reclaiming_team_says_so():
    message = ("Preempted to accommodate a workload (UID: x, JobUID: y) due to reclamation within the cohort; "
               "preemptor path: /paddlecloud/paddlecloud-team-audio; preemptee path: /paddlecloud/paddlecloud-team-vision")
    mine = workload("mine", conditions=[cond("Evicted", reason="Preempted", message=message),
                                        cond("Preempted", reason="InCohortReclamation", message=message),
                                        cond("QuotaReserved", "False", "Pending", SHORT.format(8))])
    job = job_from_objects(suspended_job("mine"), [], [], kueue=view(mine))
    assert job.phase == Phase.QUEUED
    assert job.message.startswith("Preempted: team audio reclaimed its GPUs; requeued. Now needs 8 more GPUs")


def test_a_job_whose_workers_did_not_all_start_in_time_says_so():
    mine = workload("mine", conditions=[cond("Evicted", reason="PodsReadyTimeout", message="Exceeded the PodsReady timeout")])
    job = job_from_objects(suspended_job("mine"), [], [], kueue=view(mine))
    assert job.message.startswith("Evicted: not all of its workers could start in time")
    assert "requeued" in job.message


def test_a_job_kueue_is_sending_back_says_why_before_its_quota_is_released():
    """Kueue suspends the evicted job first and releases its quota once the workers have
    stopped: in between the Workload is neither admitted-and-running nor waiting in line."""
    mine = workload("mine", admitted_to=CQ, conditions=[
        cond("QuotaReserved"), cond("Admitted"),
        cond("Evicted", reason="PodsReadyTimeout", message="Exceeded the PodsReady timeout paddlecloud-alice/job-mine")])
    job = job_from_objects(suspended_job("mine"), [], [], kueue=view(mine))
    assert job.phase == Phase.QUEUED
    assert job.message == ("Evicted: not all of its workers could start in time (image, node or volume problems), "
                           "so Kueue took its place back. Now it goes back in line in team vision's queue once "
                           "its workers have stopped.")
    assert job.queue.position is None and job.queue.queue == "team vision's queue"
    assert queue_detail(job.queue) == ("in team vision's queue · needs its workers to stop before it goes back in "
                                       "line")
    assert job.requeues == 1 and job.last_restart_reason.startswith("evicted: not all of its workers could start")
    # Admitted and never sent back: nothing to say beyond the plain queued message.
    plain = job_from_objects(suspended_job("ok"), [], [], kueue=view(
        workload("ok", admitted_to=CQ, conditions=[cond("QuotaReserved"), cond("Admitted")])))
    assert plain.queue is None and plain.message == "The job is queued, waiting for cluster capacity."


def test_preemption_inside_the_queue_and_unknown_evictions_read_in_words():
    inside = workload("i", conditions=[cond("Preempted", reason="InClusterQueue", message="...")])
    assert kq.interruption(inside) == "preempted: a higher-priority job in the same queue needed its resources; requeued"
    stopped = workload("s", conditions=[cond("Evicted", reason="ClusterQueueStopped", message="The ClusterQueue is stopped.")])
    assert kq.interruption(stopped) == "evicted by Kueue: The ClusterQueue is stopped; requeued"
    assert kq.interruption(workload("fine")) is None



def test_a_reclaimed_cpu_job_says_capacity_not_gpus():
    reclaimed = [{"type": "Preempted", "status": "True", "reason": "InCohortReclamation",
                  "message": "Preempted to accommodate a workload (UID: x, JobUID: y) due to reclamation within the "
                             "cohort; preemptor path: /paddlecloud/paddlecloud-team-audio"}]
    assert kq.interruption(workload("gpu", conditions=reclaimed)).startswith("preempted: team audio reclaimed its GPUs")
    assert kq.interruption(workload("cpu", gpus=0, conditions=reclaimed)) == (
        "preempted: team audio reclaimed its capacity; requeued")


def test_hostile_or_odd_workloads_read_without_errors():
    odd = {"metadata": {"name": "x", "namespace": "paddlecloud-alice",
                        "ownerReferences": [{"kind": "Job", "name": "mine", "uid": "job-uid-mine"}]},
           "spec": {"priority": "high", "podSets": [{"count": -1, "template": {"spec": {"containers": [
               {"resources": {"requests": {"nvidia.com/gpu": "lots"}}}]}}}]},
           "status": {"conditions": ["junk", {"type": "QuotaReserved", "status": "False", "message": None}]}}
    job = job_from_objects(suspended_job("mine"), [], [], kueue=view(odd))
    assert job.phase == Phase.QUEUED and job.queue.position is None  # no queueName: no line to place it in
    assert kq.requests(odd) == {}


# ------------------------------------------------------------------ requeues

PREEMPTED_BY_AUDIO = ("Preempted to accommodate a workload (UID: x, JobUID: y) due to reclamation within the cohort; "
                      "preemptor path: /paddlecloud/paddlecloud-team-audio")


def preempted(name, count=None):
    wl = workload(name, conditions=[cond("Evicted", reason="Preempted", message=PREEMPTED_BY_AUDIO),
                                    cond("Preempted", reason="InCohortReclamation", message=PREEMPTED_BY_AUDIO),
                                    cond("QuotaReserved", "False", "Pending", SHORT.format(8))])
    if count is not None:
        wl["status"]["schedulingStats"] = {"evictions": [
            {"reason": "Preempted", "underlyingCause": "InCohortReclamation", "count": count},
            {"reason": "PodsReadyTimeout", "underlyingCause": "", "count": 1}]}
    return wl


def test_kueues_eviction_count_is_the_requeues_and_at_least_one_while_evicted():
    assert kq.evictions(preempted("a", count=2)) == 3  # every reason counts: each started the job again
    assert kq.evictions(preempted("a")) == 1  # no stats (an older Kueue): it is evicted now, so once
    assert kq.evictions(workload("fresh", conditions=[cond("QuotaReserved", "False")])) == 0
    odd = workload("odd")
    odd["status"]["schedulingStats"] = {"evictions": [{"count": "2"}, {"count": True}, {"count": -4}, "junk"]}
    assert kq.evictions(odd) == 0


def test_a_preempted_job_is_read_as_requeued_with_why_and_a_readmitted_one_keeps_the_count():
    job = job_from_objects(suspended_job("mine"), [], [], kueue=view(preempted("mine", count=1)))
    assert (job.phase, job.requeues, job.restarts, job.attempt) == (Phase.QUEUED, 2, 0, 3)
    assert job.last_restart_reason == "preempted: team audio reclaimed its GPUs"  # no "; requeued": it is the cause
    assert job.last_restart_at == at(-30) and job.attempt_line().endswith(f"GPUs at {clock(at(-30))}")
    running = suspended_job("mine")
    running["spec"]["suspend"] = False
    readmitted = preempted("mine", count=1)
    readmitted["status"]["conditions"] = [cond("QuotaReserved"), cond("Admitted")]
    job = job_from_objects(running, [], [], kueue=view(readmitted))
    assert (job.requeues, job.attempt) == (2, 3)
    assert job.attempt_line() == "attempt 3 of 3"  # a Workload that no longer says why
    assert job.last_restart_at is None  # readmitted: Kueue's conditions carry the readmission's time
    assert job_from_objects(running, [], []).requeues == 0  # no Workload read: none known


def readmitted_after(*interruptions):
    """A Workload admitted again, its conditions as Kueue v0.17 leaves them: each (kind, message,
    minutes) condition turned False with "Previously: " before its message at the readmission."""
    wl = workload("mine", conditions=[cond("QuotaReserved", minutes=-1), cond("Admitted", minutes=-1)] + [
        cond(kind, "False", "QuotaReserved", "Previously: " + message, minutes) for kind, message, minutes in interruptions])
    wl["status"]["schedulingStats"] = {"evictions": [{"reason": "Preempted", "underlyingCause": "", "count": 1}]}
    return wl


def test_a_readmitted_job_still_says_why_it_was_sent_back():
    running = suspended_job("mine")
    running["spec"]["suspend"] = False

    def line(wl):
        return job_from_objects(running, [], [], kueue=view(wl)).attempt_line()

    assert line(readmitted_after(("Evicted", PREEMPTED_BY_AUDIO, -1), ("Preempted", PREEMPTED_BY_AUDIO, -1))) == \
        "attempt 2 of 2: preempted: team audio reclaimed its GPUs"
    inside = PREEMPTED_BY_AUDIO.replace("reclamation within the cohort", "prioritization in the ClusterQueue")
    assert line(readmitted_after(("Evicted", inside, -1), ("Preempted", inside, -1))) == \
        "attempt 2 of 2: preempted: a higher-priority job in the same queue needed its resources"
    # Preempted long ago, then evicted for workers that did not start: the later one is the last.
    assert line(readmitted_after(("Preempted", PREEMPTED_BY_AUDIO, -50),
                                 ("Evicted", "Exceeded the PodsReady timeout ns/job-mine", -1))).startswith(
        "attempt 2 of 2: evicted: not all of its workers could start in time")
    assert line(readmitted_after(("Evicted", "The ClusterQueue is stopped.", -1))) == \
        "attempt 2 of 2: evicted by Kueue: The ClusterQueue is stopped"
    assert kq.as_interrupted(workload("fresh", conditions=[cond("QuotaReserved")])) is None
