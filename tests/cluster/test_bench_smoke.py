"""Every benchmark section that needs the test control plane, at smoke size
(benchmarks/run.py --smoke): each must run and its correctness checks pass. No timing is
checked; this is what keeps `make bench` from breaking unnoticed between its runs.

The KWOK sections start a cluster of their own with KWOK nodes only (no real node: the
benchmark's KwokBench), as `make bench` does; the `queue` section another, with Kueue, and
`hub-scale` another, with a real hub. `follow-node` runs on the session's cluster with the real
node (`--cluster-state`: a namespace of its own, deleted after), where `make bench` starts one.

`follow-node` had no smoke test for a while (the first one written failed in CI and was taken
out), and in that time the product's workers stopped passing on what Paddle's launcher writes
to its standard output (paddle_ext.trainer_logs), which is where the section's workers wrote:
its full run then failed with no follower ever seeing a line. That is the rot this file is for."""

from __future__ import annotations

from availability import skip_or_fail
from benchsmoke import run_smoke
import pytest

from tools.k8s.kueue import unavailable_reason as kueue_missing

KWOK_SECTIONS = ["cli", "logs", "follow", "submit", "list", "spawn"]


@pytest.mark.timeout(900)
def test_the_kwok_benchmarks_run_and_their_checks_pass(k8s_bin_dir, tmp_path):
    report = run_smoke(KWOK_SECTIONS, tmp_path / "results.md", extra_path=k8s_bin_dir, timeout=840)
    for title in ("CLI start-up (KWOK)", "Whole merged log (KWOK)", "Submit a 4-worker job (KWOK)",
                  "Listing 3 jobs (KWOK)", "2 concurrent notebook spawns (KWOK)"):
        assert f"## {title}" in report, title


@pytest.mark.timeout(600)
def test_the_kueue_benchmark_runs_and_its_checks_pass(k8s_bin_dir, tmp_path):
    """The `queue` section (KWOK nodes and the real Kueue) at smoke size: a job submitted with
    and without Kueue runs, 5 held jobs are all listed Queued at positions 1..5, and each is
    admitted once when the queue is released."""
    reason = kueue_missing(k8s_bin_dir)
    if reason:
        skip_or_fail(f"kueue: {reason}")
    report = run_smoke(["queue"], tmp_path / "results.md", extra_path=k8s_bin_dir, timeout=540)
    assert "## Kueue: start-up, admission, reading the line (KWOK + Kueue)" in report
    assert "did not run" not in report
    for check in ("one Workload per job", "every Workload admitted", "each admitted once"):
        assert f"| {check}" in report, check


@pytest.mark.timeout(900)
def test_the_hub_scale_benchmark_runs_and_its_checks_pass(k8s_bin_dir, tmp_path):
    """A real JupyterHub with our spawner (and one with plain KubeSpawner) on a KWOK
    cluster of its own: spawns through the REST API, a steady window, jobs and the quota
    service's pages, a restart with every server running; each step's checks."""
    report = run_smoke(["hub-scale"], tmp_path / "results.md", extra_path=k8s_bin_dir, timeout=840)
    assert "## Hub at 5 users (KWOK)" in report
    assert "**NO**" not in report


@pytest.mark.timeout(600)
def test_the_real_node_follow_benchmark_runs_and_its_checks_pass(real_cluster, k8s_bin_dir, tmp_path):
    """`follow-node` at smoke size, on the session's cluster (`--cluster-state`; `make bench`
    starts a real-node cluster of its own): a 2-worker job of ours whose trainers print lines,
    followed by our CLI, kubectl and the notebook server's SSE endpoint; every line of both
    workers once and in order in each; the section's namespace gone after it."""
    before = namespaces(real_cluster)
    report = run_smoke(["follow-node"], tmp_path / "results.md", extra_path=k8s_bin_dir, timeout=540,
                       args=("--cluster-state", real_cluster.state_dir))
    assert "## Follow: 2 workers × 20 lines/s (real node)" in report
    assert "not run" not in report
    assert namespaces(real_cluster) <= before  # nothing of the section is left in the session's cluster


def namespaces(cluster) -> set[str]:
    return {ns["metadata"]["name"] for ns in cluster.request("GET", "/api/v1/namespaces")["items"]}
