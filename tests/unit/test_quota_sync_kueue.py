"""The quota sync with and without Kueue: one path writes a user's ResourceQuota and, with
Kueue, their queues from the same settings; without Kueue nothing of Kueue is written."""

from __future__ import annotations

import json
from decimal import Decimal as D

import pytest

from paddle_ext.constants import QUEUE_ANNOTATION
from paddle_ext.hub.quota_sync import QuotaSync
from paddle_ext.hub.settings import HubSettings, notebook_backend_config
from paddle_ext.kubeapi import KubeApiError
from paddle_ext.quota.model import Entry, Limits, QuotaConfig
from paddle_ext.quota.queues import QueuePolicy

CONFIG = QuotaConfig(groups={"vision": Entry(Limits(gpus=16, cpu="64", memory="256Gi"))},
                     site_default=Limits(gpus=4, cpu="32", memory="64Gi", pods=40, running_jobs=4))


class MemoryApi:
    """The API server's object store for the calls the sync makes: paths to objects, 409 on a
    second create, 404 for namespaces that do not exist."""

    def __init__(self, namespaces=("paddlecloud-alice",)):
        self.objects: dict[str, dict] = {}
        self.namespaces = set(namespaces)
        self.calls: list[tuple[str, str]] = []

    def _check_namespace(self, path):
        parts = path.split("/")
        if "namespaces" in parts and parts[parts.index("namespaces") + 1] not in self.namespaces:
            raise KubeApiError(404, "namespace not found")

    async def get(self, path):
        self.calls.append(("get", path))
        if path not in self.objects:
            raise KubeApiError(404, "not found")
        return self.objects[path]

    async def create(self, path, body):
        self.calls.append(("create", path))
        self._check_namespace(path)
        full = f"{path}/{body['metadata']['name']}"
        if full in self.objects:
            raise KubeApiError(409, "already exists")
        self.objects[full] = json.loads(json.dumps(body))
        return body

    async def patch(self, path, body):
        self.calls.append(("patch", path))
        current = self.objects[path]
        for key in ("labels", "annotations"):
            merged = {**current["metadata"].get(key, {}), **(body.get("metadata") or {}).get(key, {})}
            current["metadata"][key] = {k: v for k, v in merged.items() if v is not None}
        spec = {**current.get("spec", {}), **(body.get("spec") or {})}
        if "hard" in (body.get("spec") or {}):
            spec["hard"] = {k: v for k, v in body["spec"]["hard"].items() if v is not None}
        current["spec"] = spec
        return current

    async def delete(self, path):
        self.calls.append(("delete", path))
        del self.objects[path]
        return {}

    def kueue_paths(self):
        return [path for _, path in self.calls if "kueue.x-k8s.io" in path]


class Store:
    async def load(self):
        return CONFIG


QUOTA = "/api/v1/namespaces/paddlecloud-alice/resourcequotas/paddlecloud-quota"
LOCAL_QUEUE = "/apis/kueue.x-k8s.io/v1beta2/namespaces/paddlecloud-alice/localqueues/default"
TEAM = "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/paddlecloud-team-vision"


async def test_without_kueue_only_the_resource_quota_is_written_as_today():
    api = MemoryApi()
    sync = QuotaSync(api, Store())
    await sync.sync_user("alice", ["vision"])
    assert api.kueue_paths() == [] and await sync.sync_teams() == []
    hard = api.objects[QUOTA]["spec"]["hard"]
    assert hard["requests.nvidia.com/gpu"] == "16" and hard["requests.cpu"] == "64"
    assert QUEUE_ANNOTATION not in api.objects[QUOTA]["metadata"].get("annotations", {})


