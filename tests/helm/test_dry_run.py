"""Every object the chart renders, and every object the hub then makes in a user namespace
from the chart's settings, passes the API server's own checks (server-side dry-run on the
test control plane: schemas, defaulting, admission)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from serverutil import wait_for

from helmlib import (CHART, MATRIX, documents, helm, kubectl, notes, docs_try_values, settings_text, template,
                     values_file)
from paddle_ext import tenancy
from paddle_ext.hub.settings import HubSettings
from tools.k8s.images import CACHE_ROOT

NAMESPACE = "paddlecloud"
CRD = Path(CACHE_ROOT) / "crds"


@pytest.fixture(scope="module")
def cluster(kwok_cluster):
    kubectl(kwok_cluster.kubeconfig, "create", "namespace", NAMESPACE)
    crds = sorted(CRD.glob("training-operator-*/kubeflow.org_paddlejobs.yaml"))
    assert crds, f"the PaddleJob CRD is not cached under {CRD}; run `make k8s-bin`"
    kubectl(kwok_cluster.kubeconfig, "apply", "--server-side", "-f", str(crds[-1]))
    wait_for(lambda: any(c["type"] == "Established" and c["status"] == "True" for c in json.loads(kubectl(
        kwok_cluster.kubeconfig, "get", "crd/paddlejobs.kubeflow.org", "-o", "json").stdout)["status"].get(
        "conditions") or []), timeout=60, interval=0.5, what="the PaddleJob CRD to be established")
    yield kwok_cluster
    kubectl(kwok_cluster.kubeconfig, "delete", "namespace", NAMESPACE, "--wait=false", check=False)


def dry_run(kubeconfig: str, objects: str, namespace: str = NAMESPACE) -> list[str]:
    proc = kubectl(kubeconfig, "apply", "--dry-run=server", "-n", namespace, "-o", "json", "-f", "-",
                   input=objects, check=False)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    items = result.get("items", [result]) if result.get("kind") == "List" else [result]
    return [f"{item['kind']}/{item['metadata']['name']}" for item in items]


@pytest.mark.parametrize("name", MATRIX)
def test_every_rendered_object_passes_server_side_dry_run(cluster, name):
    rendered = template(values_file(name), namespace=NAMESPACE)
    expected = sorted(f"{d['kind']}/{d['metadata']['name']}" for d in documents(rendered))
    assert sorted(dry_run(cluster.kubeconfig, rendered)) == expected


def test_a_broken_object_is_refused_by_the_dry_run(cluster):
    """The dry-run is shown to judge: an object the API server cannot accept fails it."""
    docs = documents(template(values_file("minimal"), namespace=NAMESPACE))
    service = next(d for d in docs if d["kind"] == "Service")
    service["spec"]["ports"][0]["port"] = 70000
    proc = kubectl(cluster.kubeconfig, "apply", "--dry-run=server", "-n", NAMESPACE, "-f", "-",
                   input=yaml.safe_dump(service), check=False)
    assert proc.returncode != 0 and "70000" in proc.stderr


def install_dry_run(cluster) -> tuple[dict, str]:
    proc = helm("install", "pc", str(CHART), "--namespace", NAMESPACE, "-f", values_file("minimal"),
                "--dry-run=server", kubeconfig=cluster.kubeconfig)
    manifest, _, notes = proc.stdout.partition("NOTES:")
    return yaml.safe_load(settings_text(documents(manifest.split("MANIFEST:", 1)[1]))), notes


def test_install_dry_run_reads_the_api_server_from_the_cluster_and_says_how_to_log_in(cluster):
    # This control plane publishes no endpoints for `kubernetes` (its API server is on 127.0.0.1):
    # the users' pods then get no API-server egress (not 443/6443 anywhere), and the notes say so.
    settings, notes = install_dry_run(cluster)
    assert settings["user_network_policy"]["api_server"] == []
    assert "WARNING: users' notebooks cannot reach the Kubernetes API server" in notes
    assert "networkPolicy.apiServer=" in notes
    assert "port-forward service/proxy-public 8000:80" in notes
    assert 'Log in with "github"' in notes and "users alice, bob" in notes and "/services/quota/" in notes
    # Where the cluster says where its API server is, exactly that (and the Service's address).
    kubectl(cluster.kubeconfig, "apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
        "metadata": {"name": "kubernetes-helm-test", "namespace": "default",
                     "labels": {"kubernetes.io/service-name": "kubernetes"}},
        "endpoints": [{"addresses": ["192.0.2.10"]}, {"addresses": ["192.0.2.11"]}],
        "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}))
    try:
        settings, notes = install_dry_run(cluster)
    finally:
        kubectl(cluster.kubeconfig, "delete", "endpointslice", "-n", "default", "kubernetes-helm-test")
    service_ip = json.loads(kubectl(cluster.kubeconfig, "get", "service", "kubernetes", "-o", "json").stdout)
    assert settings["user_network_policy"]["api_server"] == [
        {"cidr": "192.0.2.10/32", "port": 6443}, {"cidr": "192.0.2.11/32", "port": 6443},
        {"cidr": f"{service_ip['spec']['clusterIP']}/32", "port": 443}]
    assert "WARNING" not in notes


@pytest.mark.parametrize("name", ["full", "minimal"])
def test_what_the_hub_makes_in_a_user_namespace_passes_too(cluster, name, tmp_path):
    """From the rendered settings: the notebook's service account, the RoleBinding to the
    chart's ClusterRole, the LimitRange, the NetworkPolicies, dataset claims and the quota."""
    from paddle_ext.hub.settings import dataset_claims
    from paddle_ext.quota.model import Effective, Limits, parse_patch

    path = tmp_path / "values.yaml"
    path.write_text(settings_text(documents(template(values_file(name), namespace=NAMESPACE))))
    settings = HubSettings.load(str(path), environ={})
    user_ns = f"dry-{name}"
    labels = {**tenancy.pod_security_labels(), "paddlecloud.io/user": "alice"}
    kubectl(cluster.kubeconfig, "apply", "-f", "-", input=yaml.safe_dump(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": user_ns, "labels": labels}}))
    policy = settings.user_network_policy
    objects = [tenancy.service_account(user_ns), tenancy.role_binding(user_ns, cluster_role=settings.notebook_cluster_role),
               tenancy.limit_range(user_ns, settings.limit_range_cpu, settings.limit_range_memory,
                                   settings.limit_range_max, settings.limit_range_ephemeral_storage_request,
                                   settings.limit_range_ephemeral_storage),
               *tenancy.user_network_policies(user_ns, settings.hub_namespace, policy["hub_pod_labels"],
                                              policy["proxy_pod_labels"], policy["api_server"],
                                              policy["hub_api_port"], policy["egress"], policy["dns"]),
               *dataset_claims(settings, user_ns),
               tenancy.user_resource_quota(user_ns, Effective(Limits.from_dict(parse_patch(settings.default_quota)), {}),
                                           settings.gpu_resource, settings.object_quota)]
    made = dry_run(cluster.kubeconfig, yaml.safe_dump_all(objects), namespace=user_ns)
    assert sorted(made) == sorted(f"{o['kind']}/{o['metadata']['name']}" for o in objects)
    assert len([m for m in made if m.startswith("NetworkPolicy/")]) == 3
    kubectl(cluster.kubeconfig, "delete", "namespace", user_ns, "--wait=false", check=False)


@pytest.mark.parametrize("name", ["try", "minimal"])
def test_notes_rendered_without_a_cluster_are_what_helm_install_prints(cluster, name, tmp_path):
    """test_chart.py reads NOTES.txt through helmlib.notes(); a real (dry-run) install prints the same."""
    values = values_file(name) if name != "try" else str(tmp_path / "try-values.yaml")
    if name == "try":
        Path(values).write_text(docs_try_values())
    out = helm("install", "pc", str(CHART), "-n", NAMESPACE, "-f", values, "--dry-run=server",
               kubeconfig=cluster.kubeconfig).stdout
    printed = out.split("\nNOTES:\n", 1)[1]
    assert printed.strip() == notes(values, namespace=NAMESPACE).strip()
