"""configure_quota_service adds the service, scope and roles to a hub config, keeping what is there."""

from __future__ import annotations

import sys

from traitlets.config import Config

from paddle_ext.hub.quota_config import configure_quota_service


def test_adds_service_scope_and_roles_to_an_empty_config(monkeypatch):
    for key in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "POD_NAMESPACE", "KUBECONFIG"):
        monkeypatch.delenv(key, raising=False)
    c = Config()
    service = configure_quota_service(c, port=10101, admin_users=["carol"])
    assert c.JupyterHub.services == [service]
    assert service["url"] == "http://127.0.0.1:10101"
    assert service["command"] == [sys.executable, "-m", "paddle_ext.hub.quota_service"]
    assert service["oauth_no_confirm"] is True
    assert service["oauth_client_allowed_scopes"] == ["custom:paddlecloud-quota:admin"]
    assert list(c.JupyterHub.custom_scopes) == ["custom:paddlecloud-quota:admin"]
    roles = {role["name"]: role for role in c.JupyterHub.load_roles}
    assert roles["user"]["scopes"] == ["self", "access:services!service=quota"]
    assert roles["paddlecloud-quota-service"]["services"] == ["quota"]
    assert set(roles["paddlecloud-quota-service"]["scopes"]) == {"list:users", "read:users", "list:groups",
                                                                 "read:groups"}
    assert roles["paddlecloud-quota-admin"]["users"] == ["carol"]
    assert service["environment"] == {}


def test_keeps_existing_services_roles_and_extends_a_user_role(monkeypatch):
    # In a hub pod: the service must learn it runs in a cluster, and where.
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setenv("POD_NAMESPACE", "paddlecloud")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    c = Config()
    c.JupyterHub.services = [{"name": "idle-culler", "command": ["culler"]}]
    c.JupyterHub.load_roles = [{"name": "idle-culler", "services": ["idle-culler"], "scopes": ["list:users"]},
                               {"name": "user", "scopes": ["self", "access:services!service=other"]}]
    c.JupyterHub.custom_scopes = {"custom:x:y": {"description": "x"}}
    service = configure_quota_service(c, port=10101, host="hub", listen_ip="0.0.0.0",
                                      environment={"PADDLECLOUD_QUOTA_STORE": "kubernetes"})
    assert [s["name"] for s in c.JupyterHub.services] == ["idle-culler", "quota"]
    assert service["url"] == "http://hub:10101" and "--ip=0.0.0.0" in service["command"]
    assert service["environment"] == {"PADDLECLOUD_QUOTA_STORE": "kubernetes", "KUBERNETES_SERVICE_HOST": "10.0.0.1",
                                      "KUBERNETES_SERVICE_PORT": "443", "POD_NAMESPACE": "paddlecloud"}
    assert set(c.JupyterHub.custom_scopes) == {"custom:x:y", "custom:paddlecloud-quota:admin"}
    roles = {role["name"]: role for role in c.JupyterHub.load_roles}
    assert roles["user"]["scopes"] == ["self", "access:services!service=other", "access:services!service=quota"]
    assert "idle-culler" in roles
    configure_quota_service(c, port=10101)  # twice: still one service, one role each
    assert [s["name"] for s in c.JupyterHub.services] == ["idle-culler", "quota"]
    assert [r["name"] for r in c.JupyterHub.load_roles].count("paddlecloud-quota-admin") == 1
