"""The on-disk layout of a local job, and the small atomic file operations on it.

    $PADDLECLOUD_HOME/jobs/<name>/
        job.json          spec, created time, working folder, environment, deadline (and
                          `admitted`, the time a queued job left the queue)
        worker-<i>.json   the supervisor's pid (= process group id)
        worker-<i>.log    everything worker i printed: its launcher's own messages, and each
                          trainer's lines as written (paddle_ext.trainer_logs)
        launch-<i>/       the launcher's --log_dir (workerlog.J: what trainer J printed); launch-<i>.attempt-<n>/ after a restart
        worker-<i>.exit   {"exit_code": N, "finished": ISO time}
        failed            the first worker that failed, and its exit code (none if it never
                          started; then a message says why)
        cancelled         when the job was cancelled
        deadline          when the job hit max_runtime_seconds
        attempt-<n>.worker-<i>.exit   how worker i's run in attempt n (0 first) ended, and
                          whether it was stopped because another worker failed
        attempt-<n>.failed   the first worker that failed on its own in attempt n (it decides)
        attempt-<n>.stop     the other workers of attempt n are being stopped
        attempt-<n>.json     what attempt n's failure led to: {"restart": bool, "reason",
                          "master" (of the next attempt), "marker" (the line each log gets)}
        code.tar.gz       the code the job ran (when the folder was small enough to keep)
    $PADDLECLOUD_HOME/jobs/.queue/
        <name>            a job waiting in line: {"seq": N, "at": ISO time}; removed when the
                          job starts or is cancelled (see local_queue, LocalBackend.promote)
    $PADDLECLOUD_HOME/jobs/.queue-settings.json
                          what a worker's supervisor needs to start queued jobs when its
                          worker ends (the backend's settings, written when a job queues)

The job's outputs ($PADDLECLOUD_OUTPUT_DIR) go next to its code, in the folder it ran
in: <workdir>/paddlecloud-outputs/<name>/.
"""

from __future__ import annotations

import json
import os
import re
import tempfile

from ..timestamps import now_iso


def job_file(job_dir: str) -> str:
    return os.path.join(job_dir, "job.json")


def worker_file(job_dir: str, index: int) -> str:
    return os.path.join(job_dir, f"worker-{index}.json")


def log_path(job_dir: str, index: int) -> str:
    return os.path.join(job_dir, f"worker-{index}.log")


def launch_dir(job_dir: str, index: int, attempt: int = 0) -> str:
    """Worker `index`'s launcher --log_dir in `attempt` (0 first): its trainers write
    workerlog.J there, a folder of their own in each attempt."""
    return os.path.join(job_dir, f"launch-{index}" if not attempt else f"launch-{index}.attempt-{attempt}")


def exit_file(job_dir: str, index: int) -> str:
    return os.path.join(job_dir, f"worker-{index}.exit")


def cancel_file(job_dir: str) -> str:
    return os.path.join(job_dir, "cancelled")


def failed_file(job_dir: str) -> str:
    return os.path.join(job_dir, "failed")


def deadline_file(job_dir: str) -> str:
    return os.path.join(job_dir, "deadline")


QUEUE_FOLDER = ".queue"
QUEUE_SETTINGS = ".queue-settings.json"


def queue_dir(jobs_dir: str) -> str:
    return os.path.join(jobs_dir, QUEUE_FOLDER)


def queue_entry(jobs_dir: str, name: str) -> str:
    return os.path.join(queue_dir(jobs_dir), name)


def queue_settings_file(jobs_dir: str) -> str:
    return os.path.join(jobs_dir, QUEUE_SETTINGS)


def queued_names(jobs_dir: str) -> list[str]:
    """The names of the jobs waiting in line (unordered); none when there is no queue."""
    try:
        return [entry for entry in os.listdir(queue_dir(jobs_dir)) if not entry.startswith(".")]
    except FileNotFoundError:
        return []


def queue_entries(jobs_dir: str) -> dict[str, int]:
    """Queued job name -> its sequence number (the order it joined in)."""
    entries = {}
    for name in queued_names(jobs_dir):
        data = read_json(queue_entry(jobs_dir, name))
        if data is not None:
            entries[name] = int(data.get("seq", 0))
    return entries


def leave_queue(jobs_dir: str, name: str) -> bool:
    """Take a job out of the line; False if it was not in it."""
    try:
        os.unlink(queue_entry(jobs_dir, name))
    except FileNotFoundError:
        return False
    return True


