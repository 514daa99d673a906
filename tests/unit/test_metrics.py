"""paddle_ext.report() lines and Paddle's Model.fit lines read back as metric points (pure).

The Model.fit logs under tests/unit/data/ are real output, captured from
`paddlecloud submit --workers N --follow -- python fit_model.py` (tests/local/scripts/fit_model.py,
PaddlePaddle 3.3.1 CPU; verbose=2 with 2 workers, verbose=1 with 1 worker). The local
tier runs the same script again and checks the parser against the installed Paddle.
"""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import paddle_ext
from paddle_ext.constants import METRIC_MARKER
from paddle_ext.loglines import split_prefix
from paddle_ext.metrics import (MetricParser, MetricPoint, MetricsPage, CursorError, format_cursor, mean_series,
                                parse_cursor, parse_report, read_metrics, series, throughput)
from paddle_ext.reporting import report

DATA = Path(__file__).resolve().parent / "data"


def reported(**kwargs) -> str:
    out = io.StringIO()
    report(stream=out, **kwargs)
    return out.getvalue()


def by_worker(path: Path) -> dict[int, list[str]]:
    """A merged `[worker-I] ` log split back into each worker's lines."""
    logs: dict[int, list[str]] = {}
    for line in path.read_text().splitlines():
        worker, text = split_prefix(line)
        logs.setdefault(worker or 0, []).append(text)
    return logs


# ------------------------------------------------------------------ report()

def test_report_prints_one_parseable_line(monkeypatch):
    monkeypatch.setenv("PADDLE_TRAINER_ID", "3")
    text = reported(step=7, loss=0.25, acc=1)
    assert text.endswith("\n") and text.count("\n") == 1 and text.startswith(METRIC_MARKER)
    record = parse_report(text.rstrip("\n"))
    assert record["step"] == 7 and record["rank"] == 3 and record["values"] == {"loss": 0.25, "acc": 1}
    assert isinstance(record["values"]["acc"], int) and record["time"] > 1.7e9


def test_report_counts_steps_when_none_given_and_nan_is_a_gap(monkeypatch):
    monkeypatch.delenv("PADDLE_TRAINER_ID", raising=False)
    first = parse_report(reported(step=41, loss=1.0).strip())
    following = parse_report(reported(loss=math.nan).strip())
    assert (first["step"], first["rank"]) == (41, None)
    assert following["step"] == 42 and following["values"] == {"loss": None}


def test_report_accepts_numpy_scalars_and_one_element_arrays():
    numpy = pytest.importorskip("numpy")
    record = parse_report(reported(step=1, loss=numpy.float32(0.5), acc=numpy.array([0.75])).strip())
    assert record["values"] == {"loss": 0.5, "acc": 0.75}


@pytest.mark.parametrize("kwargs, error, words", [
    ({"step": 1}, ValueError, "at least one value"),
    ({"step": -1, "loss": 1.0}, TypeError, "step must be a whole number"),
    ({"step": 1.5, "loss": 1.0}, TypeError, "step must be a whole number"),
    ({"step": 1, "loss": "low"}, TypeError, "loss must be a number"),
    ({"step": 1, "ok": True}, TypeError, "ok must be a number"),
    ({"step": 1, "loss": [1.0, 2.0]}, TypeError, "loss must be a number"),
])
def test_report_refuses_bad_input_before_printing(kwargs, error, words):
    out = io.StringIO()
    with pytest.raises(error, match=words):
        report(stream=out, **kwargs)
    assert out.getvalue() == ""


def test_report_imports_with_the_standard_library_only(tmp_path):
    """A worker's Python may have nothing but the package: no Jupyter, traitlets, aiohttp."""
    package = Path(paddle_ext.__file__).resolve().parent
    code = ("import sys; import paddle_ext; paddle_ext.report(step=1, loss=0.5); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('traitlets', 'tornado', 'aiohttp', 'jupyter_server', 'ipywidgets', 'yaml')))")
    # -S: no site-packages at all, only the standard library and the package itself
    result = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60,
                            env={"PYTHONPATH": str(package.parent), "PADDLE_TRAINER_ID": "1",
                                 "PATH": os.environ.get("PATH", "")})
    assert result.returncode == 0, result.stderr
    line, loaded = result.stdout.splitlines()
    assert parse_report(line)["rank"] == 1 and loaded == "[]"


# ------------------------------------------------------------------ parsing

