"""Supervises one worker of a local job, detached from whoever started it.

    python -m paddle_ext.backends.local_supervisor JOB_DIR INDEX -- ARGV...

Forks into the background (so the Jupyter server never owns the process and can
restart freely), becomes leader of a new process group, runs ARGV (Paddle's
launcher) with its messages appended to `worker-INDEX.log` and every trainer's lines
copied there as they are written (paddle_ext.trainer_logs: the launcher's own copy of
local rank 0's output, every ~2 s, is left out), and records the exit code in `worker-INDEX.exit`.
If the worker fails, it stops the other workers and, when the failure is worth a restart
(paddle_ext.restarts) and the job's `max_restarts` allows, every worker's supervisor runs
its command again as the next attempt (a marker line in each log says which and why);
otherwise it marks the job failed. It also enforces the job's deadline, and once its worker
has ended for good starts the queued jobs that now fit (LocalBackend.promote, in a process
of its own: local_promote). Once the worker has ended, nothing it started may outlive
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

from ..constants import RESTART_ENV
from ..ports import free_port
from ..restarts import decide, failure_message, may_be_a_consequence, restart_marker
from ..timestamps import now_iso
from ..launch import trainers_per_worker
from ..trainer_logs import TrainerLogRelay
from . import local_files as files

TYPE_CHECKING = False  # (typing itself stays out of a supervisor's start)
if TYPE_CHECKING:
    from typing import Callable

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
STOP_GRACE_SECONDS = 5.0  # from SIGTERM to SIGKILL, when a worker's peer failed or its deadline came
STRAYS_TIMEOUT_SECONDS = 10.0  # for killed processes to be gone (they may be in the kernel)
# When a worker's own code fails and restarts are left, how long the other workers get to end
# on their own first: a worker killed at the same moment (whose loss made this one's program
# fail) then counts as the cause, and the job restarts instead of failing.
PEER_FAILURE_GRACE_SECONDS = 10.0
# For the other workers' runs to end once stopped (grace, then their strays killed).
RUN_END_TIMEOUT_SECONDS = STOP_GRACE_SECONDS + STRAYS_TIMEOUT_SECONDS + 5.0
POLL_SECONDS = 0.1


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
    max_restarts = meta["spec"].get("max_restarts") or 0
    workers = meta["spec"]["workers"]
    attempt = 0
    with open(files.log_path(job_dir, index), "ab", buffering=0) as log:
        code = 0
        while True:
            if attempt and ended_by_user(job_dir):  # cancelled while the restart was decided
                break
            code = run_attempt(job_dir, index, argv, meta, attempt, log)
            if code is None:  # could not start: the job has failed
                return 127
            files.write_json(files.attempt_exit_file(job_dir, attempt, index), {
                "exit_code": code, "stopped": files.exists(files.attempt_stop_file(job_dir, attempt))})
            if ended_by_user(job_dir):
                break
            decision = settle(job_dir, index, workers, attempt, max_restarts, code)
            if decision is None or not decision.get("restart"):
                break
            attempt += 1
            argv = with_master(argv, decision["master"])
            log.write((decision["marker"] + "\n").encode(errors="replace"))
    files.write_exit(job_dir, index, code)
    return code


def ended_by_user(job_dir: str) -> bool:
    """Cancelled, or past its deadline: no restart, whatever the exit codes."""
    return files.exists(files.cancel_file(job_dir)) or files.exists(files.deadline_file(job_dir))


def run_attempt(job_dir: str, index: int, argv: list[str], meta: dict, attempt: int, log) -> int | None:
    """Run the worker's command once, as attempt `attempt`, its trainers' lines relayed into
    the log as they are written; its exit code (None: it could not start, and the job is
    marked failed). Nothing it started outlives it."""
    env = {**os.environ, **meta.get("env", {}), RESTART_ENV: str(attempt)}
    launch_dir = files.launch_dir(job_dir, index, attempt)  # each attempt's trainers write afresh
    argv = with_option(argv, "--log_dir", launch_dir)
    ranks = trainers_per_worker((meta.get("spec") or {}).get("gpus_per_worker", 0))
    relay = TrainerLogRelay(launch_dir, ranks, log.fileno())
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
        return None
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
    return code


def with_option(argv: list[str], option: str, value: str) -> list[str]:
    """The launcher's command line with `option`'s value replaced (when it has the option)."""
    argv = list(argv)
    if option in argv:
        argv[argv.index(option) + 1] = value
    return argv


def with_master(argv: list[str], master: str) -> list[str]:
    """The launcher's command line with another rendezvous address (each attempt gets its own)."""
    return with_option(argv, "--master", master)


