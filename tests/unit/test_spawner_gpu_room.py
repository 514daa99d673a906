"""The spawner refuses a GPU notebook at once when no node it may use has room now, with
GpuRoom's message on the spawn page, right before KubeSpawner would create the pod (the
notebook's real pod manifest, the API's models through the client's own serializer); a CPU
notebook is not checked, the setting turns it off, and a hub that may not list nodes spawns
as before. A fake core API stands in for the cluster's lists."""

from __future__ import annotations

import datetime
import logging

import kubespawner.spawner
import pytest
from kubernetes_asyncio.client import (ApiClient, V1Container, V1Node, V1NodeList, V1NodeSpec, V1NodeStatus,
                                       V1ObjectMeta, V1OwnerReference, V1Pod, V1PodList, V1PodSpec, V1PodStatus,
                                       V1ResourceRequirements, V1Taint)
from kubernetes_asyncio.client.exceptions import ApiException
from tornado import web

import paddle_ext.hub.spawner as spawner_module
from paddle_ext.hub.settings import HubSettings
from paddle_ext.hub.spawner import PaddleCloudSpawner

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def gpu_node(name):
    return V1Node(metadata=V1ObjectMeta(name=name, labels={"kubernetes.io/hostname": name}),
                  spec=V1NodeSpec(taints=[V1Taint(key="nvidia.com/gpu", value="present", effect="NoSchedule")]),
                  status=V1NodeStatus(allocatable={"cpu": "32", "memory": "128Gi", "nvidia.com/gpu": "8"}))


def job_pod(node, gpus, job_uid, name=None, namespace="bob"):
    return V1Pod(metadata=V1ObjectMeta(name=name or f"w-{node}", namespace=namespace, owner_references=[
                     V1OwnerReference(api_version="batch/v1", kind="Job", name="train", uid=job_uid)]),
                 spec=V1PodSpec(node_name=node, containers=[V1Container(
                     name="worker", resources=V1ResourceRequirements(requests={"nvidia.com/gpu": str(gpus)}))]),
                 status=V1PodStatus(phase="Running"))


class FakeCore:
    def __init__(self, api_client, nodes, pods, nodes_status=None):
        self.api_client, self.nodes, self.pods, self.nodes_status = api_client, nodes, pods, nodes_status
        self.calls: list[str] = []

    async def list_node(self):
        self.calls.append("list_node")
        if self.nodes_status:
            raise ApiException(status=self.nodes_status, reason="Forbidden")
        return V1NodeList(items=self.nodes)

    async def list_pod_for_all_namespaces(self, field_selector=None):
        self.calls.append(f"list_pod_for_all_namespaces {field_selector}")
        return V1PodList(items=self.pods)


class FakeCustom:
    def __init__(self, jobs):
        self.jobs, self.listed = jobs, []

    async def list_cluster_custom_object(self, group, version, plural):
        self.listed.append((group, version, plural))
        return {"items": self.jobs}


NOW = datetime.datetime(2026, 12, 2, 15, 0, tzinfo=datetime.timezone.utc)
STARTED = NOW - datetime.timedelta(minutes=10)
JOBS = [{"metadata": {"uid": "u0"}, "spec": {"activeDeadlineSeconds": 3600},
         "status": {"startTime": STARTED.isoformat()}}]


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch):
    monkeypatch.setattr(kubespawner.spawner, "load_config", lambda **_kwargs: None)
    monkeypatch.setattr(kubespawner.spawner, "shared_client", lambda _name: None)


@pytest.fixture
async def setup(monkeypatch):
    created = []

    async def create_pod(self, pod, request_timeout):
        created.append(pod.metadata.name)
        return True

    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "_make_create_pod_request", create_pod)
    custom = FakeCustom(JOBS)
    monkeypatch.setattr(spawner_module, "CustomObjectsApi", lambda _client: custom)
    monkeypatch.setattr(spawner_module, "now", lambda: NOW)
    client = ApiClient()
    yield client, created, custom
    await client.close()


