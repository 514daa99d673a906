"""Fixtures and rules shared by the tiers."""

import pytest

from hubutil import LocalHub

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
