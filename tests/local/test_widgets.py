"""Widgets driven in-process against the real local backend (the browser tier clicks them for real)."""

import time

import pytest

from paddle_ext import JobClient
from paddle_ext.backends.local import LocalBackend
from paddle_ext.errors import SpecError
from paddle_ext.widgets import JobLauncher, JobList, JobMonitor
from paddle_ext.widgets.launcher import parse_env


@pytest.fixture
def client(tmp_path, workdir):
    return JobClient(LocalBackend(home=str(tmp_path), working_dir=str(workdir)))


def wait_done(monitor, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not (monitor.job and monitor.job.done):
        time.sleep(0.3)
    time.sleep(1.5)


def test_launch_follow_and_reattach(client):
    assert JobLauncher(client=client).workers.value == 1  # the one default, as for the API and the CLI
    launcher = JobLauncher(client=client, workers=2)
    assert launcher.workers.value == 2 and launcher.launch_button.description == "Launch"
    launcher.command.value = "python ticker.py --count 5 --interval 0.1"
    launcher.env.value = "# comment\nGREETING=hi\n"
    launcher.launch_button.click()
    monitor = launcher.monitor
    assert monitor is not None and "Started" in launcher.message.value
    assert monitor.worker_filter.label == "All workers"
    wait_done(monitor)
    assert monitor.job.phase == "Succeeded"
    assert "[worker-0] tick 0 4" in monitor.log_lines and "[worker-1] tick 1 4" in monitor.log_lines
    assert "tick 1 4" in monitor.log_view.value and "Succeeded" in monitor.header.value
    assert "running jobs: 0 used" in launcher.quota_view.value  # refreshed when the job ended
    assert client.get(monitor.name).spec["env"] == {"GREETING": "hi"}

    again = JobMonitor(monitor.name, client=client)  # e.g. after a kernel restart
    time.sleep(1.5)
    assert sorted(again.log_lines) == sorted(monitor.log_lines)  # same lines; order of workers may differ
    again.worker_filter.value = 1
    time.sleep(1.5)
    assert again.log_lines and all(not line.startswith("[worker-") for line in again.log_lines)
    assert "tick 1 4" in again.log_lines

    listing = JobList(client=client)
    assert monitor.name in listing.table.value


def test_bad_form_input_is_shown_not_raised(client):
    launcher = JobLauncher(client=client)
    launcher.command.value = ""
    launcher.launch_button.click()
    assert "command" in launcher.message.value and launcher.monitor is None
    launcher.command.value = "python 'unclosed"
    launcher.launch_button.click()
    assert "cannot be split" in launcher.message.value
    with pytest.raises(SpecError, match="line 1"):
        parse_env("NOVALUE")


def test_cancel_button(client):
    job = client.submit({"command": ["python", "ticker.py", "--count", "500"], "workers": 1})
    monitor = JobMonitor(job.name, client=client)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and client.get(job.name).phase != "Running":
        time.sleep(0.2)
    monitor.cancel_button.click()
    assert client.get(job.name).phase == "Cancelled"
    assert monitor.cancel_button.disabled
    time.sleep(2.5)  # the monitor's own refreshes since must not bring it back
    assert monitor.cancel_button.disabled


def test_unknown_job_shows_an_error(client):
    monitor = JobMonitor("no-such-job", client=client)
    assert "No job named" in monitor.error.value
    assert monitor.cancel_button.disabled  # nothing to cancel


def test_monitor_plots_metrics_and_hides_framework_lines(client):
    # Paddle's launcher relays its trainer's output every 2 seconds: report for longer than that
    job = client.submit({"command": ["python", "report_steps.py", "--steps", "12", "--interval", "0.5"], "workers": 2})
    monitor = JobMonitor(job.name, client=client)
    deadline = time.monotonic() + 60
    grew = []
    while time.monotonic() < deadline and not (monitor.job and monitor.job.done):
        grew.append(len(monitor.plots.points))
        time.sleep(0.3)
    wait_done(monitor)
    assert monitor.job.phase == "Succeeded"
    assert sorted((p.worker, p.step) for p in monitor.plots.points) == [(w, s) for w in (0, 1) for s in range(12)]
    assert any(0 < n < 24 for n in grew), f"the plot should fill while the job runs: {grew}"
    assert [c.figure.title for c in monitor.plots._charts.values()] == ["loss", "acc", "steps/s"]
    loss = monitor.plots._charts["loss"]
    assert [list(mark.y) for mark in loss.figure.marks] == [
        pytest.approx([1.0 / (s + 1) + w for s in range(12)]) for w in (0, 1)]
    monitor.plots.mode.value = "mean"
    assert [list(mark.y) for mark in loss.figure.marks] == [pytest.approx([1.0 / (s + 1) + 0.5 for s in range(12)])]
    assert monitor.plots.layout.display is None

    # "My output only" hides PaddlePaddle's launcher lines from the view, not from the log
    assert any("LAUNCH INFO" in line for line in monitor.shown_lines)
    monitor.mine_only.value = True
    shown = monitor.shown_lines
    assert shown and not any("LAUNCH" in line for line in shown)
    assert "[worker-1] rank 1: done" in shown and "LAUNCH INFO" not in monitor.log_view.value
    assert "framework output and metric records hidden" in monitor.log_view.value
    assert not any("PADDLECLOUD_METRIC" in line for line in shown)
    assert any("LAUNCH INFO" in line for line in monitor.log_lines)
    assert 'data-current="Finished"' in monitor.workers_view.value


def wait_for(check, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not check():
        time.sleep(0.2)
    return check()


def test_cancel_is_disabled_once_the_job_has_ended_however_it_ended(client):
    done = client.submit({"command": ["python", "ticker.py", "--count", "2", "--interval", "0.1"]})
    running = client.submit({"command": ["python", "ticker.py", "--count", "500"]})
    watching_done, watching_running = JobMonitor(done.name, client=client), JobMonitor(running.name, client=client)
    assert wait_for(lambda: client.get(running.name).phase == "Running")
    assert wait_for(lambda: not watching_running.cancel_button.disabled)  # a running job can be cancelled
    assert wait_for(lambda: watching_done.job.phase == "Succeeded")  # ended on its own
    assert wait_for(lambda: watching_done.cancel_button.disabled)
    client.cancel(running.name)  # cancelled elsewhere (the CLI, another notebook)
    assert wait_for(lambda: watching_running.job.done and watching_running.cancel_button.disabled)
    later = JobMonitor(running.name, client=client)  # opened after the end
    assert later.cancel_button.disabled and later.job.phase == "Cancelled"
    for monitor in (watching_done, watching_running, later):
        monitor.close()
