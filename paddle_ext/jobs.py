"""A job as users see it, the same on every backend (pure, typed).

`Job.to_dict()` is the one JSON form of a job: `paddlecloud status --json`, the REST API
and the widgets all read it.
"""

from __future__ import annotations

import dataclasses
import enum

from .restarts import attempt_label
from .timestamps import clock


class Phase(enum.StrEnum):
    """QUEUED: waiting in line for capacity (nothing of it runs or holds resources yet);
    PENDING: admitted, its workers are being placed and started."""

    QUEUED = "Queued"
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"

    @property
    def finished(self) -> bool:
        return self in FINISHED_PHASES


FINISHED_PHASES = frozenset({Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED})


class Reason(enum.StrEnum):
    """Why a job is in its phase, in a word programs can test."""

    NONE = ""
    STARTING = "Starting"
    QUEUED = "Queued"
    COMPLETED = "Completed"
    CANCELLED = "Cancelled"
    WORKER_FAILED = "WorkerFailed"
    WORKER_LOST = "WorkerLost"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    UNSCHEDULABLE = "Unschedulable"
    IMAGE_PULL_BACK_OFF = "ImagePullBackOff"
    OOM_KILLED = "OOMKilled"
    QUOTA_EXCEEDED = "QuotaExceeded"


@dataclasses.dataclass(frozen=True)
class QueueState:
    """Where a Queued job stands in line, as the user reads it.

    `queue` names the line in words ("team vision's queue", "this machine's queue");
    `position` is 1-based (1: next to start) and `ahead` the jobs before it; `waiting_for`
    says in plain words what it needs ("4 more GPUs"); `estimated_start` is an ISO time or
    None when no estimate can be made, and `estimate_basis` says how it was computed (it is
    an estimate, never a promise)."""

    queue: str
    position: int | None = None
    ahead: int | None = None
    waiting_for: str = ""
    estimated_start: str | None = None
    estimate_basis: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class WorkerState:
    index: int
    phase: Phase
    exit_code: int | None = None
    reason: str = ""  # a short detail: "exited with code 3", "ImagePullBackOff", ...

    def to_dict(self) -> dict:
        return {"index": self.index, "phase": str(self.phase), "exit_code": self.exit_code, "reason": self.reason}


class Step(enum.StrEnum):
    """Launch progress of one worker (see paddle_ext.progress), in order."""

    QUEUED = "Queued"
    SCHEDULING = "Scheduling"
    PULLING = "Pulling"
    STARTING = "Starting"
    RUNNING = "Running"
    FINISHED = "Finished"


STEPS = tuple(Step)


@dataclasses.dataclass(frozen=True)
class WorkerProgress:
    """Which launch step a worker is at, what it waits for (`detail`) and its node.
    `steps` are the steps this backend goes through (a local run is not queued,
    scheduled or pulled)."""

    index: int
    step: Step
    detail: str = ""
    node: str = ""
    steps: tuple[Step, ...] = STEPS

    @property
    def number(self) -> int:
        """1-based position of the step among `steps`, for progress bars."""
        return self.steps.index(self.step) + 1

    def to_dict(self) -> dict:
        return {"index": self.index, "step": str(self.step), "detail": self.detail, "node": self.node,
                "number": self.number, "of": len(self.steps), "steps": [str(step) for step in self.steps]}


@dataclasses.dataclass(frozen=True)
class Job:
    name: str
    phase: Phase
    workers: int
    spec: dict
    reason: str = ""
    message: str = ""
    created: str | None = None
    finished: str | None = None
    worker_states: tuple[WorkerState, ...] = ()
    backend: str = ""
    code: dict | None = None  # workspace.CodeSnapshot.record(): what the job ran
    outputs: dict | None = None  # OutputsRecord: where the job's outputs are kept, if anywhere
    progress: tuple[WorkerProgress, ...] = ()
    queue: QueueState | None = None  # set while the job is Queued
    # Restarts of all workers together after a lost, killed or evicted worker (0: none yet);
    # `last_restart_reason` says why the last one happened, in words.
    restarts: int = 0
    last_restart_reason: str = ""
    # Times a queue (Kueue) sent the job back after it had started (preempted, or evicted for
    # workers that could not start): attempts too, but not the job's fault, so not counted
    # against max_restarts; `last_restart_reason` then says why ("preempted: team audio
    # reclaimed its GPUs") unless a restart came after.
    requeues: int = 0
    last_restart_at: str | None = None  # when the last restart or requeue happened (ISO), where known
    resumed_from_step: int | None = None  # the step the current attempt resumed from (its checkpoint)

    @property
    def done(self) -> bool:
        return Phase(self.phase).finished

    @property
    def holds_resources(self) -> bool:
        """Whether the job counts against quotas and capacity now: started and not ended
        (a Queued job waits in line and holds nothing)."""
        return not self.done and self.phase != Phase.QUEUED

    @property
    def attempt(self) -> int:
        """Which attempt runs (or ran last, or runs next while requeued): 1 first, 2 after the
        first restart or requeue."""
        return self.restarts + self.requeues + 1

    @property
    def max_restarts(self) -> int:
        return self.spec.get("max_restarts") or 0

    def attempt_line(self) -> str:
        """'attempt 2 of 4: worker 1 was killed by signal 9 at 14:02 UTC; resumed from step 500',
        or '' before any restart or requeue; the time and the step where known. Requeues add to
        the attempts a job may have ('attempt 2 of 2: preempted: team audio reclaimed its GPUs'
        for a job without restarts)."""
        if self.attempt == 1:
            return ""
        line = attempt_label(self.attempt - 1, self.max_restarts + self.requeues)
        if self.last_restart_reason:
            line += f": {self.last_restart_reason}"
            if self.last_restart_at:
                line += f" at {clock(self.last_restart_at)}"
        if self.resumed_from_step:
            line += f"; resumed from step {self.resumed_from_step}"
        elif self.resumed_from_step == 0:
            line += "; no checkpoint, started again from step 0"
        return line

    def to_dict(self) -> dict:
        return {
            "name": self.name, "phase": str(self.phase), "workers": self.workers, "spec": self.spec,
            "reason": str(self.reason), "message": self.message, "created": self.created,
            "finished": self.finished, "worker_states": [w.to_dict() for w in self.worker_states],
            "backend": self.backend, "code": self.code, "outputs": self.outputs,
            "progress": [p.to_dict() for p in self.progress],
            "queue": self.queue.to_dict() if self.queue else None,
            "attempt": self.attempt, "restarts": self.restarts, "max_restarts": self.max_restarts,
            "last_restart_reason": self.last_restart_reason, "requeues": self.requeues,
            "last_restart_at": self.last_restart_at, "resumed_from_step": self.resumed_from_step,
        }


def outputs_record(path: str | None, kept: bool, note: str = "") -> dict:
    """The job's `outputs` field: the folder workers see as $PADDLECLOUD_OUTPUT_DIR, and
    whether it outlives the job's pods (readable from the notebook afterwards)."""
    return {"path": path, "kept": kept, "note": note}
