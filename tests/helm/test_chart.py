"""The chart without a cluster: lint, render, schema, and that what it renders is what the
hub's code reads (HubSettings, the notebook rules, the Services policy, the passthrough)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import subprocess
import sys

import pytest
import yaml

from helmlib import (CHART, MATRIX, REPO, documents, find, helm, notes, docs_try_values, secret_data, settings_text,
                     template, values_file)
from loginvalues import KINDS, docs_login_text, docs_login_values
from paddle_ext import policies, tenancy
from paddle_ext.manifests import container_security_context, pod_security_context
from paddle_ext.hub.settings import (HubSettings, login_access, notebook_backend_config, pod_rules, profile_list,
                                     traitlets_passthrough)

pytestmark = pytest.mark.usefixtures("k8s_tools")

# HubSettings fields the chart decides itself (not in the values' `settings:`).
CHART_SETS = {"hub_namespace", "hub_connect_url", "quota_service_host", "quota_service_port",
              "notebook_cluster_role", "user_network_policy"}
# Where values.yaml's `settings:` default differs from HubSettings' on purpose.
CHART_DEFAULTS = {"gpu_tolerations": ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},)}


def schema() -> dict:
    return json.loads((CHART / "values.schema.json").read_text())


def chart_values() -> dict:
    return yaml.safe_load((CHART / "values.yaml").read_text())


def test_the_json_schema_is_generated_from_the_hand_written_yaml():
    proc = subprocess.run([sys.executable, str(REPO / "helm" / "schema.py"), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((CHART / "values.schema.json").read_text()) == yaml.safe_load(
        (CHART / "values.schema.yaml").read_text())


def test_the_check_catches_a_stale_json(tmp_path, monkeypatch):
    """The sync check is shown to fail: a schema whose JSON lags its YAML is reported."""
    sys.path.insert(0, str(REPO / "helm"))
    import schema as schema_tool

    stale = tmp_path / "values.schema.json"
    stale.write_text(schema_tool.rendered().replace('"minLength": 1', '"minLength": 0', 1))
    monkeypatch.setattr(schema_tool, "TARGET", stale)
    assert schema_tool.main(["--check"]) == 1
    assert schema_tool.main([]) == 0 and schema_tool.main(["--check"]) == 0


@pytest.mark.parametrize("name", MATRIX)
def test_lint_strict(name):
    proc = helm("lint", "--strict", str(CHART), "-f", values_file(name), "--namespace", "paddlecloud")
    assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout


@pytest.mark.parametrize("name", MATRIX)
def test_every_values_file_renders_and_each_object_is_what_the_hub_expects(name):
    docs = documents(template(values_file(name)))
    kinds = sorted(f"{d['kind']}/{d['metadata']['name']}" for d in docs)
    always = {"ServiceAccount/hub", "ConfigMap/hub-settings", "Secret/hub", "PersistentVolumeClaim/hub-db",
              "Service/hub", "Service/proxy-public", "Service/proxy-api", "Deployment/hub", "Deployment/proxy",
              "ClusterRole/pc-hub", "ClusterRoleBinding/pc-hub", "Role/hub", "RoleBinding/hub",
              "ClusterRole/pc-notebook", "ValidatingAdmissionPolicy/paddlecloud-services-stay-inside",
              "ValidatingAdmissionPolicyBinding/paddlecloud-services-stay-inside", "PodDisruptionBudget/proxy",
              *(f"{kind}/{name}" for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
                for name in (policies.POD_POLICY_NAME, policies.JOB_POLICY_NAME, policies.HUB_POLICY_NAME))}
    assert always <= set(kinds), always - set(kinds)
    assert len(kinds) == len(set(kinds)), "an object is rendered twice"
    for doc in docs:
        namespaced = doc["kind"] not in ("ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                                         "ValidatingAdmissionPolicyBinding")
        assert "namespace" not in doc["metadata"] or not namespaced  # helm puts them in the release namespace
        for pod in [doc["spec"]["template"]["spec"]] if doc["kind"] == "Deployment" else []:
            for container in pod["containers"]:
                assert container["imagePullPolicy"] in ("IfNotPresent", "Never")
                assert container["securityContext"] == container_security_context()
            assert pod["securityContext"] == pod_security_context()
    hub = find(docs, "Deployment", "hub")
    assert hub["spec"]["strategy"] == {"type": "Recreate"} and hub["spec"]["replicas"] == 1
    env = {e["name"]: e for e in hub["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["PADDLECLOUD_PROXY_API_URL"]["value"] == "http://proxy-api:8001"
    assert env["CONFIGPROXY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "hub", "key": "proxy.token"}
    assert env["JPY_COOKIE_SECRET"]["valueFrom"]["secretKeyRef"] == {"name": "hub", "key": "hub.cookie-secret"}
    netpols = {d["metadata"]["name"] for d in docs if d["kind"] == "NetworkPolicy"}
    ingress = [d for d in docs if d["kind"] == "Ingress"]
    settings = yaml.safe_load(settings_text(docs))
    if name == "ingress-tls":
        assert not netpols and "user_network_policy" not in settings
        (ing,) = ingress
        assert ing["spec"]["tls"] == [{"secretName": "hub-tls", "hosts": ["hub.example.org"]}]
        assert ing["spec"]["ingressClassName"] == "nginx"
        assert ing["spec"]["rules"][0]["host"] == "hub.example.org"
        assert ing["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"] == {
            "name": "proxy-public", "port": {"name": "http"}}
    else:
        assert netpols == {"hub", "proxy"} and not ingress
        assert settings["user_network_policy"]["hub_pod_labels"] == \
            hub["spec"]["template"]["metadata"]["labels"]
    public = find(docs, "Service", "proxy-public")
    hub_rules = find(docs, "ClusterRole", "pc-hub")["rules"]
    queue_writes = [r for r in hub_rules if r["apiGroups"] == ["kueue.x-k8s.io"] and set(r["verbs"]) - {
        "get", "list", "watch"}]
    assert bool(queue_writes) == (name == "kueue")
    # The notebook reads its Workloads and LocalQueue; the hub holds what it grants.
    assert {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads", "localqueues"],
            "verbs": ["get", "list", "watch"]} in hub_rules
    if name == "kueue":
        assert settings["kueue_enabled"] is True and settings["kueue_borrowing_limit"] == {"gpus": 8}
        # The quota service reads ClusterQueues for the overview and deletes those no quota wants.
        assert {"apiGroups": ["kueue.x-k8s.io"], "resources": ["clusterqueues"],
                "verbs": ["get", "list", "watch", "create", "patch", "delete"]} in hub_rules
    if name == "full":
        assert public["spec"]["type"] == "NodePort" and public["spec"]["ports"][0]["nodePort"] == 30080
        assert find(docs, "PodDisruptionBudget", "proxy")["spec"]["minAvailable"] == 1
        assert settings["user_network_policy"]["api_server"] == [{"cidr": "10.0.0.10/32", "port": 6443}]
    if name == "paddlejob":
        assert public["spec"]["type"] == "LoadBalancer"
        assert public["spec"]["loadBalancerSourceRanges"] == ["203.0.113.0/24"]
        assert settings["job_kind"] == "paddlejob"
    if name == "minimal":
        assert public["spec"]["type"] == "ClusterIP"
        # Where the API server is cannot be read without a cluster: no API-server egress at all,
        # rather than 443/6443 to any address.
        assert settings["user_network_policy"]["api_server"] == []


@pytest.mark.parametrize("name", MATRIX)
def test_the_rendered_settings_are_what_HubSettings_reads(name, tmp_path):
    docs = documents(template(values_file(name)))
    path = tmp_path / "values.yaml"
    path.write_text(settings_text(docs))
    settings = HubSettings.load(str(path), environ={})  # unknown or malformed settings raise here
    values = yaml.safe_load(open(values_file(name)))
    for key, value in values["settings"].items():
        got = getattr(settings, key)
        assert (list(got) if isinstance(got, tuple) else got) == value, key
    assert settings.hub_namespace == "paddlecloud" and settings.notebook_cluster_role == "pc-notebook"
    assert settings.hub_connect_url == "http://hub.paddlecloud.svc:8081"
    assert (settings.quota_service_host, settings.quota_service_port) == ("hub.paddlecloud.svc", 10101)
    assert profile_list(settings) and notebook_backend_config(settings)["KubernetesBackend"]["job_kind"] in (
        "job", "paddlejob")
    from jupyterhub.auth import LocalAuthenticator
    assert login_access(settings, LocalAuthenticator)  # a login choice that the hub accepts


def test_settings_map_one_to_one_onto_HubSettings():
    fields = {f.name: f for f in dataclasses.fields(HubSettings)}
    in_schema = set(schema()["properties"]["settings"]["properties"])
    assert in_schema | CHART_SETS == set(fields), (
        f"in HubSettings, not in the chart: {sorted(set(fields) - in_schema - CHART_SETS)}; "
        f"in the chart, not in HubSettings: {sorted(in_schema - set(fields))}")
    assert not in_schema & CHART_SETS
    defaults = chart_values()["settings"]
    assert set(defaults) == in_schema, "values.yaml lists every setting with its default"
    reference = HubSettings()
    for key, value in defaults.items():
        expected = CHART_DEFAULTS.get(key, getattr(reference, key))
        got = tuple(value) if isinstance(value, list) else value
        assert got == expected, f"values.yaml settings.{key} = {value!r}, HubSettings default {expected!r}"


BAD_VALUES = [
    ("misspelt top-level key", {"hubb": {}}, "additional properties 'hubb' not allowed"),
    ("misspelt hub key", {"hub": {"authenticatorClas": "github"}}, "additional properties 'authenticatorClas'"),
    ("misspelt setting", {"settings": {"gpu_imag": "x"}}, "additional properties 'gpu_imag' not allowed"),
    ("misspelt nested key", {"proxy": {"service": {"typ": "NodePort"}}}, "additional properties 'typ'"),
    ("wrong type: string for integer", {"settings": {"cull_idle_seconds": "1h"}},
     "at '/settings/cull_idle_seconds': got string, want integer"),
    ("wrong type: string for boolean", {"settings": {"jobs_share_home": "yes"}},
     "at '/settings/jobs_share_home': got string, want boolean"),
    ("not a service type", {"proxy": {"service": {"type": "Ingress"}}}, "at '/proxy/service/type'"),
    ("not a quantity", {"settings": {"home_capacity": "ten gigs"}}, "at '/settings/home_capacity'"),
    ("not a job kind", {"settings": {"job_kind": "mpijob"}}, "at '/settings/job_kind'"),
    ("hub.config not {Class: {trait: value}}", {"hub": {"config": {"client_id": "x"}}}, "at '/hub/config"),
]


@pytest.mark.parametrize("what,override,message", BAD_VALUES, ids=[b[0] for b in BAD_VALUES])
def test_the_schema_refuses(what, override, message, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(override))
    proc = helm("template", "pc", str(CHART), "-f", values_file("minimal"), "-f", str(bad), check=False)
    assert proc.returncode != 0, f"{what} was accepted"
    assert message in proc.stderr, proc.stderr


def test_without_a_login_choice_install_is_refused_naming_the_three_ways(tmp_path):
    proc = helm("template", "pc", str(CHART), check=False)
    assert proc.returncode != 0
    for words in ("/hub/authenticatorClass", "/settings/allowed_users", "/settings/allowed_groups",
                  "/settings/allow_all"):
        assert words in proc.stderr, proc.stderr


def test_the_notebook_cluster_role_holds_exactly_the_notebook_rules():
    role = find(documents(template(values_file("minimal"))), "ClusterRole", "pc-notebook")
    assert role["rules"] == [dict(rule) for rule in tenancy.NOTEBOOK_RULES]


def test_the_services_policy_is_the_one_the_spawner_would_make():
    docs = documents(template(values_file("minimal")))
    for expected in policies.service_exposure_policy():
        got = find(docs, expected["kind"], expected["metadata"]["name"])
        assert got["spec"] == expected["spec"]


@pytest.mark.parametrize("name", MATRIX)
def test_the_pod_job_and_hub_policies_are_the_ones_the_code_makes_for_the_same_settings(name, tmp_path):
    docs = documents(template(values_file(name), namespace="pc-system"))
    path = tmp_path / "values.yaml"
    path.write_text(settings_text(docs))
    settings = HubSettings.load(str(path), environ={})
    expected = [*policies.user_pod_policies(pod_rules(settings)), *policies.hub_policy("pc-system", "hub")]
    for obj in expected:
        got = find(docs, obj["kind"], obj["metadata"]["name"])
        assert got["spec"] == obj["spec"], obj["metadata"]["name"]
    rules = pod_rules(settings)
    if name == "full":  # the values' own tolerations, classes and dataset claim reach the policy
        assert rules.priority_classes == ("research-low",) and rules.dataset_claims == ("team-datasets",)
        assert len(rules.tolerations) == 2
    assert rules.queue_required == (name == "kueue")


def test_secrets_are_generated_once_per_render_and_the_pods_checksums_agree():
    def render():
        docs = documents(template(values_file("minimal")))
        data = secret_data(find(docs, "Secret", "hub"))
        hub = find(docs, "Deployment", "hub")["spec"]["template"]["metadata"]["annotations"]
        proxy = find(docs, "Deployment", "proxy")["spec"]["template"]["metadata"]["annotations"]
        return data, hub, proxy

    data, hub, proxy = render()
    assert re.fullmatch(r"[A-Za-z0-9]{64}", data["proxy.token"])
    assert re.fullmatch(r"[0-9a-f]{64}", data["hub.cookie-secret"])
    assert hub["checksum/secrets"] == hashlib.sha256(
        (data["proxy.token"] + data["hub.cookie-secret"]).encode()).hexdigest()
    assert proxy["checksum/auth-token"] == hashlib.sha256(data["proxy.token"].encode()).hexdigest()[:4]
    again, _, _ = render()  # no cluster to look up: a new token each time (the install test checks lookup)
    assert again["proxy.token"] != data["proxy.token"]


def test_hub_config_is_passed_through_in_the_secret(tmp_path):
    docs = documents(template(values_file("minimal")))
    text = secret_data(find(docs, "Secret", "hub"))["hub-config.yaml"]
    assert "a-secret" not in json.dumps(docs[:0] + [d for d in docs if d["kind"] != "Secret"])
    path = tmp_path / "hub-config.yaml"
    path.write_text(text)
    assert traitlets_passthrough(str(path)) == {
        "GitHubOAuthenticator": {"client_id": "an-id", "client_secret": "a-secret",
                                 "oauth_callback_url": "https://hub.example.org/hub/oauth_callback"},
        # The chart installs the Services policy, so the hub does not (and may not).
        "PaddleCloudSpawner": {"service_exposure_policy": False, "user_pod_policy": False}}


@pytest.mark.parametrize("kind", KINDS)
def test_the_readmes_login_values_render_with_their_secrets_only_from_existing_secrets(kind, tmp_path):
    """The docs' OIDC and LDAP blocks (docs/admin/logins.md), as an admin adds them (-f after their own values): the
    authenticator, its traits in the hub's Secret, the groups in the settings, and each secretEnv
    entry a secretKeyRef to the admin's Secret (no secret value anywhere in the render)."""
    values = docs_login_values(kind)
    login = tmp_path / "login-values.yaml"
    login.write_text(docs_login_text(kind))
    docs = documents(template(values_file("minimal"), str(login)))
    hub = find(docs, "Deployment", "hub")["spec"]["template"]["spec"]["containers"][0]
    env = {item["name"]: item for item in hub["env"]}
    assert env["PADDLECLOUD_AUTHENTICATOR_CLASS"]["value"] == values["hub"]["authenticatorClass"]
    assert env["PADDLECLOUD_ADMIN_USERS"]["value"] == ""  # admins come from admin_groups
    for item in values["hub"].get("secretEnv", []):
        assert env[item["name"]] == {"name": item["name"], "valueFrom": {"secretKeyRef": {
            "name": item["secretName"], "key": item["key"]}}}
    config = tmp_path / "hub-config.yaml"
    config.write_text(secret_data(find(docs, "Secret", "hub"))["hub-config.yaml"])
    for section, traits in values["hub"]["config"].items():
        assert traitlets_passthrough(str(config))[section] == traits
    settings_file = tmp_path / "values.yaml"
    settings_file.write_text(settings_text(docs))
    settings = HubSettings.load(str(settings_file), environ={})
    assert (settings.allowed_groups, settings.admin_groups) == (("vision", "audio"), ("hub-admins",))
    text = notes(values_file("minimal"), str(login))
    assert "Admins: members of hub-admins (at each login)." in text
    assert "Who may log in: users alice, bob; members of vision, audio; and the admins." in text


