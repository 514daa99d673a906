"""A GPU notebook on a full cluster is refused at once with the numbers and when GPUs are
expected back (paddle_ext.hub.notebook_gpus): only the nodes the notebook's pod may be
placed on count."""

from __future__ import annotations

import datetime

from paddle_ext.hub.notebook_gpus import gpu_room, job_ends, when
from paddle_ext.jobkinds import JOB_KINDS

NOW = datetime.datetime(2026, 12, 2, 15, 0, tzinfo=datetime.timezone.utc)
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def node(name, gpus, taints=(), labels=None, unschedulable=False):
    return {"metadata": {"name": name, "labels": labels or {}},
            "spec": {"taints": list(taints), "unschedulable": unschedulable},
            "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "nvidia.com/gpu": str(gpus)}}}


def pod(node_name, gpus, owner_uid=None, phase="Running"):
    owners = [{"kind": "Job", "name": "j", "uid": owner_uid}] if owner_uid else []
    return {"metadata": {"name": f"p-{node_name}-{gpus}", "ownerReferences": owners},
            "spec": {"nodeName": node_name,
                     "containers": [{"resources": {"requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": phase}}


def job(uid, deadline=None, started=NOW - datetime.timedelta(minutes=30)):
    spec = {"activeDeadlineSeconds": deadline} if deadline is not None else {}
    return {"metadata": {"uid": uid}, "spec": spec, "status": {"startTime": started.isoformat()}}


def notebook(gpus=1, selector=None, tolerations=(GPU_TOLERATION,)):
    requests = {"cpu": "1", "memory": "4Gi"}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    return {"containers": [{"resources": {"requests": requests, "limits": requests}}],
            "nodeSelector": selector or {}, "tolerations": list(tolerations)}


FULL = [node("gpu-0", 8, [GPU_TAINT]), node("gpu-1", 8, [GPU_TAINT]), node("cpu-0", 0)]


def test_a_full_cluster_is_refused_with_the_numbers_and_when_gpus_come_back():
    pods = [pod("gpu-0", 8, "a"), pod("gpu-1", 4, "b"), pod("gpu-1", 4, "c")]
    jobs = [job("a", deadline=3 * 3600), job("b", deadline=3600 + 20 * 60), job("c")]
    room = gpu_room(FULL, pods, jobs, notebook(1), NOW)
    assert not room.fits
    assert (room.capacity, room.in_use, room.most_free, room.nodes) == (16, 16, 0, 2)
    # b ends 50 min from now (started 30 min ago, 80 min limit); a at 17:30
    assert room.expected_back == NOW + datetime.timedelta(minutes=50)
    assert room.message == (
        "No node has 1 GPU free for this notebook now: the 2 GPU nodes have 16 GPUs, all in use. "
        "GPUs are expected back at 15:50 UTC on 2026-12-02 (in about 50 min), when a running job reaches its "
        "time limit. Try again later, or pick a profile without GPUs.")


def test_the_expected_time_is_when_one_node_has_enough_free():
    # 4 GPUs wanted: gpu-1's two 2-GPU jobs end at +1 h and +2 h; gpu-0's 8-GPU job at +3 h
    pods = [pod("gpu-0", 8, "a"), pod("gpu-1", 2, "b"), pod("gpu-1", 2, "c"), pod("gpu-1", 4, "d")]
    jobs = [job("a", 3 * 3600 + 1800), job("b", 3600 + 1800), job("c", 2 * 3600 + 1800), job("d")]
    room = gpu_room(FULL, pods, jobs, notebook(4), NOW)
    assert room.expected_back == NOW + datetime.timedelta(hours=2)
    assert "GPUs are expected back at 17:00 UTC on 2026-12-02 (in about 2 h)" in room.message


def test_without_time_limits_the_message_says_it_is_not_known():
    room = gpu_room(FULL, [pod("gpu-0", 8, "a"), pod("gpu-1", 7, "b")], [job("a"), job("b")], notebook(2), NOW)
    assert room.expected_back is None
    assert room.message == (
        "No node has 2 GPUs free for this notebook now: the 2 GPU nodes have 16 GPUs, 15 in use, at most 1 free "
        "on one node. No running job that holds them has a time limit, so when GPUs come back is not known. "
        "Try again later, or pick a profile without GPUs.")


def test_a_node_with_room_is_accepted():
    room = gpu_room(FULL, [pod("gpu-0", 8, "a"), pod("gpu-1", 6, "b")], [], notebook(2), NOW)
    assert room.fits and room.message is None and room.most_free == 2


def test_finished_pods_hold_nothing():
    room = gpu_room(FULL, [pod("gpu-0", 8, phase="Succeeded"), pod("gpu-1", 8)], [], notebook(1), NOW)
    assert room.fits


def test_nodes_the_pod_cannot_use_are_not_counted():
    private = {"key": "team", "value": "vision", "effect": "NoSchedule"}
    nodes = [node("gpu-0", 8, [GPU_TAINT]),
             node("tainted", 8, [GPU_TAINT, private]),  # its taint not tolerated
             node("other-pool", 8, [GPU_TAINT], labels={"pool": "b"}),  # the selector does not match it
             node("cordoned", 8, [GPU_TAINT], labels={"pool": "a"}, unschedulable=True)]
    for n in nodes[:1]:
        n["metadata"]["labels"]["pool"] = "a"
    room = gpu_room(nodes, [pod("gpu-0", 8)], [], notebook(1, selector={"pool": "a"}), NOW)
    assert not room.fits
    assert (room.nodes, room.capacity) == (1, 8)
    assert room.message.startswith("No node has 1 GPU free for this notebook now: the GPU node has 8 GPUs, all in use.")
    # the same notebook tolerating the private taint and selecting nothing may use the free nodes
    assert gpu_room(nodes, [pod("gpu-0", 8)], [], notebook(1, tolerations=(GPU_TOLERATION, private)), NOW).fits


def test_without_a_gpu_toleration_no_gpu_node_counts():
    room = gpu_room(FULL, [], [], notebook(1, tolerations=()), NOW)
    assert room.nodes == 0
    assert room.message == ("No node has 1 GPU free for this notebook now: no node it may be placed on has GPUs. "
                            "Pick a profile without GPUs, or ask an admin.")


def test_more_gpus_than_any_node_has_says_so():
    room = gpu_room(FULL, [], [], notebook(16), NOW)
    assert room.message == ("No node has 16 GPUs for this notebook: the largest GPU node it may be placed on has "
                            "8 GPUs. Pick a profile with fewer GPUs.")


def test_cpu_notebooks_are_never_checked():
    assert gpu_room(FULL, [pod("gpu-0", 8), pod("gpu-1", 8)], [], notebook(0), NOW) is None
    assert gpu_room([], [], [], notebook(0, tolerations=()), NOW) is None


def test_job_ends_reads_each_kind_and_skips_jobs_without_a_limit_or_start():
    started = NOW - datetime.timedelta(hours=1)
    paddle = {"metadata": {"uid": "p"}, "spec": {"runPolicy": {"activeDeadlineSeconds": 7200}},
              "status": {"startTime": started.isoformat()}}
    assert job_ends([paddle], NOW, JOB_KINDS["paddlejob"]) == {"p": NOW + datetime.timedelta(hours=1)}
    unstarted = {"metadata": {"uid": "u"}, "spec": {"activeDeadlineSeconds": 60}, "status": {}}
    overdue = job("o", deadline=60)  # past its limit, its pods still going: back any moment
    assert job_ends([unstarted, job("n"), overdue], NOW) == {"o": NOW}


def test_when_words():
    assert when(NOW + datetime.timedelta(minutes=61), NOW) == "at 16:01 UTC on 2026-12-02 (in about 1 h 1 min)"
    assert when(NOW, NOW) == "at 15:00 UTC on 2026-12-02 (in about 0 min)"
