"""JobMonitor (phase, each worker's launch progress, the code it ran and its output folder,
live metric plots, live logs with a "My output only" toggle, Cancel) and JobList."""

from __future__ import annotations

import html
import os
import threading
import time
from collections import deque
from urllib.parse import quote

import ipywidgets as widgets

from ..client import JobClient
from ..constants import SERVER_BASE_URL_ENV, SERVER_ROOT_ENV
from ..errors import PaddleCloudError
from ..jobs import Phase, WorkerProgress
from ..loglines import FrameworkFilter
from ..metrics import format_cursor
from ..progress import queue_detail
from ..quantity import human_bytes
from .plots import MetricsPlot

ALL_WORKERS = -1  # the filter's "All workers" choice (a Dropdown shows nothing for None)

PHASE_COLORS = {
    Phase.QUEUED: "#6a1b9a", Phase.PENDING: "#b26a00", Phase.RUNNING: "#1565c0", Phase.SUCCEEDED: "#2e7d32",
    Phase.FAILED: "#c62828", Phase.CANCELLED: "#616161",
}


def phase_badge(phase: str) -> str:
    color = PHASE_COLORS.get(phase, "#616161")
    return (f'<span class="paddle-phase" style="background:{color};color:white;'
            f'padding:1px 8px;border-radius:8px">{html.escape(phase)}</span>')


STEP_COLORS = {"done": "#2e7d32", "current": "#1565c0", "todo": "#bdbdbd", "failed": "#c62828"}


def render_stepper(progress: WorkerProgress | None, phase: str) -> str:
    """Queued > Scheduling > Pulling > Starting > Running > Finished, the current step marked."""
    if progress is None:
        return ""
    chips = []
    for number, step in enumerate(progress.steps, start=1):
        if number < progress.number:
            state = "done"
        elif number == progress.number:
            state = "failed" if phase == Phase.FAILED else ("done" if step == progress.steps[-1] else "current")
        else:
            state = "todo"
        weight = "bold" if number == progress.number else "normal"
        chips.append(f'<span class="paddle-step paddle-step-{state}" data-step="{step}" '
                     f'style="color:{STEP_COLORS[state]};font-weight:{weight};white-space:nowrap">'
                     f'{"&#9679;" if state != "todo" else "&#9675;"} {step}</span>')
    return (f'<span class="paddle-progress" data-current="{progress.step}">'
            + ' <span style="color:#bdbdbd">&rsaquo;</span> '.join(chips) + "</span>")


def job_detail(job) -> str:
    """The line next to a job's phase: where it stands in line while queued ('position 2 in
    this machine's queue · needs 4 more GPUs · starts ~14:05 UTC (estimate)'), else its message."""
    return queue_detail(job.queue) if job.queue else job.message


def render_workers(job) -> str:
    cell = 'style="padding:2px 14px 2px 0;text-align:left"'
    progress = {p.index: p for p in job.progress}
    rows = []
    for w in job.worker_states:
        step = progress.get(w.index)
        detail = step.detail if step and step.detail else w.reason
        rows.append(
            f'<tr data-worker="{w.index}"><td {cell}>worker-{w.index}</td><td {cell}>{html.escape(w.phase)}</td>'
            f"<td {cell}>{'' if w.exit_code is None else w.exit_code}</td>"
            f"<td {cell}>{render_stepper(step, w.phase)}</td>"
            f'<td {cell} class="paddle-detail">{html.escape(detail)}</td></tr>')
    return (f'<table class="paddle-workers"><tr><th {cell}>Worker</th><th {cell}>State</th>'
            f"<th {cell}>Exit code</th><th {cell}>Launch</th><th {cell}>Detail</th></tr>{''.join(rows)}</table>")


def short_digest(digest: str | None) -> str:
    """'sha256:0123456789abcdef...' -> '0123456789ab': enough to tell two snapshots apart."""
    return (digest or "").rpartition(":")[2][:12]


def lab_tree_url(path: str, root: str, base_url: str) -> str | None:
    """The JupyterLab URL that shows folder `path` in the file browser, or None when it is
    not under the server's root folder (the file browser cannot reach it)."""
    if not (os.path.isabs(path) and os.path.isabs(root)):
        return None
    relative = os.path.relpath(os.path.normpath(path), os.path.normpath(root))
    if relative == os.pardir or relative.startswith(os.pardir + os.sep):
        return None
    return f"{base_url.rstrip('/')}/lab/tree/{quote('' if relative == '.' else relative)}"


