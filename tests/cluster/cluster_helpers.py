"""Helpers shared by the cluster tier tests."""

import asyncio
import inspect
import time

import pytest


def wait_for(check, timeout=30.0, interval=0.2, what="condition", message=None):
    """Poll check() until it returns a truthy value; return it or fail (with `message()`, if
    given, saying what the state was)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}" + (f"\n{message()}" if message else ""))
        time.sleep(interval)


async def wait_for_async(check, timeout=30.0, interval=0.2, what="condition"):
    """wait_for in a coroutine: poll check() (a function, or one returning an awaitable) until
    it gives a truthy value; return it, or fail naming `what` and the last value seen."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}; last seen: {value!r}"[:3000])
        await asyncio.sleep(interval)


# KWOK's fake GPU nodes: placement, scheduling and scale (nothing runs there). With a real
# node in the cluster they carry the taint real GPU nodes usually have; GPU pods tolerate it.
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
KWOK_NODES = {"type": "kwok"}


def on_kwok_nodes(pod_spec: dict) -> dict:
    """`pod_spec` placed on the KWOK nodes (their label, their taint tolerated)."""
    return {**pod_spec, "nodeSelector": {**pod_spec.get("nodeSelector", {}), **KWOK_NODES},
            "tolerations": [*pod_spec.get("tolerations", []), GPU_TOLERATION]}
