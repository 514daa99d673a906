"""Training metrics read back from job logs (pure).

Two sources, both plain log lines, so nothing beyond the log is stored:

- `paddle_ext.report(step=..., **values)` lines: `PADDLECLOUD_METRIC {"step", "rank", "time", "values"}`;
- PaddlePaddle's own `paddle.Model.fit` progress lines, read only where the step is
  unambiguous: after an `Epoch e/E` header, outside `Eval begin...`/`Predict begin...`
  sections, with the global step `(e - 1) * steps_per_epoch + step` (so `step n/T` is
  needed after the first epoch). Both verbose modes print them:

      Epoch 1/2
      step 2/8 [======>.......................] - loss: 0.6088 - acc: 0.5625 - ETA: 0s - 7ms/step
      step 4/4 - loss: 0.6278 - acc: 0.4062 - 7ms/step

  giving `loss`, `acc` and `step_time_ms` (the `ETA` is skipped).

`read_metrics` turns each worker's lines into points after a cursor (the number of lines
of each worker already read), which makes the REST endpoint incremental.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any, Iterable, Mapping, Sequence

from .constants import METRIC_MARKER
from .restarts import marker_attempt

REPORT = "report"
PADDLE_FIT = "paddle"
STEP_TIME = "step_time_ms"

_EPOCH = re.compile(r"^Epoch (\d+)/(\d+)$")
_EVAL_BEGIN = re.compile(r"^(?:Eval|Predict) begin\.\.\.$")
_EVAL_END = re.compile(r"^(?:Eval|Predict) samples: \d+$")
_FIT_STEP = re.compile(r"^step (\d+)(?:/(\d+))?(?: \[[=>.]*\])? - (.+) - (\d+(?:\.\d+)?)(us|ms|s)/step$")
_FIT_VALUE = re.compile(r"^([A-Za-z_][\w.]*): \[?(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|nan|inf|-inf)\]?$")
_UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


@dataclasses.dataclass(frozen=True)
class MetricPoint:
    """Values one worker recorded at one training step."""

    worker: int
    step: int
    values: Mapping[str, float | int | None]
    rank: int | None = None
    time: float | None = None  # seconds since the epoch (report() lines only)
    epoch: int | None = None  # Model.fit lines only
    source: str = REPORT
    attempt: int = 0  # of the job (0 first): the report() line's, else the last restart marker's in the log

    def to_dict(self) -> dict:
        return {"worker": self.worker, "step": self.step, "values": dict(self.values), "rank": self.rank,
                "time": self.time, "epoch": self.epoch, "source": self.source, "attempt": self.attempt}


def _is_number(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def parse_report(line: str) -> dict | None:
    """The record of a complete, well-formed report() line; None for anything else."""
    if not line.startswith(METRIC_MARKER):
        return None
    try:
        record = json.loads(line[len(METRIC_MARKER):])
    except json.JSONDecodeError:
        return None
    if not isinstance(record, dict):
        return None
    step, values = record.get("step"), record.get("values")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0 or not isinstance(values, dict):
        return None
    if not all(isinstance(k, str) and _is_number(v) for k, v in values.items()):
        return None
    rank, moment, attempt = record.get("rank"), record.get("time"), record.get("attempt", 0)
    if not (rank is None or (isinstance(rank, int) and not isinstance(rank, bool))) or not _is_number(moment):
        return None
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 0:
        return None
    return {"step": step, "values": values, "rank": rank, "time": moment, "attempt": attempt}


def _fit_number(text: str) -> float | None:
    number = float(text)
    return number if math.isfinite(number) else None


class MetricParser:
    """Reads one worker's log, line by line, in order (Model.fit lines need the epoch
    header and eval sections seen before them)."""

    def __init__(self, worker: int):
        self.worker = worker
        self.epoch: int | None = None
        self.in_eval = False
        self.attempt = 0  # the last restart marker's (a log that keeps every attempt has them)

    def feed(self, line: str) -> MetricPoint | None:
        record = parse_report(line)
        if record is not None:
            return MetricPoint(self.worker, record["step"], record["values"], record["rank"], record["time"],
                               attempt=max(record["attempt"], self.attempt))
        text = line.rstrip("\b \r")
        began = marker_attempt(text)
        if began is not None:
            self.attempt, self.epoch, self.in_eval = began, None, False
            return None
        if match := _EPOCH.match(text):
            self.epoch, self.in_eval = int(match.group(1)), False
            return None
        if _EVAL_BEGIN.match(text):
            self.in_eval = True
            return None
        if _EVAL_END.match(text):
            self.in_eval = False
            return None
        if self.in_eval or self.epoch is None:
            return None
        match = _FIT_STEP.match(text)
        if not match:
            return None
        step, total = int(match.group(1)), match.group(2)
        if total is None and self.epoch != 1:
            return None  # which global step this is cannot be known
        values: dict[str, float | None] = {}
        for part in match.group(3).split(" - "):
            found = _FIT_VALUE.match(part)
            if found:
                values[found.group(1)] = _fit_number(found.group(2))
        values[STEP_TIME] = float(match.group(4)) * _UNIT_MS[match.group(5)]
        global_step = step + (self.epoch - 1) * int(total or 0)
        return MetricPoint(self.worker, global_step, values, epoch=self.epoch, source=PADDLE_FIT, attempt=self.attempt)


# ------------------------------------------------------------------ cursors and pages

class CursorError(ValueError):
    pass


def format_cursor(counts: Sequence[int]) -> str:
    """Lines read per worker, e.g. '120.118': pass it back as `since` for what is new."""
    return ".".join(str(count) for count in counts)


def parse_cursor(text: str | None, workers: int) -> tuple[int, ...]:
    """The line counts of a cursor from an earlier answer; none means from the start."""
    if not text:
        return (0,) * workers
    parts = text.split(".")
    if len(parts) != workers or not all(part.isdigit() for part in parts):
        raise CursorError(f"The 'since' parameter must be a cursor from an earlier answer for this job "
                          f"(got '{text}').")
    return tuple(int(part) for part in parts)


def read_metrics(logs: Mapping[int, Sequence[str]], since: Sequence[int], finished: bool
                 ) -> tuple[list[MetricPoint], tuple[int, ...]]:
    """Points in the lines after `since`, and the cursor to ask with next time.

    `logs` holds every line of each worker (0..n-1) so far. While the job runs, a last
    line that is not a complete report() line may still be being written: it is read
    next time instead. A worker whose log got shorter than the cursor (its pod was
    replaced) is read again from its start."""
    points: list[MetricPoint] = []
    counts = []
    for worker in range(len(since)):
        lines = logs.get(worker, ())
        start = since[worker] if since[worker] <= len(lines) else 0
        end = len(lines)
        if not finished and lines and parse_report(lines[-1]) is None:
            end -= 1
        parser = MetricParser(worker)
        for index, line in enumerate(lines[:end]):
            point = parser.feed(line)
            if point is not None and index >= start:
                points.append(point)
        counts.append(max(end, start))
    return points, tuple(counts)


@dataclasses.dataclass(frozen=True)
class MetricsPage:
    """One answer of GET /paddle/api/jobs/{name}/metrics (docs/user/rest.md documents the JSON)."""

    job: str
    phase: str
    done: bool
    points: tuple[MetricPoint, ...]
    cursor: tuple[int, ...]

    @property
    def names(self) -> list[str]:
        return sorted({key for point in self.points for key in point.values})

    def to_dict(self) -> dict:
        return {"job": self.job, "phase": self.phase, "done": self.done, "cursor": format_cursor(self.cursor),
                "names": self.names, "points": [point.to_dict() for point in self.points]}


# ------------------------------------------------------------------ series for plots

def series(points: Iterable[MetricPoint], name: str) -> dict[int, list[tuple[int, float]]]:
    """worker -> [(step, value)] of one metric, in step order (gaps left out)."""
    found: dict[int, dict[int, float]] = {}
    for point in points:
        value = point.values.get(name)
        if value is not None:
            found.setdefault(point.worker, {})[point.step] = float(value)
    return {worker: sorted(steps.items()) for worker, steps in sorted(found.items())}


def attempt_starts(points: Iterable[MetricPoint]) -> list[tuple[int, int]]:
    """[(attempt, step)]: where each attempt after the first began on the charts, the first
    step any worker reported in it (a resumed job starts at its checkpoint's step)."""
    first: dict[int, int] = {}
    for point in points:
        if point.attempt and (point.attempt not in first or point.step < first[point.attempt]):
            first[point.attempt] = point.step
    return sorted(first.items())


def mean_series(per_worker: Mapping[int, list[tuple[int, float]]]) -> list[tuple[int, float]]:
    """The mean over workers at each step (of the workers that recorded that step)."""
    sums: dict[int, list[float]] = {}
    for values in per_worker.values():
        for step, value in values:
            sums.setdefault(step, []).append(value)
    return [(step, sum(values) / len(values)) for step, values in sorted(sums.items())]


def throughput(points: Iterable[MetricPoint]) -> dict[int, list[tuple[int, float]]]:
    """worker -> [(step, steps per second)]: from Model.fit's step time, else from the
    time between a worker's consecutive report() calls."""
    result: dict[int, list[tuple[int, float]]] = {}
    previous: dict[int, MetricPoint] = {}
    for point in sorted(points, key=lambda p: (p.worker, p.step)):
        step_time = point.values.get(STEP_TIME)
        rate = None
        if step_time:
            rate = 1000.0 / float(step_time)
        else:
            before = previous.get(point.worker)
            if before is not None and before.time is not None and point.time is not None \
                    and point.time > before.time and point.step > before.step:
                rate = (point.step - before.step) / (point.time - before.time)
        previous[point.worker] = point
        if rate is not None:
            result.setdefault(point.worker, []).append((point.step, round(rate, 3)))
    return result
