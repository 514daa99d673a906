"""Pure parts of the Kubernetes hub config: settings, profiles, dataset mounts, quota fit; and the
spawner's own steps (run at once, all shown on the spawn page)."""

import json

import pytest

from catalogue import IMAGENET
from paddle_ext.errors import NoNamespace, QuotaExceeded
from paddle_ext.hub.settings import (HubSettings, dataset_claims, namespace_for, notebook_datasets,
                                     notebook_environment, notebook_request, profile_list)
from paddle_ext.quota.model import check_fits, resource_quota_terms

DATASETS = [IMAGENET]


def test_settings_from_values_file_then_environment(tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text("gpu_image: registry/paddle:gpu\ndatasets:\n  - {name: a, mount_path: /d/a, volume: {}}\n")
    settings = HubSettings.load(str(values), environ={
        "PADDLECLOUD_CPU_IMAGE": "registry/paddle:cpu",
        "PADDLECLOUD_GPU_NODE_SELECTOR": json.dumps({"gpu": "true"}),
        "PADDLECLOUD_CULL_IDLE_SECONDS": "60"})
    assert settings.gpu_image == "registry/paddle:gpu" and settings.cpu_image == "registry/paddle:cpu"
    assert settings.datasets[0]["name"] == "a" and settings.gpu_node_selector == {"gpu": "true"}
    assert settings.cull_idle_seconds == 60


def test_unknown_setting_and_bad_json_are_named(tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text("gpu_imag: typo\n")
    with pytest.raises(ValueError, match="gpu_imag"):
        HubSettings.load(str(values), environ={})
    with pytest.raises(ValueError, match="PADDLECLOUD_DATASETS must be JSON"):
        HubSettings.load(None, environ={"PADDLECLOUD_DATASETS": "[oops"})


def test_profiles_gpu_gpu4_cpu():
    settings = HubSettings(gpu_node_selector={"nvidia.com/gpu.present": "true"},
                           gpu_tolerations=({"key": "nvidia.com/gpu", "operator": "Exists"},))
    gpu, gpu4, cpu = profile_list(settings)
    assert gpu["default"] and gpu["kubespawner_override"]["extra_resource_limits"] == {"nvidia.com/gpu": "1"}
    assert gpu4["kubespawner_override"]["extra_resource_guarantees"] == {"nvidia.com/gpu": "4"}
    assert gpu4["kubespawner_override"]["node_selector"] == {"nvidia.com/gpu.present": "true"}
    assert "extra_resource_limits" not in cpu["kubespawner_override"] and "node_selector" not in cpu["kubespawner_override"]
    assert cpu["kubespawner_override"]["image"] == settings.cpu_image


def test_notebook_mounts_and_claims_and_env():
    settings = HubSettings(datasets=tuple(DATASETS))
    volumes, mounts = notebook_datasets(settings)
    assert mounts == [{"name": "dataset-imagenet", "mountPath": "/datasets/imagenet", "readOnly": True,
                       "subPath": "imagenet"}]
    assert volumes[0]["persistentVolumeClaim"] == {"claimName": "team-datasets", "readOnly": True}
    (claim,) = dataset_claims(settings, "u-alice")
    assert claim["metadata"] == {"name": "team-datasets", "namespace": "u-alice",
                                 "labels": {"app.kubernetes.io/managed-by": "paddlecloud"}}
    env = notebook_environment(settings)
    assert env["PADDLECLOUD_BACKEND"] == "kubernetes"
    assert json.loads(env["PADDLECLOUD_DATASETS"].replace("{{", "{").replace("}}", "}"))[0]["name"] == "imagenet"


def test_a_notebook_is_checked_against_the_resource_quota_with_the_one_quota_message():
    quota = {"metadata": {"name": "paddlecloud-quota"},
             "status": {"hard": {"requests.nvidia.com/gpu": "2", "pods": "10"},
                        "used": {"requests.nvidia.com/gpu": "1", "pods": "1"}}}
    limits, in_use = resource_quota_terms(quota)
    check_fits(notebook_request(8.0, 32 * 2**30, 1), limits, [], in_use, subject="This server")
    with pytest.raises(QuotaExceeded) as info:
        check_fits(notebook_request(32.0, "128G", 2), limits, [], in_use, subject="This server")
    assert info.value.message == "This server needs 2 GPUs; your quota is 2 and 1 are in use."


def test_gpu_resource_name_is_a_setting():
    settings = HubSettings(gpu_resource="amd.com/gpu")
    gpu, _, _ = profile_list(settings)
    assert gpu["kubespawner_override"]["extra_resource_limits"] == {"amd.com/gpu": "1"}


def test_namespace_names_follow_kubespawner_escaping():
    assert namespace_for("alice") == "paddlecloud-alice"
    escaped = namespace_for("Alice@example.org")  # KubeSpawner's safe slug
    assert escaped.startswith("paddlecloud-alice-example-org") and len(escaped) <= 63
    with pytest.raises(NoNamespace, match="not a valid namespace name"):
        namespace_for("a" * 60)


def test_a_shared_home_becomes_the_jobs_workspace():
    assert "PADDLECLOUD_WORKSPACE_CLAIM" not in notebook_environment(HubSettings())
    env = notebook_environment(HubSettings.load(None, environ={"PADDLECLOUD_JOBS_SHARE_HOME": "true"}))
    # Left for KubeSpawner to expand per user, exactly as the home claim's name is.
    assert env["PADDLECLOUD_WORKSPACE_CLAIM"] == "home-{username}"
    assert env["PADDLECLOUD_WORKSPACE_MOUNT"] == "/home/jovyan"
    with pytest.raises(ValueError, match="PADDLECLOUD_JOBS_SHARE_HOME must be true or false"):
        HubSettings.load(None, environ={"PADDLECLOUD_JOBS_SHARE_HOME": "maybe"})


def test_who_may_log_in_is_an_explicit_choice():
    from jupyterhub.auth import DummyAuthenticator, LocalAuthenticator

    from paddle_ext.hub.settings import NO_LOGIN_CHOICE, login_access

    with pytest.raises(ValueError) as info:
        login_access(HubSettings.load(None, environ={}), DummyAuthenticator)
    assert str(info.value) == NO_LOGIN_CHOICE and "PADDLECLOUD_ALLOW_ALL=true" in NO_LOGIN_CHOICE
    users = HubSettings.load(None, environ={"PADDLECLOUD_ALLOWED_USERS": "alice, bob,,"})
    assert users.allowed_users == ("alice", "bob")
    assert login_access(users, DummyAuthenticator) == {
        "allow_all": False, "allow_existing_users": False, "allowed_users": {"alice", "bob"}}
    everyone = HubSettings.load(None, environ={"PADDLECLOUD_ALLOW_ALL": "true"})
    assert login_access(everyone, DummyAuthenticator) == {"allow_all": True}
    groups = HubSettings.load(None, environ={"PADDLECLOUD_ALLOWED_GROUPS": "ml"})
    with pytest.raises(ValueError, match="DummyAuthenticator does not know groups"):
        login_access(groups, DummyAuthenticator)
    assert login_access(groups, LocalAuthenticator)["allowed_groups"] == {"ml"}  # one that knows groups
    with pytest.raises(ValueError, match="cannot be combined"):
        login_access(HubSettings(allow_all=True, allowed_users=("alice",)), DummyAuthenticator)


def test_groups_from_the_login_become_hub_groups_and_admin_groups_make_admins():
    from jupyterhub.auth import DummyAuthenticator, LocalAuthenticator

    from paddle_ext.hub.settings import login_access

    settings = HubSettings.load(None, environ={"PADDLECLOUD_ALLOWED_GROUPS": "vision,audio",
                                               "PADDLECLOUD_ADMIN_GROUPS": "hub-admins"})
    assert settings.admin_groups == ("hub-admins",)
    with pytest.raises(ValueError, match="LocalAuthenticator cannot make admins from groups"):
        login_access(settings, LocalAuthenticator)
    with pytest.raises(ValueError, match="DummyAuthenticator cannot make admins from groups"):
        login_access(HubSettings(allow_all=True, admin_groups=("x",)), DummyAuthenticator)
    # LocalAuthenticator reads the system's groups itself: nothing for manage_groups to sync
    assert "manage_groups" not in login_access(HubSettings(allowed_groups=("ml",)), LocalAuthenticator)


def test_oauthenticator_gets_manage_groups_whenever_groups_decide_who_logs_in_or_who_is_admin():
    generic = pytest.importorskip("oauthenticator.generic").GenericOAuthenticator
    from paddle_ext.hub.settings import login_access

    traits = login_access(HubSettings(allowed_groups=("vision",), admin_groups=("hub-admins",)), generic)
    assert traits == {"allow_all": False, "allow_existing_users": False, "allowed_groups": {"vision"},
                      "admin_groups": {"hub-admins"}, "manage_groups": True,
                      "custom_403_message": "You signed in, but are in none of the groups that may use this hub "
                                            "(vision). Ask your administrator to add you to one of them."}
    assert "manage_groups" not in login_access(HubSettings(allowed_users=("alice",)), generic)
    # OAuthenticator refuses allowed_groups without manage_groups: the traits must load together
    generic(**{name: value for name, value in traits.items()})
    ldap = pytest.importorskip("paddle_ext.hub.ldap").LDAPGroupsAuthenticator
    assert login_access(HubSettings(allowed_groups=("vision",), admin_groups=("a",)), ldap)["admin_groups"] == {"a"}
    assert ldap.class_traits()["manage_groups"].default_value is True


def test_who_may_log_in_from_a_values_file(tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text("allowed_users: [alice, bob]\nallowed_groups: [ml]\n")
    settings = HubSettings.load(str(values), environ={})
    assert settings.allowed_users == ("alice", "bob") and settings.allowed_groups == ("ml",)
    assert not settings.allow_all


async def test_spawn_steps_run_at_once_and_the_first_error_waits_for_the_others():
    import asyncio

    from paddle_ext.hub.spawner import run_all

    ended = []
    events = {name: asyncio.Event() for name in ("a", "b", "c", "fails", "also")}

    async def step(name, after=(), error=None):
        """Ends once the steps named in `after` have ended: gates, not sleeps."""
        for other in after:
            await events[other].wait()
        ended.append(name)
        events.get(name, asyncio.Event()).set()
        if error:
            raise error

    # At once: each step waits for the next one, which could not end if the steps ran one by one
    # (the timeout only stops a hang: the steps finish in one pass of the event loop).
    await asyncio.wait_for(run_all(step("a", after=["b"]), step("b", after=["c"]), step("c")), timeout=30)
    assert ended == ["c", "b", "a"]
    ended.clear()
    with pytest.raises(ValueError, match="first"):
        await asyncio.wait_for(run_all(step("fails", error=ValueError("first")), step("slow", after=["also"]),
                                       step("also", after=["fails"], error=KeyError("x"))), timeout=30)
    assert ended == ["fails", "also", "slow"]  # the last step ended before the first error was raised


async def test_the_spawn_page_gets_every_step_up_to_the_pod_even_one_after_the_namespace(monkeypatch):
    """KubeSpawner makes the home volume after our namespace steps and before the pod: the
    spawn page's progress must not hand over to the pod's events before that step."""
    import asyncio
    from types import SimpleNamespace

    import kubespawner.spawner
    from kubespawner import KubeSpawner

    import paddle_ext.hub.spawner
    from paddle_ext.hub.spawner import PaddleCloudSpawner

    async def done(*_args, **_kwargs):
        return True

    monkeypatch.setattr(kubespawner.spawner, "load_config", lambda **_kwargs: None)  # no cluster here
    monkeypatch.setattr(kubespawner.spawner, "shared_client", lambda _name: None)
    monkeypatch.setattr(KubeSpawner, "_ensure_namespace", done)
    monkeypatch.setattr(KubeSpawner, "_make_create_pvc_request", done)
    monkeypatch.setattr(KubeSpawner, "_make_create_pod_request", done)
    monkeypatch.setattr(paddle_ext.hub.spawner, "claim_namespace", done)
    spawner = PaddleCloudSpawner(_mock=True, enable_user_namespaces=True, events_enabled=False,
                                 service_exposure_policy=False, user_pod_policy=False, sync_quota=False,
                                 paddlecloud_settings=HubSettings())
    for step in ("_make_rbac", "_make_network_policies", "_make_queue", "_make_limit_range",
                 "_make_dataset_claims", "_check_quota_fits"):
        monkeypatch.setattr(spawner, step, done)

    class Steps(list):
        """The steps recorded, saying when progress() looks at them (it reads their length)."""

        def __init__(self):
            super().__init__()
            self.looked = asyncio.Event()

        def __len__(self):
            self.looked.set()
            return super().__len__()

    steps = Steps()
    spawner._setup_events, spawner._setup_done = steps, False
    spawner._start_future = asyncio.get_running_loop().create_future()

    async def messages(events):
        return [event["message"] async for event in events]

    progress = spawner.progress()
    await spawner._ensure_namespace()
    first = (await asyncio.wait_for(anext(progress), 5))["message"]
    steps.looked.clear()
    rest = asyncio.ensure_future(messages(progress))
    await asyncio.wait_for(steps.looked.wait(), 5)  # the gate: it looks again with only the namespace made
    await spawner._make_create_pvc_request(SimpleNamespace(metadata=SimpleNamespace(name="home-dave")), 1)
    await spawner._make_create_pod_request(None, 1)
    spawner._start_future.set_result(None)
    assert [first, *await asyncio.wait_for(rest, 5)] == [f"Namespace {spawner.namespace} ready",
                                                          "Home volume home-dave ready"]


async def test_a_policy_with_no_api_server_opens_no_egress_for_it_and_the_hub_says_so_once(monkeypatch, caplog):
    from types import SimpleNamespace

    import kubespawner.spawner

    from paddle_ext.hub.spawner import PaddleCloudSpawner

    monkeypatch.setattr(kubespawner.spawner, "load_config", lambda **_kwargs: None)  # no cluster here
    monkeypatch.setattr(kubespawner.spawner, "shared_client", lambda _name: None)
    monkeypatch.setattr(PaddleCloudSpawner, "_no_api_server_logged", False)
    settings = HubSettings(user_network_policy={"hub_pod_labels": {"component": "hub"}, "api_server": []})
    spawner = PaddleCloudSpawner(_mock=True, enable_user_namespaces=True, events_enabled=False,
                                 service_exposure_policy=False, user_pod_policy=False, sync_quota=False,
                                 paddlecloud_settings=settings)
    spawner._setup_events = []
    spawner.api = SimpleNamespace(api_client=None)
    made = []

    async def create_or_replace(_create, _replace, _ns, body):
        made.append(body)

    monkeypatch.setattr(spawner, "_create_or_replace", create_or_replace)
    for _ in range(2):
        await spawner._make_network_policies()
    egress = [rule for body in made for rule in body["spec"].get("egress", ())]
    assert egress and not [peer for rule in egress for peer in rule["to"] if "ipBlock" in peer]
    warned = [r.getMessage() for r in caplog.records if "names no api_server" in r.getMessage()]
    assert len(warned) == 1 and "set networkPolicy.apiServer" in warned[0]


def test_a_catalogue_emptydir_without_a_size_is_refused_naming_it():
    scratch = {"name": "scratch", "mount_path": "/scratch", "volume": {"emptyDir": {}}}
    with pytest.raises(ValueError, match="datasets: 'scratch' is an emptyDir without a sizeLimit"):
        HubSettings(datasets=(scratch,))
    sized = {**scratch, "volume": {"emptyDir": {"sizeLimit": "10Gi"}}}
    assert HubSettings(datasets=(sized,)).datasets == (sized,)
