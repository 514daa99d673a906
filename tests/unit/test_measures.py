"""A test's measures are printed at the end of the run, with pytest-xdist too (tests/measures.py)."""

import subprocess

import pytest

from serverutil import isolated_pytest

SUITE = '''
from measures import MEASURE

def test_passes_with_a_measure(record_property):
    record_property(MEASURE, "spread: 0.012")
    print("own output, not shown when the test passes")

def test_fails_with_a_measure(record_property):
    record_property(MEASURE, "spread: 0.301")
    assert False
'''


def run(tmp_path, *args: str) -> str:
    cmd, env = isolated_pytest(tmp_path, SUITE, "-p", "measures", *args)
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr  # one test fails
    return done.stdout


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["one process", "xdist"])
def test_every_measure_is_printed_under_measures_at_the_end(tmp_path, workers):
    out = run(tmp_path, *workers)
    section = out[out.index(" measures "):]
    assert "spread: 0.012  (test_isolated.py::test_passes_with_a_measure)" in section, out
    assert "spread: 0.301  (test_isolated.py::test_fails_with_a_measure)" in section, out
    assert "own output" not in out
