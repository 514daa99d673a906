"""The JupyterLab "Paddle Jobs" panel in a real browser against the real local hub: a
user opens the panel, starts a 2-worker job from the New-job dialog, watches both
workers' lines arrive while the job runs, filters to worker 1, downloads the log and
gets exactly the server's lines, and reopens it after 10^5 more lines with only the
rows on screen drawn; a second job's name clash is refused in the dialog with the
server's words, and that job is cancelled from its view and shows Cancelled. The page
fetches nothing but the hub on 127.0.0.1. The first job runs until the test opens its
gate (a file in the user's folder), so "while it runs" never races the machine."""

from __future__ import annotations

import re
import shutil
from collections import Counter
from urllib.parse import urlparse

import pytest
import requests
from playwright.sync_api import expect

from hubutil import REPO
from labpage import SECOND, dismiss_news_toast, docs_screenshot, log_in_to_lab

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

USER = "dana"
TICKER = REPO / "tests" / "local" / "scripts" / "ticker.py"
LOCAL_SCHEMES = ("data", "blob", "about")
BULK_LINES = 100_000
GATE = "gate-first-job"  # ticker.py --until: the first job runs until this file is in the user's folder


def open_panel(page):
    panel = page.locator(".pc-JobsPanel")
    if not panel.is_visible():
        page.locator('.lm-TabBar-tab[data-id="paddlecloud-jobs"]').click()
    expect(panel).to_be_visible(timeout=30 * SECOND)
    return panel


def fill_new_job(page, open_from=".pc-JobsPanel .pc-NewJob", **fields):
    """Open the dialog (from the panel's button unless it is already opening) and type
    into its fields (by JobSpec field name)."""
    if open_from:
        page.locator(open_from).click()
    dialog = page.locator(".pc-NewJobDialog")
    expect(dialog.locator(".pc-JobForm")).to_be_visible(timeout=30 * SECOND)
    for name, value in fields.items():
        dialog.locator(f'input[name="{name}"]').fill(str(value))
    return dialog


def launch(dialog):
    dialog.locator(".jp-Dialog-button.jp-mod-accept").click()


