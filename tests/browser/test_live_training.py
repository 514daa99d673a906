"""A cell magic's live monitor in a real browser: a researcher runs `%%paddle_train` in
JupyterLab and watches the metric charts (bqplot) appear and grow while the job runs,
then hides the framework's lines with "My output only"."""

from __future__ import annotations

import re
import time

import nbformat
import pytest
from playwright.sync_api import expect

from test_quickstart import dismiss_news_toast, run_cell

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

USER = "erin"
SECOND = 1000
TRAINING = """%%paddle_train --workers 2
import os, time
import paddle_ext
rank = int(os.environ["PADDLE_TRAINER_ID"])
for step in range(40):
    paddle_ext.report(step=step, loss=2.0 / (step + 1) + 0.1 * rank, acc=step / 40)
    print(f"rank {rank}: step {step}", flush=True)
    time.sleep(0.5)
print(f"rank {rank}: done", flush=True)
"""


def points_drawn(page) -> int:
    """Markers drawn in the monitor's loss chart (one per point and worker)."""
    return page.evaluate("""() => {
        const chart = [...document.querySelectorAll('.paddle-chart')]
            .find(fig => fig.textContent.includes('loss'));
        if (!chart) return 0;
        return [...chart.querySelectorAll('.dot')].filter(dot => !dot.closest('.legend, .g_legend')).length;
    }""")


def test_the_monitor_plot_appears_and_grows_while_the_job_runs(hub, page, artifacts):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("%load_ext paddle_ext"), nbformat.v4.new_code_cell(TRAINING)]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    home = hub.user_home(USER)
    home.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, home / "live.ipynb")
    try:
        page.goto(hub.url + "/hub/login")
        page.fill("#username_input", USER)
        page.fill("#password_input", hub.password)
        page.click("#login_submit")
        page.wait_for_url(re.compile(rf"/user/{USER}/lab"), timeout=300 * SECOND)
        expect(page.locator("#jp-main-dock-panel")).to_be_visible(timeout=120 * SECOND)
        dismiss_news_toast(page)
        page.goto(f"{hub.url}/user/{USER}/lab/tree/live.ipynb")
        cells = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-CodeCell")
        expect(cells.nth(1)).to_contain_text("paddle_train", timeout=120 * SECOND)
        expect(page.locator("#jp-main-statusbar")).to_contain_text(re.compile(r"\|\s*Idle"), timeout=180 * SECOND)
        run_cell(cells.nth(0), page)
        run_cell(cells.nth(1), page)

        monitor = page.locator(".paddle-monitor")
        expect(monitor).to_be_visible(timeout=120 * SECOND)
        expect(monitor.locator(".paddle-progress").first).to_be_visible(timeout=60 * SECOND)
        chart = monitor.locator(".paddle-chart", has_text="loss")
        expect(chart).to_be_visible(timeout=180 * SECOND)
        counts = [points_drawn(page)]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(set(counts)) < 3:
            time.sleep(1.5)
            counts.append(points_drawn(page))
        print("points drawn over time:", counts)
        assert 0 < counts[0] < counts[-1] < 80, f"the chart should grow while the job runs: {counts}"
        chart.scroll_into_view_if_needed()
        page.screenshot(path=str(artifacts / "live-metrics.png"))
        expect(monitor.locator(".paddle-chart", has_text="acc")).to_be_visible()
        expect(monitor.locator(".paddle-chart", has_text="steps/s")).to_be_visible()

        log = monitor.locator(".paddle-log")
        expect(log).to_contain_text("LAUNCH INFO", timeout=60 * SECOND)
        monitor.locator(".paddle-mine input[type=checkbox]").check()
        expect(log).not_to_contain_text("LAUNCH INFO")
        expect(log).to_contain_text(re.compile(r"\[worker-1\] rank 1: step \d+"))
        expect(log).not_to_contain_text("PADDLECLOUD_METRIC")
        expect(log).to_contain_text("of framework output and metric records hidden")

        expect(monitor.locator(".paddle-phase")).to_have_text("Succeeded", timeout=240 * SECOND)
        expect(monitor.locator(".paddle-progress").first).to_have_attribute("data-current", "Finished")
        assert points_drawn(page) == 80  # 40 steps of 2 workers, each once
    finally:
        page.screenshot(path=str(artifacts / "live-metrics-end.png"))
