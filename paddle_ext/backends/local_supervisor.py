"""Supervises one worker of a local job, detached from whoever started it.

    python -m paddle_ext.backends.local_supervisor JOB_DIR INDEX -- ARGV...

Forks into the background (so the Jupyter server never owns the process and can
restart freely), becomes leader of a new process group, runs ARGV with output
appended to `worker-INDEX.log`, and records the exit code in `worker-INDEX.exit`.
If the worker fails, it marks the job failed and stops the other workers; it also
enforces the job's deadline. Everything it knows lives in files of the job folder.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from . import local_files as files


def stop_group(pgid: int, grace_seconds: float = 5.0) -> None:
    """SIGTERM a process group, then SIGKILL what is left after the grace period."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_seconds
    while time.monotonic() < deadline:
        if not files.group_alive(pgid):
            return
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def stop_strays() -> None:
    """Kill what the worker left running in our process group (as a container's end would)."""
    me = os.getpid()
    for pid in files.group_members(os.getpgid(0)):
        if pid != me:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def stop_other_workers(job_dir: str, index: int) -> None:
    for other, pgid in files.worker_pids(job_dir).items():
        if other != index:
            stop_group(pgid)


def supervise(job_dir: str, index: int, argv: list[str]) -> int:
    # Our own process group: cancel signals the whole group; the supervisor ignores
    # SIGTERM so it can still record how the worker ended.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    meta = files.read_json(files.job_file(job_dir))
    if meta is None:
        return 127  # the job was abandoned before this worker came up: nothing to run
    files.write_json(files.worker_file(job_dir, index), {"pid": os.getpid(), "pgid": os.getpgid(0)})
    # Cancelled, or failed for want of another worker, while this one was coming up: stay
    # out (the pid is written first, so a canceller either sees it or we see its mark).
    if files.exists(files.cancel_file(job_dir)) or files.exists(files.failed_file(job_dir)):
        return 0
    env = {**os.environ, **meta.get("env", {})}
    with open(files.log_path(job_dir, index), "ab", buffering=0) as log:
        try:
            child = subprocess.Popen(
                argv, cwd=meta.get("workdir") or None, env=env, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT,
                preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL),
            )
        except Exception as exc:  # noqa: BLE001 (OSError, or what exec refuses: the job must still end)
            log.write(f"paddlecloud: could not start worker {index}: {exc}\n".encode(errors="replace"))
            files.write_exit(job_dir, index, 127)
            files.mark_failed(job_dir, index, 127, f"Worker {index} could not start: {exc}.")
            stop_other_workers(job_dir, index)
            return 127
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
                code = child.wait(timeout=5)
            except subprocess.TimeoutExpired:
                child.kill()
                code = child.wait()
            stop_other_workers(job_dir, index)
    stop_strays()
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