def test_panel_starts_watches_filters_and_cancels_jobs(hub, page, artifacts):
    remote = []

    def note(request):
        url = urlparse(request.url)
        if url.scheme not in LOCAL_SCHEMES and url.hostname != "127.0.0.1":
            remote.append(request.url)

    page.on("request", note)
    # An admin gives the user a quota, so the panel has bars to show.
    admin = hub.login("admin")
    token = hub.new_token(admin, "admin")
    assert hub.hub_api("POST", f"/users/{USER}", token).status_code == 201
    quota = requests.put(f"{hub.url}/services/quota/api/quotas/users/{USER}", json={"pods": 8, "running_jobs": 3},
                         headers={"Authorization": f"token {token}"}, timeout=60)
    assert quota.status_code == 200, quota.text
    try:
        log_in_to_lab(page, hub, USER)
        dismiss_news_toast(page)
        shutil.copy(TICKER, hub.user_home(USER) / "ticker.py")
        panel = open_panel(page)
        expect(panel.locator(".pc-Empty")).to_contain_text("You have no training jobs yet.", timeout=30 * SECOND)
        expect(page.locator(".pc-JobsStatus")).to_have_text("0 jobs running · 0 GPUs")
        pods = panel.locator('.pc-QuotaRow[data-field="pods"] .pc-QuotaRow-value')
        expect(pods).to_have_text("0 / 8", timeout=30 * SECOND)
        expect(panel.locator('.pc-QuotaRow[data-field="gpus"]')).to_have_count(0)  # unlimited: no bar

        # The command palette offers the panel's commands.
        page.keyboard.press("Control+Shift+C")
        palette = page.locator("#command-palette")
        palette.locator("input").fill("Paddle")
        expect(palette.locator(".lm-CommandPalette-item")).to_contain_text(["New Paddle Job…", "Show Paddle Jobs"])
        page.keyboard.press("Escape")

        # --- a 2-worker job from the dialog; a value over the deployment's bound is refused first
        dialog = fill_new_job(page, command=f"python ticker.py --until {GATE} --interval 0.3", workers=99)
        launch(dialog)
        expect(dialog.locator('.pc-JobForm-fieldError[data-field="workers"]')).to_have_text(
            "must be at most 8 here (got 99)")
        dialog.locator('input[name="workers"]').fill("2")
        launch(dialog)
        expect(dialog).to_have_count(0, timeout=60 * SECOND)

        view = page.locator(".pc-JobView:visible")
        expect(view).to_be_visible(timeout=30 * SECOND)
        name = view.locator(".pc-JobView-title").inner_text()
        assert re.fullmatch(r"ticker-[a-z0-9]{5}", name), name
        expect(panel.locator(f'.pc-JobItem[data-job="{name}"]')).to_contain_text("2 workers × CPU", timeout=30 * SECOND)

        # Both workers' lines arrive while the job runs (it cannot end before the test opens its gate).
        log = view.locator(".pc-LogViewer-scroller")
        expect(log).to_contain_text("tick 0 3", timeout=120 * SECOND)
        expect(log).to_contain_text("tick 1 3", timeout=30 * SECOND)
        expect(view.locator(".pc-JobView-header .pc-Phase")).to_have_text("Running")
        assert "ticker 1 done" not in log.inner_text()
        expect(page.locator(".pc-JobsStatus")).to_have_text("1 job running · 0 GPUs", timeout=15 * SECOND)
        expect(log).to_contain_text("tick 1 10", timeout=60 * SECOND)  # and keep arriving
        expect(pods).to_have_text("2 / 8")
        expect(panel.locator('.pc-QuotaRow[data-field="running_jobs"] .pc-QuotaRow-value')).to_have_text("1 / 3")
        docs_screenshot(page, artifacts, "lab-panel-live.png")

        # Worker 1 only.
        view.locator(".pc-WorkerFilter").select_option("1")
        rows = view.locator(".pc-LogRow")
        expect(rows.first).to_be_visible()
        expect(view.locator('.pc-LogRow[data-worker="0"]')).to_have_count(0)
        expect(log).to_contain_text("tick 1 ")
        expect(log).not_to_contain_text("tick 0 ")
        page.screenshot(path=str(artifacts / "lab-panel-worker-1.png"))
        view.locator(".pc-WorkerFilter").select_option("")

        (hub.user_home(USER) / GATE).touch()
        expect(view.locator(".pc-JobView-header .pc-Phase")).to_have_text("Succeeded", timeout=180 * SECOND)
        expect(view.locator(".pc-LogState")).to_have_text("Log complete: the job succeeded.", timeout=30 * SECOND)
        expect(panel.locator(f'.pc-JobItem[data-job="{name}"] .pc-Phase')).to_have_text("Succeeded", timeout=30 * SECOND)

        # The download holds every line the server has for the job, each exactly once.
        with page.expect_download() as download:
            view.locator(".pc-Download").click()
        downloaded = open(download.value.path(), encoding="utf-8").read().splitlines()
        served = page.request.get(f"{hub.url}/user/{USER}/paddle/api/jobs/{name}/logs")
        assert served.ok, served.text()
        assert Counter(downloaded) == Counter(served.text().splitlines())
        assert downloaded.count("[worker-1] ticker 1 done") == 1
        for worker in (0, 1):
            # Each worker's "tick <worker> 3" was on screen before the gate opened: at least 4 ticks.
            ticks = [int(line.split()[-1]) for line in downloaded if line.startswith(f"[worker-{worker}] tick ")]
            assert len(ticks) > 3 and sorted(ticks) == list(range(len(ticks))), (worker, ticks)

        # --- 10^5 lines: the job's log grows by 100,000 lines (written where the worker's
        # output goes); a freshly opened view takes them all and draws only the rows on screen.
        (worker_log,) = hub.home.rglob(f"jobs/{name}/worker-1.log")
        with open(worker_log, "a", encoding="utf-8") as log_file:
            log_file.writelines(f"bulk line {i} {'x' * 40}\n" for i in range(BULK_LINES))
        page.locator(".lm-TabBar-tab.lm-mod-current .lm-TabBar-tabCloseIcon").click()
        panel.locator(f'.pc-JobItem[data-job="{name}"]').click()
        view = page.locator(".pc-JobView:visible")
        count = view.locator(".pc-LogCount")
        expect(count).to_have_text(re.compile(r"^10\d,\d{3} lines$"), timeout=240 * SECOND)
        assert view.locator(".pc-LogRow").count() < 200, "rows outside the viewport should not be in the DOM"
        view.locator(".pc-LogSearch").fill("bulk line 77777 ")
        expect(count).to_have_text(re.compile(r"^1 of 10\d,\d{3} lines$"), timeout=30 * SECOND)
        expect(view.locator(".pc-LogRow mark")).to_have_text("bulk line 77777 ")
        view.locator(".pc-LogSearch").fill("")
        expect(count).to_have_text(re.compile(r"^10\d,\d{3} lines$"), timeout=30 * SECOND)
        view.locator(".pc-LogViewer-scroller").evaluate("el => { el.scrollTop = 0; }")
        expect(view.locator('.pc-LogRow[data-line="1"]')).to_be_visible(timeout=10 * SECOND)
        assert view.locator(".pc-LogRow").count() < 200, "rows outside the viewport should not be in the DOM"
        expect(view.locator(".pc-Follow input")).not_to_be_checked()
        page.screenshot(path=str(artifacts / "lab-panel-100k-lines.png"))

        # --- a second job, from the Launcher's card: a name clash is the server's to refuse;
        # the dialog shows its words
        page.locator("#jp-main-dock-panel .lm-TabBar-tab", has_text="Launcher").click()
        page.locator(".jp-LauncherCard", has_text="New Paddle Job").click()
        dialog = fill_new_job(page, open_from=None, name=name,
                              command="python ticker.py --count 1000 --interval 0.3", workers=2)
        launch(dialog)
        expect(dialog.locator('.pc-JobForm-fieldError[data-field="name"]')).to_have_text(
            f"A job named '{name}' already exists; choose another name.", timeout=30 * SECOND)
        dialog.locator('input[name="name"]').fill("long-ticker")
        launch(dialog)
        expect(dialog).to_have_count(0, timeout=60 * SECOND)
        view = page.locator(".pc-JobView:visible")
        expect(view.locator(".pc-JobView-title")).to_have_text("long-ticker", timeout=30 * SECOND)
        log = view.locator(".pc-LogViewer-scroller")
        expect(log).to_contain_text("tick 1 20", timeout=120 * SECOND)

        # Scrolling up stops following; the checkbox says so.
        follow = view.locator(".pc-Follow input")
        expect(follow).to_be_checked()
        log.hover()
        page.mouse.wheel(0, -2000)
        expect(follow).not_to_be_checked()
        count = view.locator(".pc-LogCount")
        before = count.inner_text()
        expect(count).not_to_have_text(before, timeout=30 * SECOND)  # more lines came in...
        assert log.evaluate("el => el.scrollTop + el.clientHeight < el.scrollHeight - 100"), \
            "...and the view stayed where the user scrolled to"

        view.locator(".pc-Cancel").click()
        confirm = page.locator(".jp-Dialog").filter(has_text="Cancel job long-ticker?")
        expect(confirm).to_be_visible()
        confirm.locator(".jp-Dialog-button.jp-mod-warn").click()
        expect(view.locator(".pc-JobView-header .pc-Phase")).to_have_text("Cancelled", timeout=60 * SECOND)
        expect(panel.locator('.pc-JobItem[data-job="long-ticker"] .pc-Phase')).to_have_text(
            "Cancelled", timeout=30 * SECOND)
        expect(view.locator(".pc-Cancel")).to_be_disabled()
        job = page.request.get(f"{hub.url}/user/{USER}/paddle/api/jobs/long-ticker").json()
        assert job["phase"] == "Cancelled", job
        expect(page.locator(".pc-JobsStatus")).to_have_text("0 jobs running · 0 GPUs", timeout=15 * SECOND)
        page.screenshot(path=str(artifacts / "lab-panel-cancelled.png"))
    finally:
        (hub.user_home(USER) / GATE).touch()  # however the test went, the first job may end
        page.screenshot(path=str(artifacts / "lab-panel.png"))
    assert not remote, f"the page fetched from outside 127.0.0.1: {remote[:5]}"
