"""A job's phase, reason and message from Kubernetes objects (pure; dicts in, words out).

Inputs are objects as the API returns them in JSON (camelCase keys): the job's object
(read as its `jobkinds.JobKind` says), its pods, and recent events. Every failure ends
in a `reason` a program can branch on and a `message` a researcher understands.
"""

from __future__ import annotations

import functools
import json
from decimal import Decimal
from typing import Iterable, Mapping

from ..capacity import Resources, pod_requests
from ..constants import (CANCELLED_ANNOTATION, CODE_ANNOTATION, COMPLETION_INDEX_LABEL, DEFAULT_JOB_KIND, FAILED_ANNOTATION, GPU_RESOURCE,
                         INDEX_FAILURE_COUNT_ANNOTATION, JOB_LABEL, OUTPUTS_ANNOTATION, SPEC_ANNOTATION)
from ..capacity import max_free_gpus  # noqa: F401 (re-exported: the Unschedulable message's number)
from ..jobkinds import INDEX_LABELS, JOB_KINDS, JobKind
from ..jobs import Job, Phase, Reason, WorkerState
from ..quantity import format_quantity, parse_quantity
from ..restarts import PEER_LOST_EXIT_CODE, exit_cause, restart_marker
from ..spec import FIELDS as SPEC_FIELDS
from ..spec import check_field
from .kubernetes_queue import KueueView, queue_state, requeues
from .kubernetes_progress import (IMAGE_PULL_REASONS, unschedulable, waiting_state, worker_of_pod_name,
                                  worker_progress)

# Refusals that pass: a full quota frees up; a new namespace's service account appears.
TRANSIENT_REFUSALS = ("exceeded quota", "error looking up service account")
# The Job controller's reasons for failing a job whose index ran out of backoffLimitPerIndex:
# at once when more indexes failed than maxFailedIndexes allows, or once every index ended.
INDEX_FAILED_REASONS = ("MaxFailedIndexesExceeded", "FailedIndexes")


DEFAULT_KIND = JOB_KINDS[DEFAULT_JOB_KIND]  # job_from_objects' kind when none is named


def worker_index(pod: dict) -> int | None:
    labels = pod["metadata"].get("labels") or {}
    for key in INDEX_LABELS:
        value = labels.get(key)
        if isinstance(value, str) and value.isdigit() and len(value) <= 10:
            return int(value)
    return None


def worker_pods(pods: list[dict], index: int) -> list[dict]:
    """The pods worker `index` has had, oldest first (one per attempt whose pod is kept)."""
    own = [pod for pod in pods if worker_index(pod) == index]
    return sorted(own, key=lambda pod: pod["metadata"].get("creationTimestamp") or "")


def pod_attempt(pod: dict) -> int | None:
    """The attempt (0 first) a worker pod ran: its index's failure count when Kubernetes made
    it (Indexed Jobs with restarts), or None where Kubernetes does not count."""
    count = (pod["metadata"].get("annotations") or {}).get(INDEX_FAILURE_COUNT_ANNOTATION)
    return int(count) if isinstance(count, str) and count.isascii() and count.isdigit() and len(count) <= 6 else None


REPLACED_MARKER = "--- the worker's pod was replaced; its replacement's log follows ---"


