"""The hub-scale benchmark's pure parts (benchmarks/hub_scale.py): the hub config it layers
on the product's, and how it counts the API server's requests and LISTs from /metrics."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def hub_scale():
    """benchmarks/hub_scale.py, imported with benchmarks/ on sys.path only meanwhile (its
    `common` would shadow other modules of that name)."""
    before = set(sys.modules)
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import hub_scale as module
    finally:
        sys.path.remove(str(BENCHMARKS))
        for name in set(sys.modules) - before:
            if name in ("common", "spawn", "hub_scale"):
                del sys.modules[name]
    return module


METRICS = """# HELP apiserver_request_total [STABLE] Counter of apiserver requests
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="cluster",subresource="",verb="LIST",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 3
apiserver_request_total{code="500",component="apiserver",dry_run="",group="",resource="pods",scope="cluster",subresource="",verb="LIST",version="v1"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="cluster",subresource="",verb="WATCH",version="v1"} 40
apiserver_request_total{code="200",component="apiserver",dry_run="",group="batch",resource="jobs",scope="cluster",subresource="",verb="LIST",version="v1"} 2e+00
"""


def test_lists_are_counted_by_resource_and_scope_whatever_the_answer(hub_scale):
    assert hub_scale.list_counts(METRICS) == {("pods", "cluster"): 8.0, ("pods", "namespace"): 3.0,
                                              ("jobs", "cluster"): 2.0}


def test_the_window_counts_only_what_grew_and_cluster_wide_lists_apart(hub_scale):
    before = hub_scale.list_counts(METRICS)
    after = {**before, ("pods", "cluster"): 11.0, ("configmaps", "namespace"): 4.0}
    delta = hub_scale.counts_delta(before, after)
    assert delta == {("pods", "cluster"): 3, ("configmaps", "namespace"): 4}
    assert hub_scale.cluster_lists(delta) == 3
    assert hub_scale.describe_lists(delta) == "configmaps (namespace) 4, pods (cluster) 3"


def test_the_plain_hub_runs_kubespawner_without_what_only_ours_adds(hub_scale):
    from traitlets.config import Config

    ours = hub_scale.bench_config("/product.py", "t0ken", 4321, plain=False)
    plain = hub_scale.bench_config("/product.py", "t0ken", 4321, plain=True)
    assert "load_subconfig('/product.py')" in ours and "spawner_class" not in ours
    c = Config()
    c.JupyterHub.services = [{"name": "quota"}]
    c.JupyterHub.load_roles = []
    c.KubeSpawner.volumes = [{"name": "home"}, {"name": "dataset-imagenet"}]
    c.KubeSpawner.volume_mounts = [{"name": "home"}, {"name": "dataset-imagenet"}]
    exec(compile(plain, "bench_config.py", "exec"), {"get_config": lambda: c, "load_subconfig": lambda path: None})
    assert c.JupyterHub.spawner_class == "kubespawner.KubeSpawner"
    assert c.KubeSpawner.service_account is None
    assert [v["name"] for v in c.KubeSpawner.volumes] == ["home"]
    assert [m["name"] for m in c.KubeSpawner.volume_mounts] == ["home"]
    assert [s["name"] for s in c.JupyterHub.services] == ["quota", hub_scale.BENCH_SERVICE]
    assert c.JupyterHub.services[1]["api_token"] == "t0ken"
    assert c.KubeSpawner.pod_connect_ip == "127.0.0.1" and c.KubeSpawner.port == 4321


def test_progress_events_are_read_from_server_sent_lines(hub_scale):
    assert hub_scale.sse_data(b'data: {"ready": true, "progress": 100}\n') == {"ready": True, "progress": 100}
    assert hub_scale.sse_data(b"\n") is None
    assert hub_scale.sse_data(b": keepalive\n") is None


REQUESTS = METRICS + """apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 5
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="status",verb="PATCH",version="v1"} 900
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 800
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="serviceaccounts",scope="resource",subresource="",verb="POST",version="v1"} 2
"""


def test_every_request_is_counted_by_verb_resource_and_scope(hub_scale):
    counts = hub_scale.request_counts(REQUESTS)
    assert counts[("LIST", "pods", "cluster")] == 8.0
    assert counts[("POST", "pods/binding", "resource")] == 5.0
    assert counts[("WATCH", "pods", "cluster")] == 40.0
    assert hub_scale.list_counts(REQUESTS) == hub_scale.list_counts(METRICS)  # a subresource's POST is no LIST


def test_what_the_spawns_cost_leaves_out_heartbeats_and_watches(hub_scale):
    before = {key: 0.0 for key in hub_scale.request_counts(REQUESTS)}
    costs = hub_scale.spawn_requests(hub_scale.counts_delta(before, hub_scale.request_counts(REQUESTS)))
    assert costs == {("LIST", "pods"): 11, ("LIST", "jobs"): 2, ("POST", "pods/binding"): 5,
                     ("POST", "serviceaccounts"): 2}
    assert hub_scale.describe_requests(costs, 4, 2.0) == "20 (5.0 per spawn, 10/s): LIST 13, POST 7"
    assert hub_scale.top_requests(costs, 2) == "LIST pods 11, POST pods/binding 5"
