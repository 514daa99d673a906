"""Helpers shared by the cluster tier tests."""

import time

import pytest


def wait_for(check, timeout=30.0, interval=0.2, what="condition"):
    """Poll check() until it returns a truthy value; return it or fail."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
