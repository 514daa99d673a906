"""Launch progress of each worker from Kubernetes objects (pure; dicts in, words out).

The steps are `paddle_ext.jobs.Step`. What tells which step a worker is at:

    Queued      no pod yet: the Job is suspended (Kueue holds it, or it was created
                suspended), or the namespace's quota refuses its pods (FailedCreate)
    Scheduling  the pod has no node; when the scheduler says Unschedulable and the pod
                asks for GPUs: "waiting for 16 GPUs; the most free on any node is 8"
    Pulling     the kubelet's `Pulling` event without a `Pulled` one yet, or the
                container waits in ErrImagePull/ImagePullBackOff
    Starting    on a node, container not running yet (after `Pulled`: "image pulled in
                2.1s (1.2 GB)" from the kubelet's "Image size: N bytes")
    Running     the container runs
    Finished    the pod succeeded or failed, or the job was cancelled
"""

from __future__ import annotations

import re

from .. import quantity
from ..jobs import Phase, Step, WorkerProgress, WorkerState
from ..progress import finished_detail

IMAGE_PULL_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
_PULLED_IN = re.compile(r" in ([0-9.]+[a-zµ]+(?:[0-9.]+[a-zµ]+)*) ")
_IMAGE_SIZE = re.compile(r"Image size: (\d+) bytes")


def worker_of_pod_name(job_name: str, pod_name: str) -> int | None:
    """The worker index in the name of one of the job's pods: <job>-<index>-<5 characters>
    (an Indexed Job's) or <job>-worker-<index> (a PaddleJob's); None for any other name."""
    match = re.fullmatch(re.escape(job_name) + r"-(?:(\d+)-[a-z0-9]{5}|worker-(\d+))", pod_name)
    return int(match.group(1) or match.group(2)) if match else None


def related_events(job_name: str, pods: list[dict], events: list[dict]) -> list[dict]:
    """The events about the job itself or one of its pods, from a namespace's events; and
    the kubelet's "Killing" of a pod of the job that is gone already (it names the worker
    whose pod was deleted)."""
    uids = {pod["metadata"].get("uid") for pod in pods} - {None}
    names = {pod["metadata"]["name"] for pod in pods}
    related = []
    for event in events:
        about = event.get("involvedObject") or event.get("regarding") or {}
        if about.get("kind") == "Pod":
            if about.get("uid") in uids or (not about.get("uid") and about.get("name") in names):
                related.append(event)
            elif event.get("reason") == "Killing" and about.get("name") not in names and \
                    worker_of_pod_name(job_name, about.get("name") or "") is not None:
                related.append(event)
        elif about.get("name") == job_name:
            related.append(event)
    return related


def human_bytes(count: int) -> str:
    """1234567890 -> '1.2 GB' (decimal units, as registries show sizes)."""
    return quantity.human_bytes(count, binary=False)


def pulled_detail(message: str) -> str:
    """Words for the kubelet's Pulled event: how long and how big, where it says so."""
    if "already present on machine" in message:
        return "the image is already on the node"
    parts = []
    took = _PULLED_IN.search(message)
    if took:
        parts.append(f"in {took.group(1)}")
    size = _IMAGE_SIZE.search(message)
    if size:
        parts.append(f"({human_bytes(int(size.group(1)))})")
    return " ".join(["image pulled", *parts])


def _pod_events(pod: dict, events: list[dict]) -> list[dict]:
    uid, name = pod["metadata"].get("uid"), pod["metadata"]["name"]
    found = []
    for event in events:
        about = event.get("involvedObject") or event.get("regarding") or {}
        if about.get("kind") == "Pod" and (about.get("uid") == uid if uid and about.get("uid")
                                           else about.get("name") == name):
            found.append(event)
    return found


def _container_state(pod: dict) -> dict:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return (statuses[0].get("state") or {}) if statuses else {}


def waiting_state(pod: dict) -> dict:
    """Why the pod's containers wait ({"reason", "message"}; {} if they do not): an init
    container's (e.g. "prepare", which unpacks the job's code, pulling the same image) comes
    first, as the worker cannot start before it."""
    status = pod.get("status") or {}
    for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])[:1]]:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            return waiting
    return {}


def unschedulable(pod: dict) -> dict | None:
    """The pod's PodScheduled=False/Unschedulable condition, if the scheduler gave up for now."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False" \
                and condition.get("reason") == "Unschedulable":
            return condition
    return None


def waiting_for_node(pod: dict, gpus: int, max_free_gpus: int | None) -> str:
    """What a pod without a node waits for, with the GPU numbers when they are the point."""
    condition = unschedulable(pod)
    if condition is None:
        return "waiting for the scheduler to pick a node"
    if gpus:
        text = f"waiting for {gpus} GPUs"
        return text + (f"; the most free on any node is {max_free_gpus}" if max_free_gpus is not None else "")
    scheduler = (condition.get("message") or "").strip().rstrip(".")
    return "no node can take it yet" + (f": {scheduler}" if scheduler else "")


def worker_progress(index: int, pod: dict | None, state: WorkerState, events: list[dict], *, image: str,
                    suspended: bool, quota_message: str | None, gpus: int,
                    max_free_gpus: int | None) -> WorkerProgress:
    """One worker's step. `state` is its WorkerState (kubernetes_status.worker_state),
    `events` the job's related events, `quota_message` the quota's refusal of its pods
    if the job controller got one."""
    if Phase(state.phase).finished:
        return WorkerProgress(index, Step.FINISHED, finished_detail(state),
                              ((pod or {}).get("spec") or {}).get("nodeName", ""))
    if pod is None:
        if suspended:
            return WorkerProgress(index, Step.QUEUED, "the job is queued, waiting for cluster capacity")
        if quota_message:
            return WorkerProgress(index, Step.QUEUED, f"the namespace's quota does not admit it: {quota_message}")
        return WorkerProgress(index, Step.QUEUED, "waiting for its pod to be created")
    node = (pod.get("spec") or {}).get("nodeName") or ""
    container = _container_state(pod)
    if "running" in container or "terminated" in container:
        return WorkerProgress(index, Step.RUNNING, f"on node {node}" if node else "", node)
    if not node:
        return WorkerProgress(index, Step.SCHEDULING, waiting_for_node(pod, gpus, max_free_gpus))
    waiting = waiting_state(pod)
    if waiting.get("reason") in IMAGE_PULL_REASONS:
        why = waiting.get("message") or waiting["reason"]
        return WorkerProgress(index, Step.PULLING, f"cannot pull image {image}: {why}", node)
    reasons = {event.get("reason"): event for event in _pod_events(pod, events)}
    if "Pulled" in reasons:
        return WorkerProgress(index, Step.STARTING, pulled_detail(reasons["Pulled"].get("message") or ""), node)
    if "Pulling" in reasons:
        return WorkerProgress(index, Step.PULLING, f"pulling image {image} on node {node}", node)
    return WorkerProgress(index, Step.STARTING, f"starting on node {node}", node)
