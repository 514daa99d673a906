"""Site settings the Helm chart drives: profiles, jobs launched from notebooks, the notebook's
ClusterRole, user-namespace NetworkPolicies, Kueue, the proxy pod and the traitlets passthrough."""

import json
from pathlib import Path

import pytest
from traitlets.config import Config, PyFileConfigLoader

from paddle_ext import tenancy
from paddle_ext.backends.registry import make_backend
from paddle_ext.constants import BACKEND_CONFIG_ENV
from paddle_ext.hub.settings import (DEFAULT_PROFILES, HubSettings, notebook_backend_config, notebook_environment,
                                     profile_list, traitlets_passthrough)

REPO = Path(__file__).resolve().parents[2]


def test_profiles_are_a_setting_and_the_defaults_are_the_three_paddle_profiles():
    assert [p["slug"] for p in profile_list(HubSettings())] == ["paddle-gpu", "paddle-gpu-x4", "paddle-cpu"]
    assert HubSettings().profiles == DEFAULT_PROFILES
    small = HubSettings.load(None, environ={"PADDLECLOUD_PROFILES": json.dumps([
        {"slug": "cpu-small", "display_name": "Small CPU", "gpus": 0, "cpu": "500m", "memory": "1Gi",
         "image": "registry/nb:cpu", "default": True}])})
    (profile,) = profile_list(small)
    assert profile["default"] and profile["description"] == "500m CPU, 1Gi memory"
    assert profile["kubespawner_override"] == {"image": "registry/nb:cpu", "cpu_guarantee": 0.5, "cpu_limit": 0.5,
                                               "mem_guarantee": 2**30, "mem_limit": 2**30}


def test_every_profiles_sizes_are_ones_jupyterhub_accepts():
    """JupyterHub's memory traits know K/M/G/T only: a Kubernetes "1Gi" must reach them as bytes."""
    from jupyterhub.traitlets import ByteSpecification

    sizes = ByteSpecification()
    settings = HubSettings(profiles=(*DEFAULT_PROFILES, {"slug": "s", "display_name": "S", "gpus": 0, "cpu": "250m",
                                                         "memory": "1536Mi"}))
    for profile in profile_list(settings):
        override = profile["kubespawner_override"]
        assert sizes.validate(None, override["mem_limit"]) == override["mem_limit"]
    assert profile_list(settings)[-1]["kubespawner_override"]["mem_limit"] == 1536 * 2**20
    assert profile_list(settings)[0]["kubespawner_override"]["mem_limit"] == 32 * 10**9  # "32G", as Kubernetes reads it
    with pytest.raises(ValueError, match="profile x: missing cpu, memory; unknown gpu"):
        HubSettings(profiles=({"slug": "x", "display_name": "X", "gpus": 0, "gpu": 1},))


def test_job_settings_reach_the_notebook_backend_through_one_environment_variable(monkeypatch):
    settings = HubSettings(job_kind="paddlejob", queue_name="team-a", gpu_resource="amd.com/gpu",
                           gpu_tolerations=({"key": "amd.com/gpu", "operator": "Exists"},),
                           job_options={"max_workers": 4, "max_memory": "16Gi", "ttl_seconds_after_finished": 60})
    config = notebook_backend_config(settings)
    assert config == {"KubernetesBackend": {"job_kind": "paddlejob", "queue_name": "team-a",
                                            "gpu_resource": "amd.com/gpu", "ttl_seconds_after_finished": 60,
                                            "gpu_tolerations": [{"key": "amd.com/gpu", "operator": "Exists"}]},
                      "JobBackend": {"max_workers": 4, "max_memory": "16Gi"}}
    env = notebook_environment(settings)[BACKEND_CONFIG_ENV]
    assert json.loads(env.replace("{{", "{").replace("}}", "}")) == config  # braces doubled for KubeSpawner
    monkeypatch.setenv(BACKEND_CONFIG_ENV, json.dumps(config))
    backend = make_backend("kubernetes")
    assert (backend.job_kind, backend.queue_name, backend.gpu_resource) == ("paddlejob", "team-a", "amd.com/gpu")
    assert backend.max_workers == 4 and backend.max_memory == "16Gi" and backend.ttl_seconds_after_finished == 60
    # A server's own config wins over the site's.
    own = make_backend("kubernetes", config=Config({"KubernetesBackend": {"queue_name": "mine"}}))
    assert own.queue_name == "mine" and own.job_kind == "paddlejob"
    monkeypatch.setenv(BACKEND_CONFIG_ENV, "[1]")
    with pytest.raises(ValueError, match="must be a JSON object"):
        make_backend("kubernetes")


