"""Checkpoints a training script resumes from after a restart, in two lines:

    start = checkpoint.resume(model, optimizer)          # 0 on a fresh start
    for step in range(start, total_steps):
        ...train one step...
        checkpoint.save(model, optimizer, step + 1)       # rank 0 writes; the others return

A checkpoint is one file, `step-<N>.pdckpt`, holding the model's and the optimizer's state
and N, the number of steps done; it goes to `$PADDLECLOUD_OUTPUT_DIR/checkpoints` (the
job's output folder, kept after the job on the embedded default and with a shared
workspace on Kubernetes), written to a temporary file and renamed into place, so a worker
killed mid-write leaves the previous checkpoint whole. The last `keep` are kept.

Every worker reads the same folder: where the workers do not share it (Kubernetes without
a shared workspace), a restarted job starts again from step 0. Restarts themselves are the
platform's (see `max_restarts`); `attempt()` says which attempt runs (0 first).

After a restart, rank 0 also writes `resumed.json` beside the checkpoints (the job, the
attempt and the step it resumed from), which the job's status reads to say "resumed from step
500" (`resumed_step`).

Imports paddle only when called, so `import paddle_ext.checkpoint` costs nothing.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import stat
import sys
import tempfile
from typing import Any, TypeGuard

from .constants import JOB_NAME_ENV, OUTPUT_DIR_ENV, RESTART_ENV, TRAINER_ID_ENV

FOLDER = "checkpoints"
SUFFIX = ".pdckpt"
DEFAULT_KEEP = 3
RESUME_RECORD = "resumed.json"
_RECORD_MAX_BYTES = 4096
_NAME = re.compile(r"step-(\d{1,18})" + re.escape(SUFFIX) + r"\Z")


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    path: str
    step: int


def folder(directory: str | None = None) -> str:
    """Where checkpoints go: `directory`, else $PADDLECLOUD_OUTPUT_DIR/checkpoints, else
    ./checkpoints (a script run by hand)."""
    if directory:
        return directory
    return os.path.join(os.environ.get(OUTPUT_DIR_ENV) or ".", FOLDER)


def attempt() -> int:
    """Which attempt of the job this is: 0 first, 1 after the first restart or requeue
    ($PADDLECLOUD_RESTART; resume() corrects it where the platform counts failures only)."""
    try:
        return max(int(os.environ.get(RESTART_ENV, "0")), 0)
    except ValueError:
        return 0


def attempt_after(state: dict, job: str, counted: int) -> int:
    """The attempt a run resuming from the checkpoint `state` is, at least: its own count
    (`counted`), or one more than the attempt that wrote the checkpoint where that was this
    same job `job` (pure)."""
    written = state.get("attempt")
    if job and state.get("job") == job and isinstance(written, int) and not isinstance(written, bool) and written >= 0:
        return max(counted, written + 1)
    return counted


def checkpoints(directory: str | None = None) -> list[Checkpoint]:
    """The complete checkpoints in the folder, oldest step first (temporary files are not)."""
    where = folder(directory)
    try:
        names = os.listdir(where)
    except FileNotFoundError:
        return []
    found = [Checkpoint(os.path.join(where, name), int(match[1]))
             for name in names if (match := _NAME.fullmatch(name))]
    return sorted(found, key=lambda checkpoint: checkpoint.step)


def latest(directory: str | None = None) -> Checkpoint | None:
    """The checkpoint with the most steps done, or None."""
    found = checkpoints(directory)
    return found[-1] if found else None


def _rank() -> int:
    try:
        return int(os.environ.get(TRAINER_ID_ENV, "0"))
    except ValueError:
        return 0


def _layer(model: Any) -> Any:
    """The model itself, also when wrapped in paddle.DataParallel (whose state names differ)."""
    return getattr(model, "_layers", model)


def save(model: Any, optimizer: Any = None, step: int = 0, directory: str | None = None,
         keep: int = DEFAULT_KEEP, extra: dict | None = None) -> Checkpoint | None:
    """Write a checkpoint of `model` (and `optimizer`) after `step` steps; only rank 0 writes
    (the others return None at once: their state is the same). Atomic: written to a temporary
    file in the same folder, flushed to disk, then renamed. Keeps the last `keep`."""
    if _rank() != 0:
        return None
    if keep < 1:
        raise ValueError(f"keep must be at least 1 (got {keep})")
    import paddle

    where = folder(directory)
    os.makedirs(where, exist_ok=True)
    state = {"step": int(step), "model": _layer(model).state_dict(), "extra": dict(extra or {}),
             "attempt": attempt(), "job": os.environ.get(JOB_NAME_ENV, "")}
    if optimizer is not None:
        state["optimizer"] = optimizer.state_dict()
    path = os.path.join(where, f"step-{int(step):09d}{SUFFIX}")
    fd, tmp = tempfile.mkstemp(dir=where, prefix=".tmp-", suffix=SUFFIX)
    os.close(fd)
    try:
        paddle.save(state, tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    for old in checkpoints(where)[:-keep]:
        try:
            os.unlink(old.path)
        except FileNotFoundError:
            pass
    return Checkpoint(path, int(step))


def load(checkpoint: Checkpoint, model: Any, optimizer: Any = None) -> dict:
    """Put the checkpoint's state into `model` (and `optimizer`); the whole saved dict."""
    import paddle

    state = paddle.load(checkpoint.path)
    _layer(model).set_state_dict(state["model"])
    if optimizer is not None and "optimizer" in state:
        optimizer.set_state_dict(state["optimizer"])
    return state


