"""A cell magic's live monitor in a real browser: a researcher runs `%%paddle_train` in
JupyterLab and watches the metric charts (bqplot) appear and grow while the job runs,
then hides the framework's lines with "My output only".

The training cell waits at gates (files the test creates in the notebook's folder), so
"while the job runs" is a state the test holds, not a race with the machine's speed:
10 steps, gate, 10 steps, gate, 20 steps. Worker 0 starts only once worker 1's first 10 steps
are drawn, so worker 1's line is charted alone before worker 0's appears beside it: the order
in which a line once came out wrong (worker 0's line a single stray dot, no legend)."""

from __future__ import annotations

import re

import nbformat
import pytest
from playwright.sync_api import expect

from labpage import SECOND, dismiss_news_toast, docs_screenshot, log_in_to_lab, run_cell, wait_for_idle_kernel, wait_for_lab
from serverutil import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

USER = "erin"
TRAINING = """%%paddle_train --workers 2
import os, time
import paddle_ext
rank = int(os.environ["PADDLE_TRAINER_ID"])
while rank == 0 and not os.path.exists("gate-0"):
    time.sleep(0.2)
for step in range(40):
    for gate, at in (("gate-a", 10), ("gate-b", 20)):
        while step == at and not os.path.exists(gate):
            time.sleep(0.2)
    paddle_ext.report(step=step, loss=2.0 / (step + 1) + 0.1 * rank, acc=step / 40)
    print(f"rank {rank}: step {step}", flush=True)
    time.sleep(0.1)
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


def loss_chart_state(page) -> str:
    """What the loss chart draws, for a failed wait: each line's label and its number of
    markers (a mark drawn twice shows up twice), and the legend's entries."""
    state = page.evaluate("""() => {
        const chart = [...document.querySelectorAll('.paddle-chart')]
            .find(fig => fig.textContent.includes('loss'));
        if (!chart) return null;
        const curves = [...chart.querySelectorAll('.curve')].filter(c => !c.closest('.legend, .g_legend'));
        return {
            lines: curves.map(c => [c.querySelector('.curve_label')?.textContent ?? '?',
                                    c.querySelectorAll('.dot').length]),
            legend: [...chart.querySelectorAll('.g_legend .legendtext')].map(t => t.textContent),
        };
    }""")
    return f"loss chart: {state}"


def open_notebook(page, hub, filename: str, sources: list[str]):
    """Write a notebook of code cells `sources` into the user's home, log in and open it in
    JupyterLab; returns its cells once they are shown and the kernel is idle."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    home = hub.user_home(USER)
    home.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, home / filename)
    log_in_to_lab(page, hub, USER)
    dismiss_news_toast(page)
    page.goto(f"{hub.url}/user/{USER}/lab/tree/{filename}")
    wait_for_lab(page)
    cells = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-CodeCell")
    expect(cells.nth(len(sources) - 1)).to_contain_text(sources[-1].splitlines()[0], timeout=120 * SECOND)
    wait_for_idle_kernel(page)
    return cells


def test_the_monitor_plot_appears_and_grows_while_the_job_runs(hub, page, artifacts):
    home = hub.user_home(USER)
    home.mkdir(parents=True, exist_ok=True)  # for the gates, whatever fails first
    try:
        cells = open_notebook(page, hub, "live.ipynb", ["%load_ext paddle_ext", TRAINING])
        run_cell(cells.nth(0), page)
        run_cell(cells.nth(1), page)

        monitor = page.locator(".paddle-monitor")
        expect(monitor).to_be_visible(timeout=120 * SECOND)
        expect(monitor.locator(".paddle-progress").first).to_be_visible(timeout=60 * SECOND)
        chart = monitor.locator(".paddle-chart", has_text="loss")
        expect(chart).to_be_visible(timeout=180 * SECOND)
        phase = monitor.locator(".paddle-phase")
        # Worker 1 at the first gate, worker 0 not started: worker 1's line drawn alone.
        wait_for(lambda: points_drawn(page) == 10, 180, "worker 1's first 10 steps in the loss chart",
                 message=lambda: loss_chart_state(page))
        (home / "gate-0").touch()
        # At the first gate: 10 steps of each worker drawn, the job still running.
        wait_for(lambda: points_drawn(page) == 20, 180, "10 steps of both workers in the loss chart",
                 message=lambda: loss_chart_state(page))
        expect(phase).to_have_text("Running")
        (home / "gate-a").touch()
        # At the second gate: the chart grew to 20 steps of each, while the job still runs.
        wait_for(lambda: points_drawn(page) == 40, 180, "20 steps of both workers in the loss chart",
                 message=lambda: loss_chart_state(page))
        expect(phase).to_have_text("Running")
        chart.scroll_into_view_if_needed()
        docs_screenshot(monitor, artifacts, "live-metrics.png")
        expect(monitor.locator(".paddle-chart", has_text="acc")).to_be_visible()
        expect(monitor.locator(".paddle-chart", has_text="steps/s")).to_be_visible()

        log = monitor.locator(".paddle-log")
        expect(log).to_contain_text("LAUNCH INFO", timeout=60 * SECOND)
        monitor.locator(".paddle-mine input[type=checkbox]").check()
        expect(log).not_to_contain_text("LAUNCH INFO")
        expect(log).to_contain_text(re.compile(r"\[worker-1\] rank 1: step \d+"))
        expect(log).not_to_contain_text("PADDLECLOUD_METRIC")
        expect(log).to_contain_text("of framework output and metric records hidden")

        (home / "gate-b").touch()
        expect(phase).to_have_text("Succeeded", timeout=240 * SECOND)
        expect(monitor.locator(".paddle-progress").first).to_have_attribute("data-current", "Finished")
        wait_for(lambda: points_drawn(page) == 80, 60, "all 40 steps of both workers, each once",
                 message=lambda: loss_chart_state(page))
    finally:
        page.screenshot(path=str(artifacts / "live-metrics-end.png"))
        for gate in ("gate-0", "gate-a", "gate-b"):  # a failed wait leaves no job behind
            (home / gate).touch()


def test_a_chart_begun_with_one_point_draws_the_points_that_follow(hub, page):
    """A job's first metrics read may find one point: its chart is drawn with it, and the next
    read's points must join that line (the chart once stayed a single dot: bqplot's guessed
    step-axis format threw on the one point's domain and the line missed its new points)."""
    cells = open_notebook(page, hub, "one-point.ipynb", [
        "from paddle_ext.metrics import MetricPoint\n"
        "from paddle_ext.widgets.plots import MetricsPlot\n"
        "plot = MetricsPlot()\n"
        "plot.add([MetricPoint(worker=1, step=0, values={'loss': 1.0})])\n"
        "plot",
        "plot.add([MetricPoint(worker=1, step=step, values={'loss': 1 / (step + 1)}) for step in range(1, 10)])",
    ])
    run_cell(cells.nth(0), page)
    wait_for(lambda: points_drawn(page) == 1, 120, "the chart drawn with its one point",
             message=lambda: loss_chart_state(page))
    run_cell(cells.nth(1), page)
    wait_for(lambda: points_drawn(page) == 10, 60, "the nine points that followed joining the line",
             message=lambda: loss_chart_state(page))
