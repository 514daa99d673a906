"""The docs' login values (docs/admin/logins.md) (OpenID Connect, LDAP) without a cluster or helm: each, laid over the
chart's values.yaml, passes the chart's schema; its settings are what HubSettings reads; and the
hub's login code accepts them with the authenticator they name (tests/local/test_login_*.py log
in with them against real servers; tests/helm/test_chart.py renders them)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from loginvalues import KINDS, docs_login_values, merged
from paddle_ext.hub.settings import HubSettings, login_access

CHART = Path(__file__).resolve().parents[2] / "helm" / "paddlecloud-hub"
AUTHENTICATORS = {"oidc": ("oauthenticator.generic", "GenericOAuthenticator"),
                  "ldap": ("paddle_ext.hub.ldap", "LDAPGroupsAuthenticator")}


@pytest.mark.parametrize("kind", KINDS)
def test_the_readmes_login_values_pass_the_charts_schema(kind):
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = merged(yaml.safe_load((CHART / "values.yaml").read_text()), docs_login_values(kind))
    jsonschema.validate(values, schema)
    wrong = merged(values, {"hub": {"secretEnv": [{"name": "OAUTH_CLIENT_SECRET", "secret": "in values"}]}})
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(wrong, schema)  # a secret cannot be put in values this way


@pytest.mark.parametrize("kind", KINDS)
def test_the_readmes_login_values_are_a_login_choice_the_hub_accepts(kind, tmp_path):
    module, name = AUTHENTICATORS[kind]
    authenticator = getattr(pytest.importorskip(module), name)
    values = docs_login_values(kind)
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values["settings"]))
    settings = HubSettings.load(str(path), environ={})
    traits = login_access(settings, authenticator)
    assert traits["allowed_groups"] == {"vision", "audio"} and traits["admin_groups"] == {"hub-admins"}
    config = values["hub"]["config"][name]
    assert set(config) <= set(authenticator.class_traits(config=True)), "every trait in the docs' block exists"
    assert not any("secret" in key or "password" in key for key in config), "secrets go in secretEnv"


async def test_ldap_admits_group_members_and_admins_and_tells_everyone_else_which_groups():
    ldap = pytest.importorskip("paddle_ext.hub.ldap")
    from tornado import web

    auth = ldap.LDAPGroupsAuthenticator(bind_dn_template=["uid={username},ou=people,dc=example,dc=org"],
                                        group_search_base="ou=groups,dc=example,dc=org",
                                        allowed_groups={"vision", "audio"}, admin_users={"root"})
    assert auth.manage_groups is True
    assert await auth.check_allowed("bob", {"groups": ["audio"], "admin": None})
    assert await auth.check_allowed("root", {"groups": [], "admin": None})  # an admin by name
    assert await auth.check_allowed("carol", {"groups": ["hub-admins"], "admin": True})  # by group
    with pytest.raises(web.HTTPError) as info:
        await auth.check_allowed("eve", {"groups": ["outsiders"], "admin": False})
    assert info.value.status_code == 403
    assert info.value.log_message == ("You signed in, but are in none of the groups that may use this hub "
                                      "(audio, vision). Ask your administrator to add you to one of them.")
