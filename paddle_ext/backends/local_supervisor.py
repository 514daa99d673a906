"""Supervises one worker of a local job, detached from whoever started it.

    python -m paddle_ext.backends.local_supervisor JOB_DIR INDEX -- ARGV...

Forks into the background (so the Jupyter server never owns the process and can
restart freely), becomes leader of a new process group, runs ARGV (Paddle's
launcher) with its messages appended to `worker-INDEX.log` and every trainer's lines
copied there as they are written (paddle_ext.trainer_logs: the launcher's own copy of
local rank 0's output, every ~2 s, is left out), and records the exit code in `worker-INDEX.exit`.
If the worker fails, it marks the job failed and stops the other workers; it also
enforces the job's deadline. Once the worker has ended, nothing it started may outlive
it (as nothing outlives a container): the supervisor is the worker's subreaper, so even
the trainers Paddle's launcher starts in sessions of their own come back to it when the
launcher dies first, and it kills them. Everything it knows lives in files of the job
folder.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

from ..launch import trainers_per_worker
from ..trainer_logs import TrainerLogRelay
from . import local_files as files

TYPE_CHECKING = False  # (typing itself stays out of a supervisor's start)
if TYPE_CHECKING:
    from typing import Callable

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
STOP_GRACE_SECONDS = 5.0  # from SIGTERM to SIGKILL, when a worker's peer failed or its deadline came
STRAYS_TIMEOUT_SECONDS = 10.0  # for killed processes to be gone (they may be in the kernel)


def stop_group(pgid: int, grace_seconds: float = STOP_GRACE_SECONDS, wait_for_supervisor: bool = True) -> None:
    """Stop one worker: SIGTERM its process group (the worker gets it; its supervisor, the
    group's leader with pid = pgid, ignores it) and SIGKILL what is left of the worker
    after the grace period. Its supervisor then stops what the worker left outside the
    group, records how it ended and exits; with `wait_for_supervisor`, wait for that too
    (a supervisor still there after it is killed)."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    if not _wait_until(lambda: not _worker_processes(pgid), grace_seconds):
        for pid in _worker_processes(pgid):
            _kill(pid)
    if wait_for_supervisor and not _wait_until(lambda: not files.group_alive(pgid), STRAYS_TIMEOUT_SECONDS + 1):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _worker_processes(pgid: int) -> list[int]:
    return [pid for pid in files.group_members(pgid) if pid != pgid]


def _wait_until(done: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def adopt_orphans() -> None:
    """Make the processes the worker leaves behind ours when their parent dies, instead of
    init's: Paddle's launcher runs each trainer in a session (and process group) of its
    own, and a launcher killed before it stopped them would otherwise orphan them."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def reap_children() -> None:
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def stop_strays(timeout: float = STRAYS_TIMEOUT_SECONDS) -> None:
    """Kill everything the worker left running below us or in our process group (as a
    container's end would), until nothing is left."""
    me = os.getpid()
    deadline = time.monotonic() + timeout
    while True:
        reap_children()
        left = (set(files.descendants(me)) | set(files.group_members(os.getpgid(0)))) - {me}
        if not left or time.monotonic() > deadline:
            return
        for pid in left:
            _kill(pid)
        time.sleep(0.05)


def stop_other_workers(job_dir: str, index: int) -> None:
    """Stop the job's other workers; their supervisors record how they ended (waiting for
    them here could wait for a supervisor that is stopping us)."""
    for other, pgid in files.worker_pids(job_dir).items():
        if other != index:
            stop_group(pgid, wait_for_supervisor=False)


def supervise(job_dir: str, index: int, argv: list[str]) -> int:
    # Our own process group: cancel signals the whole group; the supervisor ignores
    # SIGTERM so it can still record how the worker ended.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    adopt_orphans()
    meta = files.read_json(files.job_file(job_dir))
    if meta is None:
        return 127  # the job was abandoned before this worker came up: nothing to run
    files.write_json(files.worker_file(job_dir, index), {"pid": os.getpid(), "pgid": os.getpgid(0)})
    # Cancelled, or failed for want of another worker, while this one was coming up: stay
    # out (the pid is written first, so a canceller either sees it or we see its mark).
    if files.exists(files.cancel_file(job_dir)) or files.exists(files.failed_file(job_dir)):
        return 0
    env = {**os.environ, **meta.get("env", {})}
    ranks = trainers_per_worker((meta.get("spec") or {}).get("gpus_per_worker", 0))
    with open(files.log_path(job_dir, index), "ab", buffering=0) as log:
        relay = TrainerLogRelay(files.launch_dir(job_dir, index), ranks, log.fileno())
        try:
            child = subprocess.Popen(
                argv, cwd=meta.get("workdir") or None, env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=log,  # its stdout is its late copy of rank 0's lines
                preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL),
            )
        except Exception as exc:  # noqa: BLE001 (OSError, or what exec refuses: the job must still end)
            relay.stop()
            log.write(f"paddlecloud: could not start worker {index}: {exc}\n".encode(errors="replace"))
            files.write_exit(job_dir, index, 127)
            files.mark_failed(job_dir, index, 127, f"Worker {index} could not start: {exc}.")
            stop_other_workers(job_dir, index)
            return 127
        relay.start()  # after the fork: no thread of ours runs while it happens (it reads from the start)
        timeout = None
        if meta.get("deadline"):
            timeout = max(meta["deadline"] - time.time(), 0.1)
        try:
            code = child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            log.write(f"paddlecloud: worker {index} reached the job's time limit; stopping it\n".encode())
            files.mark_deadline(job_dir)
            child.terminate()
            try:
                code = child.wait(timeout=STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                child.kill()
                code = child.wait()
            stop_other_workers(job_dir, index)
        stop_strays()  # no trainer writes any more: what the relay copies now is the last of it
        relay.stop()
    files.write_exit(job_dir, index, code)
    if code != 0 and not files.exists(files.cancel_file(job_dir)):
        if files.mark_failed(job_dir, index, code):
            stop_other_workers(job_dir, index)
    return code


def main(args: list[str]) -> int:
    job_dir, index, sep, *argv = args
    if sep != "--" or not argv:
        print("usage: local_supervisor JOB_DIR INDEX -- ARGV...", file=sys.stderr)
        return 2
    if os.fork() > 0:
        return 0  # the starter returns at once; the grandchild is re-parented
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    try:
        supervise(job_dir, int(index), argv)
    finally:
        os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
