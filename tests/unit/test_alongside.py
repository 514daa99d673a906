"""tools/alongside.sh, which make test uses to run the tiers that need no cluster next to the
cluster and helm tiers: the side command's output comes after the main command's, whole, and
neither command's failure is lost."""

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "alongside.sh"


def alongside(tmp_path, side: str, *main: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), str(tmp_path / "logs" / "side.log"), side, *main],
                          capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})})


def niceness(done: subprocess.CompletedProcess) -> dict[str, int]:
    return {name: int(value) for name, value in (line.split() for line in done.stdout.splitlines()
                                                  if line.startswith(("main ", "side ")))}


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


def test_the_side_runs_at_a_lower_cpu_priority_than_the_main_command_unless_told_otherwise(tmp_path):
    show = ("echo side $(nice)", "bash", "-c", "echo main $(nice)")
    default = niceness(alongside(tmp_path, *show, env={"ALONGSIDE_NICE": ""}))
    assert default["side"] > default["main"], default
    same = niceness(alongside(tmp_path, *show, env={"ALONGSIDE_NICE": "0"}))
    assert same["side"] == same["main"], same


def test_it_says_how_to_call_it():
    done = subprocess.run([str(SCRIPT), "only-a-log"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "usage:" in done.stderr
