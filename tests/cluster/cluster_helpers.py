"""Helpers shared by the cluster tier tests."""

import asyncio
import inspect
import json
import time

import kubernetes
import pytest

from paddle_ext.constants import NOTEBOOK_SERVICE_ACCOUNT


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


def api_message(exc: kubernetes.client.ApiException) -> str:
    try:
        return json.loads(exc.body)["message"]
    except (TypeError, ValueError, KeyError):
        return str(exc.body)


def as_user(cluster, core_v1, ns, service_account: str = NOTEBOOK_SERVICE_ACCOUNT) -> kubernetes.client.ApiClient:
    """An API client with the token of the user's notebook service account in `ns` (or of
    another service account there)."""
    token = core_v1.create_namespaced_service_account_token(
        service_account, ns, {"spec": {"expirationSeconds": 900}}).status.token
    config = kubernetes.client.Configuration()
    config.host = cluster.server
    config.ssl_ca_cert = cluster.pki["ca.crt"]
    config.api_key = {"authorization": f"Bearer {token}"}
    return kubernetes.client.ApiClient(config)