def log_marker(job: Job, pods: list[dict], pod: dict, shown_before: bool, after_gone: bool = False) -> str | None:
    """The line a worker's log gets before the log of `pod`, one of the job's `pods`: where a
    restart began ('--- attempt 2 of 3: worker 1 was killed by signal 9; restarting ---', as on
    the embedded default), where a requeue did (the queue preempted the job: its pods were
    deleted), or where Kubernetes replaced the worker's pod without counting a restart (an
    eviction). None before the first attempt's log. `shown_before`: an earlier pod of this
    worker has been shown (it may be gone since); `after_gone`: the attempt just before this
    pod's is one whose pod is gone (its log read from the copy its worker kept)."""
    attempt = pod_attempt(pod)
    created = pod["metadata"].get("creationTimestamp") or ""
    index = worker_index(pod)
    own = worker_pods(pods, index)
    if after_gone and job.requeues and own and own[-1] is pod:  # the attempt the requeue began
        return restart_marker(job.attempt - 1, job.max_restarts + job.requeues,
                              job.last_restart_reason or "requeued by the queue")
    earlier = [other for other in own if (other["metadata"].get("creationTimestamp") or "") < created]
    if earlier and pod_attempt(earlier[-1]) == attempt:
        return f"--- the worker's pod {_ended_how(earlier[-1])}; its replacement's log follows ---"
    if not attempt:
        return REPLACED_MARKER if shown_before else None
    ended = [(worker_index(other), other) for other in pods if pod_attempt(other) == attempt - 1 and _terminated(other)]
    # the worker that caused the restart, not one that stopped for a lost peer
    roots = [(i, other) for i, other in ended if i is not None and not _stopped_for_lost_peer(other)]
    cause = _cause(roots)
    if cause is not None:
        reason = f"worker {cause[0]} {_ended_how(cause[1])}"
    elif attempt == job.restarts and job.last_restart_reason:  # the cause's pod is gone; the job's view knows
        reason = job.last_restart_reason
    else:
        reason = "a worker was lost (its pod is gone)"
    return restart_marker(attempt, job.max_restarts, reason)


def _finished_at(item: tuple[int, dict]) -> str:
    pod = item[1]
    return (_terminated(pod) or {}).get("finishedAt") or pod["metadata"].get("creationTimestamp") or ""


def _cause(replaced: list[tuple[int, dict]]) -> tuple[int, dict] | None:
    """Among replaced worker pods (index, pod), the one that says why they were: the last to
    end that did not merely stop for a lost peer (else the last to end)."""
    ended = sorted(replaced, key=_finished_at)
    causes = [item for item in ended if not _stopped_for_lost_peer(item[1])]
    return (causes or ended)[-1] if ended else None


def _stopped_for_lost_peer(pod: dict) -> bool:
    """The worker ended with our peer-lost exit: a consequence of another worker's loss."""
    return (_terminated(pod) or {}).get("exitCode") == PEER_LOST_EXIT_CODE


def pods_by_worker(pods: list[dict]) -> dict[int, dict]:
    """The newest pod of each worker index (a retried worker has several)."""
    newest: dict[int, dict] = {}
    for pod in pods:
        index = worker_index(pod)
        if index is None:
            continue
        stamp = pod["metadata"].get("creationTimestamp") or ""
        if index not in newest or stamp >= (newest[index]["metadata"].get("creationTimestamp") or ""):
            newest[index] = pod
    return newest


