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


def drawn(chart):
    """label -> (x, y, legend shown, color) of each mark of a chart, in the figure's order."""
    return {m.labels[0]: (list(m.x), list(m.y), m.display_legend, m.colors[0]) for m in chart.marks}


def test_every_line_is_drawn_with_all_its_points_whatever_worker_reports_first():
    plot = MetricsPlot()
    plot.add([MetricPoint(1, step, {"loss": 1.0 + step}, time=float(step)) for step in range(3)])
    loss = plot.charts.children[0]
    assert drawn(loss) == {"worker-1": ([0, 1, 2], [1.0, 2.0, 3.0], False, "#ff7f0e")}  # worker-1's color
    first = loss.marks[0]
    plot.add([MetricPoint(0, step, {"loss": 0.5 + step}, time=float(step)) for step in range(2)])
    # Both lines in the legend, each in its worker's color, each with all its points; worker-1's
    # mark is the same one, still first: a mark already drawn is never taken out and put back.
    assert drawn(loss) == {"worker-1": ([0, 1, 2], [1.0, 2.0, 3.0], True, "#ff7f0e"),
                           "worker-0": ([0, 1], [0.5, 1.5], True, "#1f77b4")}
    assert loss.marks[0] is first
    plot.mode.value = "mean"
    assert drawn(loss) == {"mean": ([0, 1, 2], [0.75, 1.75, 3.0], False, "#1f77b4")}
    plot.mode.value = "workers"
    assert drawn(loss)["worker-0"] == ([0, 1], [0.5, 1.5], True, "#1f77b4")


def test_a_new_line_is_created_with_its_points_not_empty_and_then_filled():
    from bqplot import Lines

    created = []
    original = Lines.__init__

    def spy(self, **kwargs):
        created.append((kwargs["labels"][0], list(kwargs.get("x", [])), list(kwargs.get("y", []))))
        original(self, **kwargs)

    Lines.__init__ = spy
    try:
        MetricsPlot().add([MetricPoint(0, 0, {"loss": 2.0}, time=0.0), MetricPoint(0, 1, {"loss": 1.0}, time=1.0)])
    finally:
        Lines.__init__ = original
    assert ("worker-0", [0, 1], [2.0, 1.0]) in created