def test_a_settings_change_changes_the_hubs_checksum_and_not_the_proxys(tmp_path):
    change = tmp_path / "change.yaml"
    change.write_text("settings: {cull_idle_seconds: 7200}\n")
    base = documents(template(values_file("minimal")))
    changed = documents(template(values_file("minimal"), str(change)))

    def annotations(docs, name):
        return find(docs, "Deployment", name)["spec"]["template"]["metadata"]["annotations"]

    assert annotations(base, "hub")["checksum/settings"] != annotations(changed, "hub")["checksum/settings"]
    assert annotations(base, "hub")["checksum/hub-config"] == annotations(changed, "hub")["checksum/hub-config"]
    assert set(annotations(base, "proxy")) == {"checksum/auth-token"}  # only the token restarts the proxy


# --- NOTES.txt tells the truth for the values given


@pytest.fixture
def try_values(tmp_path):
    """The "Try it on this machine" values of docs/admin/deploy.md (the ones test_install.py installs)."""
    path = tmp_path / "try-values.yaml"
    path.write_text(docs_try_values())
    return str(path)


def test_the_readmes_try_values_lint_and_fit_a_two_cpu_node(try_values):
    proc = helm("lint", "--strict", str(CHART), "-f", try_values, "--namespace", "paddlecloud")
    assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout
    docs = documents(template(try_values))
    profiles = yaml.safe_load(settings_text(docs))["profiles"]
    assert [p["gpus"] for p in profiles] == [0] and profiles[0]["cpu"] == "500m"
    assert find(docs, "Service", "proxy-public")["spec"]["type"] == "NodePort"
    # No storage class named: the cluster's default provisions the hub's database.
    assert "storageClassName" not in find(docs, "PersistentVolumeClaim", "hub-db")["spec"]