def server_location() -> tuple[str, str] | None:
    """(root folder, base URL) of the Jupyter server this kernel belongs to, when it says."""
    root, base_url = os.environ.get(SERVER_ROOT_ENV), os.environ.get(SERVER_BASE_URL_ENV)
    return (root, base_url) if root and base_url else None


def render_code_and_outputs(code: dict | None, outputs: dict | None, server: tuple[str, str] | None) -> str:
    """'Code: 12 files, 3.4 KiB, 0123456789ab, from /home/me/project' and 'Outputs: <folder>
    Open in JupyterLab' (or why the folder is not kept); '' while the job has neither."""
    lines = []
    if code:
        files = code.get("files", 0)
        parts = [f"{files} file{'' if files == 1 else 's'}", human_bytes(code.get("bytes", 0))]
        digest = short_digest(code.get("digest"))
        if digest:
            parts.append(f'<code title="{html.escape(code["digest"])}">{digest}</code>')
        if code.get("workdir"):
            parts.append(f"from <code>{html.escape(code['workdir'])}</code>")
        lines.append("<b>Code:</b> " + ", ".join(parts))
    if outputs and outputs.get("path"):
        path = outputs["path"]
        line = f"<b>Outputs:</b> <code>{html.escape(path)}</code>"
        url = lab_tree_url(path, *server) if server and outputs.get("kept") else None
        if url:
            line += f' <a href="{html.escape(url)}" target="_blank" rel="noopener">Open in JupyterLab</a>'
        if not outputs.get("kept") and outputs.get("note"):
            line += f' <span style="color:#757575">({html.escape(outputs["note"])})</span>'
        lines.append(line)
    return '<div class="paddle-record" style="font-size:12px">' + "<br>".join(lines) + "</div>" if lines else ""


