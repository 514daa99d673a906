"""Every benchmark section that needs no cluster, at smoke size (benchmarks/run.py
--smoke): it must run and its correctness checks pass. No timing is checked; this is
what keeps `make bench` from breaking unnoticed between its runs."""

from __future__ import annotations

from benchsmoke import run_smoke
import pytest


@pytest.mark.timeout(600)
def test_the_local_job_benchmark_runs_and_its_checks_pass(tmp_path):
    report = run_smoke(["local"], tmp_path / "results.md")
    assert "Local job: submit → first worker line" in report


@pytest.mark.timeout(600)
def test_the_live_lines_benchmark_runs_and_its_checks_pass(tmp_path):
    report = run_smoke(["live"], tmp_path / "results.md")
    assert "Live lines: print → follow (local)" in report
