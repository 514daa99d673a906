"""Browser tier: Debian Chromium driven by Playwright against the real local hub.

Screenshots go to test-artifacts/browser/ (gitignored); a failing test also leaves
`<test name>-failure.png` there. The README's three (the launcher with live charts and logs,
the JupyterLab panel, the admin overview) are taken by the tests that reach those states,
through `labpage.docs_screenshot`: with PADDLECLOUD_DOCS_SCREENSHOTS=1 (`make screenshots`) they are
also written into docs/_static/screenshots/, never by hand.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hubutil import REPO

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = REPO / "test-artifacts" / "browser"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
]


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        pytest.fail(f"{CHROMIUM} is missing; run `make browser-deps`")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser, request, artifacts):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    # What the browser could not load, kept with a failing test's output (pytest shows it).
    page.on("requestfailed", lambda failed: print(f"browser: {failed.method} {failed.url} failed: {failed.failure}"))
    try:
        yield page
    finally:
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:
            try:
                page.screenshot(path=str(artifacts / f"{request.node.name}-failure.png"), full_page=True)
            except Exception as exc:  # the page may be gone; the test's own error matters more
                print(f"could not take a failure screenshot: {exc}")
        context.close()