@pytest.mark.parametrize("line", [
    METRIC_MARKER + '{"step": 1, "values": {"loss": 0.5',  # still being written
    METRIC_MARKER + '{"step": -1, "values": {}}',
    METRIC_MARKER + '{"step": true, "values": {}}',
    METRIC_MARKER + '{"step": 1, "values": {"loss": "x"}}',
    METRIC_MARKER + '[1, 2]',
    "printed " + METRIC_MARKER + '{"step": 1, "values": {}}',
])
def test_malformed_report_lines_are_not_points(line):
    assert parse_report(line) is None
    assert MetricParser(0).feed(line) is None


def test_model_fit_verbose2_two_workers_real_output():
    logs = by_worker(DATA / "paddle_fit_2_workers_verbose2.log")
    points, cursor = read_metrics(logs, (0, 0), finished=True)
    assert cursor == (len(logs[0]), len(logs[1]))
    # Model.fit logs on rank 0 only; 2 epochs of 4 steps, log_freq=2; eval sections skipped
    assert [(p.worker, p.epoch, p.step) for p in points] == [(0, 1, 2), (0, 1, 4), (0, 2, 6), (0, 2, 8)]
    assert points[0].values == {"loss": 0.9430, "acc": 0.3281, "step_time_ms": 10.0}
    assert points[-1].values == {"loss": 0.4123, "acc": 0.6406, "step_time_ms": 3.0}
    assert all(p.source == "paddle" for p in points)


def test_model_fit_verbose1_progress_bar_real_output():
    logs = by_worker(DATA / "paddle_fit_1_worker_verbose1.log")
    points, _ = read_metrics(logs, (0,), finished=True)
    assert [p.step for p in points] == [2, 4, 6, 8, 10, 12, 14, 16]
    assert points[0].values == {"loss": 0.6088, "acc": 0.5625, "step_time_ms": 7.0}  # the ETA is not a metric
    assert points[7].values["loss"] == 0.0819


def test_fit_lines_outside_training_are_ignored():
    parser = MetricParser(0)
    assert parser.feed("step 2/4 - loss: 0.9 - 1ms/step") is None  # no Epoch header yet
    assert parser.feed("Epoch 2/3") is None
    assert parser.feed("step 3 - loss: 0.9 - 1ms/step") is None  # epoch 2 without a total: ambiguous
    assert parser.feed("step 3/10 - loss: [0.5] - 250us/step").values == {"loss": 0.5, "step_time_ms": 0.25}
    parser.feed("Eval begin...")
    assert parser.feed("step 1/1 - loss: 0.7 - 1ms/step") is None
    parser.feed("Eval samples: 64")
    assert parser.feed("step 4/10 - loss: 0.4 - 2s/step").step == 14


# ------------------------------------------------------------------ cursors

def report_lines(worker: int, steps) -> list[str]:
    return [reported(step=s, loss=1.0 / (s + 1)).strip() for s in steps]


def test_incremental_reads_return_each_point_once():
    logs = {0: ["hello"] + report_lines(0, range(3)), 1: report_lines(1, range(2))}
    first, cursor = read_metrics(logs, parse_cursor(None, 2), finished=False)
    assert sorted((p.worker, p.step) for p in first) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]
    assert format_cursor(cursor) == "4.2"
    logs[1] += ["a line", *report_lines(1, [2])]
    more, cursor = read_metrics(logs, parse_cursor(format_cursor(cursor), 2), finished=False)
    assert [(p.worker, p.step) for p in more] == [(1, 2)] and cursor == (4, 4)
    nothing, same = read_metrics(logs, cursor, finished=True)
    assert nothing == [] and same == cursor


def test_a_last_line_still_being_written_is_read_next_time():
    complete = reported(step=5, loss=0.5).strip()
    logs = {0: ["Epoch 1/1", complete[:20]]}
    points, cursor = read_metrics(logs, (0,), finished=False)
    assert points == [] and cursor == (1,)
    logs[0][-1] = complete
    points, cursor = read_metrics(logs, cursor, finished=False)
    assert [p.step for p in points] == [5] and cursor == (2,)
    logs[0].append("step 1/1 - loss: 0.1 - 1ms/")  # a fit line is held back until the job ends
    assert read_metrics(logs, cursor, finished=False) == ([], (2,))
    logs[0][-1] = "step 1/1 - loss: 0.1 - 1ms/step"
    assert [p.source for p in read_metrics(logs, cursor, finished=True)[0]] == ["paddle"]


def test_a_replaced_workers_shorter_log_is_read_from_its_start():
    points, cursor = read_metrics({0: report_lines(0, [0])}, (9,), finished=True)
    assert [p.step for p in points] == [0] and cursor == (1,)


@pytest.mark.parametrize("text", ["abc", "1.2.3", "1", "-1.0", "1..2"])
def test_bad_cursors_are_refused(text):
    with pytest.raises(CursorError, match="cursor from an earlier answer"):
        parse_cursor(text, 2)