async def test_with_kueue_the_user_gets_the_team_queue_and_a_backstop_above_what_kueue_admits():
    api = MemoryApi()
    sync = QuotaSync(api, Store(), kueue=QueuePolicy(borrowing=Limits(gpus=8, cpu="0", memory="0")))
    await sync.sync_user("alice", ["vision"])
    assert api.objects["/apis/kueue.x-k8s.io/v1beta2/resourceflavors/paddlecloud"]["kind"] == "ResourceFlavor"
    team = api.objects[TEAM]
    gpu = team["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]
    assert gpu == {"name": "nvidia.com/gpu", "nominalQuota": "16", "borrowingLimit": "8"}
    assert api.objects[LOCAL_QUEUE]["spec"] == {"clusterQueue": "paddlecloud-team-vision", "fairSharing": {"weight": "1"}}
    quota = api.objects[QUOTA]
    assert quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "24"  # 16 nominal + 8 borrowable
    assert quota["spec"]["hard"]["pods"] == "40"  # not a Kueue resource: as before
    assert json.loads(quota["metadata"]["annotations"][QUEUE_ANNOTATION])["cluster_queue"] == "paddlecloud-team-vision"


async def test_a_changed_team_quota_patches_the_cluster_queue_and_a_move_replaces_the_local_queue():
    api = MemoryApi()
    sync = QuotaSync(api, Store(), kueue=QueuePolicy())
    await sync.sync_user("alice", ["vision"])
    moved = QuotaConfig(groups={"vision": Entry(Limits(gpus=8))}, users={"alice": Entry(Limits(gpus=1))})
    assert await sync.sync_teams(moved) == ["paddlecloud-team-vision"]
    gpu = api.objects[TEAM]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]
    assert gpu["nominalQuota"] == "8"
    await sync.sync_user("alice", ["vision"], config=moved)  # a personal quota: a queue of her own
    assert ("delete", LOCAL_QUEUE) in api.calls
    assert api.objects[LOCAL_QUEUE]["spec"] == {"clusterQueue": "paddlecloud-user-alice", "fairSharing": {"weight": "1"}}
    # No borrowing limit: Kueue may admit whatever the cohort lends, so no GPU bound in the backstop.
    assert "requests.nvidia.com/gpu" not in api.objects[QUOTA]["spec"]["hard"]


async def test_the_users_weight_goes_into_the_local_queue_and_a_new_weight_is_patched_in_place():
    api = MemoryApi()
    await QuotaSync(api, Store(), kueue=QueuePolicy(fair_sharing=True)).sync_user("alice", ["vision"])
    assert api.objects[LOCAL_QUEUE]["spec"] == {"clusterQueue": "paddlecloud-team-vision", "fairSharing": {"weight": "1"}}
    assert api.objects[TEAM]["spec"]["admissionScope"] == {"admissionMode": "UsageBasedAdmissionFairSharing"}
    heavier = QueuePolicy.from_settings(None, None, True, {"alice": 3})
    await QuotaSync(api, Store(), kueue=heavier).sync_user("alice", ["vision"])
    assert api.objects[LOCAL_QUEUE]["spec"]["fairSharing"] == {"weight": "3"}
    assert ("patch", LOCAL_QUEUE) in api.calls and ("delete", LOCAL_QUEUE) not in api.calls  # jobs stay queued


async def test_a_user_without_a_namespace_yet_gets_nothing_written_in_it():
    api = MemoryApi(namespaces=())
    sync = QuotaSync(api, Store(), kueue=QueuePolicy())
    assert await sync.sync_user("alice", ["vision"], missing_ok=True) is None
    assert api.objects == {}  # not even her queue: written at her first start


def test_hub_settings_send_jobs_to_the_default_local_queue_only_with_kueue():
    assert "queue_name" not in notebook_backend_config(HubSettings())["KubernetesBackend"]
    settings = HubSettings(kueue_enabled=True, kueue_borrowing_limit={"gpus": 8})
    assert notebook_backend_config(settings)["KubernetesBackend"]["queue_name"] == "default"
    assert settings.queue_policy() == QueuePolicy(borrowing=Limits(gpus=8))
    assert HubSettings().queue_policy() is None


