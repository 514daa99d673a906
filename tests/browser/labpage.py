"""Helpers for driving JupyterLab pages of the local hub in the browser tier."""

from __future__ import annotations

import re

from playwright.sync_api import expect

SECOND = 1000  # Playwright timeouts are in milliseconds


def log_in_to_lab(page, hub, name: str) -> None:
    """Log in through the hub's form and wait until the user's JupyterLab is up."""
    page.goto(hub.url + "/hub/login")
    page.fill("#username_input", name)
    page.fill("#password_input", hub.password)
    page.click("#login_submit")
    # The hub spawns the server and redirects to JupyterLab (default_url /lab).
    page.wait_for_url(re.compile(rf"/user/{name}/lab"), timeout=300 * SECOND)
    expect(page.locator("#jp-main-dock-panel")).to_be_visible(timeout=120 * SECOND)


def dismiss_news_toast(page) -> None:
    """JupyterLab may ask about news on first start (the hub config turns the feed off;
    this guards against a version that asks anyway). Never fails the test."""
    toast = page.locator(".jp-toast-button", has_text=re.compile(r"^\s*No\s*$"))
    try:
        toast.first.click(timeout=2 * SECOND)
    except Exception:
        pass