def settle(job_dir: str, index: int, workers: int, attempt: int, max_restarts: int, code: int) -> dict | None:
    """After this worker's run in `attempt` ended with `code`: what happens next, once every
    worker's run has ended (a decision dict, or None when the attempt succeeded or the job
    was cancelled). The first worker to fail on its own decides for all."""
    stopped = files.exists(files.attempt_stop_file(job_dir, attempt))
    if code != 0 and not stopped and files.create_json_once(
            files.attempt_failed_file(job_dir, attempt), {"worker": index, "exit_code": code, "at": now_iso()}):
        return decide_attempt(job_dir, index, workers, attempt, max_restarts, code)
    while True:  # another worker decides, or every worker has finished well
        decision = files.read_json(files.decision_file(job_dir, attempt))
        if decision is not None:
            return decision
        if ended_by_user(job_dir):
            return None
        exits = [files.read_json(files.attempt_exit_file(job_dir, attempt, i)) for i in range(workers)]
        if all(e is not None and e["exit_code"] == 0 for e in exits) and not files.exists(
                files.attempt_failed_file(job_dir, attempt)):
            return None
        lost = lost_workers(job_dir, workers, attempt)
        if lost and files.create_json_once(files.attempt_failed_file(job_dir, attempt),
                                           {"worker": lost[0], "exit_code": None, "at": now_iso()}):
            return decide_attempt(job_dir, lost[0], workers, attempt, 0, None)  # its supervisor is gone
        time.sleep(POLL_SECONDS)


def lost_workers(job_dir: str, workers: int, attempt: int) -> list[int]:
    """Workers whose supervisor is gone without saying how their run in `attempt` ended."""
    pids = files.worker_pids(job_dir)
    # Liveness before the record: a supervisor writes its record and then ends, so one seen
    # gone has written it, if it ever will.
    gone = [i for i in range(workers) if i in pids and not files.group_alive(pids[i])]
    return [i for i in gone if not files.exists(files.attempt_exit_file(job_dir, attempt, i))]


def decide_attempt(job_dir: str, index: int, workers: int, attempt: int, max_restarts: int,
                   code: int | None) -> dict:
    """The deciding worker's part: stop the others (at once when this failure is a likely
    cause; after PEER_FAILURE_GRACE_SECONDS when it may be another's consequence, the user's
    error or an abort, so that a worker killed at the same moment is seen as the cause), wait until every run has ended,
    then record the decision and, when the job ends, its failure."""
    if attempt < max_restarts and may_be_a_consequence(code):
        _wait_until(lambda: len(ended_runs(job_dir, workers, attempt)) >= workers, PEER_FAILURE_GRACE_SECONDS)
    files.create_json_once(files.attempt_stop_file(job_dir, attempt), {"at": now_iso()})
    stop_other_workers(job_dir, index)
    _wait_until(lambda: len(ended_runs(job_dir, workers, attempt)) >= workers
                or bool(lost_workers(job_dir, workers, attempt)), RUN_END_TIMEOUT_SECONDS)
    runs = ended_runs(job_dir, workers, attempt)
    failures = {i: run["exit_code"] for i, run in runs.items() if run["exit_code"] != 0 and not run["stopped"]}
    failures[index] = code
    lost = [i for i in lost_workers(job_dir, workers, attempt) if i not in runs]
    if lost:  # a worker without its supervisor cannot be restarted here
        failures = {lost[0]: None}
        max_restarts = 0
    decision = decide(failures, attempt, max_restarts)
    record = {"restart": decision.restart, "reason": decision.reason, "worker": decision.worker, "at": now_iso()}
    if decision.restart:
        record["master"] = f"127.0.0.1:{free_port()}"
        record["marker"] = restart_marker(attempt + 1, max_restarts, decision.reason)
    else:
        files.mark_failed(job_dir, decision.worker, failures[decision.worker],
                          failure_message(decision.reason, attempt, max_restarts, decision.retryable))
    files.write_json(files.decision_file(job_dir, attempt), record)
    return record


def ended_runs(job_dir: str, workers: int, attempt: int) -> dict[int, dict]:
    """The runs of `attempt` that have ended, by worker."""
    found = {}
    for i in range(workers):
        run = files.read_json(files.attempt_exit_file(job_dir, attempt, i))
        if run is not None:
            found[i] = run
    return found


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
        start_queued(job_dir)
    finally:
        os._exit(0)


def start_queued(job_dir: str) -> None:
    """This worker has ended and holds nothing now: start the queued jobs that fit (see
    LocalBackend.promote). Only when some wait, as the backend costs an import."""
    jobs_dir = os.path.dirname(os.path.abspath(job_dir))
    if not files.queued_names(jobs_dir):
        return
    # Detached, and not waited for: this worker reads as ended as soon as we are gone.
    subprocess.Popen([sys.executable, "-m", "paddle_ext.backends.local_promote", jobs_dir],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
