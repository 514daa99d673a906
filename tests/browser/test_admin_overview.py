"""The admin overview in a real browser: the hub admin sees the machine's capacity, a
running job of another user and the GPU-hours chart, and cancels that job; a user who
is not an admin sees neither the overview nor gets it from the API (403)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from playwright.sync_api import expect

from paddle_ext import JobClient
from paddle_ext.backends.local import LocalBackend
from paddle_ext.spec import JobSpec
from labpage import SECOND, docs_screenshot, log_in

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SCRIPTS = Path(__file__).resolve().parents[1] / "local" / "scripts"


def test_admin_sees_another_users_running_job_and_cancels_it(hub, page, browser, artifacts, tmp_path):
    shutil.copy(SCRIPTS / "ticker.py", tmp_path / "ticker.py")
    # bob's job, in bob's own job folder, as his server would start it
    # (JobClient: Playwright's sync API holds this thread's event loop)
    bob = JobClient(LocalBackend(home=str(hub.user_home("bob") / ".paddlecloud"), user="bob",
                                 working_dir=str(tmp_path), quota_file=str(tmp_path / "no-quota.json")))
    job = bob.submit(JobSpec(command=("python", "ticker.py", "--count", "2000"), workers=2))
    session = hub.login("admin")
    assert hub.hub_api("POST", "/users/bob", hub.new_token(session, "admin")).status_code == 201
    try:
        log_in(page, hub, "admin")
        page.goto(hub.url + "/services/quota/")
        row = page.locator(f'#jobs-table tr[data-job="bob/{job.name}"]')
        expect(row).to_be_visible(timeout=60 * SECOND)
        expect(row).to_contain_text("2")  # workers
        machine = page.locator("#capacity-table tr.total")
        expect(machine.locator('td[data-field="cpu"] .value')).to_have_text(f"2 / {os.cpu_count()}")
        expect(machine.locator('td[data-field="gpus"] .value')).to_have_text("0 / 0")
        expect(page.locator('#hours-chart g[data-hours="user:bob"]')).to_be_visible()
        docs_screenshot(page, artifacts, "admin-overview.png", full_page=True)

        page.once("dialog", lambda dialog: dialog.accept())
        row.locator("button[data-cancel]").click()
        expect(page.locator("#toast")).to_have_text(f"Cancelled {job.name} of bob.", timeout=60 * SECOND)
        expect(row).to_have_count(0)
        assert bob.get(job.name).phase == "Cancelled"
        assert f"AUDIT: admin admin cancelled job {job.name} of user bob" in hub.log_tail(200_000)

        # bob is no admin: no overview on the page, and 403 from its API with his own cookie
        context = browser.new_context(viewport={"width": 1200, "height": 800})
        try:
            own = context.new_page()
            log_in(own, hub, "bob")
            own.goto(hub.url + "/services/quota/")
            expect(own.locator("#own")).to_be_visible(timeout=60 * SECOND)
            expect(own.locator("#overview")).to_be_hidden()
            expect(own.locator("#jobs-table tr")).to_have_count(0)
            status = own.evaluate("""async () => {
                const boot = JSON.parse(document.getElementById('boot').textContent);
                const r = await fetch(boot.overview, {headers: {'X-XSRFToken': boot.xsrf}});
                return [r.status, (await r.json()).error];
            }""")
            assert status == [403, "forbidden"]
            own.screenshot(path=str(artifacts / "admin-overview-non-admin.png"), full_page=True)
        finally:
            context.close()
    finally:
        bob.cancel(job.name)
