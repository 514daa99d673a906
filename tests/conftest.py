"""Fixtures and rules shared by the tiers."""

from collections import Counter

import pytest
from hypothesis import HealthCheck, settings

from file_schedule import pytest_sessionstart  # noqa: F401 (a hook: under xdist, files go out longest first)
from hubutil import LocalHub
from measures import pytest_runtest_logreport, pytest_terminal_summary  # noqa: F401 (hooks: measures on record)
from stop_on_sigterm import pytest_configure  # noqa: F401 (a hook: a SIGTERM'd run tears its fixtures down)

# Hypothesis' own timing checks (a per-example deadline, "generation too slow") are
# wall-clock assertions: on a loaded 2-core machine they fail tests that are right.
settings.register_profile("paddlecloud", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("paddlecloud")

# A test that hangs fails after this many seconds (pytest-timeout) instead of stalling the
# run; slow tests set their own, larger mark.
DEFAULT_TIMEOUT = 600


def pytest_collection_modifyitems(items):
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(DEFAULT_TIMEOUT))
        name_the_operation(item)
    items[:] = steps_in_written_order(items)


def pytest_collection_finish(session):
    """Two tests with one node id: pytest-xdist would run only one of them, quietly."""
    twice = sorted(nodeid for nodeid, count in Counter(item.nodeid for item in session.items).items() if count > 1)
    if twice:
        raise pytest.UsageError(f"{len(twice)} node ids name more than one test, e.g. {twice[0]}: "
                                "give each test an id of its own")


def name_the_operation(item) -> None:
    """Schemathesis makes one test per API operation, named `test[GET /jobs]`, but under pytest
    9 they all get the test function's node id (it passes no parameters, and the id is built
    from them). pytest-xdist, which runs the quicker tiers in parallel, schedules tests by node
    id: all but one operation's test would not run. The id gets the operation as its parameter."""
    label = getattr(item, "operation_label", None)
    if label and item._id.params is None:
        item._id = item._id.with_params(label)


def steps_in_written_order(items: list) -> list:
    """pytest-randomly shuffles modules and the tests inside each module. A module that is one
    flow in steps over one installed thing (tests/helm/test_install.py: install, use, upgrade,
    uninstall) says so with `STEPS_IN_ORDER = True`: its tests keep the places the shuffle gave
    them, filled in the order they are written. Every other test keeps its shuffled place."""
    result = list(items)
    flows: dict[object, list[int]] = {}
    for index, item in enumerate(items):
        module = getattr(item, "module", None)
        if getattr(module, "STEPS_IN_ORDER", False):
            flows.setdefault(module, []).append(index)
    for places in flows.values():
        written = sorted((items[i] for i in places), key=lambda item: item.location[1])
        for place, item in zip(places, written):
            result[place] = item
    return result


@pytest.fixture
def hub(tmp_path):
    hub = LocalHub(tmp_path / "paddlecloud")
    try:
        hub.start()
        yield hub
    finally:
        hub.stop_and_check()
