"""The Kubernetes hub's config (hub_config/jupyterhub_config.py, what the chart runs) with the
docs' OIDC and LDAP values (docs/admin/logins.md), without a cluster: JupyterHub initialises with it (the
authenticator is created, so its own checks run: OAuthenticator refuses allowed_groups without
manage_groups), the login's groups are managed, the refusal page names the allowed groups, and
the quota admin role goes to the admin group."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import pytest

from hubutil import REPO
from loginvalues import KINDS, hub_environment, docs_login_values

pytestmark = [pytest.mark.timeout(300)]

CLASSES = {"oidc": "GenericOAuthenticator", "ldap": "LDAPGroupsAuthenticator"}


@pytest.mark.parametrize("kind", KINDS)
def test_the_kubernetes_hub_initialises_with_the_readmes_login_values(kind, tmp_path):
    pytest.importorskip({"oidc": "oauthenticator", "ldap": "ldapauthenticator"}[kind])
    values = docs_login_values(kind)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PADDLECLOUD_")}
    env.update({"PADDLECLOUD_HUB_STATE_DIR": str(tmp_path), "PYTHONPATH": str(REPO),
                "PADDLECLOUD_ADMIN_USERS": ",".join(values["hub"]["adminUsers"]),
                **hub_environment(values, tmp_path / "hub-config.yaml")})
    result = subprocess.run([sys.executable, "-m", "jupyterhub", "-f", str(REPO / "hub_config" / "jupyterhub_config.py"),
                             "--show-config-json"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    config = json.loads(result.stdout)
    assert config["JupyterHub"]["authenticator_class"] == values["hub"]["authenticatorClass"]
    assert config[CLASSES[kind]] == values["hub"]["config"][CLASSES[kind]]
    login = config["Authenticator"]
    # sets come as their repr
    assert ast.literal_eval(login["allowed_groups"]) == {"audio", "vision"}
    assert ast.literal_eval(login["admin_groups"]) == {"hub-admins"}
    if kind == "oidc":
        assert login["manage_groups"] is True
        assert "none of the groups that may use this hub (audio, vision)" in login["custom_403_message"]
    (quota_admins,) = [role for role in config["JupyterHub"]["load_roles"] if role["name"] == "paddlecloud-quota-admin"]
    assert quota_admins["groups"] == ["hub-admins"] and quota_admins["users"] == []