def _disrupted(pod: dict) -> bool:
    return any(c.get("type") == "DisruptionTarget" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _ended_how(pod: dict) -> str:
    """How a replaced worker pod ended, in words ("was killed by signal 9")."""
    if _disrupted(pod):
        return "was evicted or preempted"
    if pod["metadata"].get("deletionTimestamp"):
        return "was stopped: its pod was deleted"
    terminated = _terminated(pod)
    if terminated and terminated.get("reason") == "OOMKilled":
        return "ran out of memory"
    return exit_cause(terminated.get("exitCode") if terminated else None).words


def restarts_of(pods: list[dict], job_name: str = "", events: list[dict] = (),
                spent: int = 0) -> tuple[int, str, str | None]:
    """(restarts, why the last one happened, when: an ISO time or None) from a job's pods: each restart of a worker
    leaves its old pod behind (Failed), so the most pods any worker index has, less one, is
    the count; the last replaced pod that did not merely stop for a lost peer says why.
    `spent`: restarts the Job controller says were used up (a job failed for an index out of
    restarts), at least: a deleted worker pod leaves nothing behind, and the pods the
    controller deletes when the job fails are gone too."""
    by_index: dict[int, list[dict]] = {}
    for pod in pods:
        index = worker_index(pod)
        if index is not None:
            by_index.setdefault(index, []).append(pod)
    replaced = []
    for index, own in by_index.items():
        own.sort(key=lambda pod: pod["metadata"].get("creationTimestamp") or "")
        replaced += [(index, pod) for pod in own[:-1]]
    count = max([len(own) - 1 for own in by_index.values()] + [spent])
    if not count:
        return 0, "", None

    causes = [item for item in replaced if not _stopped_for_lost_peer(item[1])]
    if not causes and job_name:
        # Only peers that stopped for a lost worker are left: the lost one's pod was deleted
        # (and is gone); the kubelet's last Killing event names it.
        known = {pod["metadata"].get("name") for pod in pods if (pod.get("status") or {}).get("phase") != "Failed"}
        known |= pods_the_job_controller_deleted(job_name, events)
        for event in sorted(events, key=_event_time, reverse=True):
            involved = event.get("involvedObject") or {}
            if event.get("reason") == "Killing" and involved.get("kind") == "Pod" and involved.get("name") not in known:
                index = worker_of_pod_name(job_name, involved.get("name") or "")
                if index is not None:
                    return count, f"worker {index} was stopped: its pod was deleted", _event_time(event) or None
    cause = _cause(replaced)
    if cause is None:
        return count, "", None
    index, pod = cause
    return count, f"worker {index} {_ended_how(pod)}", _ended_at(pod)


def _ended_at(pod: dict) -> str | None:
    """When a worker pod ended (its container finished, or the pod was deleted), if known."""
    return (_terminated(pod) or {}).get("finishedAt") or pod["metadata"].get("deletionTimestamp") or None


def _container_status(pod: dict) -> dict:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return statuses[0] if statuses else {}


def container_started(pod: dict) -> bool:
    """The worker's container has run (it is running or has ended)."""
    state = _container_status(pod).get("state") or {}
    return "running" in state or "terminated" in state


def _terminated(pod: dict) -> dict | None:
    """How the worker's container ended; or how an init container failed, which ends the pod
    before the worker starts."""
    state = _container_status(pod).get("state") or {}
    if state.get("terminated"):
        return state["terminated"]
    for init in (pod.get("status") or {}).get("initContainerStatuses") or []:
        ended = (init.get("state") or {}).get("terminated") or {}
        if ended.get("exitCode"):
            return ended
    return None


def worker_state(index: int, pod: dict | None, cancelled: bool, job_succeeded: bool = False) -> WorkerState:
    if pod is None and job_succeeded:  # its pod was not read, or was removed after the job ended
        return WorkerState(index, Phase.SUCCEEDED, 0)
    if pod is None:
        return WorkerState(index, Phase.CANCELLED if cancelled else Phase.PENDING, None, "no pod")
    phase = (pod.get("status") or {}).get("phase", "Pending")
    terminated = _terminated(pod)
    code = terminated.get("exitCode") if terminated else None
    if phase == "Succeeded":
        return WorkerState(index, Phase.SUCCEEDED, code if code is not None else 0)
    if phase == "Failed":
        reason = (terminated or {}).get("reason") or (pod.get("status") or {}).get("reason") or "Failed"
        return WorkerState(index, Phase.FAILED, code, reason)
    if cancelled:
        return WorkerState(index, Phase.CANCELLED, code, "cancelled")
    if phase == "Running":
        return WorkerState(index, Phase.RUNNING)
    waiting = waiting_state(pod)
    if waiting.get("reason"):
        return WorkerState(index, Phase.PENDING, None, waiting["reason"])
    return WorkerState(index, Phase.PENDING, None, Reason.UNSCHEDULABLE if unschedulable(pod) else "")


def requested_gpus(kind: JobKind, job: dict, gpu_resource: str) -> int:
    """GPUs per worker, as the pod template asks for them."""
    return enforced_worker_request(kind, job, [], gpu_resource).gpus


def container_image(kind: JobKind, job: dict) -> str:
    containers = kind.pod_spec(job).get("containers") or [{}]
    return containers[0].get("image", "")


def _event_time(event: dict) -> str:
    return event.get("eventTime") or event.get("firstTimestamp") or event.get("lastTimestamp") or ""


def pods_the_job_controller_deleted(job_name: str, events: list[dict]) -> set[str]:
    """Pods Kubernetes' Job controller removed itself (the survivors of a failed job): they
    stopped because the job failed, not the other way round."""
    return {event["message"].removeprefix("Deleted pod: ").strip() for event in events
            if event.get("reason") == "SuccessfulDelete" and (event.get("involvedObject") or {}).get("kind") == "Job"
            and (event.get("involvedObject") or {}).get("name") == job_name
            and (event.get("message") or "").startswith("Deleted pod: ")}


def failure(kind: JobKind, job: dict, workers: dict[int, dict], condition: dict, events: list[dict] = ()
            ) -> tuple[str, str]:
    """(reason, message) of a failed job: the worker that failed first, not the ones stopped
    because of it."""
    if condition.get("reason") == "DeadlineExceeded":
        deadline = kind.deadline_seconds(job)
        return Reason.DEADLINE_EXCEEDED, f"The job ran longer than its limit of {deadline} seconds and was stopped."
    job_name = job["metadata"]["name"]
    collateral = pods_the_job_controller_deleted(job_name, events)
    ended = sorted((_terminated(pod).get("finishedAt") or "", index, pod) for index, pod in workers.items()
                   if (pod.get("status") or {}).get("phase") == "Failed" and _terminated(pod)
                   and pod["metadata"]["name"] not in collateral)
    # A worker that stopped for a lost peer (paddle_ext.worker) did not fail the job; where the
    # lost worker's pod is gone, the kubelet's Killing event below names it.
    failed = [item for item in ended if _terminated(item[2]).get("exitCode") != PEER_LOST_EXIT_CODE]
    if failed:
        _, index, pod = failed[0]
        terminated = _terminated(pod)
        if terminated.get("reason") == "OOMKilled":
            containers = kind.pod_spec(job).get("containers") or [{}]
            memory = ((containers[0].get("resources") or {}).get("limits") or {}).get("memory", "?")
            return Reason.OOM_KILLED, (f"Worker {index} ran out of memory (its limit is {memory}) and was killed; "
                                       "ask for more memory per worker.")
        code = terminated.get("exitCode")
        if pod["metadata"].get("deletionTimestamp"):
            return Reason.WORKER_FAILED, (f"Worker {index} was stopped before it finished: its pod was deleted "
                                          f"(exit code {code}).")
        detail = (terminated.get("message") or "").strip()
        return Reason.WORKER_FAILED, f"Worker {index} exited with code {code}." + (f" {detail}" if detail else "")
    # The failed pod is gone already: the first worker the kubelet was told to stop.
    for event in sorted(events, key=_event_time):
        involved = event.get("involvedObject") or {}
        if event.get("reason") == "Killing" and involved.get("kind") == "Pod" and involved.get("name") not in collateral:
            index = worker_of_pod_name(job_name, involved.get("name") or "")
            if index is not None:
                return Reason.WORKER_FAILED, f"Worker {index} was stopped before it finished: its pod was deleted."
    if ended:
        _, index, pod = ended[0]
        return Reason.WORKER_FAILED, f"Worker {index} exited with code {_terminated(pod).get('exitCode')}."
    return condition.get("reason") or "Failed", condition.get("message") or "The job failed."


def quota_refusal(events: list[dict], gpu_resource: str) -> str | None:
    """The quota's refusal of the job's pods (the newest FailedCreate event), in words."""
    for event in sorted(events, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "", reverse=True):
        if event.get("reason") == "FailedCreate" and "exceeded quota" in event.get("message", ""):
            from ..quota.model import parse_quota_rejection  # (rarely needed: not at every command's start)

            return parse_quota_rejection(event["message"], gpu_resource)
    return None


def creation_refused(events: list[dict]) -> str | None:
    """The API server's reason for refusing the job's pods, when it refused them for good
    (a LimitRange, Pod Security, an admission policy; not a full quota, which frees up)."""
    for event in sorted(events, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "", reverse=True):
        message = event.get("message") or ""
        if event.get("reason") == "FailedCreate" and ("forbidden" in message or "is invalid" in message) \
                and not any(passing in message for passing in TRANSIENT_REFUSALS):
            return message.strip().removeprefix("Error creating: ")
    return None


def pending_reason(kind: JobKind, job: dict, workers: dict[int, dict], events: list[dict], max_free_gpus: int | None,
                   gpu_resource: str) -> tuple[str, str] | None:
    """Why a job is not running yet, if Kubernetes says why."""
    refused = quota_refusal(events, gpu_resource)
    if refused:
        return Reason.QUOTA_EXCEEDED, refused
    for index, pod in sorted(workers.items()):
        waiting = waiting_state(pod)
        if waiting.get("reason") in IMAGE_PULL_REASONS:
            return Reason.IMAGE_PULL_BACK_OFF, (f"Cannot pull image '{container_image(kind, job)}' for worker {index}: "
                                        f"{waiting.get('message') or waiting['reason']}.")
    for index, pod in sorted(workers.items()):
        condition = unschedulable(pod)
        if condition:
            gpus = requested_gpus(kind, job, gpu_resource)
            parts = []
            if gpus:
                parts.append(f"Needs {gpus} GPUs per worker")
                if max_free_gpus is not None:
                    parts[-1] += f"; the most free on any node is {max_free_gpus}"
            scheduler = (condition.get("message") or "").strip().rstrip(".")
            message = ". ".join(parts + ([f"Scheduler: {scheduler}"] if scheduler else [])) + "."
            return Reason.UNSCHEDULABLE, f"Worker {index} cannot be placed on any node. {message}"
    return None


# A job object may say it has up to this many workers (Kubernetes' own bound on an Indexed
# Job; a NonIndexed Job's count is any int32): its view lists the state of the first
# MAX_VIEWED_WORKERS only, so reading a hostile object costs the same as reading a big job.
MAX_VIEWED_WORKERS = 1000
# What the recorded spec (the user-writable annotation) may show; its resource fields
# never count: what Kubernetes enforces, the job object's own spec, says those.
RESOURCE_SPEC_FIELDS = ("workers", "gpus_per_worker", "cpu", "memory")
SPEC_PROBLEM_KEY = "spec_problem"


def _whole(value, low: int, high: int) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
        return value
    return None


def enforced_workers(kind: JobKind, job: dict) -> int:
    """How many workers the job object runs at once (what Kubernetes makes pods for): its
    worker count, bounded by `parallelism` where the kind has one; 1 when neither reads."""
    count = _whole(kind.workers(job), 0, 2 ** 31 - 1)
    parallel = _whole((job.get("spec") or {}).get("parallelism"), 0, 2 ** 31 - 1) \
        if kind.workers_path == ("completions",) else None
    counts = [c for c in (count, parallel) if c is not None]
    return min(counts) if counts else 1


def enforced_worker_request(kind: JobKind, job: dict, pods: list[dict], gpu_resource: str) -> Resources:
    """What one worker holds: a live pod's requests (admission applied: a LimitRange's
    defaults included), else the pod template's; zero where they cannot be read."""
    live = [pod for pod in pods if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    for source in (*(pod.get("spec") or {} for pod in live), kind.pod_spec(job)):
        try:
            return _worker_request(source, gpu_resource)
        except (ValueError, TypeError, ArithmeticError, AttributeError):
            continue
    return Resources()


def _worker_request(pod_spec: dict, gpu_resource: str) -> Resources:
    """pod_requests of `pod_spec` with its requests defaulted, worked out once per distinct
    set of its containers' resources: the jobs of a listing mostly ask for the same, and
    reading 1,000 of them spent a third of its time here."""
    try:
        key = tuple(tuple(_resources_key(c) for c in pod_spec.get(field) or ())
                    for field in ("containers", "initContainers"))
        hash(key)
    except (TypeError, AttributeError):  # not the shape the API server stores: worked out as it is
        return pod_requests({"spec": _requests_defaulted(pod_spec)}, gpu_resource)
    return _requests_of(key, gpu_resource)


def _resources_key(container: dict) -> tuple:
    resources = container.get("resources") or {}
    return (tuple((resources.get("limits") or {}).items()), tuple((resources.get("requests") or {}).items()))


@functools.lru_cache(maxsize=256)
def _requests_of(key: tuple, gpu_resource: str) -> Resources:
    def containers(entries: tuple) -> list[dict]:
        return [{"resources": {"limits": dict(limits), "requests": dict(requests)}} for limits, requests in entries]
    return pod_requests({"spec": _requests_defaulted({"containers": containers(key[0]),
                                                      "initContainers": containers(key[1])})}, gpu_resource)


def _requests_defaulted(pod_spec: dict) -> dict:
    """The pod spec as the API server stores it: a resource with a limit and no request
    is requested at its limit."""
    def container(c: dict) -> dict:
        resources = c.get("resources") or {}
        return {**c, "resources": {**resources, "requests": {**(resources.get("limits") or {}),
                                                             **(resources.get("requests") or {})}}}
    return {key: [container(c) for c in pod_spec.get(key) or []] for key in ("containers", "initContainers")}


def recorded_spec(annotations: dict) -> tuple[dict, str]:
    """The spec the job was submitted with (the annotation), for display only: known
    fields of the right type and bounds; (fields, what was wrong with it or "")."""
    text = annotations.get(SPEC_ANNOTATION)
    if not text:
        return {}, ""
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except (ValueError, RecursionError):
        value = None
    if not isinstance(value, dict):
        return {}, f"the {SPEC_ANNOTATION} annotation is not a JSON object; it is ignored"
    kept, dropped = {}, []
    for key in list(value)[:len(SPEC_FIELDS) + 8]:
        if key in SPEC_FIELDS and (value[key] is None or not check_field(key, value[key])):
            kept[key] = value[key]
        else:
            dropped.append(str(key)[:40])
    if len(value) > len(SPEC_FIELDS) + 8:
        dropped.append("...")
    return kept, (f"the {SPEC_ANNOTATION} annotation has unknown or invalid fields, ignored: {', '.join(dropped)}"
                  if dropped else "")


def trusted_spec(kind: JobKind, job: dict, pods: list[dict], gpu_resource: str) -> dict:
    """The job's spec as shown and counted: the recorded spec for display, with workers,
    GPUs, CPU and memory per worker from what Kubernetes enforces (the job object and its
    pods). A recorded value that says otherwise is replaced and the difference noted under
    `spec_problem`; a recorded quantity equal to the enforced one keeps its spelling."""
    spec, problem = recorded_spec((job.get("metadata") or {}).get("annotations") or {})
    request = enforced_worker_request(kind, job, pods, gpu_resource)
    enforced = {"workers": enforced_workers(kind, job), "gpus_per_worker": request.gpus,
                "cpu": request.cpu, "memory": request.memory}
    differ = []
    for field in RESOURCE_SPEC_FIELDS:
        value, recorded = enforced[field], spec.get(field)
        if field in ("cpu", "memory"):
            same = isinstance(recorded, str) and _quantity(recorded) == value
            spec[field] = recorded if same else format_quantity(value, binary=field == "memory")
        else:
            same = recorded == value
            spec[field] = value
        if recorded is not None and not same:
            differ.append(field)
    per_index = ((job.get("spec") or {}) if isinstance(job.get("spec"), dict) else {}).get("backoffLimitPerIndex")
    if kind.index_label == COMPLETION_INDEX_LABEL and _whole(per_index, 0, 2 ** 31 - 1) is not None:
        spec["max_restarts"] = per_index  # what the Job controller enforces
    if differ:
        note = f"the {SPEC_ANNOTATION} annotation disagrees with the job object on {', '.join(differ)}; " \
               "the job object's values are shown"
        problem = f"{problem}; {note}" if problem else note
    if problem:
        spec[SPEC_PROBLEM_KEY] = problem
    return spec


def _quantity(text: str) -> Decimal | None:
    try:
        return parse_quantity(text)
    except (ValueError, ArithmeticError):
        return None


def job_from_objects(job: dict, pods: list[dict], events: list[dict], *, kind: JobKind = DEFAULT_KIND,
                     backend: str = "kubernetes", max_free_gpus: int | None = None, gpu_resource: str = GPU_RESOURCE,
                     kueue: KueueView | None = None) -> Job:
    """The job, read from its object (of `kind`), its pods and the events about them. What it
    runs and holds comes from the object and its pods, never from the user-writable spec
    annotation (shown, validated, in `spec`). A suspended job waits in a queue (Queued); with
    `kueue` (Kueue's objects, kubernetes_queue) it says where it stands in line and why."""
    metadata = job["metadata"]
    annotations = metadata.get("annotations") or {}
    spec = trusted_spec(kind, job, pods, gpu_resource)
    count = _whole(kind.workers(job), 1, 2 ** 31 - 1) or len(pods_by_worker(pods)) or 1
    viewed = min(count, MAX_VIEWED_WORKERS)
    workers = {index: pod for index, pod in pods_by_worker(pods).items() if index < viewed}
    cancelled = CANCELLED_ANNOTATION in annotations
    succeeded, failed = kind.succeeded(job), kind.failed(job)
    job_succeeded = succeeded is not None
    states = tuple(worker_state(i, workers.get(i), cancelled, job_succeeded) for i in range(viewed))
    finished = None
    queue = None
    refused = creation_refused(events) if not pods else None
    if cancelled:
        phase, reason, message = Phase.CANCELLED, Reason.CANCELLED, "The job was cancelled."
        finished = annotations[CANCELLED_ANNOTATION]
    elif FAILED_ANNOTATION in annotations:  # stopped by us: its workers could never be created
        phase, reason, message = Phase.FAILED, Reason.WORKER_FAILED, annotations[FAILED_ANNOTATION]
        finished = (job.get("status") or {}).get("completionTime")
    elif job_succeeded:
        phase, reason = Phase.SUCCEEDED, Reason.COMPLETED
        message = f"All {count} workers finished successfully."
        finished = (job.get("status") or {}).get("completionTime") or succeeded.get("lastTransitionTime")
    elif failed is not None:
        phase = Phase.FAILED
        reason, message = failure(kind, job, workers, failed, events)
        finished = failed.get("lastTransitionTime")
    elif kind.is_suspended(job):
        phase, reason, message = Phase.QUEUED, Reason.QUEUED, "The job is queued, waiting for cluster capacity."
        placed = queue_state(job, kueue, gpu_resource) if kueue is not None else None
        if placed is not None:
            queue, message = placed
    elif refused:
        phase, reason = Phase.FAILED, Reason.WORKER_FAILED
        message = f"Kubernetes refused to create the workers: {refused.rstrip('.')}."
    else:
        why = pending_reason(kind, job, workers, events, max_free_gpus, gpu_resource)
        if why:
            phase, (reason, message) = Phase.PENDING, why
        elif states and all(s.phase in (Phase.RUNNING, Phase.SUCCEEDED) for s in states) and \
                any(s.phase == Phase.RUNNING for s in states):
            phase, reason, message = Phase.RUNNING, Reason.NONE, ""
        else:
            phase, reason, message = Phase.PENDING, Reason.STARTING, "The workers are starting."
    # A job failed for an index out of restarts (backoffLimitPerIndex, maxFailedIndexes 0) spent them all.
    spent = (spec.get("max_restarts") or 0) if failed is not None and failed.get("reason") in INDEX_FAILED_REASONS else 0
    restarts, last_restart_reason, last_restart_at = restarts_of(pods, metadata["name"], events, spent)
    # Requeues by Kueue (preempted, evicted): attempts too, though not restarts the job spent. A
    # restart seen in the pods names the reason: usually the later event (a readmitted job's pods
    # are all new), though failed pods of a restart before the requeue are kept too.
    requeued, requeue_reason, requeued_at = requeues(job, kueue, gpu_resource)
    if requeued and not restarts:
        last_restart_reason, last_restart_at = requeue_reason, requeued_at
    if phase == Phase.FAILED and reason == Reason.WORKER_FAILED and failed is not None:
        if failed.get("reason") == "PodFailurePolicy" and spec.get("max_restarts"):
            message += " Not restarted: an error in the job's own code fails it at once."
        elif restarts:
            message += f" Restarted {restarts} of at most {spec.get('max_restarts') or 0} times."
    suspended = kind.is_suspended(job) and not cancelled
    quota_message = quota_refusal(events, gpu_resource) if phase == Phase.PENDING else None
    progress = tuple(
        worker_progress(i, workers.get(i), states[i], events, image=container_image(kind, job), suspended=suspended,
                        quota_message=quota_message, gpus=requested_gpus(kind, job, gpu_resource),
                        max_free_gpus=max_free_gpus)
        for i in range(viewed))
    return Job(
        name=metadata["name"], phase=phase, workers=count, spec=spec, reason=reason, message=message,
        created=metadata.get("creationTimestamp"), finished=finished, worker_states=states, backend=backend,
        code=_json_annotation(annotations, CODE_ANNOTATION), outputs=_json_annotation(annotations, OUTPUTS_ANNOTATION),
        progress=progress, restarts=restarts, last_restart_reason=last_restart_reason, queue=queue,
        requeues=requeued, last_restart_at=last_restart_at,
    )


def _json_annotation(annotations: dict, key: str) -> dict | None:
    try:
        value = json.loads(annotations.get(key) or "null")
    except (ValueError, TypeError, RecursionError):  # not JSON, not text, nested past the parser's depth
        return None
    return value if isinstance(value, dict) else None


# ------------------------------------------------------------ many jobs at once

def by_namespace(objects: Iterable[dict], namespaces: Iterable[str]) -> dict[str, list[dict]]:
    """The objects of a cluster-wide list in each of `namespaces` (every one a key, maybe
    empty); objects anywhere else are left out."""
    found: dict[str, list[dict]] = {namespace: [] for namespace in namespaces}
    for obj in objects:
        namespace = (obj.get("metadata") or {}).get("namespace")
        if namespace in found:
            found[namespace].append(obj)
    return found


def pods_by_job(pods: Iterable[dict]) -> dict[str, list[dict]]:
    """One namespace's pods by the job they belong to (their job label)."""
    found: dict[str, list[dict]] = {}
    for pod in pods:
        found.setdefault((pod["metadata"].get("labels") or {}).get(JOB_LABEL, ""), []).append(pod)
    return found


def open_jobs(kind: JobKind, jobs: Iterable[dict]) -> list[str]:
    """The names of the jobs whose pods a listing reads: all but those Kubernetes reports
    succeeded, which say all a listing shows of their workers (each exited 0); that saves most
    of the bytes of a namespace with a long history."""
    return [job["metadata"]["name"] for job in jobs if not kind.has_succeeded(job)]


def open_job_pods(kind: JobKind, jobs: list[dict], pods: list[dict]) -> list[dict]:
    """Of one namespace's pods, those of its open jobs (a pod asked for by the name of a job
    open in another namespace is left out)."""
    by_job = pods_by_job(pods)
    return [pod for name in open_jobs(kind, jobs) for pod in by_job.get(name, [])]


def refusals_needed(kind: JobKind, jobs: list[dict], pods: list[dict]) -> bool:
    """Whether a job of the namespace that has not ended, and is not suspended (queued: no pods
    by design, and its view reads no refusal), has no pods: only then are the namespace's
    FailedCreate events read (why Kubernetes refuses its workers). A listing of queued jobs
    so does without that request."""
    by_job = pods_by_job(pods)
    return any(not by_job.get(job["metadata"]["name"]) and not kind.has_finished(job) and not kind.is_suspended(job)
               for job in jobs)


def job_views(jobs: list[dict], pods: list[dict], refusals: list[dict], *, kind: JobKind = DEFAULT_KIND,
              gpu_resource: str = GPU_RESOURCE, kueue: KueueView | None = None) -> list[tuple[dict, Job]]:
    """One namespace's jobs, newest first, each with its view (job_from_objects) from its own
    pods and the FailedCreate events about it among `refusals`."""
    by_job = pods_by_job(pods)
    refused: dict[str, list[dict]] = {}
    for event in refusals:
        refused.setdefault((event.get("involvedObject") or {}).get("name", ""), []).append(event)
    views = [(job, job_from_objects(job, by_job.get(job["metadata"]["name"], []), refused.get(job["metadata"]["name"], []),
                                    kind=kind, gpu_resource=gpu_resource, kueue=kueue)) for job in jobs]
    return sorted(views, key=lambda view: view[1].created or "", reverse=True)


def views_by_namespace(jobs: Mapping[str, list[dict]], pods: Mapping[str, list[dict]],
                       refusals: Mapping[str, list[dict]], *, kind: JobKind = DEFAULT_KIND,
                       gpu_resource: str = GPU_RESOURCE) -> dict[str, list[Job]]:
    """Each namespace's job views, newest first, from cluster-wide lists grouped by namespace
    (by_namespace), read as a listing of that namespace alone reads them: the pods of its open
    jobs, and its FailedCreate events only where one of its jobs waits without pods."""
    views = {}
    for namespace, namespace_jobs in jobs.items():
        namespace_pods = open_job_pods(kind, namespace_jobs, pods.get(namespace, []))
        namespace_refusals = refusals.get(namespace, []) if refusals_needed(kind, namespace_jobs, namespace_pods) else []
        views[namespace] = [view for _, view in job_views(namespace_jobs, namespace_pods, namespace_refusals,
                                                          kind=kind, gpu_resource=gpu_resource)]
    return views
