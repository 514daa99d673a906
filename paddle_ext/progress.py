"""Launch progress per worker: which step of getting started each worker is at, and what
it waits for (pure).

Steps, in order (`paddle_ext.jobs.Step`): Queued (the job waits for admission: Kueue,
or the namespace's quota refuses its pods), Scheduling (the pod waits for a node),
Pulling (the node pulls the image), Starting (the container or processes start),
Running, Finished. A worker's `step` is the one it is in now; `detail` says what it
waits for, in words. Jobs carry them as `Job.progress` (JSON: `progress`, one entry
per worker).

On Kubernetes `paddle_ext.backends.kubernetes_progress` derives them from the Job, its
pods and events; the local backend has only Queued (waiting in this machine's queue),
Starting, Running and Finished (`local_progress`).

A queued job's detail is where it stands in line (`queue_line`): 'Queued · position 2 in
this machine's queue · needs 4 more GPUs (6 of 8 in use) · starts ~14:05 UTC (estimate)'.
"""

from __future__ import annotations

from .jobs import STEPS, Phase, QueueState, Step, WorkerProgress, WorkerState
from .timestamps import parse_time

__all__ = ["LOCAL_STEPS", "STEPS", "Step", "WorkerProgress", "describe", "finished_detail", "local_progress",
           "queue_detail", "queue_line", "steps_line"]


def finished_detail(state: WorkerState) -> str:
    """'Succeeded', 'Failed: exited with code 3', ..."""
    return str(state.phase) + (f": {state.reason}" if state.reason else "")


LOCAL_STEPS = (Step.QUEUED, Step.STARTING, Step.RUNNING, Step.FINISHED)


def queue_detail(queue: QueueState, brief: bool = False) -> str:
    """'position 2 in this machine's queue · needs 4 more GPUs · starts ~14:05 UTC (estimate)';
    `brief` (a table's column) leaves out the queue's name and why there is no estimate."""
    where = "" if brief else f" in {queue.queue}"
    parts = [f"position {queue.position}{where}" if queue.position else f"in {queue.queue}"]
    if queue.ahead and queue.position and queue.ahead != queue.position - 1:
        parts.append(f"{queue.ahead} job{'s' if queue.ahead != 1 else ''} ahead")
    if queue.waiting_for:
        parts.append(f"needs {queue.waiting_for}")
    try:
        start = parse_time(queue.estimated_start)
    except ValueError:
        start = None
    if start is not None:
        parts.append(f"starts ~{start:%H:%M} UTC (estimate)")
    elif queue.estimate_basis and not brief:
        parts.append(queue.estimate_basis)
    return " · ".join(parts)


def queue_line(queue: QueueState) -> str:
    """'Queued · position 2 in this machine's queue · needs ...': a queued job in one line."""
    return "Queued · " + queue_detail(queue)


def local_progress(state: WorkerState) -> WorkerProgress:
    """A local worker: started processes are Running, not yet started ones Starting."""
    if Phase(state.phase).finished:
        return WorkerProgress(state.index, Step.FINISHED, finished_detail(state), steps=LOCAL_STEPS)
    if state.phase == Phase.RUNNING:
        return WorkerProgress(state.index, Step.RUNNING, "its processes are running", steps=LOCAL_STEPS)
    return WorkerProgress(state.index, Step.STARTING, "starting its processes", steps=LOCAL_STEPS)


def describe(progress: WorkerProgress) -> str:
    """One line: 'worker-0  [2/6 Scheduling] waiting for 16 GPUs; the most free on any node is 8'."""
    text = f"worker-{progress.index}  [{progress.number}/{len(progress.steps)} {progress.step}]"
    return text + (f" {progress.detail}" if progress.detail else "")


def steps_line(progress: tuple[WorkerProgress, ...]) -> str:
    """'Queued > Scheduling > ...': the steps a job's workers go through."""
    return " > ".join(progress[0].steps if progress else STEPS)
