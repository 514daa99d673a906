"""tools/alongside.sh, which make test-cluster uses to run the cluster tier's two parts at once:
the side command's output comes after the main command's, whole, and neither command's failure
is lost."""

import subprocess
from pathlib import Path

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
