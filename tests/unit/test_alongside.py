"""tools/alongside.sh, which make test-cluster uses to run the cluster tier's two parts at once:
the side command's output comes after the main command's, whole, neither command's failure is
lost, and stopping it stops the side command (tools/background.sh, which tools/k8s/prebuild.sh
uses too)."""

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from serverutil import wait_for
from tools.k8s.procutil import pid_alive

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "alongside.sh"


def alongside(tmp_path, side: str, *main: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), str(tmp_path / "logs" / "side.log"), side, *main],
                          capture_output=True, text=True, timeout=60)


def test_the_side_output_follows_the_main_output_whole_and_stays_in_its_log(tmp_path):
    done = alongside(tmp_path, "echo side one; echo side two", "bash", "-c", "echo main")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines.index("main") < lines.index("side one") < lines.index("side two"), lines
    assert (tmp_path / "logs" / "side.log").read_text() == "side one\nside two\n"


def test_a_failed_side_fails_the_run_and_a_failed_main_keeps_its_own_status(tmp_path):
    assert alongside(tmp_path, "exit 3", "true").returncode == 3
    failed = alongside(tmp_path, "echo still printed; exit 3", "bash", "-c", "exit 4")
    assert failed.returncode == 4 and "still printed" in failed.stdout, failed.stdout


def test_it_says_how_to_call_it():
    done = subprocess.run([str(SCRIPT), "only-a-log"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "usage:" in done.stderr


def test_stopping_it_stops_everything_the_side_command_started(tmp_path):
    """As Ctrl-C or a CI timeout stops make: a signal to the script's process group. The side
    command runs in a session of its own, so only the script's trap can stop it."""
    side_pid = tmp_path / "side.pid"
    gate = tmp_path / "main-started"
    script = subprocess.Popen(
        [str(SCRIPT), str(tmp_path / "side.log"), f"sleep 600 & echo $! > {side_pid}; wait",
         sys.executable, "-c", f"import pathlib, time; pathlib.Path({str(gate)!r}).touch(); time.sleep(600)"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for(lambda: gate.exists() and side_pid.exists() and side_pid.read_text().strip(), timeout=30,
                 what="both commands started")
        sleeper = int(side_pid.read_text())
        os.killpg(script.pid, signal.SIGTERM)
        assert script.wait(timeout=30) == 143
        wait_for(lambda: not pid_alive(sleeper), timeout=30, what=f"the side command's sleep (pid {sleeper}) stopped")
    finally:
        if script.poll() is None:
            os.killpg(script.pid, signal.SIGKILL)
        script.communicate()
        if side_pid.exists():  # left running only where the script failed to stop it
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(side_pid.read_text()), signal.SIGKILL)
