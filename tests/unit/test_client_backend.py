"""`JobClient()` (and so the CLI, the widgets and the magic) picks its backend as the
The user guide (docs/user/python.md) says: $PADDLECLOUD_BACKEND, else Kubernetes inside a cluster (a pod with a
service-account token), else local; an explicit argument wins. Kubernetes outside a
cluster uses the kubeconfig's current context and its namespace. Nothing is contacted:
choosing a backend reads only the environment and files."""

from __future__ import annotations

import pytest

from paddle_ext import JobClient, constants, kubeapi
from paddle_ext.backends.kubernetes import KubernetesBackend
from paddle_ext.backends.local import LocalBackend

KUBECONFIG = """
apiVersion: v1
kind: Config
current-context: lab
contexts:
- {name: lab, context: {cluster: c, user: u, namespace: paddlecloud-bob}}
clusters:
- {name: c, cluster: {server: "https://127.0.0.1:6443"}}
users:
- {name: u, user: {token: not-a-real-token}}
"""


@pytest.fixture
def pod(tmp_path, monkeypatch):
    """The environment of this process, outside any cluster; `enter()` makes it look like a pod's."""
    account = tmp_path / "serviceaccount"
    # Where a pod finds its service account, here a folder of the test's own.
    monkeypatch.setattr(constants, "SERVICE_ACCOUNT_DIR", str(account))
    monkeypatch.setattr(kubeapi.credentials, "SERVICE_ACCOUNT_DIR", str(account))
    monkeypatch.setenv("PADDLECLOUD_HOME", str(tmp_path / "home"))
    for name in ("PADDLECLOUD_BACKEND", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "KUBECONFIG"):
        monkeypatch.delenv(name, raising=False)

    def enter():
        account.mkdir()
        (account / "token").write_text("pod-token")
        (account / "namespace").write_text("paddlecloud-alice")
        (account / "ca.crt").write_text("")
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "198.19.0.1")

    return enter


def test_outside_a_cluster_without_a_setting_jobs_run_locally(pod):
    client = JobClient()
    assert type(client.backend) is LocalBackend and client.backend.name == "local"


def test_inside_a_cluster_the_kubernetes_backend_in_the_pods_namespace(pod, monkeypatch):
    pod()
    client = JobClient()
    assert type(client.backend) is KubernetesBackend
    assert client.backend.namespace == "paddlecloud-alice"
    assert client.backend.api.credentials.server == "https://198.19.0.1:443"
    monkeypatch.setenv("PADDLECLOUD_BACKEND", "local")  # the setting wins over where it runs
    assert type(JobClient().backend) is LocalBackend
    assert type(JobClient("local").backend) is LocalBackend  # and an explicit choice over both


def test_kubernetes_outside_a_cluster_uses_the_kubeconfigs_context(pod, monkeypatch, tmp_path):
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    monkeypatch.setenv("PADDLECLOUD_BACKEND", "kubernetes")
    client = JobClient()
    assert type(client.backend) is KubernetesBackend and client.backend.namespace == "paddlecloud-bob"
    assert client.backend.api.credentials.server == "https://127.0.0.1:6443"
    assert JobClient(namespace="other").backend.namespace == "other"  # --namespace overrides
    assert type(JobClient("local").backend) is LocalBackend
