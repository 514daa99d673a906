"""The quota admin panel in a real browser: the hub admin logs in, opens /services/quota/
from the hub's Services menu, sees a bad value refused with the server's message, sets a user's GPU limit, reloads
and still sees it, and has a save that raced another admin refused (409) with the
server's reason; the user, also through the Services menu, sees their own quota read-only."""

from __future__ import annotations

import json
import re

import pytest
import requests
from playwright.sync_api import expect

from labpage import SECOND, log_in

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def open_from_services_menu(page, hub) -> None:
    """The hub's own page, its Services menu, the quota entry: lands on the quota page."""
    page.goto(hub.url + "/hub/home")
    page.locator("a.dropdown-toggle", has_text=re.compile(r"^\s*Services\s*$")).click()
    entry = page.locator(".dropdown-menu a.dropdown-item", has_text=re.compile(r"^\s*quota\s*$"))
    expect(entry).to_be_visible(timeout=30 * SECOND)
    entry.click()
    page.wait_for_url(re.compile(r"/services/quota/?$"), timeout=60 * SECOND)


def test_admin_edits_a_users_gpu_limit(hub, page, browser, artifacts):
    session = hub.login("admin")
    token = hub.new_token(session, "admin")
    assert hub.hub_api("POST", "/users/alice", token).status_code == 201

    log_in(page, hub, "admin")
    open_from_services_menu(page, hub)
    row = page.locator('tr[data-user="alice"]')
    expect(row).to_be_visible(timeout=60 * SECOND)
    expect(row.locator('td[data-field="gpus"] .value')).to_have_text("0 / unlimited")

    row.locator("button[data-edit]").click()
    dialog = page.locator("#editor")
    expect(dialog).to_be_visible()
    page.fill("#f-gpus", "-3")
    page.click("#edit-save")
    expect(page.locator("#edit-error")).to_have_text("Invalid quota: gpus: must not be negative (got -3).")
    expect(page.locator("#p-gpus")).to_have_text("must not be negative (got -3)")
    assert "alice" not in json.loads((hub.home / "quotas.json").read_text() if (hub.home / "quotas.json").exists()
                                     else '{"users": {}}')["users"]

    page.fill("#f-gpus", "2")
    page.click("#edit-save")
    expect(dialog).to_be_hidden()
    expect(page.locator("#toast")).to_have_text("Saved user alice.")
    expect(row.locator('td[data-field="gpus"] .value')).to_have_text("0 / 2")

    page.reload()
    row = page.locator('tr[data-user="alice"]')
    expect(row.locator('td[data-field="gpus"] .value')).to_have_text("0 / 2", timeout=30 * SECOND)
    expect(row.locator('td[data-field="gpus"] .src')).to_have_text("user")
    page.screenshot(path=str(artifacts / "quota-admin.png"), full_page=True)
    assert json.loads((hub.home / "quotas.json").read_text())["users"]["alice"]["limits"] == {"gpus": 2}

    # Another admin saves alice's quota while this page's editor is open: this save is
    # refused with the server's reason instead of silently undoing theirs.
    row.locator("button[data-edit]").click()
    other = requests.put(f"{hub.url}/services/quota/api/quotas/users/alice", json={"gpus": 5},
                         headers={"Authorization": f"token {token}"}, timeout=60)
    assert other.status_code == 200, other.text
    page.fill("#f-gpus", "3")
    page.click("#edit-save")
    expect(page.locator("#edit-error")).to_have_text(
        "Someone else changed the quota of user 'alice' since you loaded it; "
        "reload to see their change and try again.")
    page.click("#edit-cancel")
    assert json.loads((hub.home / "quotas.json").read_text())["users"]["alice"]["limits"] == {"gpus": 5}

    # alice sees her own quota, without edit controls.
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    try:
        own = context.new_page()
        log_in(own, hub, "alice")
        open_from_services_menu(own, hub)
        expect(own.locator('#own-body [data-field="gpus"] b')).to_have_text("0 / 5", timeout=60 * SECOND)
        expect(own.locator("button[data-edit]")).to_have_count(0)
    finally:
        context.close()