def nvidia_gpus(dev: str = "/dev") -> int:
    """How many NVIDIA GPUs this machine shows (/dev/nvidia0, /dev/nvidia1, ...)."""
    try:
        return sum(1 for entry in os.listdir(dev) if re.fullmatch(r"nvidia[0-9]+", entry))
    except OSError:
        return 0


def attempt_exit_file(job_dir: str, attempt: int, index: int) -> str:
    return os.path.join(job_dir, f"attempt-{attempt}.worker-{index}.exit")


def attempt_failed_file(job_dir: str, attempt: int) -> str:
    return os.path.join(job_dir, f"attempt-{attempt}.failed")


def attempt_stop_file(job_dir: str, attempt: int) -> str:
    return os.path.join(job_dir, f"attempt-{attempt}.stop")


def decision_file(job_dir: str, attempt: int) -> str:
    return os.path.join(job_dir, f"attempt-{attempt}.json")


def restarts(job_dir: str) -> list[dict]:
    """The job's restarts so far, in order: each attempt's decision to restart."""
    found = []
    attempt = 0
    while (decision := read_json(decision_file(job_dir, attempt))) is not None and decision.get("restart"):
        found.append(decision)
        attempt += 1
    return found


def exists(path: str) -> bool:
    return os.path.exists(path)


def read_json(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except json.JSONDecodeError:
        return None


def write_json(path: str, data: dict) -> None:
    """Write atomically: readers see the old file or the new one, never half of one."""
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def create_json_once(path: str, data: dict) -> bool:
    """Create `path` only if it does not exist yet; True if this call created it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f)
    return True


def write_exit(job_dir: str, index: int, code: int) -> None:
    write_json(exit_file(job_dir, index), {"exit_code": code, "finished": now_iso()})


def mark_failed(job_dir: str, index: int, code: int | None, message: str = "") -> bool:
    """Record the job's first failure; False if another worker failed first. A worker that
    could not start has no exit code; `message` says what went wrong."""
    record = {"worker": index, "exit_code": code, "at": now_iso()}
    if message:
        record["message"] = message
    return create_json_once(failed_file(job_dir), record)


def mark_deadline(job_dir: str) -> bool:
    return create_json_once(deadline_file(job_dir), {"at": now_iso()})


def mark_cancelled(job_dir: str) -> bool:
    return create_json_once(cancel_file(job_dir), {"at": now_iso()})


def worker_pids(job_dir: str) -> dict[int, int]:
    """Worker index -> process group id, for the workers that have started."""
    pids = {}
    for entry in os.listdir(job_dir):
        if entry.startswith("worker-") and entry.endswith(".json"):
            data = read_json(os.path.join(job_dir, entry))
            if data:
                pids[int(entry[len("worker-"):-len(".json")])] = data["pgid"]
    return pids


def _stat_fields(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command name: state (R, S, Z, ...), parent pid,
    process group, ...; [] when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _running(fields: list[str]) -> bool:
    return bool(fields) and fields[0] not in ("Z", "X")


def process_alive(pid: int) -> bool:
    """Running (not a zombie waiting to be reaped)."""
    return _running(_stat_fields(pid))


def _live_processes() -> list[tuple[int, int, int]]:
    """(pid, parent pid, process group) of every process that is not a zombie."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _running(fields := _stat_fields(int(entry))):
            found.append((int(entry), int(fields[1]), int(fields[2])))
    return found


def _group_exists(pgid: int) -> bool:
    """Whether the kernel knows a process of group `pgid`, zombies included (signal 0 is
    only checked, never sent)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's processes are in it
        return True
    return True


def group_members(pgid: int) -> list[int]:
    """Live processes whose process group is `pgid`."""
    if not _group_exists(pgid):  # a job's ended worker: no walk over every process's /proc entry
        return []
    return [pid for pid, _parent, group in _live_processes() if group == pgid]


def descendants(pid: int) -> list[int]:
    """Live processes below `pid`: its children, their children, and so on."""
    children: dict[int, list[int]] = {}
    for child, parent, _group in _live_processes():
        children.setdefault(parent, []).append(child)
    found, queue = [], list(children.get(pid, []))
    while queue:
        found.append(queue.pop())
        queue.extend(children.get(found[-1], []))
    return found


def group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` is running. A worker's group is led by its supervisor
    (pid = pgid): while that runs, it answers without reading every process's /proc entry
    (which the job list, status and log follows ask for every worker, again and again: on a
    busy machine that walk was most of their CPU). Only a group whose leader has ended is
    looked for process by process."""
    if not _group_exists(pgid):
        return False
    leader = _stat_fields(pgid)
    if _running(leader) and int(leader[2]) == pgid:
        return True
    return bool(group_members(pgid))
