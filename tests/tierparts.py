"""The two parts of a tier that uses test clusters (the cluster and helm tiers): the tests that
need the machine's one real node, and the rest, which run on a cluster of KWOK nodes only, as a
machine without root runs them. `make test` runs the real-node parts one after another in its
foreground chain and the rest beside them (the Makefile's test-tiers): the real node is one per
machine, the rest is not.

PADDLECLOUD_CLUSTER_PART picks a session's part (unset: every test of the tier, in one session).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

PART_VARIABLE = "PADDLECLOUD_CLUSTER_PART"
REAL_NODE_PART, KWOK_PART = "real-node", "kwok"


def cluster_part() -> str | None:
    """Which part of its tier this session runs (None: all of it)."""
    part = os.environ.get(PART_VARIABLE) or None
    if part not in (None, REAL_NODE_PART, KWOK_PART):
        raise pytest.UsageError(f"{PART_VARIABLE}={part!r}: it is {REAL_NODE_PART!r}, {KWOK_PART!r} or unset (every test)")
    return part


def keep_this_part(config: pytest.Config, items: list[pytest.Item], needs_real_node: Callable[[pytest.Item], bool]) -> None:
    """Deselect the tests of the other part (for pytest_collection_modifyitems)."""
    part = cluster_part()
    if not part:
        return
    ours = [needs_real_node(item) == (part == REAL_NODE_PART) for item in items]
    left_out = [item for item, mine in zip(items, ours) if not mine]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item, mine in zip(items, ours) if mine]