@pytest.mark.parametrize("values, words", [
    ({"kueue_enabled": True, "queue_name": "research", "cluster_queue": "cq"}, "leave queue_name"),
    ({"kueue_borrowing_limit": {"pods": 2}}, "only gpus, cpu, memory"),
    ({"kueue_lending_limit": {"gpus": -1}}, "must not be negative"),
    ({"kueue_user_weights": {"alice": 0}}, "alice's weight must be a number above 0"),
])
def test_hub_settings_refuse_conflicting_or_bad_kueue_settings(values, words):
    with pytest.raises(ValueError, match=words):
        HubSettings(**values)


def test_hub_settings_read_kueue_from_the_environment():
    settings = HubSettings.load(environ={"PADDLECLOUD_KUEUE_ENABLED": "true",
                                         "PADDLECLOUD_KUEUE_LENDING_LIMIT": '{"gpus": 4}'})
    assert settings.kueue_enabled and settings.kueue_lending_limit == {"gpus": 4}


def test_the_quota_service_takes_kueue_from_the_hubs_environment(monkeypatch):
    from paddle_ext.hub.quota_service import QuotaService

    monkeypatch.delenv("PADDLECLOUD_KUEUE", raising=False)
    assert QuotaService().queue_policy() is None
    monkeypatch.setenv("PADDLECLOUD_KUEUE", '{"lending_limit": {"gpus": 2}, "borrowing_limit": {"cpu": "4"}}')
    assert QuotaService().queue_policy() == QueuePolicy(lending=Limits(gpus=2), borrowing=Limits(cpu="4"))
    monkeypatch.setenv("PADDLECLOUD_KUEUE", '{"fair_sharing": true, "user_weights": {"alice": 2}}')
    assert QuotaService().queue_policy() == QueuePolicy(fair_sharing=True, weights={"alice": D(2)})


def test_hub_settings_read_fair_sharing_from_the_environment():
    settings = HubSettings.load(environ={"PADDLECLOUD_KUEUE_ENABLED": "true", "PADDLECLOUD_KUEUE_FAIR_SHARING": "true",
                                         "PADDLECLOUD_KUEUE_USER_WEIGHTS": '{"bob": 2}'})
    assert settings.queue_policy() == QueuePolicy(fair_sharing=True, weights={"bob": D(2)})
    assert HubSettings(kueue_enabled=True).queue_policy().weight("bob") == D(1)


@pytest.mark.parametrize("variable, trait, off", [("PADDLECLOUD_DEFAULT_QUOTA", "site_default_quota", {}),
                                                  ("PADDLECLOUD_OBJECT_QUOTA", "object_quota", None)])
def test_the_quota_services_json_settings_read_alike_from_the_environment(monkeypatch, variable, trait, off):
    from paddle_ext.hub import quota_service

    assert getattr(quota_service, {"site_default_quota": "SITE_DEFAULT_QUOTA_ENV",
                                   "object_quota": "OBJECT_QUOTA_ENV"}[trait]) == variable
    for unset in ("", "null"):
        monkeypatch.setenv(variable, unset)
        assert getattr(quota_service.QuotaService(), trait) == off
    monkeypatch.setenv(variable, '{"gpus": 1}')
    assert getattr(quota_service.QuotaService(), trait) == {"gpus": 1}
    monkeypatch.setenv(variable, "[1]")
    with pytest.raises(ValueError, match=rf"\${variable} must be a JSON object"):
        getattr(quota_service.QuotaService(), trait)
    monkeypatch.setenv(variable, "{gpus")
    with pytest.raises(ValueError, match=rf"\${variable} is not JSON"):
        getattr(quota_service.QuotaService(), trait)
    monkeypatch.setenv("PADDLECLOUD_KUEUE", "null")
    assert not quota_service.QuotaService().kueue_enabled