async def spawn(client, nodes, pods, gpus=1, nodes_status=None, **config):
    gpu = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    spawner = PaddleCloudSpawner(_mock=True, paddlecloud_settings=HubSettings(), extra_resource_limits=gpu,
                                 extra_resource_guarantees=gpu, tolerations=[GPU_TOLERATION], **config)
    spawner.api = FakeCore(client, nodes, pods, nodes_status)
    spawner._gpu_room_checked = False  # as start() sets it
    spawner._setup_events = []
    pod = await spawner.get_pod_manifest()
    return spawner, spawner._make_create_pod_request(pod, 5)


async def test_a_full_cluster_refuses_the_gpu_notebook_before_its_pod_is_made(setup):
    client, created, custom = setup
    spawner, request = await spawn(client, [gpu_node("g0"), gpu_node("g1")],
                                   [job_pod("g0", 8, "u0"), job_pod("g1", 8, "u1")])
    with pytest.raises(web.HTTPError) as refused:
        await request
    assert refused.value.status_code == 403
    message = refused.value.log_message
    assert message.startswith("No node has 1 GPU free for this notebook now: the 2 GPU nodes have 16 GPUs, all in "
                              "use. GPUs are expected back at ")
    assert message.endswith("15:50 UTC on 2026-12-02 (in about 50 min), when a running job reaches its time limit. "
                            "Try again later, or pick a profile without GPUs.")
    assert created == []
    assert custom.listed == [("batch", "v1", "jobs")]  # the site's job kind, cluster-wide
    assert "list_pod_for_all_namespaces status.phase!=Succeeded,status.phase!=Failed" in spawner.api.calls
    assert spawner._setup_events[-1]["message"] == f"No GPUs free: {message}"


async def test_a_node_with_room_lets_the_pod_be_made(setup):
    client, created, _ = setup
    _spawner, request = await spawn(client, [gpu_node("g0"), gpu_node("g1")], [job_pod("g0", 8, "u0")])
    assert await request is True
    assert len(created) == 1


async def test_cpu_notebooks_and_the_setting_off_are_not_checked(setup):
    client, created, _ = setup
    full = ([gpu_node("g0")], [job_pod("g0", 8, "u0")])
    cpu, request = await spawn(client, *full, gpus=0)
    assert await request is True and cpu.api.calls == []
    off, request = await spawn(client, *full, refuse_gpu_spawn_when_full=False)
    assert await request is True and off.api.calls == []
    assert len(created) == 2


async def test_a_hub_that_may_not_list_nodes_spawns_unchecked_and_says_so_once(setup, monkeypatch, caplog):
    client, created, _ = setup
    monkeypatch.setattr(PaddleCloudSpawner, "_nodes_forbidden_logged", False)
    caplog.set_level(logging.WARNING)
    for _ in range(2):
        spawner, request = await spawn(client, [], [], nodes_status=403)
        spawner.log = logging.getLogger("test-spawner")
        assert await request is True
    assert len(created) == 2
    assert [r.message for r in caplog.records].count(
        "The hub may not list nodes or pods cluster-wide (Forbidden): GPU notebooks are spawned without checking "
        "that a node has room") == 1


async def test_the_users_own_notebook_pod_of_before_does_not_count(setup):
    """A restart while the old pod is still there: KubeSpawner replaces it, so its GPU is this notebook's."""
    client, created, _ = setup
    probe = PaddleCloudSpawner(_mock=True, paddlecloud_settings=HubSettings())
    own = job_pod("g1", 1, "n", name=probe.pod_name, namespace=probe.namespace)
    _spawner, request = await spawn(client, [gpu_node("g0"), gpu_node("g1")],
                                    [job_pod("g0", 8, "u0"), job_pod("g1", 7, "u1"), own])
    assert await request is True and len(created) == 1
    elsewhere = job_pod("g1", 1, "n", name=probe.pod_name, namespace="someone-else")
    _spawner, request = await spawn(client, [gpu_node("g0"), gpu_node("g1")],
                                    [job_pod("g0", 8, "u0"), job_pod("g1", 7, "u1"), elsewhere])
    with pytest.raises(web.HTTPError):
        await request
