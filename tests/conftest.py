"""Fixtures and rules shared by the tiers."""

import pytest
from hypothesis import HealthCheck, settings

from hubutil import LocalHub

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


@pytest.fixture
def hub(tmp_path):
    hub = LocalHub(tmp_path / "paddlecloud")
    try:
        hub.start()
        yield hub
    finally:
        hub.stop_and_check()
