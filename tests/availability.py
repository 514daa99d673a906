"""Skip or fail when the cluster, the real node or a real login server cannot run on this machine.

Every test or fixture that would skip because the control-plane binaries, root, a tool or
the kernel's features are missing goes through `skip_or_fail`: on a developer's machine it
skips with the reason (printed by `-rs`); with PADDLECLOUD_REQUIRE_REAL_NODE=1 (set by
`.ci/run`) it fails naming the same reason, so CI cannot go green with the real-node claims
unproven. Skips about test order (a test that must run before the session's cluster) are
not about availability and do not come here.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

REQUIRE = "PADDLECLOUD_REQUIRE_REAL_NODE"
SKIP_CLUSTER = "PADDLECLOUD_SKIP_CLUSTER"


def required() -> bool:
    """Whether this run must run the real-node and cluster tests (CI)."""
    return os.environ.get(REQUIRE) == "1"


def skip_cluster_allowed() -> bool:
    """PADDLECLOUD_SKIP_CLUSTER=1 lets missing binaries skip the cluster and helm tiers;
    together with PADDLECLOUD_REQUIRE_REAL_NODE=1 it is a contradiction, and fails."""
    if os.environ.get(SKIP_CLUSTER) != "1":
        return False
    if required():
        pytest.fail(f"{SKIP_CLUSTER}=1 and {REQUIRE}=1 are set together: this run must run the cluster "
                    f"tiers, so it cannot skip them; unset one", pytrace=False)
    return True


def skip_or_fail(reason: str) -> NoReturn:
    """The cluster or the real node cannot run here, for `reason`: skip, or fail under
    PADDLECLOUD_REQUIRE_REAL_NODE=1."""
    if required():
        pytest.fail(f"{reason} ({REQUIRE}=1: the real-node and cluster tests must run on this machine)",
                    pytrace=False)
    pytest.skip(reason)


def require_cluster_tools(missing: str | None) -> None:
    """The cluster and helm tiers' tools: with `missing` (what is missing and how to get it)
    skip where PADDLECLOUD_SKIP_CLUSTER=1 allows it (fail under PADDLECLOUD_REQUIRE_REAL_NODE=1),
    else fail; present, still fail when the two settings are set together."""
    if missing and skip_cluster_allowed():
        skip_or_fail(missing)
    if missing:
        pytest.fail(missing, pytrace=False)
    skip_cluster_allowed()
