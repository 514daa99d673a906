"""A spawn survives a Kubernetes API request that gets no answer in time (issue 29: with a
hundred spawns arriving at once, the hub's event loop stalled for seconds and spawns failed
on a 3-second request timeout before any pod was asked for). Our spawn steps try such a
request again, as KubeSpawner does for its pod and PVC; a create whose answer was lost but
which was made all the same comes back as 409 on the retry and counts as done. A fake
CoreV1Api stands in for the cluster; its first try of each request never answers, so the
spawner's own timeout (`k8s_api_request_timeout`) is what ends it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from kubernetes_asyncio.client.rest import ApiException

from paddle_ext.hub.spawner import retry_timeouts


class FirstTryUnansweredApi:
    """Each request's first try hangs until the caller gives up on it; the creates were made on
    the server all the same, so a second try of a create is answered 409."""

    def __init__(self, labels: dict, never_answered: tuple[str, ...] = (), first_try_answered: bool = False):
        self.labels = labels
        self.never_answered = never_answered
        self.first_try_answered = first_try_answered
        self.calls: list[str] = []

    async def _answer(self, method: str, answer):
        first = method not in self.calls and not self.first_try_answered
        self.calls.append(method)
        if first or method in self.never_answered:
            await asyncio.Event().wait()  # no answer: only the caller's timeout ends this try
        return answer()

    @staticmethod
    def _conflict():
        raise ApiException(status=409, reason="AlreadyExists")

    async def create_namespace(self, body):
        return await self._answer("create_namespace", self._conflict)

    async def read_namespace(self, name):
        return await self._answer("read_namespace", lambda: SimpleNamespace(
            metadata=SimpleNamespace(name=name, labels=self.labels)))

    async def create_namespaced_limit_range(self, namespace, body):
        return await self._answer("create_namespaced_limit_range", self._conflict)

    async def replace_namespaced_limit_range(self, name, namespace, body):
        return await self._answer("replace_namespaced_limit_range", lambda: body)

    async def list_namespaced_resource_quota(self, namespace):
        return await self._answer("list_namespaced_resource_quota", lambda: SimpleNamespace(items=[]))


def spawner_with(monkeypatch, api: FirstTryUnansweredApi, retry_timeout: int):
    import kubespawner.spawner

    from paddle_ext.hub.settings import HubSettings
    from paddle_ext.hub.spawner import PaddleCloudSpawner

    async def nothing(*_args, **_kwargs):
        return None

    monkeypatch.setattr(kubespawner.spawner, "load_config", lambda **_kwargs: None)  # no cluster here
    monkeypatch.setattr(kubespawner.spawner, "shared_client", lambda _name: None)
    spawner = PaddleCloudSpawner(_mock=True, enable_user_namespaces=True, events_enabled=False,
                                 service_exposure_policy=False, user_pod_policy=False, sync_quota=False,
                                 paddlecloud_settings=HubSettings(), k8s_api_request_timeout=1,
                                 k8s_api_request_retry_timeout=retry_timeout)
    spawner.api = api
    # Steps that need API classes beyond CoreV1Api are left out; the ones kept cover a create,
    # a create-or-replace and a list.
    for step in ("_make_rbac", "_make_network_policies", "_make_queue", "_make_dataset_claims"):
        monkeypatch.setattr(spawner, step, nothing)
    spawner._setup_events = []
    return spawner


async def test_every_spawn_request_that_got_no_answer_is_tried_again_and_the_spawn_goes_on(monkeypatch):
    api = FirstTryUnansweredApi({})
    spawner = spawner_with(monkeypatch, api, retry_timeout=30)
    api.labels = spawner._expand_all(spawner.user_namespace_labels)
    await asyncio.wait_for(spawner._ensure_namespace(), 60)
    assert sorted(api.calls) == sorted(2 * ["create_namespace", "read_namespace", "create_namespaced_limit_range",
                                            "replace_namespaced_limit_range", "list_namespaced_resource_quota"])
    messages = [event["message"] for event in spawner._setup_events]
    assert messages[0] == f"Namespace {spawner.namespace} ready"
    assert messages[-1] == "Quota check passed: the server fits"


async def test_a_request_never_answered_fails_the_spawn_naming_it(monkeypatch):
    api = FirstTryUnansweredApi({}, never_answered=("list_namespaced_resource_quota",), first_try_answered=True)
    spawner = spawner_with(monkeypatch, api, retry_timeout=3)
    api.labels = spawner._expand_all(spawner.user_namespace_labels)
    with pytest.raises(asyncio.TimeoutError) as failed:
        await asyncio.wait_for(spawner._ensure_namespace(), 60)
    assert str(failed.value) == (f"list resource quotas ({spawner.user.name}'s spawn): the Kubernetes API did "
                                 "not answer within 3 s")
    assert api.calls.count("list_namespaced_resource_quota") >= 2


async def test_only_a_timeout_is_tried_again():
    tries = []

    async def refused():
        tries.append(1)
        raise ApiException(status=403, reason="Forbidden")

    with pytest.raises(ApiException):
        await retry_timeouts(refused, "create role", timeout=30)
    assert len(tries) == 1

    async def slow_then_done():
        tries.append(1)
        if len(tries) < 4:
            raise asyncio.TimeoutError()
        return "made"

    assert await retry_timeouts(slow_then_done, "create role", timeout=30) == "made"
    assert len(tries) == 4


def test_the_spawn_page_reads_the_same_events_as_kubespawner_without_sorting_everyones(monkeypatch):
    """`events` picks this pod's events out of every user's before sorting: the same list as
    KubeSpawner's own (which sorts all of them first), events of a same-named pod in another
    namespace left out, and only what follows the start's marker."""
    from kubespawner import KubeSpawner

    api = FirstTryUnansweredApi({})
    spawner = spawner_with(monkeypatch, api, retry_timeout=30)

    def event(uid, name, namespace, second):
        return {"metadata": {"uid": uid}, "involvedObject": {"name": name, "namespace": namespace},
                "lastTimestamp": f"2026-12-02T10:00:{second:02d}Z", "eventTime": None}

    ours = [event(f"e{i}", spawner.pod_name, spawner.namespace, 50 - i) for i in range(6)]
    others = [event(f"o{i}", f"jupyter-other{i}", f"paddlecloud-other{i}", i) for i in range(40)]
    resources = {e["metadata"]["uid"]: e for e in others[:20] + ours + others[20:]}
    spawner.events_enabled = True
    monkeypatch.setitem(KubeSpawner.reflectors, spawner._get_reflector_key("events"), SimpleNamespace(
        resources=resources, events=sorted(resources.values(), key=lambda e: e["lastTimestamp"])))
    for marker in (None, "e3"):
        spawner._last_event = marker
        assert spawner.events == KubeSpawner.events.fget(spawner)
    assert [e["metadata"]["uid"] for e in spawner.events] == ["e2", "e1", "e0"]
    elsewhere = event("x", spawner.pod_name, "paddlecloud-someone-else", 59)
    resources["x"] = elsewhere
    assert elsewhere not in spawner.events
