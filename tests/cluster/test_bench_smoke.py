"""Every benchmark section that needs the test control plane, at smoke size
(benchmarks/run.py --smoke): each must run and its correctness checks pass. No timing is
checked; this is what keeps `make bench` from breaking unnoticed between its runs.

The KWOK sections start a cluster of their own with KWOK nodes only (no real node: the
benchmark's KwokBench), as `make bench` does; `follow-node` needs the real node and skips
without it (fails under PADDLECLOUD_REQUIRE_REAL_NODE=1)."""

from __future__ import annotations

from availability import skip_or_fail
from benchsmoke import run_smoke
import pytest

KWOK_SECTIONS = ["cli", "logs", "follow", "submit", "list", "spawn"]


@pytest.mark.timeout(900)
def test_the_kwok_benchmarks_run_and_their_checks_pass(k8s_bin_dir, tmp_path):
    report = run_smoke(KWOK_SECTIONS, tmp_path / "results.md", extra_path=k8s_bin_dir, timeout=840)
    for title in ("CLI start-up (KWOK)", "Whole merged log (KWOK)", "Submit a 4-worker job (KWOK)",
                  "Listing 3 jobs (KWOK)", "2 concurrent notebook spawns (KWOK)"):
        assert f"## {title}" in report, title


@pytest.mark.own_real_node  # its cluster takes the real node: it runs before the session's
@pytest.mark.timeout(900)
def test_the_real_node_follow_benchmark_runs_and_its_checks_pass(k8s_bin_dir, tmp_path):
    from conftest import real_node_missing

    reason = real_node_missing(k8s_bin_dir)
    if reason:
        skip_or_fail(f"real node: {reason}")
    # (the section writes a "not run here" row instead of failing when the node is missing)
    report = run_smoke(["follow-node"], tmp_path / "results.md", extra_path=k8s_bin_dir, timeout=840)
    assert "not measured" not in report.split("## ", 2)[1], report
