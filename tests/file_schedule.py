"""Longest files first in the tiers that run in pytest-xdist worker processes.

Those tiers hand each worker whole test files (`--dist loadfile`), and a worker asks for the next
file only when it has almost nothing left. Left to xdist, the files go out in order of how many
tests they hold (its `--loadscope-reorder`, which the Makefile turns off): a file of two long tests,
such as the Kueue fairness test's three minutes, went out near the end and ran on while the other
workers sat idle. Here the files go out longest first, by how long each took in the last run of
its tier on this machine (the controller records it in DURATIONS_FILE, under the cache that
survives between runs); a file never timed goes first, and without any record the order is the
random one (pytest-randomly). Inside a file, the tests keep their random order.

Only the order in which files are handed out changes: which worker runs a file was never fixed.
The controller reads the record once and gives it to every worker (they must all collect the same
order), so a record written meanwhile by another tier cannot split them.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections import Counter
from pathlib import Path

import pytest

CACHE = Path(os.environ.get("PADDLECLOUD_CACHE") or Path.home() / ".cache" / "paddlecloud")
DURATIONS_FILE = CACHE / "test-file-durations.json"
WORKER_INPUT_KEY = "paddlecloud_file_durations"


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def longest_files_first(items: list, durations: dict[str, float]) -> list:
    """`items` with whole files moved by their recorded seconds, longest first and unrecorded
    ones before all; a stable sort, so each file's tests keep their order."""
    return sorted(items, key=lambda item: -durations.get(file_of(item.nodeid), math.inf))


def read_record(path: Path = DURATIONS_FILE) -> dict[str, float]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {name: float(seconds) for name, seconds in data.items()
            if isinstance(name, str) and isinstance(seconds, (int, float))}


def write_record(seconds_by_file: dict[str, float], path: Path = DURATIONS_FILE) -> None:
    """Merge this run's files into the record (written whole, then renamed into place)."""
    if not seconds_by_file:
        return
    merged = {**read_record(path), **{name: round(seconds, 1) for name, seconds in seconds_by_file.items()}}
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=path.name, suffix=".tmp", delete=False) as out:
        json.dump(merged, out, indent=0, sort_keys=True)
    os.replace(out.name, path)


def runs_workers(config: pytest.Config) -> bool:
    """This process is the controller of pytest-xdist workers."""
    return not hasattr(config, "workerinput") and bool(getattr(config.option, "numprocesses", None))


def pytest_sessionstart(session):
    """Registers the plugin (a hook of tests/conftest.py, or `-p file_schedule`)."""
    session.config.pluginmanager.register(FileSchedule(session.config), "paddlecloud-file-schedule")


class FileSchedule:

    def __init__(self, config: pytest.Config):
        self.controller = runs_workers(config)
        self.durations = read_record() if self.controller else {}
        self.seconds: Counter[str] = Counter()

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node):
        node.workerinput[WORKER_INPUT_KEY] = self.durations

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        durations = getattr(config, "workerinput", {}).get(WORKER_INPUT_KEY)
        if durations:
            items[:] = longest_files_first(items, durations)

    def pytest_runtest_logreport(self, report):
        if self.controller:
            self.seconds[file_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self, session):
        if self.controller:
            write_record(dict(self.seconds))
