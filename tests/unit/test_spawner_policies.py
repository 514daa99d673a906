"""The spawner writes the user-namespace admission policies once per hub process, even when
the first spawns come at once, and a replace survives the API server updating a new policy's
status between the read and the write. A fake admission API stands in for the cluster: it
answers like the API server (409 on create of an existing object and on a stale
resourceVersion) and bumps each new policy's resourceVersion once after creating it, as the
API server's type check does. (The benchmark's two concurrent spawns found this: one got
"the object has been modified".)"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from kubernetes_asyncio.client.exceptions import ApiException

import kubespawner.spawner
import pytest

import paddle_ext.hub.spawner as spawner_module
from paddle_ext.hub.settings import HubSettings
from paddle_ext.hub.spawner import PaddleCloudSpawner


class FakeAdmission:
    def __init__(self):
        self.objects: dict[tuple[str, str], int] = {}  # (kind, name) -> resourceVersion
        self.writes: list[tuple[str, str, str]] = []

    def _create(self, kind):
        async def create(body):
            key = (kind, body["metadata"]["name"])
            await asyncio.sleep(0)  # another spawn's request may run here
            if key in self.objects:
                raise ApiException(status=409, reason="AlreadyExists")
            self.objects[key] = 1
            self.writes.append(("create", *key))
            asyncio.get_running_loop().call_soon(self._status_update, key)  # the type check's status
        return create

    def _status_update(self, key):
        self.objects[key] += 1

    def _read(self, kind):
        async def read(name):
            return SimpleNamespace(metadata=SimpleNamespace(resource_version=str(self.objects[(kind, name)])))
        return read

    def _replace(self, kind):
        async def replace(name, body):
            key = (kind, name)
            await asyncio.sleep(0)
            if body["metadata"]["resourceVersion"] != str(self.objects[key]):
                raise ApiException(status=409, reason="Conflict: the object has been modified")
            self.objects[key] += 1
            self.writes.append(("replace", *key))
        return replace

    def __getattr__(self, attribute):
        for kind in ("validating_admission_policy_binding", "validating_admission_policy"):
            for verb, make in (("create", self._create), ("read", self._read), ("replace", self._replace)):
                if attribute == f"{verb}_{kind}":
                    return make(kind)
        raise AttributeError(attribute)


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch):
    monkeypatch.setattr(kubespawner.spawner, "load_config", lambda **_kwargs: None)
    monkeypatch.setattr(kubespawner.spawner, "shared_client", lambda _name: None)


async def test_concurrent_first_spawns_write_the_pod_policies_once(monkeypatch):
    fake = FakeAdmission()
    monkeypatch.setattr(spawner_module, "AdmissionregistrationV1Api", lambda _client: fake)
    monkeypatch.setattr(PaddleCloudSpawner, "_pod_policy_ensured", False)
    monkeypatch.setattr(PaddleCloudSpawner, "_pod_policy_lock", None)
    spawners = [PaddleCloudSpawner(_mock=True, paddlecloud_settings=HubSettings()) for _ in range(3)]
    for spawner in spawners:
        spawner.api = SimpleNamespace(api_client=None)
    await asyncio.gather(*(spawner._ensure_pod_policy() for spawner in spawners))
    assert PaddleCloudSpawner._pod_policy_ensured
    assert [verb for verb, *_ in fake.writes] == ["create"] * len(fake.objects) and len(fake.objects) == 4


async def test_a_replace_that_loses_to_a_status_update_reads_again_and_succeeds(monkeypatch):
    fake = FakeAdmission()
    monkeypatch.setattr(spawner_module, "AdmissionregistrationV1Api", lambda _client: fake)
    monkeypatch.setattr(PaddleCloudSpawner, "_pod_policy_lock", None)
    spawner = PaddleCloudSpawner(_mock=True, paddlecloud_settings=HubSettings())
    spawner.api = SimpleNamespace(api_client=None)
    monkeypatch.setattr(PaddleCloudSpawner, "_pod_policy_ensured", False)
    await spawner._ensure_pod_policy()  # a first hub: creates them
    bumps = iter([True])  # the next read is followed by one status update before the replace
    original_read = fake._read

    def racing_read(kind):
        read = original_read(kind)

        async def read_then_update(name):
            current = await read(name)
            if next(bumps, False):
                fake._status_update((kind, name))
            return current
        return read_then_update

    monkeypatch.setattr(fake, "_read", racing_read)
    monkeypatch.setattr(PaddleCloudSpawner, "_pod_policy_ensured", False)  # a second hub starting
    await spawner._ensure_pod_policy()
    assert [verb for verb, *_ in fake.writes].count("replace") == 4  # every object brought up to date
