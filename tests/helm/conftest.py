"""Fixtures for the helm tier: the chart's tools (helm, kubectl from `make k8s-bin`), a KWOK
control plane for server-side dry-runs, and the real-node cluster for `helm install`.

Like the cluster tier, it runs in two parts (tests/tierparts.py): PADDLECLOUD_CLUSTER_PART=real-node
runs the tests that install on the real node (they use `real_cluster`), =kwok the rest (lint,
rendering, dry-runs), which `make test` runs beside the real node's tests.

Missing binaries are an error, unless PADDLECLOUD_SKIP_CLUSTER=1 (then the tests that need
them skip). The real-node tests skip with one line where this machine cannot run a node.
Under PADDLECLOUD_REQUIRE_REAL_NODE=1 (CI) those skips are failures (tests/availability.py).
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from availability import require_cluster_tools, skip_or_fail
from helmlib import missing_tools
from tierparts import keep_this_part


def pytest_collection_modifyitems(config, items):
    """This session's part of the tier (tests/tierparts.py)."""
    keep_this_part(config, items, lambda item: "real_cluster" in item.fixturenames)


@pytest.fixture(scope="session")
def k8s_tools():
    missing = missing_tools()
    require_cluster_tools(f"helm tier: {missing} missing; run `make k8s-bin`" if missing else None)


@pytest.fixture(scope="session")
def kwok_cluster(k8s_tools, tmp_path_factory):
    """A control plane with 2 KWOK nodes (no real node): enough for server-side dry-runs."""
    from helmlib import bin_dir
    from tools.k8s.cluster import Cluster
    from tools.k8s.kueue import unavailable_reason as kueue_missing

    cluster = Cluster(str(tmp_path_factory.mktemp("helm-kwok")), bin_dir(), nodes=2,
                      kueue=kueue_missing(bin_dir()) is None)  # as next to a real install: Kueue's CRDs
    t0 = time.monotonic()
    cluster.start()
    print(f"\nKWOK cluster ready in {time.monotonic() - t0:.1f}s")
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def real_cluster(k8s_tools, tmp_path_factory):
    """The control plane with the real node (containerd with `make images`' images) and the
    default StorageClass `local-path`, as `make cluster` runs it."""
    from helmlib import bin_dir
    from tools.k8s import images, node
    from tools.k8s.cluster import IMAGE_REFS, Cluster
    from tools.k8s.kueue import unavailable_reason as kueue_missing

    reason = node.host_unavailable_reason()
    if reason:
        skip_or_fail(f"helm install on the real node: {reason}")
    # Images are global on this machine: another checkout's `make images` may have replaced ours
    # since. The chart must run this checkout's images, so rebuild what differs (seconds, from
    # the layer cache), and check below that the node imported exactly those.
    wanted = {ref: key for ref, key in images.planned_keys(os.path.join(bin_dir(), "pause")).items()
              if ref in IMAGE_REFS.values()}
    if images.stale_images(wanted, os.path.join(bin_dir(), "pause")):
        build = subprocess.run(["python3", os.path.join(images.HERE, "images.py"), "build", "--bin-dir", bin_dir()],
                               capture_output=True, text=True)
        if build.returncode != 0:
            pytest.fail(f"helm install on the real node: `make images` failed: {build.stderr[-2000:]}", pytrace=False)
    cluster = Cluster(str(tmp_path_factory.mktemp("helm-real")), bin_dir(), nodes=2, complete_after="3s",
                      real_node=True, storage=True,  # as `make cluster`: a default StorageClass
                      kueue=kueue_missing(bin_dir()) is None,
                      node_lock_timeout=float(os.environ.get("PADDLECLOUD_NODE_LOCK_TIMEOUT", "600")))
    t0 = time.monotonic()
    cluster.start()
    print(f"\nreal-node cluster ready in {time.monotonic() - t0:.1f}s")
    stale = sorted(ref for ref, key in wanted.items() if cluster.images.get(ref) != key)
    if stale:
        cluster.stop()
        pytest.fail(f"helm install on the real node: {stale} in the node are not this checkout's (another "
                    "checkout rebuilt them while this one started); run again", pytrace=False)
    yield cluster
    cluster.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Record failed tests in their module's FAILED list, where it has one (for diagnostics)."""
    outcome = yield
    failed = getattr(item.module, "FAILED", None)
    if outcome.get_result().failed and failed is not None:
        failed.append(item.name)
