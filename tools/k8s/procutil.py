"""Small helpers shared by cluster.py, node.py and images.py: processes by pid, JSON state
files, HTTP health checks.

Stdlib only: images.py runs with the system python3.
"""

import json
import os
import signal
import ssl
import time
import urllib.error
import urllib.request

CHILDREN = {}  # pid -> Popen of the processes this interpreter started (register them here)


# ---------------------------------------------------------------- processes


def pid_alive(pid):
    """Whether pid is a running process; a zombie counts as gone (our own children are reaped)."""
    if pid in CHILDREN:  # our child: poll() also reaps it
        return CHILDREN[pid].poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    fields = _stat_fields(pid)
    return bool(fields) and fields[0] != "Z"


def _stat_fields(pid):
    """The fields of /proc/PID/stat after the command name (state first; [] when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def pid_exe(pid):
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


def pid_cmdline(pid):
    """The argv of pid ([] when it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().decode(errors="replace").split("\0")
    except OSError:
        return []


def all_pids():
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def pid_started(pid):
    """When pid started, in clock ticks since boot (None when it is gone): with the pid, it names
    one process for good, where a pid alone may be reused once the kernel's pids wrap (a test run
    uses tens of thousands, and /proc/sys/kernel/pid_max may be 32768)."""
    fields = _stat_fields(pid)
    return int(fields[19]) if len(fields) > 19 else None


def process_record(pid, exe):
    """What a state file keeps of a process it may have to stop later: {"pid", "exe", "started"}
    (exe: the argv[0] it runs)."""
    return {"pid": pid, "exe": exe, "started": pid_started(pid)}


def runs_as_recorded(info):
    """Whether a recorded process still runs: the same pid and start time (a record without
    "started", written by an older version, is matched by pid and program)."""
    pid = info["pid"]
    if not pid_alive(pid):
        return False
    if info.get("started") is not None:
        return pid_started(pid) == info["started"]
    return pid_cmdline(pid)[:1] == [info["exe"]]


def signal_pids(pids, sig):
    """Send sig to each pid; those already gone are skipped."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def kill_and_wait(pids, sig=signal.SIGTERM, timeout=15.0):
    """Signal pids, SIGKILL what is still alive after timeout; return survivors."""
    pids = [p for p in pids if pid_alive(p)]
    signal_pids(pids, sig)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.1)
    signal_pids([p for p in pids if pid_alive(p)], signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if pid_alive(p)]


def stop_pids(pids, timeout=15.0):
    """SIGTERM each {name: record} (if it still runs as recorded), then SIGKILL stragglers.

    Returns the pids that were still alive at the end (should be empty).
    """
    return kill_and_wait([info["pid"] for info in pids.values() if runs_as_recorded(info)], timeout=timeout)


def stop_in_turn(pids, timeout=15.0):
    """stop_pids for each {name: record} in turn, in the order given: a component's clients
    before it. Stopped together, Kueue and the API server each waited on the other until the
    timeout's SIGKILL (a cluster stopped in 15 s instead of 3)."""
    return [pid for name, info in pids.items() for pid in stop_pids({name: info}, timeout)]


# ---------------------------------------------------------------- JSON files


def write_json(path, data):
    """Write data as JSON to path atomically (a reader sees the old file or the new one)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=1)
    os.replace(tmp, path)


def read_json(path):
    with open(path) as fh:
        return json.load(fh)


# ---------------------------------------------------------------- HTTP


def http_ok(url, insecure=False):
    """Whether GET url answers 200 within 2 s."""
    ctx = None
    if insecure:  # the component's self-signed serving cert on 127.0.0.1
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=2, context=ctx) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def file_mentions(path, text):
    """Whether the file at `path` (a log, a config) contains `text`; False if it cannot be read."""
    try:
        with open(path, errors="replace") as fh:
            return text in fh.read()
    except OSError:
        return False
