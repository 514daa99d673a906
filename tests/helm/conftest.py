"""Fixtures for the helm tier: the chart's tools (helm, kubectl from `make k8s-bin`), a KWOK
control plane for server-side dry-runs, and the real-node cluster for `helm install`.

Missing binaries are an error, unless PADDLECLOUD_SKIP_CLUSTER=1 (then the tests that need
them skip). The real-node tests skip with one line where this machine cannot run a node.
"""

from __future__ import annotations

import os
import time

import pytest

from helmlib import missing_tools


@pytest.fixture(scope="session")
def k8s_tools():
    missing = missing_tools()
    if missing:
        message = f"helm tier: {missing} missing; run `make k8s-bin`"
        if os.environ.get("PADDLECLOUD_SKIP_CLUSTER") == "1":
            pytest.skip(message)
        pytest.fail(message, pytrace=False)


@pytest.fixture(scope="session")
def kwok_cluster(k8s_tools, tmp_path_factory):
    """A control plane with 2 KWOK nodes (no real node): enough for server-side dry-runs."""
    from helmlib import bin_dir
    from tools.k8s.cluster import Cluster

    cluster = Cluster(str(tmp_path_factory.mktemp("helm-kwok")), bin_dir(), nodes=2)
    t0 = time.monotonic()
    cluster.start()
    print(f"\nKWOK cluster ready in {time.monotonic() - t0:.1f}s")
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def real_cluster(k8s_tools, tmp_path_factory):
    """The control plane with the real node (containerd with `make images`' images)."""
    from helmlib import bin_dir
    from tools.k8s import images, node
    from tools.k8s.cluster import IMAGE_REFS, Cluster

    reason = node.host_unavailable_reason()
    if reason:
        pytest.skip(f"helm install on the real node: {reason}")
    missing = [ref for ref in IMAGE_REFS.values() if ref not in images.built_images()]
    if missing:
        pytest.fail(f"helm install on the real node: images not built: {missing}; run `make images`", pytrace=False)
    cluster = Cluster(str(tmp_path_factory.mktemp("helm-real")), bin_dir(), nodes=2, complete_after="3s",
                      real_node=True,
                      node_lock_timeout=float(os.environ.get("PADDLECLOUD_NODE_LOCK_TIMEOUT", "600")))
    t0 = time.monotonic()
    cluster.start()
    print(f"\nreal-node cluster ready in {time.monotonic() - t0:.1f}s")
    yield cluster
    cluster.stop()
