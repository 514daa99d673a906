"""The job view's live log survives its Jupyter server going away: with a 2-worker job
running, the server stops (the job, detached, keeps writing), the view says it is
reconnecting, the server comes back on the same port, and the view carries on to the
job's end with every line exactly once (its download equals the server's log)."""

from __future__ import annotations

import shutil
from collections import Counter

import pytest
from playwright.sync_api import expect

from hubutil import REPO
from labpage import SECOND, dismiss_news_toast, wait_for_lab
from serverutil import Gate, JupyterServer, assert_no_processes_under, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

OFFLINE_LAB = ["--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]


def test_log_view_resumes_after_the_server_restarts(page, tmp_path, artifacts):
    root, home = tmp_path / "root", tmp_path / "home"
    root.mkdir()
    home.mkdir()
    shutil.copy(REPO / "tests" / "local" / "scripts" / "ticker.py", root / "ticker.py")
    gate = Gate(tmp_path)  # the job runs until the view has reconnected
    server = JupyterServer(home, root, args=OFFLINE_LAB).start()
    try:
        server.submit(name="resume", command=["python", "ticker.py", "--until", str(gate), "--interval", "0.2"],
                      workers=2)
        page.goto(f"{server.url}/lab?token={server.token}")
        wait_for_lab(page)
        dismiss_news_toast(page)
        if not page.locator(".pc-JobsPanel").is_visible():
            page.locator('.lm-TabBar-tab[data-id="paddlecloud-jobs"]').click()
        page.locator('.pc-JobItem[data-job="resume"]').click()
        view = page.locator(".pc-JobView:visible")
        state = view.locator(".pc-LogState")
        scroller = view.locator(".pc-LogViewer-scroller")
        expect(scroller).to_contain_text("tick 1 3", timeout=120 * SECOND)
        expect(state).to_have_text("Live")

        server.stop()
        expect(state).to_contain_text("Connection lost; reconnecting", timeout=30 * SECOND)
        page.screenshot(path=str(artifacts / "lab-reconnecting.png"))
        # The job goes on writing while nobody serves its log.
        log = home / "jobs" / "resume" / "worker-1.log"
        size = log.stat().st_size
        wait_for(lambda: log.stat().st_size > size, 60, "the job to write while the server is down")
        server.start()
        expect(state).to_have_text("Live", timeout=180 * SECOND)  # back while the job still runs
        gate.open()

        expect(state).to_have_text("Log complete: the job succeeded.", timeout=180 * SECOND)
        lost = page.locator(".jp-Dialog", has_text="Server Connection Error")  # JupyterLab's own notice
        if lost.count():
            lost.locator(".jp-Dialog-button").last.click()
        with page.expect_download() as download:
            view.locator(".pc-Download").click()
        shown = open(download.value.path(), encoding="utf-8").read().splitlines()
        served = server.api("GET", "/jobs/resume/logs").text.splitlines()
        assert Counter(shown) == Counter(served)
        for worker in (0, 1):
            ticks = [int(line.split()[-1]) for line in shown if line.startswith(f"[worker-{worker}] tick ")]
            assert ticks == list(range(len(ticks))) and len(ticks) > 3, (worker, ticks)
            assert shown.count(f"[worker-{worker}] ticker {worker} done") == 1
        page.screenshot(path=str(artifacts / "lab-reconnected.png"))
    finally:
        gate.open()
        if server.proc is not None and server.proc.poll() is None:
            server.stop_and_check()
        else:
            assert_no_processes_under(home)