def test_notes_for_dummy_with_a_password_say_which_password_not_any(try_values):
    text = notes(try_values)
    assert 'Log in with "dummy": any user name below, with the password of' in text
    assert "hub.config.DummyAuthenticator.password" in text
    assert "any password" not in text
    assert "try-paddlecloud" not in text  # the password itself stays in the Secret
    assert "Who may log in: users alice; and the admins." in text


def test_notes_for_dummy_without_a_password_say_any_password(tmp_path):
    open_door = tmp_path / "open.yaml"
    open_door.write_text("hub: {authenticatorClass: dummy}\n")
    assert 'Log in with "dummy" (any password: for trials only).' in notes(values_file("minimal"), str(open_door))


def test_notes_for_another_authenticator_promise_no_password():
    text = notes(values_file("minimal"))
    assert 'Log in with "github".' in text and "password" not in text
    assert "kubectl -n paddlecloud port-forward service/proxy-public 8000:80" in text  # ClusterIP


def test_notes_for_a_node_port_name_the_proxys_node_and_the_port(try_values, tmp_path):
    text = notes(try_values)
    assert "listens on port 30080 of every node that runs kube-proxy" in text
    assert "address of a node that runs the proxy" in text
    command = ('echo "http://$(kubectl -n paddlecloud get pod -l app.kubernetes.io/instance=pc,'
               "app.kubernetes.io/component=proxy -o jsonpath='{.items[0].status.hostIP}'):"
               "$(kubectl -n paddlecloud get service proxy-public -o jsonpath='{.spec.ports[0].nodePort}')/\"")
    assert command in text
    picked = tmp_path / "picked.yaml"
    picked.write_text("proxy: {service: {nodePort: null}}\n")
    assert "listens on port <node port> of every node" in notes(try_values, str(picked))
    assert "any node's address" not in text


def test_notes_say_what_uninstall_leaves_and_how_to_remove_it(try_values):
    text = notes(try_values, release="trial", namespace="hub-trial")
    assert "`helm uninstall trial -n hub-trial` removes the hub, the proxy and the hub's database" in text
    assert "users' namespaces" in text and "namespace hub-trial" in text
    assert "kubectl delete namespace -l app.kubernetes.io/managed-by=paddlecloud,paddlecloud.io/user" in text
    assert "kubectl delete namespace hub-trial" in text
    # Never tell an admin to delete the default namespace.
    in_default = notes(try_values, namespace="default")
    assert "kubectl delete namespace default" not in in_default
    assert "kubectl -n default delete configmap paddlecloud-quotas" in in_default
