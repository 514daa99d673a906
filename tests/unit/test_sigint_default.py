"""A run started with SIGINT ignored (a shell's background command) still starts the Kubernetes
hub so that SIGINT stops what it starts: tests/serverutil.py's sigint_default (KubeHub's
preexec_fn)."""

import signal
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

GRANDCHILD = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"


def grandchild_handles_sigint(preexec: str) -> str:
    """What a Python grandchild says, started (with `preexec` as its preexec_fn) by a process that
    was itself started with SIGINT ignored."""
    child = ("import subprocess, sys\n"
             "from serverutil import sigint_default\n"
             f"print(subprocess.run([sys.executable, '-c', {GRANDCHILD!r}], preexec_fn={preexec},\n"
             "                     capture_output=True, text=True).stdout.strip())")
    result = subprocess.run([sys.executable, "-c", child], cwd=TESTS, capture_output=True, text=True, timeout=60,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_a_process_started_with_sigint_default_stops_on_sigint():
    assert grandchild_handles_sigint("sigint_default") == "True"


def test_without_it_it_inherits_the_ignore():
    assert grandchild_handles_sigint("None") == "False"
