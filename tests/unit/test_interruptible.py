"""A run started with SIGINT ignored (a shell's background command) still stops its servers
with SIGINT: tests/serverutil.py's interruptible(), which every tier's conftest calls."""

import signal
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

CHILD_HANDLES_SIGINT = ("import signal, subprocess, sys\n"
                        "child = 'import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)'\n"
                        "print(subprocess.run([sys.executable, '-c', child], capture_output=True, text=True).stdout.strip())")


def child_handles_sigint(setup: str) -> str:
    """What a Python child of a process started with SIGINT ignored says, after `setup` ran there."""
    result = subprocess.run([sys.executable, "-c", setup + "\n" + CHILD_HANDLES_SIGINT], cwd=TESTS,
                            capture_output=True, text=True, timeout=60,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_a_run_started_with_sigint_ignored_starts_children_that_sigint_stops():
    assert child_handles_sigint("from serverutil import interruptible; interruptible()") == "True"


def test_without_it_they_would_ignore_sigint():
    assert child_handles_sigint("") == "False"
