"""MetricsPlot: live charts of a job's metrics, drawn with bqplot.

One chart per metric (losses first, then accuracies, then the rest) plus throughput
(steps per second), each with one line per worker or the workers' mean, and a dashed
vertical marker at the step where each attempt after a restart or requeue began. Points come
from `JobClient.metrics` (paddle_ext.metrics); `add()` may be called from any thread.
"""

from __future__ import annotations

import threading

import ipywidgets as widgets
from bqplot import Axis, Figure, LinearScale, Lines

from ..metrics import STEP_TIME, MetricPoint, attempt_starts, mean_series, series, throughput

THROUGHPUT = "steps/s"
# One color per line (Category10): worker-i gets COLORS[i % 10]; the mean the first.
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
          "#17becf")
PER_WORKER, MEAN = "workers", "mean"
MARKER_COLOR = "#616161"


def marker_lines(starts: list[tuple[int, int]], lines: dict[str, list[tuple[int, float]]]
                 ) -> dict[str, tuple[list[int], list[float]]]:
    """label -> (x, y) of a vertical line at each attempt's first step, from the lowest to the
    highest value charted ('attempt 2 began' at step 40); none without values."""
    values = [value for points in lines.values() for _, value in points]
    if not values:
        return {}
    low, high = min(values), max(values)
    return {f"attempt {attempt + 1} began": ([step, step], [low, high]) for attempt, step in starts}


def line_color(label: str) -> str:
    """worker-i's color whichever worker reported first; the mean's the first."""
    worker = label.removeprefix("worker-")
    return COLORS[int(worker) % len(COLORS)] if worker.isdigit() else COLORS[0]


def chart_order(names: set[str]) -> list[str]:
    """The metrics to chart, losses first, then accuracies, then the rest; throughput last."""
    shown = sorted(name for name in names if name != STEP_TIME)

    def rank(name: str) -> tuple[int, str]:
        lower = name.lower()
        return (0 if "loss" in lower else 1 if "acc" in lower else 2, name)

    return sorted(shown, key=rank)


# Each axis gets a tick format of its own. Without one, bqplot guesses the precision from the
# ticks, and for the domain of a chart's single first point it guesses none: its d3.format
# throws ("invalid format: .undefinedg") while the line's new points are taken in, the line
# never hears of them, and stays one dot while later points are charted in vain.
STEP_TICKS = "~g"  # 0, 2.5, 10, 1e+6: a step number without trailing zeros
VALUE_TICKS = ".3g"


class _Chart:
    def __init__(self, name: str):
        self.name = name
        self.x, self.y = LinearScale(), LinearScale()
        self.lines: dict[str, Lines] = {}
        self.figure = Figure(
            title=name, marks=[], axes=[Axis(scale=self.x, label="step", num_ticks=5, tick_format=STEP_TICKS),
                                        Axis(scale=self.y, side="left", label=name, num_ticks=5,
                                             tick_format=VALUE_TICKS)],
            fig_margin={"top": 36, "bottom": 40, "left": 60, "right": 16},
            layout=widgets.Layout(width="340px", height="240px"), legend_location="top-right")
        self.figure.add_class("paddle-chart")

    def show(self, lines: dict[str, list[tuple[int, float]]], starts: list[tuple[int, int]] = ()) -> None:
        """Draw `lines` (label -> points) and the attempt markers. A new line's mark is created
        with its points, not empty and then filled; every line is in the legend once there are
        two; a mark already in the figure stays where it is (new ones go after it), so the front
        end only ever adds a mark's view beside the ones it has drawn, and never takes a drawn
        one out to put it back."""
        legend = len(lines) > 1
        for label, values in lines.items():
            self._line(label, [step for step, _ in values], [value for _, value in values],
                       colors=[line_color(label)], display_legend=legend, marker="circle", marker_size=12)
        markers = marker_lines(list(starts), lines)
        for label, (x, y) in markers.items():
            self._line(label, x, y, colors=[MARKER_COLOR], line_style="dashed", display_legend=False)
        wanted = [self.lines[label] for label in [*lines, *markers]]
        marks = [mark for mark in self.figure.marks if mark in wanted]
        marks += [mark for mark in wanted if mark not in marks]
        if marks != list(self.figure.marks):
            self.figure.marks = marks

    def _line(self, label: str, x: list, y: list, display_legend: bool, **style) -> None:
        """Create a line's mark with its points, or give the existing one its points and legend."""
        mark = self.lines.get(label)
        if mark is None:
            self.lines[label] = Lines(x=x, y=y, scales={"x": self.x, "y": self.y}, labels=[label],
                                      display_legend=display_legend, **style)
            return
        with mark.hold_sync():
            mark.x, mark.y, mark.display_legend = x, y, display_legend


class MetricsPlot(widgets.VBox):
    """Charts that grow as points arrive; a toggle picks one line per worker or the mean."""

    def __init__(self, **kwargs):
        self.points: list[MetricPoint] = []
        self._lock = threading.Lock()
        self._charts: dict[str, _Chart] = {}
        self.mode = widgets.ToggleButtons(options=[("Per worker", PER_WORKER), ("Mean of workers", MEAN)],
                                          value=PER_WORKER, style={"button_width": "130px"})
        self.mode.observe(lambda _change: self.redraw(), names="value")
        self.charts = widgets.HBox(layout=widgets.Layout(flex_flow="row wrap"))
        super().__init__([self.mode, self.charts], **kwargs)
        self.add_class("paddle-plots")

    def add(self, points: list[MetricPoint]) -> None:
        if not points:
            return
        with self._lock:
            self.points.extend(points)
        self.redraw()

    def _lines(self, per_worker: dict[int, list[tuple[int, float]]]) -> dict[str, list[tuple[int, float]]]:
        if self.mode.value == MEAN and per_worker:
            return {"mean": mean_series(per_worker)}
        return {f"worker-{worker}": values for worker, values in per_worker.items()}

    def redraw(self) -> None:
        with self._lock:
            points = list(self.points)
        wanted: dict[str, dict[int, list[tuple[int, float]]]] = {}
        for name in chart_order({key for point in points for key in point.values}):
            wanted[name] = series(points, name)
        starts = attempt_starts(points)
        rates = throughput(points)
        if rates:
            wanted[THROUGHPUT] = rates
        for name, per_worker in wanted.items():
            if not per_worker:
                continue
            chart = self._charts.get(name)
            if chart is None:
                chart = self._charts[name] = _Chart(name)
            chart.show(self._lines(per_worker), starts)
        figures = [self._charts[name].figure for name in wanted if name in self._charts]
        if list(self.charts.children) != figures:
            self.charts.children = figures