def resume(model: Any, optimizer: Any = None, directory: str | None = None, quiet: bool = False) -> int:
    """Load the latest checkpoint, if any, into `model` and `optimizer`; the steps it had done
    (0 when there is none: start from the beginning). Says so in the log unless `quiet`.
    Call it on every rank, before wrapping the model in paddle.DataParallel or after."""
    found = latest(directory)
    if found is None:
        if attempt():
            _record_resume(directory, 0)
            if not quiet:
                print(f"paddlecloud: attempt {attempt() + 1}: no checkpoint in {folder(directory)}; "
                      "starting from step 0", file=sys.stderr, flush=True)
        return 0
    state = load(found, model, optimizer)
    # A queue's requeue (Kueue preempted the job) is no failure, and Kubernetes' count, which
    # $PADDLECLOUD_RESTART carries, leaves it out; the checkpoint says which attempt wrote it.
    # Set here, the attempt reaches the metric records (paddle_ext.reporting) and the next save.
    os.environ[RESTART_ENV] = str(attempt_after(state, os.environ.get(JOB_NAME_ENV, ""), attempt()))
    if attempt():
        _record_resume(directory, int(state["step"]))
    if not quiet:
        print(f"paddlecloud: resumed from checkpoint at step {state['step']} ({found.path}), "
              f"attempt {attempt() + 1}", flush=True)
    return int(state["step"])


def _record_resume(directory: str | None, step: int) -> None:
    """Rank 0 writes which attempt of which job resumed from which step (the job's status reads
    it); atomically, and never failing the run for it."""
    if _rank() != 0:
        return
    where = folder(directory)
    record = {"job": os.environ.get(JOB_NAME_ENV, ""), "attempt": attempt(), "step": step}
    tmp = None
    try:
        os.makedirs(where, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=where, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(record, f)
        os.replace(tmp, os.path.join(where, RESUME_RECORD))
    except OSError as exc:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        print(f"paddlecloud: could not note the resume in {where}: {exc}", file=sys.stderr, flush=True)


def read_resume_record(directory: str) -> dict | None:
    """The resume record in a checkpoint folder, or None (none, unreadable, not a small regular
    file: the folder is the user's, so a link or a FIFO there is not followed or waited on)."""
    try:
        fd = os.open(os.path.join(directory, RESUME_RECORD), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _RECORD_MAX_BYTES:
            return None
        record = json.loads(os.read(fd, _RECORD_MAX_BYTES))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    return record if isinstance(record, dict) else None


def resumed_step(record: dict | None, job: str, attempt_number: int) -> int | None:
    """The step attempt `attempt_number` (1 first, as Job.attempt counts) of job `job` resumed
    from, by its resume record; None when the record is of another job or attempt (pure)."""
    if not record or record.get("job") != job:
        return None
    written, step = record.get("attempt"), record.get("step")
    if not (_count(written) and _count(step)):
        return None
    return step if written + 1 == attempt_number else None


def _count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
