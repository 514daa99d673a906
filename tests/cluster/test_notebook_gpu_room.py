"""The spawner's GPU check (PaddleCloudSpawner._check_gpu_room) against the cluster's API
server, without the hub: it lists the nodes, the live pods and the Jobs cluster-wide with a
real asynchronous client, finds which Job holds a node's GPUs (its pods' owner) and when
its time limit ends, and refuses with the numbers; with a GPU free it lets the spawn go on.
Two KWOK GPU nodes of the test's own (cluster_helpers.own_gpu_nodes) stand for the GPU nodes
a notebook may use; the cluster's other GPU nodes are tainted against it. (The hub's own
spawn of a refused notebook: test_kube_hub.py, which needs the real node.)"""

from __future__ import annotations

import datetime

import kubespawner.spawner
import pytest
from kubernetes_asyncio import client as async_client, config as async_config
from tornado import web

from cluster_helpers import GPU_TOLERATION, own_gpu_nodes, wait_for
from paddle_ext.hub.settings import HubSettings
from paddle_ext.hub.spawner import PaddleCloudSpawner
from tools.k8s.cluster import COMPLETE_AFTER_ANNOTATION, IMAGE_REFS

LIMIT = 7200  # the fill jobs' activeDeadlineSeconds


def fill_job(name: str, node: str, gpus: int, toleration: dict, deadline: int | None) -> dict:
    # KWOK completes a Job's pods after a few seconds unless told otherwise: these hold their GPUs
    spec = {"backoffLimit": 0, "template": {"metadata": {"annotations": {COMPLETE_AFTER_ANNOTATION: "24h"}}, "spec": {
        "restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": node},
        "tolerations": [GPU_TOLERATION, toleration],
        "containers": [{"name": "c", "image": IMAGE_REFS["worker"],
                        "resources": {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}}]}}}
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    return {"metadata": {"name": name}, "spec": spec}


def notebook_spec(selector: dict, toleration: dict, gpus: int = 1) -> dict:
    gpu = {"nvidia.com/gpu": str(gpus)}
    return {"nodeSelector": selector, "tolerations": [GPU_TOLERATION, toleration],
            "containers": [{"name": "notebook", "resources": {"requests": gpu, "limits": gpu}}]}


@pytest.fixture
async def spawner(cluster, monkeypatch):
    monkeypatch.setattr(kubespawner.spawner, "load_config", lambda **_kwargs: None)
    monkeypatch.setattr(kubespawner.spawner, "shared_client", lambda _name: None)
    api_client = await async_config.new_client_from_config(config_file=cluster.kubeconfig)
    spawner = PaddleCloudSpawner(_mock=True, paddlecloud_settings=HubSettings())
    spawner.api = async_client.CoreV1Api(api_client)
    spawner._setup_events = []
    yield spawner
    await api_client.close()


async def test_full_gpu_nodes_refuse_a_gpu_notebook_with_when_the_jobs_time_limit_frees_them(
        spawner, core_v1, batch_v1, namespace):
    with own_gpu_nodes(core_v1, namespace, 2) as (selector, toleration):
        nodes = sorted(f"{namespace}-gpu-{i}" for i in range(2))
        # node 0: one job of 8 GPUs with a time limit; node 1: 7 GPUs without one, 1 free
        batch_v1.create_namespaced_job(namespace, fill_job("limited", nodes[0], 8, toleration, LIMIT))
        batch_v1.create_namespaced_job(namespace, fill_job("open", nodes[1], 7, toleration, None))

        def running():
            pods = core_v1.list_namespaced_pod(namespace).items
            return len(pods) == 2 and all(p.status.phase == "Running" for p in pods) and pods
        wait_for(running, timeout=90, what="the fill jobs' pods running on the test's GPU nodes")
        started = wait_for(lambda: batch_v1.read_namespaced_job("limited", namespace).status.start_time,
                           timeout=30, what="the limited job's start time")

        await spawner._check_gpu_room(notebook_spec(selector, toleration, gpus=1))  # node 1's GPU is free
        with pytest.raises(web.HTTPError) as refused:
            await spawner._check_gpu_room(notebook_spec(selector, toleration, gpus=2))
        message = refused.value.log_message
        assert refused.value.status_code == 403
        end = (started + datetime.timedelta(seconds=LIMIT)).astimezone(datetime.timezone.utc)
        assert message.startswith("No node has 2 GPUs free for this notebook now: the 2 GPU nodes have 16 GPUs, "
                                  "15 in use, at most 1 free on one node. GPUs are expected back at "
                                  f"{end:%H:%M} UTC on {end:%Y-%m-%d} (in about "), message
        assert message.endswith("when a running job reaches its time limit. "
                                "Try again later, or pick a profile without GPUs."), message
        assert spawner._setup_events[-1]["message"] == f"No GPUs free: {message}"

        # the limited job gone: its node is free, and nothing with a time limit holds the rest
        batch_v1.delete_namespaced_job("limited", namespace, propagation_policy="Foreground")
        wait_for(lambda: len(core_v1.list_namespaced_pod(namespace).items) == 1, timeout=90,
                 what="the limited job's pod gone")
        await spawner._check_gpu_room(notebook_spec(selector, toleration, gpus=8))
        batch_v1.create_namespaced_job(namespace, fill_job("open-too", nodes[0], 8, toleration, None))
        wait_for(lambda: len([p for p in core_v1.list_namespaced_pod(namespace).items
                              if p.status.phase == "Running"]) == 2, timeout=90, what="node 0 full again")
        with pytest.raises(web.HTTPError) as refused:
            await spawner._check_gpu_room(notebook_spec(selector, toleration, gpus=2))
        assert "No running job that holds them has a time limit, so when GPUs come back is not known." \
            in refused.value.log_message
        for job in batch_v1.list_namespaced_job(namespace).items:
            batch_v1.delete_namespaced_job(job.metadata.name, namespace, propagation_policy="Foreground")
        wait_for(lambda: not core_v1.list_namespaced_pod(namespace).items, timeout=90, what="the fill jobs' pods gone")
