"""LDAP login with the docs' LDAP values (docs/admin/logins.md) in the real JupyterHub (hub_config/local_config.py with
PADDLECLOUD_AUTHENTICATOR_CLASS) against a real OpenLDAP (slapd) the test seeds (tests/ldaputil.py):
a bind with the right password logs in, a wrong one is refused, the directory's groups become
hub groups at every login and reach the quota service, a directory admin group makes an admin,
and someone outside the allowed groups gets a page that says so."""

from __future__ import annotations

import re

import pytest
import requests
import yaml

from availability import skip_or_fail
from hubutil import LocalHub, login
from ldaputil import PEOPLE_SEED, SUFFIX, Directory, missing_tools
from loginvalues import hub_environment, docs_login_text, with_config
from serverutil import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(autouse=True, scope="module")
def _slapd_available():
    if missing_tools():
        skip_or_fail(f"{', '.join(missing_tools())} missing: run `make login-deps`")

PASSWORDS = {person.uid: person.password for person in PEOPLE_SEED}


class LDAPHub(LocalHub):
    """The local hub with the docs' LDAP values (docs/admin/logins.md) (tests/loginvalues.py), configured as the chart
    does from them, with this test's directory put in for ldap.example.org: its address and port,
    its tree, and no TLS (127.0.0.1; the docs' directory speaks LDAPS)."""

    def __init__(self, home, directory: Directory):
        super().__init__(home)
        self.config_file = self.home.parent / "hub-config.yaml"
        values = yaml.safe_load(docs_login_text("ldap").replace("dc=example,dc=org", SUFFIX))
        self.values = with_config(values, "LDAPGroupsAuthenticator", server_address="127.0.0.1",
                                  server_port=directory.port, tls_strategy="insecure")

    def environment(self) -> dict[str, str]:
        return {**super().environment(), **hub_environment(self.values, self.config_file)}


@pytest.fixture(scope="module")
def directory(tmp_path_factory):
    ldap = Directory(tmp_path_factory.mktemp("ldap") / "slapd").start()
    try:
        yield ldap
    finally:
        ldap.stop()


@pytest.fixture(scope="module")
def hub(tmp_path_factory, directory):
    hub = LDAPHub(tmp_path_factory.mktemp("ldap-hub") / "paddlecloud", directory)
    try:
        hub.start()
        yield hub
    finally:
        hub.stop_and_check()


def form_login(hub: LocalHub, name: str, password: str) -> requests.Response:
    """POST the hub's login form; the answer itself (302 in, else the page the user sees)."""
    session = requests.Session()
    session.get(hub.url + "/hub/login", timeout=60).raise_for_status()
    return session.post(hub.url + "/hub/login", allow_redirects=False, timeout=60,
                        data={"username": name, "password": password, "_xsrf": session.cookies.get("_xsrf")})


def user_model(hub: LocalHub, name: str) -> dict:
    session = login(hub.url, name, PASSWORDS[name])
    return hub.hub_api("GET", f"/users/{name}", hub.new_token(session, name)).json()


def quota_view(hub: LocalHub, name: str, token: str) -> dict:
    """The user's entry on the quota page (/services/quota/), as the service sees it."""
    def answer():
        response = requests.get(f"{hub.url}/services/quota/api/quotas/users/{name}", timeout=60,
                                headers={"Authorization": f"token {token}"})
        return response.json() if response.status_code == 200 else None
    return wait_for(answer, 120, f"the quota service to answer for {name}")


def test_the_right_password_logs_in_and_the_directory_groups_become_hub_groups(hub, directory):
    assert directory.members("audio") == ["alice", "bob"]  # audio is a posixGroup (memberUid), vision groupOfNames
    bob = user_model(hub, "bob")
    assert sorted(bob["groups"]) == ["audio", "vision"] and bob["admin"] is False


def test_a_wrong_password_or_an_unknown_user_is_refused(hub):
    for name, password in (("bob", "not-bobs-password"), ("mallory", "anything"), ("bob", " ")):
        response = form_login(hub, name, password)
        assert response.status_code == 403, (name, response.status_code)
        assert "Invalid username or password" in response.text


def test_someone_outside_the_allowed_groups_is_refused_with_a_page_that_says_why(hub):
    response = form_login(hub, "eve", PASSWORDS["eve"])  # a right password; eve is only in "outsiders"
    assert response.status_code == 403
    text = re.sub(r"\s+", " ", response.text)
    assert "You signed in, but are in none of the groups that may use this hub (audio, vision)" in text
    assert "Ask your administrator" in text


def test_the_directory_admin_group_makes_an_admin_and_taking_it_away_unmakes_one(hub, directory):
    assert user_model(hub, "alice")["admin"] is True  # alice is in hub-admins
    directory.remove_member("hub-admins", "alice")
    try:
        alice = user_model(hub, "alice")
        assert alice["admin"] is False and "hub-admins" not in alice["groups"]
    finally:
        directory.add_member("hub-admins", "alice")
    assert user_model(hub, "alice")["admin"] is True


def test_a_group_change_in_the_directory_reaches_the_quota_page_at_the_next_login(hub, directory):
    """alice (admin through hub-admins, so a quota admin too) gives audio 4 GPUs and vision 1;
    bob, in both, gets audio's 4. Taken out of audio in the directory, bob has vision's 1 at
    his next login: the quota service reads the hub's groups, which the login set."""
    alice_token = hub.new_token(login(hub.url, "alice", PASSWORDS["alice"]), "alice")
    bob_session = login(hub.url, "bob", PASSWORDS["bob"])
    bob_token = hub.new_token(bob_session, "bob")
    for group, gpus in (("audio", 4), ("vision", 1)):
        response = requests.put(f"{hub.url}/services/quota/api/quotas/groups/{group}", json={"gpus": gpus},
                                headers={"Authorization": f"token {alice_token}"}, timeout=60)
        assert response.status_code == 200, response.text
    before = quota_view(hub, "bob", bob_token)
    assert before["groups"] == ["audio", "vision"]
    assert (before["limits"]["gpus"], before["sources"]["gpus"]) == (4, "group:audio")

    directory.remove_member("audio", "bob")
    try:
        assert quota_view(hub, "bob", bob_token)["groups"] == ["audio", "vision"]  # nothing changes until he logs in
        login(hub.url, "bob", PASSWORDS["bob"])
        after = quota_view(hub, "bob", bob_token)
        assert after["groups"] == ["vision"]
        assert (after["limits"]["gpus"], after["sources"]["gpus"]) == (1, "group:vision")
    finally:
        directory.add_member("audio", "bob")