def test_page_json_shape():
    point = MetricPoint(1, 3, {"loss": 0.5}, rank=1, time=1.5)
    page = MetricsPage("job-a", "Running", False, (point,), (4, 7)).to_dict()
    assert page == {"job": "job-a", "phase": "Running", "done": False, "cursor": "4.7", "names": ["loss"],
                    "points": [{"worker": 1, "step": 3, "values": {"loss": 0.5}, "rank": 1, "time": 1.5,
                                "epoch": None, "source": "report", "attempt": 0}]}
    json.dumps(page)


# ------------------------------------------------------------------ series

def test_series_mean_and_throughput():
    points = [MetricPoint(0, 0, {"loss": 4.0}, time=10.0), MetricPoint(0, 2, {"loss": 2.0}, time=11.0),
              MetricPoint(1, 0, {"loss": 2.0}, time=10.0), MetricPoint(1, 2, {"loss": None}, time=12.0),
              MetricPoint(0, 4, {"loss": 1.0, "step_time_ms": 250.0})]
    assert series(points, "loss") == {0: [(0, 4.0), (2, 2.0), (4, 1.0)], 1: [(0, 2.0)]}
    assert mean_series(series(points, "loss")) == [(0, 3.0), (2, 2.0), (4, 1.0)]
    assert throughput(points) == {0: [(2, 2.0), (4, 4.0)], 1: [(2, 1.0)]}


# ------------------------------------------------------------------ attempts (restart markers on the charts)

def test_report_names_the_attempt_after_a_restart_and_says_nothing_before(monkeypatch):
    monkeypatch.setenv("PADDLECLOUD_RESTART", "0")
    assert '"attempt"' not in reported(step=1, loss=1.0)
    monkeypatch.setenv("PADDLECLOUD_RESTART", "2")
    line = reported(step=40, loss=0.5).strip()
    assert parse_report(line)["attempt"] == 2
    monkeypatch.setenv("PADDLECLOUD_RESTART", "junk")
    assert parse_report(reported(step=41, loss=0.5).strip())["attempt"] == 0


@pytest.mark.parametrize("attempt", ['"2"', "-1", "true", "1.5"])
def test_a_report_line_with_a_bad_attempt_is_not_a_point(attempt):
    assert parse_report(METRIC_MARKER + '{"step":1,"values":{"loss":1},"attempt":%s}' % attempt) is None


def test_points_after_a_restart_marker_in_the_log_belong_to_the_next_attempt_and_the_chart_marks_where_it_began():
    from paddle_ext.metrics import attempt_starts
    from paddle_ext.restarts import restart_marker

    def line(step, loss):
        return METRIC_MARKER + json.dumps({"step": step, "rank": 0, "time": 1.0, "values": {"loss": loss}})

    fit = ["Epoch 1/1", "step 1/2 - loss: 0.5 - 7ms/step"]
    logs = {0: [line(0, 1.0), line(1, 0.9), line(2, 0.8), restart_marker(1, 2, "worker 1 was killed by signal 9"),
                line(2, 0.8), line(3, 0.7), restart_marker(2, 2, "worker 0 was killed by signal 9"), *fit],
            1: [line(0, 1.0), line(1, 0.9), restart_marker(1, 2, "worker 1 was killed by signal 9"), line(1, 0.9)]}
    points, _ = read_metrics(logs, (0, 0), finished=True)
    assert [(p.worker, p.step, p.attempt) for p in points] == [
        (0, 0, 0), (0, 1, 0), (0, 2, 0), (0, 2, 1), (0, 3, 1), (0, 1, 2), (1, 0, 0), (1, 1, 0), (1, 1, 1)]
    assert attempt_starts(points) == [(1, 1), (2, 1)]  # attempt 2 began at step 1 (worker 1 resumed there)
    assert attempt_starts(points[:3]) == []
    # each step once on the chart: the last attempt's value of a redone step
    assert series(points, "loss")[0] == [(0, 1.0), (1, 0.5), (2, 0.8), (3, 0.7)]


def test_the_restart_marker_is_read_back_as_the_attempt_it_begins():
    from paddle_ext.restarts import marker_attempt, restart_marker

    assert marker_attempt(restart_marker(1, 3, "worker 1 was killed by signal 9")) == 1
    assert marker_attempt(restart_marker(3, 3, "a; b") + "\n") == 3
    assert marker_attempt("--- attempt x of 3: y; restarting ---") is None
    assert marker_attempt("step 1 --- attempt 2 of 3: y; restarting ---") is None