def test_job_settings_are_checked():
    with pytest.raises(ValueError, match="job_kind must be one of job, paddlejob"):
        HubSettings(job_kind="mpijob")
    with pytest.raises(ValueError, match="unknown job_options: max_gpus"):
        HubSettings(job_options={"max_gpus": 3})
    assert notebook_backend_config(HubSettings()) == {"KubernetesBackend": {"job_kind": "job",
                                                                            "gpu_resource": "nvidia.com/gpu"}}


def test_the_notebook_role_binding_can_bind_a_cluster_role():
    assert tenancy.role_binding("u-a")["roleRef"]["kind"] == "Role"
    binding = tenancy.role_binding("u-a", cluster_role="pc-notebook")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "pc-notebook"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "paddlecloud-notebook", "namespace": "u-a"}]


def test_user_network_policies():
    notebook, pods, egress = tenancy.user_network_policies(
        "u-a", "hub-ns", {"app.kubernetes.io/component": "hub"}, {"app.kubernetes.io/component": "proxy"},
        api_server=[{"cidr": "10.0.0.1/32", "port": 6443}], egress=[{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}])
    hub_ns = {"matchLabels": {"kubernetes.io/metadata.name": "hub-ns"}}
    assert notebook["spec"] == {
        "podSelector": {"matchLabels": {"component": "singleuser-server"}}, "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"namespaceSelector": hub_ns, "podSelector": {"matchLabels": {
            "app.kubernetes.io/component": "hub"}}},
                              {"namespaceSelector": hub_ns, "podSelector": {"matchLabels": {
                                  "app.kubernetes.io/component": "proxy"}}}],
                     "ports": [{"protocol": "TCP", "port": 8888}]}]}
    assert pods["spec"]["podSelector"] == {"matchExpressions": [
        {"key": "component", "operator": "NotIn", "values": ["singleuser-server"]}]}
    assert pods["spec"]["ingress"] == [{"from": [{"podSelector": {}}]}]
    rules = egress["spec"]["egress"]
    assert egress["spec"]["podSelector"] == {} and egress["spec"]["policyTypes"] == ["Egress"]
    assert rules[0] == {"to": [{"podSelector": {}}]}
    assert rules[1]["ports"] == [{"protocol": "TCP", "port": 8081}]
    dns_ports = [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    assert rules[2] == {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}], "ports": dns_ports}
    assert rules[3] == {"to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}], "ports": [{"protocol": "TCP", "port": 6443}]}
    assert rules[4] == {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}
    assert {p["metadata"]["name"] for p in (notebook, pods, egress)} == set(tenancy.NETWORK_POLICY_NAMES)
    node_local = [{"ipBlock": {"cidr": "169.254.20.10/32"}}]
    site_dns = tenancy.user_network_policies("u-a", "hub-ns", {"a": "hub"}, dns=node_local)[2]["spec"]["egress"][2]
    assert site_dns == {"to": node_local, "ports": dns_ports}
    with pytest.raises(ValueError, match="needs hub_pod_labels"):
        HubSettings(user_network_policy={"proxy_pod_labels": {"a": "b"}})


def test_local_queue():
    assert tenancy.local_queue("u-a", "team", "cq") == {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
        "metadata": {"name": "team", "namespace": "u-a", "labels": {"app.kubernetes.io/managed-by": "paddlecloud"}},
        "spec": {"clusterQueue": "cq"}}


def test_traitlets_passthrough(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("GitHubOAuthenticator:\n  client_id: abc\n  client_secret: s3cret\n")
    assert traitlets_passthrough(str(good)) == {"GitHubOAuthenticator": {"client_id": "abc", "client_secret": "s3cret"}}
    for text, message in (("- a\n", "must map class names"), ("client_id: abc\n", "'client_id' is not a class name"),
                          ("GitHubOAuthenticator: 3\n", "must be a mapping")):
        bad = tmp_path / "bad.yaml"
        bad.write_text(text)
        with pytest.raises(ValueError, match=message):
            traitlets_passthrough(str(bad))


def load_hub_config(monkeypatch, tmp_path, **env) -> Config:
    for key, value in {"PADDLECLOUD_AUTHENTICATOR_CLASS": "dummy", "PADDLECLOUD_ALLOWED_USERS": "alice",
                       "PADDLECLOUD_HUB_STATE_DIR": str(tmp_path / "state"), **env}.items():
        monkeypatch.setenv(key, value)
    return PyFileConfigLoader("jupyterhub_config.py", str(REPO / "hub_config")).load_config()


def test_the_hub_config_uses_a_proxy_of_its_own_and_applies_the_passthrough_last(monkeypatch, tmp_path):
    passthrough = tmp_path / "hub-config.yaml"
    passthrough.write_text("DummyAuthenticator:\n  password: pw\nPaddleCloudSpawner:\n  service_exposure_policy: false\n"
                           "KubeSpawner:\n  start_timeout: 30\n")
    c = load_hub_config(monkeypatch, tmp_path, PADDLECLOUD_PROXY_API_URL="http://proxy-api:8001",
                        PADDLECLOUD_HUB_CONFIG_FILE=str(passthrough))
    assert c.ConfigurableHTTPProxy.should_start is False and c.ConfigurableHTTPProxy.api_url == "http://proxy-api:8001"
    assert c.DummyAuthenticator.password == "pw" and c.PaddleCloudSpawner.service_exposure_policy is False
    assert c.KubeSpawner.start_timeout == 30  # over the file's own 600
    (quota,) = [s for s in c.JupyterHub.services if s["name"] == "quota"]
    assert "--QuotaService.gpu_resource=nvidia.com/gpu" in quota["command"]
    assert "--QuotaService.job_kind=job" in quota["command"]  # admin usage and cancel read the site's kind
    # The quota service knows the site's default quota, as the spawner does (issue 28).
    assert json.loads(quota["environment"]["PADDLECLOUD_DEFAULT_QUOTA"]) == HubSettings().default_quota
    without = load_hub_config(monkeypatch, tmp_path, PADDLECLOUD_PROXY_API_URL="", PADDLECLOUD_HUB_CONFIG_FILE="")
    assert "should_start" not in without.ConfigurableHTTPProxy


def test_a_bad_passthrough_stops_the_hub_with_one_line(monkeypatch, tmp_path):
    passthrough = tmp_path / "hub-config.yaml"
    passthrough.write_text("client_id: abc\n")
    with pytest.raises(SystemExit, match="PaddleCloud Hub: .*'client_id' is not a class name"):
        load_hub_config(monkeypatch, tmp_path, PADDLECLOUD_HUB_CONFIG_FILE=str(passthrough))


def test_the_hub_config_seeds_a_new_home_from_the_notebook_image(monkeypatch, tmp_path):
    c = load_hub_config(monkeypatch, tmp_path)
    assert c.KubeSpawner.lifecycle_hooks == {"postStart": {"exec": {"command": [
        "python", "-m", "paddle_ext.homeseed", "/home/jovyan", "/opt/paddlecloud/examples"]}}}
