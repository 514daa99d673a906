"""Fixtures shared by the tiers."""

import pytest

from hubutil import LocalHub


@pytest.fixture
def hub(tmp_path):
    hub = LocalHub(tmp_path / "paddlecloud")
    try:
        hub.start()
        yield hub
    finally:
        leftovers = hub.stop()
    assert not leftovers, "processes still running after the hub stopped:\n" + "\n".join(leftovers)
