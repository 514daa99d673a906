"""Runs benchmark sections at smoke size (`benchmarks/run.py --smoke`): what the tiers use
so that every `make bench` section runs in `make test` too. Only that a section runs and
its correctness checks pass is checked; its timings are never looked at."""

from __future__ import annotations

import os
from pathlib import Path
import subprocess
import sys

REPO = Path(__file__).resolve().parents[1]
RUNNER = REPO / "benchmarks" / "run.py"


def run_smoke(sections: list[str], out: Path, extra_path: str | None = None, timeout: float = 540,
              args: tuple[str, ...] = ()) -> str:
    """Run `sections` at smoke size (more of the runner's options in `args`); the report written
    to `out`. Fails (AssertionError with the runner's output) unless the runner exits 0, which it
    does only when every section ran and every correctness check passed."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # The venv's console scripts (`paddlecloud`) and the control-plane binaries, as `make bench` has them.
    env["PATH"] = os.pathsep.join(p for p in (extra_path, os.path.dirname(sys.executable), env.get("PATH", "")) if p)
    proc = subprocess.run([sys.executable, str(RUNNER), "--smoke", "--only", ",".join(sections), "--out", str(out),
                           *args],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    said = f"benchmarks/run.py --smoke --only {','.join(sections)} exited {proc.returncode}:\n" \
           f"{proc.stderr[-4000:]}\n{proc.stdout[-2000:]}"
    assert proc.returncode == 0, said
    report = out.read_text()
    assert "all checks passed" in report, said
    assert "The section failed" not in report, said
    return report
