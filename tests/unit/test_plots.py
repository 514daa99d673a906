"""The widget's charts (paddle_ext.widgets.plots): a dashed vertical marker where each attempt
after a restart or requeue began, drawn with bqplot (no kernel needed to build the figures)."""

from __future__ import annotations

from paddle_ext.metrics import MetricPoint
from paddle_ext.widgets.plots import MetricsPlot, marker_lines


def test_marker_lines_span_the_charted_values_at_each_attempts_first_step():
    lines = {"worker-0": [(0, 1.0), (1, 0.5)], "worker-1": [(0, 2.0), (3, 0.25)]}
    assert marker_lines([(1, 2), (2, 3)], lines) == {"attempt 2 began": ([2, 2], [0.25, 2.0]),
                                                     "attempt 3 began": ([3, 3], [0.25, 2.0])}
    assert marker_lines([(1, 2)], {}) == {}
    assert marker_lines([], lines) == {}


def test_the_charts_mark_a_restart_where_the_resumed_attempt_began():
    plot = MetricsPlot()
    plot.add([MetricPoint(0, step, {"loss": 1.0 / (step + 1)}, time=float(step)) for step in range(5)])
    (loss, rate) = plot.charts.children
    assert [m.labels[0] for m in loss.marks] == ["worker-0"]  # one attempt: no marker
    plot.add([MetricPoint(0, step, {"loss": 0.1}, time=10.0 + step, attempt=1) for step in range(3, 8)])
    marks = {m.labels[0]: m for m in plot.charts.children[0].marks}
    assert set(marks) == {"worker-0", "attempt 2 began"}
    marker = marks["attempt 2 began"]
    assert (list(marker.x), list(marker.y), marker.line_style) == ([3, 3], [0.1, 1.0], "dashed")
    assert "attempt 2 began" in {m.labels[0] for m in plot.charts.children[1].marks}  # on steps/s too
    plot.mode.value = "mean"
    assert {m.labels[0] for m in plot.charts.children[0].marks} == {"mean", "attempt 2 began"}
