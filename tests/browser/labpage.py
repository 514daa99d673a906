"""Helpers for driving the local hub's pages in the browser tier (one copy of each)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from urllib.parse import quote

from playwright.sync_api import expect

from hubutil import REPO

SECOND = 1000  # Playwright timeouts are in milliseconds
DOCS_SCREENSHOTS = REPO / "docs" / "_static" / "screenshots"
DOCS_SCREENSHOTS_ENV = "PADDLECLOUD_DOCS_SCREENSHOTS"


def docs_screenshot(target, artifacts: Path, name: str, **options) -> None:
    """A screenshot of `target` (a page or a locator) as test-artifacts/browser/<name>, and, with
    $PADDLECLOUD_DOCS_SCREENSHOTS=1 (`make screenshots`), the docs' copy of it
    (docs/_static/screenshots/<name>, what the README shows)."""
    target.screenshot(path=str(artifacts / name), **options)
    if os.environ.get(DOCS_SCREENSHOTS_ENV) == "1":
        DOCS_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(artifacts / name, DOCS_SCREENSHOTS / name)


def submit_login_form(page, hub, name: str, next_url: str = "") -> None:
    """The hub's login form, filled in with `name` and the demo password, and sent; the hub
    then goes on to `next_url` (a path on the hub), by default to the user's server."""
    page.goto(hub.url + "/hub/login" + (f"?next={quote(next_url, safe='')}" if next_url else ""))
    page.fill("#username_input", name)
    page.fill("#password_input", hub.password)
    page.click("#login_submit")


def log_in(page, hub, name: str) -> None:
    """Log in to the hub's home page, starting no server for the user (a login goes on to the
    user's server by default, and the tests that use this never open it: a JupyterLab started
    for nothing, which the hub's stop then waited for)."""
    submit_login_form(page, hub, name, next_url="/hub/home")
    page.wait_for_url(re.compile(r"/hub/home"), timeout=120 * SECOND)


def log_in_to_lab(page, hub, name: str) -> None:
    """Log in and wait until the user's JupyterLab is up (the hub spawns it: default_url /lab)."""
    submit_login_form(page, hub, name)
    page.wait_for_url(re.compile(rf"/user/{name}/lab"), timeout=300 * SECOND)
    wait_for_lab(page)


THEME_LOAD_FAILED = "Error Loading Theme"  # the title of JupyterLab's own dialog


def wait_for_lab(page, timeout: int = 120 * SECOND, attempts: int = 2) -> None:
    """Wait until the JupyterLab page is up with its theme applied (JupyterLab marks <body> with
    data-jp-theme-name once the theme's stylesheet has loaded).

    JupyterLab loads that stylesheet through a <link> it adds after start; when the browser
    reports the link failed, it shows a modal "Error Loading Theme" dialog over an unstyled page,
    which then takes every click. Seen once in CI under the full suite's load, with no error in the
    Jupyter server's log: the browser's side of JupyterLab's own start, not PaddleCloud's. The
    page is loaded again then (the failed requests are printed, kept with a failing test's
    output), and a second failure fails the test."""
    themed = page.locator("body[data-jp-theme-name]")
    failed = page.locator(".jp-Dialog", has_text=THEME_LOAD_FAILED)
    for attempt in range(1, attempts + 1):
        expect(page.locator("#jp-main-dock-panel")).to_be_visible(timeout=timeout)
        expect(themed.or_(failed).first).to_be_attached(timeout=timeout)
        if not failed.count():
            return
        print(f"JupyterLab could not load its theme (attempt {attempt} of {attempts}): {failed.first.inner_text()}")
        if attempt < attempts:
            page.reload()
    raise AssertionError(f"JupyterLab could not load its theme stylesheet in {attempts} page loads")


def dismiss_news_toast(page) -> None:
    """JupyterLab may ask about news on first start (the package's settings override,
    jupyter-config/lab/overrides.d/paddlecloud.json, turns the prompt off; this guards against
    a version that asks anyway). Never fails the test."""
    toast = page.locator(".jp-toast-button", has_text=re.compile(r"^\s*No\s*$"))
    try:
        toast.first.click(timeout=2 * SECOND)
    except Exception:
        pass


def wait_for_idle_kernel(page) -> None:
    """Shift+Enter before the kernel is connected can be dropped silently."""
    expect(page.locator("#jp-main-statusbar")).to_contain_text(re.compile(r"\|\s*Idle"), timeout=180 * SECOND)


def run_cell(cell, page, attempts: int = 3) -> None:
    """Shift+Enter in the cell; retried if JupyterLab did not take it (the prompt stays `[ ]:`)."""
    prompt = cell.locator(".jp-InputPrompt")
    for _ in range(attempts):
        cell.locator(".cm-content").click()
        page.keyboard.press("Shift+Enter")
        try:
            expect(prompt).not_to_have_text(re.compile(r"^\s*\[\s*\]:\s*$"), timeout=10 * SECOND)
            return
        except AssertionError:
            continue
    raise AssertionError(f"the cell did not run after {attempts} Shift+Enter presses")