class JobMonitor(widgets.VBox):
    """Live view of one job. Follows the logs on a background thread until the job ends;
    plots the metrics found in them (paddle_ext.report(), Model.fit) as they come."""

    def __init__(self, name: str, client: JobClient | None = None, max_lines: int = 5000,
                 refresh_seconds: float = 0.5, on_done=None, metrics_seconds: float = 2.0, **kwargs):
        self.client = client or JobClient()
        self.name = name
        self.job = None
        self._lines: deque[tuple[str, bool]] = deque(maxlen=max_lines)  # (line, hidden by "my output only"?)
        self._lock = threading.Lock()
        self._dirty = False
        self._generation = 0
        self._stop = threading.Event()
        self._refresh_seconds = refresh_seconds
        self._on_done = on_done
        self._metrics_cursor: str | None = None
        self._metrics_seconds = metrics_seconds  # each look reads the stored logs again
        self._ended = False  # once the job has ended, it stays ended: Cancel never comes back
        self._cancelling = False

        self.header = widgets.HTML()
        self.workers_view = widgets.HTML()
        self.record_view = widgets.HTML()  # the job's code and output folder
        self.plots = MetricsPlot()
        self.plots.layout.display = "none"  # until the first point arrives
        self.worker_filter = widgets.Dropdown(description="Logs", options=[("All workers", ALL_WORKERS)])
        self.mine_only = widgets.Checkbox(value=False, description="My output only", indent=False,
                                          layout=widgets.Layout(width="auto", margin="0 16px"))
        self.mine_only.add_class("paddle-mine")
        self.cancel_button = widgets.Button(description="Cancel", button_style="danger", icon="stop")
        self.log_view = widgets.HTML()
        self.log_view.add_class("paddle-log")
        self.error = widgets.HTML()
        self.cancel_button.on_click(self._on_cancel)
        self.mine_only.observe(self._on_mine, names="value")
        super().__init__(
            [self.header, self.workers_view, self.record_view, self.plots,
             widgets.HBox([self.worker_filter, self.mine_only, self.cancel_button]), self.log_view, self.error],
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
            self._show_error(exc.message)
            self._update_cancel()
            return
        with self._lock:  # the ticker and a click may both refresh; a job seen ended stays ended
            self.job = job
            self._ended = self._ended or job.done
        detail = f" &mdash; {html.escape(job_detail(job))}" if job_detail(job) else ""
        if job.attempt > 1:
            detail += f' <small class="paddle-restarts">({html.escape(job.attempt_line())})</small>'
        self.header.value = f"<b>{html.escape(job.name)}</b> {phase_badge(job.phase)}{detail}"
        self.workers_view.value = render_workers(job)
        self.record_view.value = render_code_and_outputs(job.code, job.outputs, server_location())
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
        noise = FrameworkFilter()
        try:
            for line in self.client.logs(self.name, worker=worker, follow=True):
                framework = noise.hides(line)
                with self._lock:
                    if generation != self._generation or self._stop.is_set():
                        return
                    self._lines.append((line, framework))
                    self._dirty = True
        except PaddleCloudError as exc:
            self._show_error(exc.message)
        except Exception as exc:  # noqa: BLE001 (a thread's end would otherwise be silent)
            self._show_error(f"The log view stopped following: {exc!r}")

    def _show_error(self, message: str) -> None:
        self.error.value = f'<span style="color:#c62828">{html.escape(message)}</span>'

    def _render_logs(self) -> None:
        with self._lock:
            if not self._dirty:
                return
            mine = self.mine_only.value
            shown = [line for line, framework in self._lines if not (mine and framework)]
            hidden = len(self._lines) - len(shown)
            self._dirty = False
        note = (f'<div class="paddle-hidden-note" style="color:#757575;font-size:11px">{hidden} '
                f"line{'s' if hidden != 1 else ''} of framework output and metric records hidden "
                "(untick &ldquo;My output only&rdquo; to see them)</div>" if mine else "")
        # column-reverse keeps the scroll position at the newest line, as a terminal does
        self.log_view.value = (
            note + '<div style="max-height:360px;overflow:auto;display:flex;flex-direction:column-reverse">'
            f'<pre style="margin:0;font-size:12px;flex:none;overflow:visible">{html.escape(chr(10).join(shown))}'
            "</pre></div>")

    def _refresh_metrics(self) -> None:
        try:
            page = self.client.metrics(self.name, self._metrics_cursor)
        except PaddleCloudError:
            return  # the log view shows what is wrong with the job
        self._metrics_cursor = format_cursor(page.cursor)
        if page.points:
            self.plots.add(list(page.points))
            self.plots.layout.display = None

    def _tick(self) -> None:
        """Refresh the view until the job has ended. An unexpected error in a refresh is shown
        in the monitor and the next refresh goes on: the live view never freezes silently."""
        last_status = last_metrics = 0.0
        while not self._stop.is_set():
            try:
                self._render_logs()
                if time.monotonic() - last_metrics > self._metrics_seconds:
                    last_metrics = time.monotonic()
                    self._refresh_metrics()
                if time.monotonic() - last_status > 1.0:
                    last_status = time.monotonic()
                    self._refresh_status()
                    if self.job is not None and self.job.done:
                        if self._on_done is not None:
                            self._on_done(self.job)
                        time.sleep(self._refresh_seconds * 2)  # let the follower drain
                        self._render_logs()
                        self._refresh_metrics()
                        return
            except Exception as exc:  # noqa: BLE001 (the thread would end, the view freeze)
                self._show_error(f"The live view could not refresh (it tries again): {exc!r}")
            time.sleep(self._refresh_seconds)

    def _on_mine(self, _change) -> None:
        with self._lock:
            self._dirty = True
        self._render_logs()

    def _on_filter(self, change) -> None:
        self._start_follow(None if change["new"] == ALL_WORKERS else change["new"])

    def _on_cancel(self, _button) -> None:
        self._cancelling = True
        self._update_cancel()
        try:
            self.client.cancel(self.name)
        except PaddleCloudError as exc:
            self._show_error(exc.message)
            self._cancelling = False  # it did not happen: the user may try again
        self._refresh_status()

    @property
    def log_lines(self) -> list[str]:
        """Every line received, framework lines included (the toggle only hides them)."""
        with self._lock:
            return [line for line, _framework in self._lines]

    @property
    def shown_lines(self) -> list[str]:
        """The lines the log view shows now."""
        with self._lock:
            return [line for line, framework in self._lines if not (self.mine_only.value and framework)]

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
            f"<td>{html.escape(j.created or '')}</td><td>{html.escape(job_detail(j))}</td></tr>" for j in jobs
        )
        self.table.value = ("<table><tr><th>Name</th><th>Phase</th><th>Workers</th><th>Created</th>"
                            f"<th>Detail</th></tr>{rows}</table>")
        self.picker.options = [("", None)] + [(j.name, j.name) for j in jobs]

    def _on_pick(self, change) -> None:
        if change["new"]:
            self.monitor_box.children = [JobMonitor(change["new"], client=self.client)]
