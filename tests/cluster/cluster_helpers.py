"""Helpers shared by the cluster tier tests."""

from serverutil import wait_for, wait_for_async  # noqa: F401 (the suite's one wait; cluster tests import it from here)


# KWOK's fake GPU nodes: placement, scheduling and scale (nothing runs there). With a real
# node in the cluster they carry the taint real GPU nodes usually have; GPU pods tolerate it.
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
KWOK_NODES = {"type": "kwok"}


def on_kwok_nodes(pod_spec: dict) -> dict:
    """`pod_spec` placed on the KWOK nodes (their label, their taint tolerated)."""
    return {**pod_spec, "nodeSelector": {**pod_spec.get("nodeSelector", {}), **KWOK_NODES},
            "tolerations": [*pod_spec.get("tolerations", []), GPU_TOLERATION]}
