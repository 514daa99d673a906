"""The on-disk layout of a local job, and the small atomic file operations on it.

    $PADDLECLOUD_HOME/jobs/<name>/
        job.json          spec, created time, working folder, environment, deadline
        worker-<i>.json   the supervisor's pid (= process group id)
        worker-<i>.log    everything worker i printed: its launcher's own messages, and each
                          trainer's lines as written (paddle_ext.trainer_logs)
        launch-<i>/       the launcher's --log_dir (workerlog.J: what trainer J printed)
        worker-<i>.exit   {"exit_code": N, "finished": ISO time}
        failed            the first worker that failed, and its exit code (none if it never
                          started; then a message says why)
        cancelled         when the job was cancelled
        deadline          when the job hit max_runtime_seconds
        code.tar.gz       the code the job ran (when the folder was small enough to keep)

The job's outputs ($PADDLECLOUD_OUTPUT_DIR) go next to its code, in the folder it ran
in: <workdir>/paddlecloud-outputs/<name>/.
"""

from __future__ import annotations

import json
import os
import tempfile

from ..timestamps import now_iso


def job_file(job_dir: str) -> str:
    return os.path.join(job_dir, "job.json")


def worker_file(job_dir: str, index: int) -> str:
    return os.path.join(job_dir, f"worker-{index}.json")


def log_path(job_dir: str, index: int) -> str:
    return os.path.join(job_dir, f"worker-{index}.log")


def launch_dir(job_dir: str, index: int) -> str:
    """Worker `index`'s launcher --log_dir: its trainers write workerlog.J there."""
    return os.path.join(job_dir, f"launch-{index}")


def exit_file(job_dir: str, index: int) -> str:
    return os.path.join(job_dir, f"worker-{index}.exit")


def cancel_file(job_dir: str) -> str:
    return os.path.join(job_dir, "cancelled")


def failed_file(job_dir: str) -> str:
    return os.path.join(job_dir, "failed")


def deadline_file(job_dir: str) -> str:
    return os.path.join(job_dir, "deadline")


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


def _process_state(pid: int) -> str | None:
    """The state letter from /proc (R, S, Z, ...), or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def process_alive(pid: int) -> bool:
    """Running (not a zombie waiting to be reaped)."""
    state = _process_state(pid)
    return state is not None and state not in ("Z", "X")


def _live_processes() -> list[tuple[int, int, int]]:
    """(pid, parent pid, process group) of every process that is not a zombie."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if fields[0] not in ("Z", "X"):
            found.append((int(entry), int(fields[1]), int(fields[2])))
    return found


def group_members(pgid: int) -> list[int]:
    """Live processes whose process group is `pgid`."""
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
    return bool(group_members(pgid))
