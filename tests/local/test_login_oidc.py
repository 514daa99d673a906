"""OpenID Connect login with the docs' OIDC values (docs/admin/logins.md) in the real JupyterHub (hub_config/local_config.py with
PADDLECLOUD_AUTHENTICATOR_CLASS=generic-oauth) against a real OIDC provider on 127.0.0.1
(oidc-provider, tests/oidcutil.py): the OAuth dance through the provider's own login form,
driven by an HTTP client; the groups claim becomes hub groups at every login and reaches the
quota service; an admin group makes an admin; someone outside the allowed groups is refused
with a page that says so."""

from __future__ import annotations

import re

import pytest
import requests

from oidcutil import ACCOUNTS, OIDCHub, login_through_provider, running_oidc_hub
from serverutil import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    yield from running_oidc_hub(tmp_path_factory, "oidc-hub")


def sso_login(hub: OIDCHub, name: str) -> requests.Session:
    session, answer = login_through_provider(hub.url, name, ACCOUNTS[name].password)
    assert answer.status_code == 200 and answer.url == f"{hub.url}/hub/home", (answer.url, answer.text[:500])
    return session


def user_model(hub: OIDCHub, name: str) -> dict:
    return hub.hub_api("GET", f"/users/{name}", hub.new_token(sso_login(hub, name), name)).json()


def test_login_through_the_providers_own_form_makes_hub_groups_from_the_groups_claim(hub):
    bob = user_model(hub, "bob")
    assert sorted(bob["groups"]) == ["audio", "vision"] and bob["admin"] is False


def test_a_wrong_password_stays_on_the_providers_form_and_the_hub_has_no_session(hub):
    session, answer = login_through_provider(hub.url, "bob", "not-bobs-password")
    assert answer.status_code == 401 and "Wrong user name or password." in answer.text
    assert answer.url.startswith(hub.provider.url)
    assert session.get(f"{hub.url}/hub/api/user", timeout=60).status_code == 403


def test_someone_outside_the_allowed_groups_is_refused_with_a_page_that_says_why(hub):
    session, answer = login_through_provider(hub.url, "eve", ACCOUNTS["eve"].password)
    assert answer.status_code == 403 and answer.url.startswith(f"{hub.url}/hub/oauth_callback")
    text = re.sub(r"\s+", " ", answer.text)
    assert "in none of the groups that may use this hub (audio, vision)" in text
    assert "Ask your administrator" in text


def test_the_admin_group_makes_an_admin_and_a_group_change_reaches_the_quota_page_at_next_login(hub):
    alice = user_model(hub, "alice")
    assert alice["admin"] is True and sorted(alice["groups"]) == ["audio", "hub-admins", "vision"]
    alice_token = hub.new_token(sso_login(hub, "alice"), "alice")
    for group, gpus in (("audio", 4), ("vision", 1)):
        response = requests.put(f"{hub.url}/services/quota/api/quotas/groups/{group}", json={"gpus": gpus},
                                headers={"Authorization": f"token {alice_token}"}, timeout=60)
        assert response.status_code == 200, response.text
    bob_token = hub.new_token(sso_login(hub, "bob"), "bob")

    def view():
        response = requests.get(f"{hub.url}/services/quota/api/quotas/users/bob", timeout=60,
                                headers={"Authorization": f"token {bob_token}"})
        return response.json() if response.status_code == 200 else None

    before = wait_for(view, 120, "bob's quota")
    assert before["groups"] == ["audio", "vision"] and before["sources"]["gpus"] == "group:audio"
    hub.provider.set_groups("bob", ["vision"])
    try:
        sso_login(hub, "bob")
        after = view()
        assert after["groups"] == ["vision"]
        assert (after["limits"]["gpus"], after["sources"]["gpus"]) == (1, "group:vision")
    finally:
        hub.provider.set_groups("bob", ACCOUNTS["bob"].groups)
