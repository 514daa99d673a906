"""Single sign-on in a real browser: Chromium goes from the hub's login page to the OpenID
Connect provider's own login page (oidc-provider on 127.0.0.1, tests/oidcutil.py), signs in and
lands in a JupyterLab of its own; someone outside the allowed groups sees the hub's page saying
why; a group taken away in the provider shows on the user's quota page after the next login."""

from __future__ import annotations

import re

import pytest
import requests
from playwright.sync_api import expect

from labpage import SECOND, wait_for_lab
from oidcutil import ACCOUNTS, running_oidc_hub

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    yield from running_oidc_hub(tmp_path_factory, "sso-hub")


HOME = "/hub/home"  # where a sign-in goes when the test needs no notebook


def sign_in(page, hub, name: str, next_url: str = "") -> None:
    """The hub's login page, its button to the provider, the provider's own form."""
    page.goto(hub.url + "/hub/login" + (f"?next={next_url}" if next_url else ""))
    page.get_by_role("button", name=f"Sign in with {hub.login_service}").click()
    page.wait_for_url(re.compile(rf"^{re.escape(hub.provider.url)}/interaction/"), timeout=60 * SECOND)
    expect(page.get_by_role("heading")).to_contain_text("Sign in to continue to paddlecloud-hub")
    page.get_by_label("User name").fill(name)
    page.get_by_label("Password").fill(ACCOUNTS[name].password)
    page.get_by_role("button", name="Sign in").click()


def test_a_user_signs_in_at_the_provider_and_gets_a_notebook(hub, page, artifacts):
    sign_in(page, hub, "bob")
    page.wait_for_url(re.compile(r"/user/bob/lab"), timeout=300 * SECOND)
    wait_for_lab(page, timeout=180 * SECOND)
    page.screenshot(path=str(artifacts / "sso-lab.png"))


def test_someone_outside_the_allowed_groups_sees_why(hub, page, artifacts):
    sign_in(page, hub, "eve")
    page.wait_for_url(re.compile(r"/hub/oauth_callback"), timeout=60 * SECOND)
    expect(page.locator("body")).to_contain_text(
        "You signed in, but are in none of the groups that may use this hub (audio, vision).")
    page.screenshot(path=str(artifacts / "sso-refused.png"))


def test_a_group_removed_in_the_provider_leaves_the_quota_page_at_the_next_login(hub, browser, page, artifacts):
    admin = requests.Session()  # alice, an admin through her group, sets the groups' GPUs over the API
    token = hub_token(hub, browser, "alice")
    for group, gpus in (("audio", 4), ("vision", 1)):
        response = admin.put(f"{hub.url}/services/quota/api/quotas/groups/{group}", json={"gpus": gpus},
                             headers={"Authorization": f"token {token}"}, timeout=60)
        assert response.status_code == 200, response.text

    sign_in(page, hub, "bob", HOME)
    page.wait_for_url(hub.url + HOME, timeout=120 * SECOND)
    gpus = page.locator('#own-body [data-field="gpus"]')
    page.goto(hub.url + "/services/quota/")
    expect(gpus.locator("b")).to_have_text("0 / 4", timeout=60 * SECOND)
    expect(gpus.locator(".src")).to_have_text("from group audio")

    hub.provider.set_groups("bob", ["vision"])
    try:
        # The next login: out of the hub, in again. The provider still knows bob (single
        # sign-on) and sends him straight back, with the groups it has now.
        page.goto(hub.url + "/hub/logout")
        page.goto(f"{hub.url}/hub/login?next={HOME}")
        page.get_by_role("button", name=f"Sign in with {hub.login_service}").click()
        page.wait_for_url(hub.url + HOME, timeout=120 * SECOND)
        page.goto(hub.url + "/services/quota/")
        expect(gpus.locator("b")).to_have_text("0 / 1", timeout=60 * SECOND)
        expect(gpus.locator(".src")).to_have_text("from group vision")
        page.screenshot(path=str(artifacts / "sso-quota-after-group-change.png"))
    finally:
        hub.provider.set_groups("bob", ACCOUNTS["bob"].groups)


def hub_token(hub, browser, name: str) -> str:
    """A hub API token made by `name`'s own browser session (signed in at the provider)."""
    context = browser.new_context()
    try:
        page = context.new_page()
        sign_in(page, hub, name, HOME)
        page.wait_for_url(hub.url + HOME, timeout=120 * SECOND)
        answer = page.request.post(f"{hub.url}/hub/api/users/{name}/tokens", data={"note": "sso test"},
                                   headers={"X-XSRFToken": next(c["value"] for c in context.cookies()
                                                                if c["name"] == "_xsrf")})
        assert answer.status == 201, answer.text()
        return answer.json()["token"]
    finally:
        context.close()
