"""JobMonitor (phase, workers, live logs, Cancel) and JobList."""

from __future__ import annotations

import html
import threading
import time
from collections import deque

import ipywidgets as widgets

from ..client import JobClient
from ..errors import PaddleCloudError
from ..jobs import Phase

ALL_WORKERS = -1  # the filter's "All workers" choice (a Dropdown shows nothing for None)

PHASE_COLORS = {
    Phase.PENDING: "#b26a00", Phase.RUNNING: "#1565c0", Phase.SUCCEEDED: "#2e7d32",
    Phase.FAILED: "#c62828", Phase.CANCELLED: "#616161",
}


def phase_badge(phase: str) -> str:
    color = PHASE_COLORS.get(phase, "#616161")
    return (f'<span class="paddle-phase" style="background:{color};color:white;'
            f'padding:1px 8px;border-radius:8px">{html.escape(phase)}</span>')


def render_workers(job) -> str:
    cell = 'style="padding:2px 14px 2px 0;text-align:left"'
    rows = "".join(
        f"<tr><td {cell}>worker-{w.index}</td><td {cell}>{html.escape(w.phase)}</td>"
        f"<td {cell}>{'' if w.exit_code is None else w.exit_code}</td><td {cell}>{html.escape(w.reason)}</td></tr>"
        for w in job.worker_states
    )
    return (f'<table class="paddle-workers"><tr><th {cell}>Worker</th><th {cell}>State</th>'
            f"<th {cell}>Exit code</th><th {cell}>Detail</th></tr>{rows}</table>")


class JobMonitor(widgets.VBox):
    """Live view of one job. Follows the logs on a background thread until the job ends."""

    def __init__(self, name: str, client: JobClient | None = None, max_lines: int = 5000,
                 refresh_seconds: float = 0.5, on_done=None, **kwargs):
        self.client = client or JobClient()
        self.name = name
        self.job = None
        self._lines: deque[str] = deque(maxlen=max_lines)
        self._lock = threading.Lock()
        self._dirty = False
        self._generation = 0
        self._stop = threading.Event()
        self._refresh_seconds = refresh_seconds
        self._on_done = on_done
        self._ended = False  # once the job has ended, it stays ended: Cancel never comes back
        self._cancelling = False

        self.header = widgets.HTML()
        self.workers_view = widgets.HTML()
        self.worker_filter = widgets.Dropdown(description="Logs", options=[("All workers", ALL_WORKERS)])
        self.cancel_button = widgets.Button(description="Cancel", button_style="danger", icon="stop")
        self.log_view = widgets.HTML()
        self.log_view.add_class("paddle-log")
        self.error = widgets.HTML()
        self.cancel_button.on_click(self._on_cancel)
        super().__init__(
            [self.header, self.workers_view,
             widgets.HBox([self.worker_filter, self.cancel_button]), self.log_view, self.error],
            **kwargs,
        )
        self.add_class("paddle-monitor")
        self._refresh_status()
        if self.job is not None:
            self.worker_filter.options = [("All workers", ALL_WORKERS)] + [
                (f"worker-{i}", i) for i in range(self.job.workers)]
            self.worker_filter.value = ALL_WORKERS
            self.worker_filter.observe(self._on_filter, names="value")
            self._start_follow(None)
            threading.Thread(target=self._tick, name=f"paddle-monitor-{name}", daemon=True).start()

    def _refresh_status(self) -> None:
        try:
            job = self.client.get(self.name)
        except PaddleCloudError as exc:
            self.error.value = f'<span style="color:#c62828">{html.escape(exc.message)}</span>'
            self._update_cancel()
            return
        with self._lock:  # the ticker and a click may both refresh; a job seen ended stays ended
            self.job = job
            self._ended = self._ended or job.done
        detail = f" &mdash; {html.escape(job.message)}" if job.message else ""
        self.header.value = f"<b>{html.escape(job.name)}</b> {phase_badge(job.phase)}{detail}"
        self.workers_view.value = render_workers(job)
        self._update_cancel()

    def _update_cancel(self) -> None:
        """Cancel is there only for a job that exists, has not ended and is not being cancelled."""
        self.cancel_button.disabled = self.job is None or self._ended or self._cancelling

    def _start_follow(self, worker: int | None) -> None:
        with self._lock:
            self._generation += 1
            generation = self._generation
            self._lines.clear()
            self._dirty = True
        threading.Thread(target=self._follow, args=(worker, generation), daemon=True).start()

    def _follow(self, worker: int | None, generation: int) -> None:
        try:
            for line in self.client.logs(self.name, worker=worker, follow=True):
                with self._lock:
                    if generation != self._generation or self._stop.is_set():
                        return
                    self._lines.append(line)
                    self._dirty = True
        except PaddleCloudError as exc:
            self.error.value = f'<span style="color:#c62828">{html.escape(exc.message)}</span>'

    def _render_logs(self) -> None:
        with self._lock:
            if not self._dirty:
                return
            text = "\n".join(self._lines)
            self._dirty = False
        # column-reverse keeps the scroll position at the newest line, as a terminal does
        self.log_view.value = (
            '<div style="max-height:360px;overflow:auto;display:flex;flex-direction:column-reverse">'
            f'<pre style="margin:0;font-size:12px;flex:none;overflow:visible">{html.escape(text)}</pre></div>')

    def _tick(self) -> None:
        last_status = 0.0
        while not self._stop.is_set():
            self._render_logs()
            if time.monotonic() - last_status > 1.0:
                last_status = time.monotonic()
                self._refresh_status()
                if self.job is not None and self.job.done:
                    if self._on_done is not None:
                        self._on_done(self.job)
                    time.sleep(self._refresh_seconds * 2)  # let the follower drain
                    self._render_logs()
                    return
            time.sleep(self._refresh_seconds)

    def _on_filter(self, change) -> None:
        self._start_follow(None if change["new"] == ALL_WORKERS else change["new"])

    def _on_cancel(self, _button) -> None:
        self._cancelling = True
        self._update_cancel()
        try:
            self.client.cancel(self.name)
        except PaddleCloudError as exc:
            self.error.value = f'<span style="color:#c62828">{html.escape(exc.message)}</span>'
            self._cancelling = False  # it did not happen: the user may try again
        self._refresh_status()

    @property
    def log_lines(self) -> list[str]:
        with self._lock:
            return list(self._lines)

    def close(self):
        self._stop.set()
        super().close()


