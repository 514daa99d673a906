"""Widgets driven in-process against the real local backend (the browser tier clicks them for real)."""

import threading

import pytest

from catalogue import local_datasets
from paddle_ext import JobClient
from paddle_ext.backends.local import LocalBackend
from paddle_ext.errors import SpecError
from paddle_ext.widgets import JobLauncher, JobList, JobMonitor
from paddle_ext.widgets.launcher import parse_env
from serverutil import Gate, assert_no_processes_under, wait_for


@pytest.fixture
def client(tmp_path, workdir):
    """A client of its own state folder; afterwards no process of its jobs may be left running."""
    home = tmp_path / "home"
    client = JobClient(LocalBackend(home=str(home), working_dir=str(workdir), datasets=local_datasets(tmp_path)))
    try:
        yield client
    finally:
        for job in client.list():
            client.cancel(job.name)
        assert_no_processes_under(home)


def monitor_stopped(monitor) -> bool:
    """The monitor's refresher has ended (it does once the job has): nothing changes it any more."""
    return monitor.job is not None and monitor.job.done and not any(
        thread.name == f"paddle-monitor-{monitor.name}" and thread.is_alive() for thread in threading.enumerate())


def test_launch_follow_and_reattach(client):
    assert JobLauncher(client=client).workers.value == 1  # the one default, as for the API and the CLI
    launcher = JobLauncher(client=client, workers=2)
    assert launcher.workers.value == 2 and launcher.launch_button.description == "Launch"
    launcher.command.value = "python ticker.py --count 5 --interval 0.1"
    launcher.env.value = "# comment\nPROBE_GREETING=hi there\n"
    launcher.datasets.value = ("mnist",)
    launcher.launch_button.click()
    monitor = launcher.monitor
    assert monitor is not None and "Started" in launcher.message.value
    assert monitor.worker_filter.label == "All workers"
    wait_for(lambda: monitor_stopped(monitor), 180, "the job to end and its monitor to stop")
    assert monitor.job.phase == "Succeeded"
    wait_for(lambda: "[worker-1] ticker 1 done" in monitor.log_lines, 30, "every line in the monitor")
    assert "[worker-0] tick 0 4" in monitor.log_lines and "[worker-1] tick 1 4" in monitor.log_lines
    # what the form said reached each worker's process (ticker.py prints it from inside)
    for worker in (0, 1):
        assert f"[worker-{worker}] env PROBE_GREETING=hi there" in monitor.log_lines
        assert f"[worker-{worker}] env PADDLECLOUD_DATASET_MNIST={client.backend.datasets[0]['path']}" \
            in monitor.log_lines
    assert "tick 1 4" in monitor.log_view.value and "Succeeded" in monitor.header.value
    job = client.get(monitor.name)  # what it ran and where its outputs are, as a user reads them
    assert f"<b>Code:</b> {job.code['files']} files, " in monitor.record_view.value
    assert f"<b>Outputs:</b> <code>{job.outputs['path']}</code>" in monitor.record_view.value
    wait_for(lambda: "running jobs: 0 used" in launcher.quota_view.value, 30,
             "the launcher's quota line to refresh when the job ended")

    again = JobMonitor(monitor.name, client=client)  # e.g. after a kernel restart
    wait_for(lambda: sorted(again.log_lines) == sorted(monitor.log_lines), 30,
             "the same lines in a re-attached monitor")  # the order of workers may differ
    again.worker_filter.value = 1
    wait_for(lambda: "ticker 1 done" in again.log_lines, 30, "worker 1's own log after filtering")
    assert all(not line.startswith("[worker-") for line in again.log_lines)
    assert "tick 1 4" in again.log_lines and "tick 0 4" not in again.log_lines

    # JobList: the job is listed; picking it opens its monitor below the table.
    listing = JobList(client=client)
    assert monitor.name in listing.table.value
    assert (monitor.name, monitor.name) in listing.picker.options
    listing.picker.value = monitor.name
    (opened,) = listing.monitor_box.children
    assert isinstance(opened, JobMonitor) and opened.name == monitor.name
    wait_for(lambda: "[worker-1] ticker 1 done" in opened.log_lines, 30, "the picked job's log in its monitor")
    assert "Succeeded" in opened.header.value
    for widget in (again, opened):
        widget.close()


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


def test_cancel_button(client, tmp_path):
    gate = Gate(tmp_path)  # never opened: only Cancel ends this job
    job = client.submit({"command": ["python", "ticker.py", "--until", str(gate)], "workers": 1})
    monitor = JobMonitor(job.name, client=client)
    wait_for(lambda: client.get(job.name).phase == "Running", 120, "the job to run")
    wait_for(lambda: not monitor.cancel_button.disabled, 30, "Cancel to be enabled for a running job")
    monitor.cancel_button.click()
    assert client.get(job.name).phase == "Cancelled"
    assert monitor.cancel_button.disabled
    # The monitor's own refreshes since must not bring it back: wait until it has stopped refreshing.
    wait_for(lambda: monitor_stopped(monitor), 60, "the monitor to see the end and stop refreshing")
    assert monitor.cancel_button.disabled


def test_unknown_job_shows_an_error(client):
    monitor = JobMonitor("no-such-job", client=client)
    assert "No job named" in monitor.error.value
    assert monitor.cancel_button.disabled  # nothing to cancel


def test_monitor_plots_metrics_and_hides_framework_lines(client, tmp_path):
    gate = Gate(tmp_path).open_after(240)  # steps 0-5 come before it, 6-11 after
    job = client.submit({"command": ["python", "report_steps.py", "--steps", "12", "--interval", "0.1",
                                     "--gate", str(gate), "--gate-at", "6"], "workers": 2})
    monitor = JobMonitor(job.name, client=client)
    # The plot fills while the job runs: the first six steps of both workers, the job held at its gate.
    wait_for(lambda: len(monitor.plots.points) == 12, 180, "the first 12 points in the plot")
    assert client.get(job.name).phase == "Running"
    gate.open()
    wait_for(lambda: monitor_stopped(monitor), 180, "the job to end and its monitor to stop")
    assert monitor.job.phase == "Succeeded" and not gate.forced
    wait_for(lambda: "[worker-1] rank 1: done" in monitor.log_lines, 30, "every line in the monitor")
    assert sorted((p.worker, p.step) for p in monitor.plots.points) == [(w, s) for w in (0, 1) for s in range(12)]
    assert [c.figure.title for c in monitor.plots._charts.values()] == ["loss", "acc", "steps/s"]
    loss = monitor.plots._charts["loss"]
    # one line per worker, in the order their first points came (a drawn mark keeps its place)
    assert {mark.labels[0]: list(mark.y) for mark in loss.figure.marks} == {
        f"worker-{w}": pytest.approx([1.0 / (s + 1) + w for s in range(12)]) for w in (0, 1)}
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


def test_cancel_is_disabled_once_the_job_has_ended_however_it_ended(client, tmp_path):
    done = client.submit({"command": ["python", "ticker.py", "--count", "2", "--interval", "0.1"]})
    running = client.submit({"command": ["python", "ticker.py", "--until", str(Gate(tmp_path))]})
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
