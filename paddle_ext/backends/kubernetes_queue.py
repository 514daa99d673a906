"""Where a Kueue-queued job stands in line, from Kueue's objects (pure; dicts in, words out).

Inputs are kueue.x-k8s.io/v1beta2 objects as the API returns them: the Workloads Kueue makes
for jobs, the LocalQueues (which ClusterQueue a namespace's queue feeds) and, when readable,
the ClusterQueues (their titles). `KueueView` carries them to `kubernetes_status`.

- **Position**: the pending Workloads of the job's ClusterQueue, in the order Kueue's
  BestEffortFIFO queue pops them (pkg/workload Ordering.GetQueueOrderTimestamp, v0.17): higher
  `spec.priority` first, then the queue-order time (the creation time, or the time of an
  eviction for not starting in time, waitForPodsReady, or by an admission check), then the
  name. Best effort: a job behind one that does not fit may start first; the position is the
  order Kueue tries them in. It is exact only when every pending Workload of the queue can be
  read (the backend passes what its account may list); otherwise None.
- **Waiting for**: Kueue's own count in the Workload's QuotaReserved=False message ("insufficient
  unused quota for nvidia.com/gpu in flavor paddlecloud, 4 more needed"), in plain words.
- **Estimated start**: the time by which enough admitted jobs of the same queue reach their
  maximum runtime (Kueue's maximumExecutionTimeSeconds, set from the job's --max-runtime) to
  free what this job and the jobs ahead of it need. An upper bound: jobs often end sooner,
  and borrowed capacity is not counted. None when a job that would have to end has no runtime
  limit, or the numbers are not known.
- **Interruptions**: a Workload evicted by preemption or by waitForPodsReady says so, in words,
  as the job's message ("preempted: team audio reclaimed its GPUs; requeued").
- **Requeues**: how often Kueue sent the job back (its Workload's status.schedulingStats.evictions,
  every reason counted): an attempt the views show, though not a restart the job spent. A
  requeue is not a failure: Kubernetes' Job controller takes the pods it deletes on suspension
  out of its failure count, so max_restarts is not spent on it. The readmitted workers resume
  from their last checkpoint (paddle_ext.checkpoint loads the latest, whatever the attempt).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import re
from decimal import Decimal
from typing import Iterable, Mapping

from ..constants import GPU_RESOURCE, QUEUE_TITLE_ANNOTATION
from ..jobs import QueueState
from ..quantity import format_quantity, parse_quantity
from ..timestamps import parse_time

TEAM_PREFIX = "paddlecloud-team-"
USER_PREFIX = "paddlecloud-user-"
_SHORTFALL = re.compile(r"insufficient unused quota for (\S+) in flavor \S+, (\S+) more needed")
_PREEMPTOR = re.compile(r"preemptor path: ([^;]+)")


@dataclasses.dataclass(frozen=True)
class KueueView:
    """What the backend could read of Kueue: Workloads (its namespace's, or all), LocalQueues,
    ClusterQueues (may be empty: notebooks cannot read them), and the time of reading.
    `complete`: the Workloads are every namespace's (positions are exact)."""

    workloads: tuple[dict, ...] = ()
    local_queues: tuple[dict, ...] = ()
    cluster_queues: tuple[dict, ...] = ()
    now: datetime.datetime | None = None
    complete: bool = False

    # Worked out once per view: a listing reads every job's place from the same view, and
    # doing this per job made `paddlecloud list` quadratic in the jobs waiting.
    @functools.cached_property
    def queue_map(self) -> dict[tuple[str, str], str]:
        return local_queue_map(self.local_queues)

    @functools.cached_property
    def lines(self) -> dict[str, list[dict]]:
        """Each ClusterQueue's line: its pending Workloads, first in line first (order_key)."""
        waiting: dict[str, list[dict]] = {}
        for workload in self.workloads:
            if pending(workload):
                cq = cluster_queue_of(workload, self.queue_map)
                if cq:
                    waiting.setdefault(cq, []).append(workload)
        return {cq: sorted(workloads, key=order_key) for cq, workloads in waiting.items()}

    @functools.cached_property
    def places(self) -> dict[str, int]:
        """A pending Workload's uid -> its 1-based place in its ClusterQueue's line."""
        return {uid: index + 1 for waiting in self.lines.values() for index, workload in enumerate(waiting)
                if (uid := (workload.get("metadata") or {}).get("uid"))}

    @functools.cached_property
    def by_owner_uid(self) -> dict[str, dict]:
        """An owner's (a Job's) uid -> the first Workload it owns."""
        owned: dict[str, dict] = {}
        for workload in self.workloads:
            for ref in (workload.get("metadata") or {}).get("ownerReferences") or ():
                if ref.get("uid"):
                    owned.setdefault(ref["uid"], workload)
        return owned

    def workload_of(self, job: dict) -> dict | None:
        """owner_workload() of `job` in this view."""
        metadata = job.get("metadata") or {}
        if metadata.get("uid"):
            workload = self.by_owner_uid.get(metadata["uid"])
            if workload is None or (workload.get("metadata") or {}).get("namespace") in (None, metadata.get("namespace")):
                return workload
        return owner_workload(job, self.workloads)

    def gpus_ahead(self, cluster_queue: str, ahead: int, gpu_resource: str) -> Decimal:
        """What the first `ahead` Workloads in `cluster_queue`'s line ask for of `gpu_resource`."""
        sums = self._prefix_sums.get((cluster_queue, gpu_resource))
        if sums is None:
            sums = [Decimal(0)]
            for workload in self.lines.get(cluster_queue, ()):
                sums.append(sums[-1] + requests(workload, gpu_resource).get(gpu_resource, Decimal(0)))
            self._prefix_sums[(cluster_queue, gpu_resource)] = sums
        return sums[min(ahead, len(sums) - 1)]

    def running(self, cluster_queue: str, gpu_resource: str) -> list[tuple[Decimal, datetime.datetime | None]]:
        """(GPUs, deadline) of the admitted, unfinished Workloads of `cluster_queue`."""
        key = (cluster_queue, gpu_resource)
        if key not in self._running:
            self._running[key] = [(requests(w, gpu_resource).get(gpu_resource, Decimal(0)), deadline(w))
                                  for w in self.workloads if admitted(w) and not holds(w, "Finished")
                                  and cluster_queue_of(w, self.queue_map) == cluster_queue]
        return self._running[key]

    @functools.cached_property
    def _prefix_sums(self) -> dict[tuple[str, str], list[Decimal]]:
        return {}

    @functools.cached_property
    def _running(self) -> dict[tuple[str, str], list[tuple[Decimal, datetime.datetime | None]]]:
        return {}


# ------------------------------------------------------------------ reading a Workload

def conditions(obj: dict) -> dict[str, dict]:
    return {str(c.get("type")): c for c in (obj.get("status") or {}).get("conditions") or ()
            if isinstance(c, dict)}


def condition(obj: dict, kind: str) -> dict:
    """obj's condition of type `kind` ({}: none), the one `conditions` keeps; without building
    every condition's entry (a listing asks this several times of each of its Workloads)."""
    found: dict = {}
    for c in (obj.get("status") or {}).get("conditions") or ():
        if isinstance(c, dict) and str(c.get("type")) == kind:
            found = c
    return found


def holds(obj: dict, kind: str) -> bool:
    return condition(obj, kind).get("status") == "True"


def admitted(workload: dict) -> bool:
    """Quota reserved (and admitted): the job may run; no longer waiting."""
    return holds(workload, "QuotaReserved") or holds(workload, "Admitted")


def pending(workload: dict) -> bool:
    """Waiting for admission: not admitted, not finished, not deactivated."""
    return not admitted(workload) and not holds(workload, "Finished") and \
        (workload.get("spec") or {}).get("active") is not False


def owner_workload(job: dict, workloads: Iterable[dict]) -> dict | None:
    """The Workload Kueue made for `job` (owner reference by uid, or kind and name)."""
    metadata = job.get("metadata") or {}
    uid, name, kind = metadata.get("uid"), metadata.get("name"), job.get("kind")
    for workload in workloads:
        if (workload.get("metadata") or {}).get("namespace") not in (None, metadata.get("namespace")):
            continue
        for ref in (workload.get("metadata") or {}).get("ownerReferences") or ():
            if (uid and ref.get("uid") == uid) or (not uid and ref.get("kind") == kind and ref.get("name") == name):
                return workload
    return None


def local_queue_map(local_queues: Iterable[dict]) -> dict[tuple[str, str], str]:
    """(namespace, LocalQueue name) -> its ClusterQueue."""
    return {((lq.get("metadata") or {}).get("namespace", ""), (lq.get("metadata") or {}).get("name", "")):
            (lq.get("spec") or {}).get("clusterQueue", "") for lq in local_queues}


def cluster_queue_of(workload: dict, queues: Mapping[tuple[str, str], str]) -> str | None:
    """The ClusterQueue a Workload is admitted to, or waits in (through its LocalQueue)."""
    admission = (workload.get("status") or {}).get("admission") or {}
    if admission.get("clusterQueue"):
        return admission["clusterQueue"]
    metadata = workload.get("metadata") or {}
    return queues.get((metadata.get("namespace", ""), (workload.get("spec") or {}).get("queueName", "")))


def priority(workload: dict) -> int:
    value = (workload.get("spec") or {}).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def order_time(workload: dict) -> datetime.datetime:
    """Kueue's queue-order time: an eviction by waitForPodsReady or an admission check moves a
    Workload to the back (at the eviction's time); else its creation time."""
    evicted = condition(workload, "Evicted")
    if evicted.get("status") == "True" and evicted.get("reason") in ("PodsReadyTimeout", "AdmissionCheck"):
        when = _time(evicted.get("lastTransitionTime"))
        if when is not None:
            return when
    return _time((workload.get("metadata") or {}).get("creationTimestamp")) or datetime.datetime.min.replace(
        tzinfo=datetime.timezone.utc)


def _time(text) -> datetime.datetime | None:
    try:
        return parse_time(text) if text else None
    except (ValueError, TypeError, AttributeError):
        return None


def order_key(workload: dict) -> tuple:
    metadata = workload.get("metadata") or {}
    return (-priority(workload), order_time(workload), metadata.get("namespace", ""), metadata.get("name", ""))


def position(workload: dict, waiting: list[dict]) -> int | None:
    """1-based place of `workload` in `waiting` (a line of KueueView.lines); None if it is not there."""
    uid = (workload.get("metadata") or {}).get("uid")
    key = order_key(workload)
    for index, other in enumerate(waiting):
        if (uid and (other.get("metadata") or {}).get("uid") == uid) or order_key(other) == key:
            return index + 1
    return None


def requests(workload: dict, gpu_resource: str = GPU_RESOURCE) -> dict[str, Decimal]:
    """What a Workload asks for in all, per resource name: its pod sets' counts times their
    containers' requests (limits where a request is missing)."""
    total: dict[str, Decimal] = {}
    for pod_set in (workload.get("spec") or {}).get("podSets") or ():
        count = pod_set.get("count", 1)
        count = count if isinstance(count, int) and count >= 0 else 0
        pod = ((pod_set.get("template") or {}).get("spec") or {})
        for container in pod.get("containers") or ():
            resources = container.get("resources") or {}
            asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
            for name, value in asked.items():
                try:
                    total[name] = total.get(name, Decimal(0)) + parse_quantity(str(value)) * count
                except (ValueError, ArithmeticError):
                    continue
    return total


# ------------------------------------------------------------------ in words

def queue_title(cluster_queue: str, cluster_queues: Iterable[dict] = ()) -> str:
    """A queue as users read it: the ClusterQueue's title annotation, else from our naming
    ("team vision's queue", "alice's queue"), else "queue <name>"."""
    for cq in cluster_queues:
        if (cq.get("metadata") or {}).get("name") == cluster_queue:
            title = ((cq.get("metadata") or {}).get("annotations") or {}).get(QUEUE_TITLE_ANNOTATION)
            if title:
                return title
    if cluster_queue.startswith(TEAM_PREFIX):
        return f"team {cluster_queue.removeprefix(TEAM_PREFIX)}'s queue"
    if cluster_queue.startswith(USER_PREFIX):
        return f"{cluster_queue.removeprefix(USER_PREFIX)}'s queue"
    return f"queue {cluster_queue}"


def more_words(resource: str, amount: Decimal, gpu_resource: str = GPU_RESOURCE) -> str:
    """'4 more GPUs', '1 more CPU', '8Gi more memory'."""
    if resource == gpu_resource:
        return f"{format_quantity(amount)} more GPU{'s' if amount != 1 else ''}"
    if resource == "cpu":
        return f"{format_quantity(amount)} more CPU{'s' if amount != 1 else ''}"
    if resource == "memory":
        return f"{format_quantity(amount, binary=True)} more memory"
    return f"{format_quantity(amount)} more {resource}"


def shortfalls(workload: dict) -> list[tuple[str, Decimal]]:
    """What Kueue says the Workload lacks: [(resource, amount more needed)]."""
    message = (conditions(workload).get("QuotaReserved") or {}).get("message") or ""
    found = []
    for resource, amount in _SHORTFALL.findall(message):
        try:
            found.append((resource, parse_quantity(amount)))
        except (ValueError, ArithmeticError):
            continue
    return found


def waiting_for(missing: list[tuple[str, Decimal]], title: str, ahead: int | None,
                gpu_resource: str = GPU_RESOURCE) -> str:
    """'needs 4 more GPUs in team vision's queue; 2 jobs ahead of yours' (a job's message)."""
    if missing:
        parts = [f"needs {needed(missing, gpu_resource)} in {title}"]
    else:
        parts = [f"waits for its turn in {title}"]
    if ahead is not None:
        parts.append("no job ahead of yours" if ahead == 0 else
                     f"{ahead} job{'s' if ahead != 1 else ''} ahead of yours")
    return "; ".join(parts)


def needed(missing: list[tuple[str, Decimal]], gpu_resource: str = GPU_RESOURCE) -> str:
    """QueueState.waiting_for: words that follow "needs" (every view puts that word before
    them, and names the queue from QueueState.queue): '4 more GPUs'; 'its turn' when it fits."""
    return " and ".join(more_words(r, a, gpu_resource) for r, a in missing) if missing else "its turn"


def interruption(workload: dict, cluster_queues: Iterable[dict] = (), say_requeued: bool = True,
                 gpu_resource: str = GPU_RESOURCE) -> str | None:
    """Why an admitted job was sent back to the queue, in words ("...; requeued" while it waits
    again, unless not `say_requeued`); None if it was not. A team reclaims a job's GPUs where it
    asks for `gpu_resource`, else its capacity (a CPU-only job borrowed CPUs and memory)."""
    conds = conditions(workload)
    preempted, evicted = conds.get("Preempted") or {}, conds.get("Evicted") or {}
    requeued = "; requeued" if pending(workload) and say_requeued else ""
    if preempted.get("status") == "True" or (evicted.get("status") == "True" and evicted.get("reason") == "Preempted"):
        message = preempted.get("message") or evicted.get("message") or ""
        path = _PREEMPTOR.search(message)
        by = path.group(1).strip().rstrip("/").rsplit("/", 1)[-1] if path else ""
        reason = preempted.get("reason") or ""
        if reason in ("InCohortReclamation", "InCohortReclaimWhileBorrowing") and by:
            who = queue_title(by, cluster_queues).removesuffix("'s queue")
            what = "GPUs" if requests(workload, gpu_resource).get(gpu_resource, Decimal(0)) > 0 else "capacity"
            return f"preempted: {who} reclaimed its {what}{requeued}"
        if reason == "InClusterQueue":
            return f"preempted: a higher-priority job in the same queue needed its resources{requeued}"
        return f"preempted to make room for another job{requeued}"
    if evicted.get("status") == "True":
        if evicted.get("reason") == "PodsReadyTimeout":
            return ("evicted: not all of its workers could start in time (image, node or volume problems), "
                    f"so Kueue took its place back{requeued}")
        detail = (evicted.get("message") or evicted.get("reason") or "").strip().rstrip(".")
        return f"evicted by Kueue: {detail}{requeued}" if detail else f"evicted by Kueue{requeued}"
    return None


def _sent_back(workload: dict, view: KueueView, title: str, gpu_resource: str) -> tuple[QueueState, str] | None:
    """A suspended job whose Workload Kueue evicted or preempted but still holds its quota
    (Kueue releases it once the job's workers have stopped): why, and that it goes back in
    line in `title`; None for any other Workload that is not waiting."""
    why = interruption(workload, view.cluster_queues, gpu_resource=gpu_resource)
    if why is None:
        return None
    words = f"goes back in line in {title} once its workers have stopped"
    return (QueueState(queue=title, waiting_for="its workers to stop before it goes back in line"),
            f"{why[0].upper()}{why[1:]}. Now it {words}.")


# ------------------------------------------------------------------ requeues

def evictions(workload: dict) -> int:
    """How often Kueue evicted the Workload (preempted it, or took its place back), from its
    status.schedulingStats; at least 1 while it is evicted (an older Kueue keeps no count)."""
    stats = ((workload.get("status") or {}).get("schedulingStats") or {}).get("evictions") or ()
    count = sum(e["count"] for e in stats if isinstance(e, dict) and isinstance(e.get("count"), int)
                and not isinstance(e.get("count"), bool) and e["count"] > 0)
    return max(count, 1 if holds(workload, "Evicted") else 0)


# Kueue's words for why it preempted (in the Preempted condition's message) -> its reason.
PREEMPTION_REASONS = {"reclamation within the cohort": "InCohortReclamation",
                      "reclamation within the cohort while borrowing": "InCohortReclaimWhileBorrowing",
                      "prioritization in the ClusterQueue": "InClusterQueue",
                      "Fair Sharing within the cohort": "InCohortFairSharing"}
_PREEMPTION_WORDS = re.compile(r"\bdue to ([^;]+);")
_EARLIER = "Previously: "  # how Kueue keeps an Evicted or Preempted condition's message once readmitted
PODS_READY_TIMEOUT_MESSAGE = "Exceeded the PodsReady timeout"


def as_interrupted(workload: dict) -> dict | None:
    """A readmitted Workload as it was when Kueue last sent it back, or None. On readmission
    Kueue turns its Evicted and Preempted conditions False, with the readmission's reason and
    "Previously: " before their message (kueue pkg/workload resetActiveCondition); the reason
    is read back from those messages, and the later of the two reset conditions is the last
    interruption."""
    conds = conditions(workload)
    earlier = {kind: cond for kind, cond in conds.items() if kind in ("Evicted", "Preempted")
               and cond.get("status") == "False" and str(cond.get("message") or "").startswith(_EARLIER)}
    if not earlier:
        return None
    evicted, preempted = earlier.get("Evicted"), earlier.get("Preempted")
    as_was: list[dict] = []
    if preempted is not None and (evicted is None or str(preempted.get("lastTransitionTime") or "")
                                  >= str(evicted.get("lastTransitionTime") or "")):
        message = str(preempted["message"]).removeprefix(_EARLIER)
        words = _PREEMPTION_WORDS.search(message)
        as_was.append({"type": "Preempted", "status": "True", "message": message,
                       "reason": PREEMPTION_REASONS.get(words.group(1).strip() if words else "", "")})
    elif evicted is not None:
        message = str(evicted["message"]).removeprefix(_EARLIER)
        reason = "PodsReadyTimeout" if message.startswith(PODS_READY_TIMEOUT_MESSAGE) else ""
        as_was.append({"type": "Evicted", "status": "True", "message": message, "reason": reason})
    return {**workload, "status": {**(workload.get("status") or {}), "conditions": as_was}}


def requeues(job: dict, view: KueueView | None, gpu_resource: str = GPU_RESOURCE) -> tuple[int, str, str | None]:
    """(requeues, why the last one, when: an ISO time or None) of a job, from its Workload where
    it can be read, also once it is admitted again (then without the time: Kueue's reset
    conditions carry the readmission's); (0, "", None) otherwise."""
    workload = view.workload_of(job) if view is not None else None
    count = evictions(workload) if workload is not None else 0
    if view is None or workload is None or not count:
        return 0, "", None
    why = interruption(workload, view.cluster_queues, say_requeued=False, gpu_resource=gpu_resource)
    if why is not None:
        return count, why, interrupted_at(workload)
    readmitted = as_interrupted(workload)
    why = (interruption(readmitted, view.cluster_queues, say_requeued=False, gpu_resource=gpu_resource)
           if readmitted else None)
    return count, why or "", None


def interrupted_at(workload: dict) -> str | None:
    """When Kueue sent a waiting Workload back (its Evicted or Preempted condition turned
    true), if it says."""
    conds = conditions(workload)
    times = [str(cond.get("lastTransitionTime")) for kind in ("Evicted", "Preempted")
             if (cond := conds.get(kind) or {}).get("status") == "True" and cond.get("lastTransitionTime")]
    return min(times) if times else None


# ------------------------------------------------------------------ the estimate

def deadline(workload: dict) -> datetime.datetime | None:
    """When an admitted Workload reaches its maximum execution time (None: it has none)."""
    seconds = (workload.get("spec") or {}).get("maximumExecutionTimeSeconds")
    start = _time((condition(workload, "Admitted") or condition(workload, "QuotaReserved"))
                  .get("lastTransitionTime"))
    if not isinstance(seconds, int) or start is None:
        return None
    past = (workload.get("status") or {}).get("accumulatedPastExecutionTimeSeconds") or 0
    return start + datetime.timedelta(seconds=max(0, seconds - (past if isinstance(past, int) else 0)))


def estimate_start(need: Decimal, running: list[tuple[Decimal, datetime.datetime | None]],
                   now: datetime.datetime) -> datetime.datetime | None:
    """The earliest time by which the running jobs that reach their deadline free `need` (of
    one resource), taking the soonest deadlines first; `now` if nothing is needed; None if
    they cannot (a job without a deadline would have to end, or all of them do not suffice)."""
    if need <= 0:
        return now
    freed = Decimal(0)
    for amount, ends in sorted(running, key=lambda r: (r[1] is None, r[1] or now)):
        if not amount:
            continue
        if ends is None:
            return None
        freed += amount
        if freed >= need:
            return max(ends, now)
    return None


def queue_state(job: dict, view: KueueView, gpu_resource: str = GPU_RESOURCE) -> tuple[QueueState, str] | None:
    """The job's QueueState and its message (what it waits for, and an interruption if any),
    from Kueue's objects; None when Kueue has no Workload for it (yet)."""
    workload = view.workload_of(job)
    if workload is None:
        return None
    cq = cluster_queue_of(workload, view.queue_map) or ""
    title = queue_title(cq, view.cluster_queues) if cq else "the queue"
    if not pending(workload):
        return _sent_back(workload, view, title, gpu_resource)
    waiting = view.lines.get(cq, []) if cq else []
    uid = (workload.get("metadata") or {}).get("uid")
    place = None
    if view.complete and cq:
        place = view.places.get(uid) if uid else None
        if place is None:
            place = position(workload, waiting)
    ahead = place - 1 if place is not None else None
    missing = shortfalls(workload)
    words = waiting_for(missing, title, ahead, gpu_resource)
    estimate, basis = None, ""
    now = view.now
    if now is not None and view.complete and cq and ahead is not None:
        # GPUs: this job's shortfall plus all the jobs ahead of it ask for; freed by the deadlines
        # of the admitted jobs of the same queue.
        short = sum((amount for resource, amount in missing if resource == gpu_resource), Decimal(0))
        ahead_need = view.gpus_ahead(cq, ahead, gpu_resource)
        running = view.running(cq, gpu_resource)
        if short or ahead_need:
            when = estimate_start(short + ahead_need, running, now)
            if when is not None:
                estimate = when.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
                basis = (f"latest time by which running jobs in {title} reach their maximum runtime and free the "
                         f"{format_quantity(short + ahead_need)} GPUs this job and the jobs ahead need; "
                         "jobs often end sooner, and borrowed GPUs are not counted")
            else:
                basis = (f"no estimate: the jobs that would have to end in {title} have no runtime limit, "
                         "or do not hold enough GPUs")
    message = interruption(workload, view.cluster_queues, gpu_resource=gpu_resource)
    text = f"{message}. Now {words}." if message else f"Queued: {words}."
    return QueueState(queue=title, position=place, ahead=ahead, waiting_for=needed(missing, gpu_resource),
                      estimated_start=estimate,
                      estimate_basis=basis), text[0].upper() + text[1:]
