"""Cluster capacity per node and the admin overview's document (pure)."""

from __future__ import annotations

import datetime
from decimal import Decimal

from paddle_ext.capacity import Resources, max_free_gpus, node_accepts, node_usage, pod_requests, pods_in_use, total
from paddle_ext.hub.overview import age_text, group_gpu_hours, job_row, overview
from paddle_ext.jobs import Job, Phase

NOW = datetime.datetime(2026, 1, 10, 12, 0, tzinfo=datetime.timezone.utc)


def node(name, gpus=8, cpu="64", memory="512Gi", unschedulable=False):
    return {"metadata": {"name": name}, "spec": {"unschedulable": unschedulable},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": cpu, "memory": memory}}}


def pod(node_name, gpus=0, cpu="1", memory="1Gi", phase="Running", init=None):
    requests = {"cpu": cpu, "memory": memory, **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    spec = {"nodeName": node_name, "containers": [{"resources": {"requests": requests}}]}
    if init:
        spec["initContainers"] = [{"resources": {"requests": init}}]
    return {"spec": spec, "status": {"phase": phase}}


def test_node_usage_counts_live_pods_requests():
    nodes = [node("b"), node("a", gpus=0, cpu="8", memory="32Gi")]
    pods = [pod("b", gpus=4, cpu="8", memory="64Gi"), pod("b", gpus=2, cpu="500m"),
            pod("b", gpus=2, phase="Succeeded"), pod("a", cpu="2", memory="4Gi"), pod(None, gpus=8)]
    usage = node_usage(nodes, pods)
    assert [n.name for n in usage] == ["a", "b"]
    assert usage[1].to_dict() == {"name": "b", "schedulable": True,
                                  "capacity": {"gpus": 8, "cpu": "64", "memory": "512Gi"},
                                  "used": {"gpus": 6, "cpu": "8.5", "memory": "65Gi"}}
    assert total(usage) == {"capacity": {"gpus": 8, "cpu": "72", "memory": "544Gi"},
                            "used": {"gpus": 6, "cpu": "10.5", "memory": "69Gi"}}
    assert max_free_gpus(nodes, pods, "nvidia.com/gpu") == 2
    assert max_free_gpus([node("c", unschedulable=True)], [], "nvidia.com/gpu") == 0


def test_the_most_free_gpus_count_only_nodes_the_waiting_pod_may_use():
    gpu_taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    team = {"metadata": {"name": "team", "labels": {"pool": "team"}}, "spec": {"taints": [gpu_taint]},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}}}
    other = {"metadata": {"name": "other", "labels": {"pool": "other"}}, "spec": {"taints": [gpu_taint]},
             "status": {"allocatable": {"nvidia.com/gpu": "8"}}}
    pods = [pod("team", gpus=6)]
    tolerating = {"nodeSelector": {"pool": "team"}, "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}
    assert max_free_gpus([team, other], pods) == 8
    assert max_free_gpus([team, other], pods, pod_spec=tolerating) == 2
    assert max_free_gpus([team, other], pods, pod_spec={"nodeSelector": {"pool": "team"}}) == 0  # taint not tolerated
    assert node_accepts(team, {"tolerations": [{"operator": "Exists"}]})
    assert node_accepts(team, {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present",
                                                "effect": "NoSchedule"}]})
    assert not node_accepts(team, {"tolerations": [{"key": "nvidia.com/gpu", "value": "absent"}]})
    assert not node_accepts(team, {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                                    "effect": "NoExecute"}]})
    prefer = {**team, "spec": {"taints": [{**gpu_taint, "effect": "PreferNoSchedule"}]}}
    assert node_accepts(prefer, {})


def test_an_init_container_larger_than_the_containers_counts():
    assert pod_requests(pod("n", cpu="1", memory="1Gi", init={"cpu": "4"})) == Resources(0, 4, 2**30)


def test_pods_in_use_counts_every_field_whatever_the_quota_limits():
    """Issue 28: a user's used CPU must not drop when their quota stops limiting CPU (a
    ResourceQuota counts only what it limits): the notebook's 0.5 CPU still counts."""
    pods = [pod("n", cpu="500m", memory="1Gi"), pod("n", gpus=1, cpu="1", memory="2Gi"),
            pod("n", cpu="4", phase="Failed")]
    assert pods_in_use(pods) == {"gpus": 1, "cpu": Decimal("1.5"), "memory": 3 * 2**30, "pods": 2}


def job(name, phase=Phase.RUNNING, created="2026-01-10T10:00:00Z", finished=None, workers=2, gpus=1):
    spec = {"name": name, "workers": workers, "gpus_per_worker": gpus, "cpu": "2", "memory": "4Gi"}
    return Job(name=name, phase=phase, workers=workers, spec=spec, created=created, finished=finished,
               backend="kubernetes")


def test_job_row_sums_workers_and_says_its_age():
    assert job_row("alice", job("a"), NOW) == {
        "user": "alice", "name": "a", "phase": "Running", "workers": 2, "gpus": 2, "cpu": "4", "memory": "8Gi",
        "created": "2026-01-10T10:00:00Z", "age_seconds": 7200, "age": "2h 0m", "backend": "kubernetes"}
    assert [age_text(s) for s in (59, 125, 3 * 3600 + 300, 2 * 86400 + 7200)] == ["0m", "2m", "3h 5m", "2d 2h"]


def test_overview_lists_running_jobs_only_and_gpu_hours_per_user_and_group():
    user_jobs = {
        "bob": (["ml"], [job("b1"), job("b0", Phase.SUCCEEDED, "2026-01-01T00:00:00Z", "2026-01-01T10:00:00Z")]),
        "alice": (["ml", "vision"], [job("a1", created="2026-01-10T11:00:00Z", gpus=4)]),
        "carol": ([], []),
    }
    doc = overview({"source": "kubernetes", "nodes": [], "total": None}, user_jobs, NOW, {"dave": "no namespace"})
    assert [(r["user"], r["name"]) for r in doc["jobs"]] == [("bob", "b1"), ("alice", "a1")]
    assert doc["gpu_hours"]["users"] == [
        {"user": "alice", "groups": ["ml", "vision"], "7d": 8.0, "30d": 8.0},   # 8 GPUs for 1 h
        {"user": "bob", "groups": ["ml"], "7d": 4.0, "30d": 24.0},             # 2 GPUs: 2 h now, 10 h 9 days ago
        {"user": "carol", "groups": [], "7d": 0.0, "30d": 0.0}]
    assert doc["gpu_hours"]["groups"] == [
        {"group": "ml", "members": ["alice", "bob"], "7d": 12.0, "30d": 32.0},
        {"group": "vision", "members": ["alice"], "7d": 8.0, "30d": 8.0}]
    assert doc["errors"] == [{"user": "dave", "message": "no namespace"}]


def test_group_gpu_hours_of_nobody():
    assert group_gpu_hours([]) == []
