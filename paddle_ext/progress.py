"""Launch progress per worker: which step of getting started each worker is at, and what
it waits for (pure).

Steps, in order (`paddle_ext.jobs.Step`): Queued (the job waits for admission: Kueue,
or the namespace's quota refuses its pods), Scheduling (the pod waits for a node),
Pulling (the node pulls the image), Starting (the container or processes start),
Running, Finished. A worker's `step` is the one it is in now; `detail` says what it
waits for, in words. Jobs carry them as `Job.progress` (JSON: `progress`, one entry
per worker).

On Kubernetes `paddle_ext.backends.kubernetes_progress` derives them from the Job, its
pods and events; the local backend has only Starting, Running and Finished
(`local_progress`).
"""

from __future__ import annotations

from .jobs import STEPS, Phase, Step, WorkerProgress, WorkerState

__all__ = ["LOCAL_STEPS", "STEPS", "Step", "WorkerProgress", "describe", "finished_detail", "local_progress",
           "steps_line"]


def finished_detail(state: WorkerState) -> str:
    """'Succeeded', 'Failed: exited with code 3', ..."""
    return str(state.phase) + (f": {state.reason}" if state.reason else "")


LOCAL_STEPS = (Step.STARTING, Step.RUNNING, Step.FINISHED)


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
