"""tools/k8s/procutil.stop_in_turn: a cluster's components are stopped one after another, each
gone before the next is signalled (stopped together, Kueue and the API server waited on each
other for the whole SIGTERM timeout); a recorded process is known by its pid, program and start
time, so a pid the kernel gave again to the same program is not stopped for it."""

from __future__ import annotations

import subprocess
import sys

from tools.k8s.procutil import pid_alive, process_record, runs_as_recorded, stop_in_turn
from serverutil import wait_for

# On SIGTERM: note whether the file named first already exists, then (slowly) write the second
# and exit; a "client" stopped before its "server" has written its file when the server looks.
PROGRAM = """
import os, signal, sys, time
seen, mine, ready = sys.argv[1:4]
def stop(*_):
    with open(mine, "w") as fh:
        fh.write("saw it" if os.path.exists(seen) else "too early")
    time.sleep(0.3)
    os.rename(mine, mine + ".done")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
open(ready, "w").close()
while True:
    time.sleep(0.05)
"""


def test_each_component_is_gone_before_the_next_is_signalled(tmp_path):
    client, server = tmp_path / "client", tmp_path / "server"
    procs = {}
    for name, seen, mine in (("kueue", tmp_path / "nothing", client), ("kube-apiserver", tmp_path / "client.done", server)):
        ready = tmp_path / f"{name}.ready"
        procs[name] = subprocess.Popen([sys.executable, "-c", PROGRAM, str(seen), str(mine), str(ready)])
        wait_for(ready.exists, 30, f"{name} ready")
    try:
        left = stop_in_turn({name: process_record(proc.pid, sys.executable) for name, proc in procs.items()})
        assert left == []
        assert (tmp_path / "server.done").read_text() == "saw it"  # the client had finished first
        assert not any(pid_alive(proc.pid) for proc in procs.values())
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()


def test_a_pid_given_again_to_the_same_program_is_not_the_recorded_process():
    proc = subprocess.Popen([sys.executable, "-c", "import time; print('running', flush=True); time.sleep(60)"],
                            stdout=subprocess.PIPE, text=True)
    try:
        record = process_record(proc.pid, sys.executable)
        assert runs_as_recorded(record)  # even before its argv is in /proc (right after Popen, it may not be)
        # the same pid and program, started at another time: what a wrapped pid looks like
        assert not runs_as_recorded({**record, "started": record["started"] - 1})
        assert proc.stdout.readline() == "running\n"
        # a record from before "started" is matched by pid and program
        assert runs_as_recorded({"pid": proc.pid, "exe": sys.executable})
        assert not runs_as_recorded({"pid": proc.pid, "exe": "/bin/sleep"})
    finally:
        proc.kill()
        proc.wait()
    assert not runs_as_recorded(record)
