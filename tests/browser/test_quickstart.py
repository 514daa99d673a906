"""A researcher's first minutes, in a real browser: log in to the local hub, open the
quickstart notebook in JupyterLab, run the launcher cell, press Launch and watch both
workers' logs stream into the monitor until the job succeeds."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from labpage import SECOND, dismiss_news_toast, log_in_to_lab, run_cell, wait_for_idle_kernel, wait_for_lab

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

USER = "carol"


def test_quickstart_launches_a_job_and_streams_both_workers(hub, page, artifacts):
    try:
        log_in_to_lab(page, hub, USER)
        dismiss_news_toast(page)

        page.goto(f"{hub.url}/user/{USER}/lab/tree/quickstart.ipynb")
        wait_for_lab(page)
        notebook = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook")
        first_code = notebook.locator(".jp-CodeCell").first
        expect(first_code).to_contain_text("JobLauncher(workers=2)", timeout=120 * SECOND)
        wait_for_idle_kernel(page)
        run_cell(first_code, page)

        launch = notebook.locator(".widget-button", has_text=re.compile(r"^\s*Launch\s*$"))
        expect(launch).to_have_count(1, timeout=180 * SECOND)
        expect(launch).to_be_enabled()
        launch.click()

        log = notebook.locator(".paddle-log")
        expect(log).to_be_visible(timeout=60 * SECOND)
        for worker in (0, 1):
            expect(log).to_contain_text(
                re.compile(rf"\[worker-{worker}\] rank {worker}: all_reduce check ok: sum=3"), timeout=240 * SECOND)
        # Let the job finish (the monitor shows the phase), so the hub stops with nothing running.
        expect(notebook.locator(".paddle-monitor .paddle-phase")).to_have_text("Succeeded", timeout=240 * SECOND)
        expect(log).to_contain_text(re.compile(r"\[worker-1\] rank 1: done"))
        log.first.scroll_into_view_if_needed()
        # Like a terminal, the log box shows its newest line without the user scrolling.
        box = log.first.evaluate("""el => {
            const box = el.querySelector('.widget-html-content > div'), pre = box.querySelector('pre');
            return {box: box.getBoundingClientRect().bottom, text: pre.getBoundingClientRect().bottom,
                    scrollTop: box.scrollTop, scrollHeight: box.scrollHeight, clientHeight: box.clientHeight};
        }""")
        print("log box:", box)
        assert box["scrollHeight"] > box["clientHeight"], "the log should overflow its box in this test"
        assert abs(box["text"] - box["box"]) <= 2, f"the newest log line is not in view: {box}"
    finally:
        try:  # show the live log in the picture when there is one
            page.locator(".paddle-log").first.scroll_into_view_if_needed(timeout=2 * SECOND)
        except Exception:
            pass
        page.screenshot(path=str(artifacts / "quickstart.png"))
