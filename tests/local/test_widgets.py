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
