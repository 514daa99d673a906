"""`paddle_ext.report(step=..., **values)`: training metrics from inside a job's workers.

    import paddle_ext
    for step in range(steps):
        ...
        paddle_ext.report(step=step, loss=float(loss), acc=accuracy)

Each call prints one line, `PADDLECLOUD_METRIC {"step": 10, "rank": 0, "time": ..., "values": {...}}`,
to standard output; the job's log keeps it like any other line, and `paddle_ext.metrics`
reads it back (REST `/paddle/api/jobs/{name}/metrics`, the monitor's plots,
`.metrics()` of a `%%paddle_train` handle). Nothing else is stored.

Standard library only: workers import this without Jupyter, traitlets or aiohttp
(`paddle_ext/__init__.py` loads everything else lazily).
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import threading
import time
from typing import Any, TextIO

from .constants import METRIC_MARKER, RESTART_ENV, TRAINER_ID_ENV

NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-/]{0,63}$")

_lock = threading.Lock()
_last_step: int | None = None


def _number(name: str, value: Any) -> float | int | None:
    """A JSON number for `value` (ints stay ints); NaN and infinities become None (a gap)."""
    if isinstance(value, bool) or isinstance(value, (str, bytes)):
        raise TypeError(f"report(): {name} must be a number (got {type(value).__name__} {value!r})")
    if isinstance(value, int):
        return value
    try:
        # numpy scalars and 0-d arrays; one-element arrays and tensors through .item()
        number = float(value.item() if hasattr(value, "item") else value)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise TypeError(f"report(): {name} must be a number (got {type(value).__name__})") from exc
    return number if math.isfinite(number) else None


def metric_line(step: int, values: dict[str, Any], rank: int | None, moment: float, attempt: int = 0) -> str:
    """The line one report() call prints (without the newline); after a restart or requeue
    it names the attempt (0 first), which the charts mark where it began."""
    record: dict[str, Any] = {"step": step, "rank": rank, "time": round(moment, 3),
                              "values": {name: _number(name, value) for name, value in values.items()}}
    if attempt:
        record["attempt"] = attempt
    return METRIC_MARKER + json.dumps(record, separators=(",", ":"), allow_nan=False)


def _rank() -> int | None:
    text = os.environ.get(TRAINER_ID_ENV, "")
    return int(text) if text.isdigit() else None


def _attempt() -> int:
    text = os.environ.get(RESTART_ENV, "")
    return int(text) if text.isdigit() and len(text) <= 6 else 0


def report(step: int | None = None, *, stream: TextIO | None = None, **values: Any) -> None:
    """Record metrics at a training step (default: the previous step + 1, from 0).

    Values must be numbers (ints, floats, numpy scalars, one-element tensors); NaN and
    infinities are recorded as gaps. Names: letters, digits, `_ . - /`. Raises TypeError
    or ValueError for anything else, before printing."""
    global _last_step
    if not values:
        raise ValueError("report(): give at least one value, e.g. report(step=10, loss=0.25)")
    for name in values:
        if not NAME_PATTERN.match(name):
            raise ValueError(f"report(): '{name}' is not a metric name (letters, digits, _ . - /)")
    with _lock:
        if step is None:
            step = 0 if _last_step is None else _last_step + 1
        elif isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise TypeError(f"report(): step must be a whole number >= 0 (got {step!r})")
        line = metric_line(step, values, _rank(), time.time(), _attempt())
        _last_step = step
        out = stream or sys.stdout
        out.write(line + "\n")  # one write: the line never interleaves with other output
        out.flush()
