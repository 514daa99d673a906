"""The job view's live log survives its Jupyter server going away: with a 2-worker job
running, the server stops (the job, detached, keeps writing), the view says it is
reconnecting, the server comes back on the same port, and the view carries on to the
job's end with every line exactly once (its download equals the server's log)."""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections import Counter

import psutil
import pytest
from playwright.sync_api import expect

from hubutil import REPO
from labpage import SECOND, dismiss_news_toast
from serverutil import JupyterServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

OFFLINE_LAB = ["--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]


def job_processes(home) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("PADDLECLOUD_HOME", "").startswith(str(home)):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def test_log_view_resumes_after_the_server_restarts(page, tmp_path, artifacts):
    root, home = tmp_path / "root", tmp_path / "home"
    root.mkdir()
    home.mkdir()
    shutil.copy(REPO / "tests" / "local" / "scripts" / "ticker.py", root / "ticker.py")
    server = JupyterServer(home, root, args=OFFLINE_LAB).start()
    try:
        server.submit(name="resume", command=["python", "ticker.py", "--count", "80", "--interval", "0.25"], workers=2)
        page.goto(f"{server.url}/lab?token={server.token}")
        expect(page.locator("#jp-main-dock-panel")).to_be_visible(timeout=120 * SECOND)
        dismiss_news_toast(page)
        if not page.locator(".pc-JobsPanel").is_visible():
            page.locator('.lm-TabBar-tab[data-id="paddlecloud-jobs"]').click()
        page.locator('.pc-JobItem[data-job="resume"]').click()
        view = page.locator(".pc-JobView:visible")
        state = view.locator(".pc-LogState")
        expect(view.locator(".pc-LogViewer-scroller")).to_contain_text("tick 1 3", timeout=120 * SECOND)
        expect(state).to_have_text("Live")

        server.stop()
        expect(state).to_contain_text("Connection lost; reconnecting", timeout=30 * SECOND)
        page.screenshot(path=str(artifacts / "lab-reconnecting.png"))
        time.sleep(2)  # the job goes on writing while nobody serves its log
        server.start()

        expect(state).to_have_text("Log complete: the job succeeded.", timeout=180 * SECOND)
        lost = page.locator(".jp-Dialog", has_text="Server Connection Error")  # JupyterLab's own notice
        if lost.count():
            lost.locator(".jp-Dialog-button").last.click()
        with page.expect_download() as download:
            view.locator(".pc-Download").click()
        shown = open(download.value.path(), encoding="utf-8").read().splitlines()
        served = server.api("GET", "/jobs/resume/logs").text.splitlines()
        assert Counter(shown) == Counter(served)
        assert shown.count("[worker-0] tick 0 79") == 1 and shown.count("[worker-1] ticker 1 done") == 1
        page.screenshot(path=str(artifacts / "lab-reconnected.png"))
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.api("DELETE", "/jobs/resume")  # a no-op once it has finished
        server.stop()
        deadline = time.monotonic() + 30
        while job_processes(home) and time.monotonic() < deadline:
            time.sleep(0.5)
        leftovers = job_processes(home)
        for proc in leftovers:
            os.kill(proc.pid, signal.SIGKILL)
    assert not leftovers, f"processes left running: {[p.pid for p in leftovers]}"
