"""The widget monitor's live view survives an unexpected error in one refresh: it shows the
error and goes on refreshing (its thread used to end, and the view froze without a word)."""

from __future__ import annotations

from paddle_ext.jobs import Job, Phase
from paddle_ext.metrics import MetricPoint, MetricsPage
from paddle_ext.widgets.monitor import JobMonitor
from serverutil import wait_for


class GlitchingClient:
    """A running one-worker job whose first metrics read raises what no backend error is."""

    def __init__(self):
        self.reads = 0

    def get(self, name: str) -> Job:
        return Job(name=name, phase=Phase.RUNNING, workers=1, spec={})

    def logs(self, name: str, worker=None, follow=False):
        return iter(["step 1"])

    def metrics(self, name: str, since=None) -> MetricsPage:
        self.reads += 1
        if self.reads == 1:
            raise RuntimeError("a glitch")
        point = MetricPoint(worker=0, step=self.reads, values={"loss": 1.0 / self.reads})
        return MetricsPage(name, "Running", False, (point,), (self.reads,))


def test_a_failed_refresh_is_shown_and_the_next_ones_go_on():
    client = GlitchingClient()
    monitor = JobMonitor("glitchy", client=client, refresh_seconds=0.05, metrics_seconds=0.05)
    try:
        wait_for(lambda: "a glitch" in monitor.error.value, 30, "the glitch shown")
        assert "could not refresh" in monitor.error.value
        wait_for(lambda: len(monitor.plots.points) >= 2, 30, "points plotted after the glitch",
                 message=lambda: f"{client.reads} metrics reads")
    finally:
        monitor.close()