class JobList(widgets.VBox):
    """A table of jobs with a Refresh button; pick one to open its monitor."""

    def __init__(self, client: JobClient | None = None, **kwargs):
        self.client = client or JobClient()
        self.table = widgets.HTML()
        self.refresh_button = widgets.Button(description="Refresh", icon="refresh")
        self.picker = widgets.Dropdown(description="Open")
        self.monitor_box = widgets.VBox()
        self.refresh_button.on_click(lambda _b: self.refresh())
        self.picker.observe(self._on_pick, names="value")
        super().__init__([widgets.HBox([self.refresh_button, self.picker]), self.table, self.monitor_box], **kwargs)
        self.refresh()

    def refresh(self) -> None:
        try:
            jobs = self.client.list()
        except PaddleCloudError as exc:
            self.table.value = f'<span style="color:#c62828">{html.escape(exc.message)}</span>'
            return
        rows = "".join(
            f"<tr><td>{html.escape(j.name)}</td><td>{phase_badge(j.phase)}</td><td>{j.workers}</td>"
            f"<td>{html.escape(j.created or '')}</td><td>{html.escape(j.message)}</td></tr>" for j in jobs
        )
        self.table.value = ("<table><tr><th>Name</th><th>Phase</th><th>Workers</th><th>Created</th>"
                            f"<th>Detail</th></tr>{rows}</table>")
        self.picker.options = [("", None)] + [(j.name, j.name) for j in jobs]

    def _on_pick(self, change) -> None:
        if change["new"]:
            self.monitor_box.children = [JobMonitor(change["new"], client=self.client)]
