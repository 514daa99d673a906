"""An existing namespace is used only when it is ours (issue 25: KubeSpawner ignores a 409 on
create, and the spawner then bound notebook rights and replaced policies there), and every
spawn makes sure its Pod Security labels. A fake CoreV1Api stands in for the cluster."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from tornado import web

from paddle_ext import tenancy
from paddle_ext.hub.spawner import claim_namespace

EXPECTED = {"app.kubernetes.io/managed-by": "paddlecloud", "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/audit": "restricted", "pod-security.kubernetes.io/warn": "restricted",
            "paddlecloud.io/user": "alice"}


class FakeCoreApi:
    """read_namespace and patch_namespace of one namespace, recording the patches."""

    def __init__(self, labels):
        self.labels = labels
        self.patches = []

    async def read_namespace(self, name):
        return SimpleNamespace(metadata=SimpleNamespace(name=name, labels=self.labels))

    async def patch_namespace(self, name, body):
        self.patches.append((name, body))
        self.labels = {**(self.labels or {}), **body["metadata"]["labels"]}


def test_the_labels_a_user_namespace_is_made_with():
    assert tenancy.user_namespace_labels() == {**{k: v for k, v in EXPECTED.items() if k != "paddlecloud.io/user"},
                                               "paddlecloud.io/user": "{username}"}


@pytest.mark.parametrize("labels, missing", [
    (None, "app.kubernetes.io/managed-by=paddlecloud, paddlecloud.io/user=alice"),
    ({"kubernetes.io/metadata.name": "paddlecloud-alice"}, "app.kubernetes.io/managed-by=paddlecloud, "
                                                            "paddlecloud.io/user=alice"),
    ({"app.kubernetes.io/managed-by": "helm", "paddlecloud.io/user": "alice"}, "app.kubernetes.io/managed-by=paddlecloud"),
    ({"app.kubernetes.io/managed-by": "paddlecloud", "paddlecloud.io/user": "mallory"}, "paddlecloud.io/user=alice"),
    ({"app.kubernetes.io/managed-by": "paddlecloud"}, "paddlecloud.io/user=alice"),
])
async def test_a_namespace_not_made_by_us_for_this_user_is_refused_and_left_alone(labels, missing):
    api = FakeCoreApi(labels)
    with pytest.raises(web.HTTPError) as refused:
        await claim_namespace(api, "paddlecloud-alice", EXPECTED, 5)
    assert refused.value.status_code == 403
    assert refused.value.log_message == (
        f"The namespace paddlecloud-alice already exists and was not made by PaddleCloud for this user (it lacks "
        f"the label{'s' if ',' in missing else ''} {missing}), so the server is not started there. Ask an admin to "
        "remove or relabel it, or to choose another user_namespace_template.")
    assert api.patches == []


async def test_our_namespace_gets_its_missing_pod_security_labels_back():
    api = FakeCoreApi({"app.kubernetes.io/managed-by": "paddlecloud", "paddlecloud.io/user": "alice",
                       "pod-security.kubernetes.io/enforce": "privileged"})
    await claim_namespace(api, "paddlecloud-alice", EXPECTED, 5)
    assert api.patches == [("paddlecloud-alice", {"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/audit": "restricted",
        "pod-security.kubernetes.io/warn": "restricted"}}})]
    await claim_namespace(api, "paddlecloud-alice", EXPECTED, 5)  # now complete: nothing more to patch
    assert len(api.patches) == 1


async def test_a_site_without_pod_security_labels_in_its_template_still_gets_restricted():
    api = FakeCoreApi({"app.kubernetes.io/managed-by": "paddlecloud"})
    await claim_namespace(api, "ns", {"app.kubernetes.io/managed-by": "paddlecloud"}, 5)
    assert api.patches == [("ns", {"metadata": {"labels": tenancy.pod_security_labels()}})]


async def test_a_refused_namespace_stops_the_spawn_before_any_right_is_bound(monkeypatch):
    """The spawner's namespace step: nothing of ours is made in a namespace that is not ours."""
    import kubespawner.spawner
    from kubespawner import KubeSpawner

    from paddle_ext.hub.settings import HubSettings
    from paddle_ext.hub.spawner import PaddleCloudSpawner

    made = []

    async def nothing(*_args, **_kwargs):
        return None

    def recorded(step):
        async def run(*_args, **_kwargs):
            made.append(step)
        return run

    monkeypatch.setattr(kubespawner.spawner, "load_config", lambda **_kwargs: None)  # no cluster here
    monkeypatch.setattr(kubespawner.spawner, "shared_client", lambda _name: None)
    monkeypatch.setattr(KubeSpawner, "_ensure_namespace", nothing)  # the create: a 409, ignored
    spawner = PaddleCloudSpawner(_mock=True, enable_user_namespaces=True, events_enabled=False,
                                 service_exposure_policy=False, user_pod_policy=False, sync_quota=False, paddlecloud_settings=HubSettings())
    spawner.api = FakeCoreApi({"kubernetes.io/metadata.name": spawner.namespace})
    for step in ("_make_rbac", "_make_network_policies", "_make_queue", "_make_limit_range",
                 "_make_dataset_claims", "_check_quota_fits"):
        monkeypatch.setattr(spawner, step, recorded(step))
    with pytest.raises(web.HTTPError, match="not made by PaddleCloud"):
        await spawner._ensure_namespace()
    assert made == [] and spawner.api.patches == []
    spawner.api = FakeCoreApi(spawner._expand_all(spawner.user_namespace_labels))
    await spawner._ensure_namespace()
    assert sorted(made) == sorted(["_make_rbac", "_make_network_policies", "_make_queue", "_make_limit_range",
                                   "_make_dataset_claims", "_check_quota_fits"])
