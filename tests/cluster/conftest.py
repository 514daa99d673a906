"""Fixtures for the cluster tier: one cluster for the whole session (tools/k8s).

The control plane (etcd, kube-apiserver, controller-manager, scheduler), two KWOK GPU
nodes (8 fake GPUs each: placement and scale, nothing runs there) and, as root, a real
node (containerd, kubelet, kube-proxy, CoreDNS on 198.18.0.1) running the images of
`make images`: every pod without GPUs runs there for real, GPU pods tolerate the KWOK
nodes' taint. Without root (or the node's Debian packages) the cluster has the KWOK
nodes only, said in one line, and tests that need real containers (`real_cluster`)
skip with that line (fail, under PADDLECLOUD_REQUIRE_REAL_NODE=1: tests/availability.py).

Binaries come from `make k8s-bin`. Missing binaries are an error, unless
PADDLECLOUD_SKIP_CLUSTER=1, which skips the tier instead (and fails together with
PADDLECLOUD_REQUIRE_REAL_NODE=1).

The tier runs in two parts side by side (the Makefile's test-cluster; tests/tierparts.py), each a
pytest session with a cluster of its own: PADDLECLOUD_CLUSTER_PART=real-node runs the tests that
need the real node (they use `real_cluster`, or are marked `own_real_node`) on a cluster with it,
and PADDLECLOUD_CLUSTER_PART=kwok the rest on a cluster of KWOK nodes only, as a machine without
root runs them. Unset, one session runs every test on one cluster.
"""

import os
from pathlib import Path
import sys
import time
import uuid

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from availability import require_cluster_tools, skip_or_fail  # noqa: E402
from tierparts import KWOK_PART, cluster_part, keep_this_part  # noqa: E402
from cluster_helpers import KUEUE_PODS_READY_SECONDS, KUEUE_PODS_READY_SECONDS_KWOK  # noqa: E402
from tools.k8s import node  # noqa: E402
from tools.k8s.cluster import IMAGE_REFS, Cluster, default_bin_dir, missing_binaries  # noqa: E402
from tools.k8s.kueue import unavailable_reason as kueue_missing  # noqa: E402
from tools.k8s.node_config import NODE_IP  # noqa: E402

import kubernetes  # noqa: E402  (a test dependency: missing, the install is broken, not the cluster)


@pytest.fixture(scope="session")
def k8s_bin_dir():
    """The cached control-plane binaries (env PADDLECLOUD_K8S_BIN_DIR overrides)."""
    bin_dir = os.environ.get("PADDLECLOUD_K8S_BIN_DIR") or default_bin_dir()
    missing = missing_binaries(bin_dir)
    require_cluster_tools(f"control-plane binaries missing in {bin_dir}: {missing}; run `make k8s-bin`"
                          if missing else None)
    return bin_dir


def real_node_missing(bin_dir) -> str | None:
    """Why this machine runs the cluster without a real node (None: it has one)."""
    from tools.k8s import node

    return node.unavailable_reason(bin_dir)


@pytest.fixture(scope="session")
def cluster(k8s_bin_dir, tmp_path_factory):
    """The session's cluster: control plane, 2 KWOK GPU nodes, Kueue (tools/k8s/kueue.py:
    it manages queue-labelled jobs in user namespaces only) and (as root) the real node."""
    from tools.k8s import images

    reason = "the kwok part of the tier runs without it" if cluster_part() == KWOK_PART else real_node_missing(k8s_bin_dir)
    if reason:
        print(f"\nreal node: {reason}; the cluster has KWOK nodes only")
    else:
        stale = images.stale_images(IMAGE_REFS.values(), os.path.join(k8s_bin_dir, "pause"))
        if stale:
            pytest.fail(f"real node: images not built from this tree: {stale}; run `make images`", pytrace=False)
    no_kueue = kueue_missing(k8s_bin_dir)
    if no_kueue:
        print(f"\nkueue: {no_kueue}; the cluster runs without it")
    c = Cluster(str(tmp_path_factory.mktemp("cluster")), k8s_bin_dir, nodes=2, complete_after="3s",
                real_node=reason is None, kueue=no_kueue is None,
                kueue_pods_ready_timeout=f"{KUEUE_PODS_READY_SECONDS_KWOK if reason else KUEUE_PODS_READY_SECONDS}s",
                node_lock_timeout=float(os.environ.get("PADDLECLOUD_NODE_LOCK_TIMEOUT", "600")))
    t0 = time.monotonic()
    c.start()
    print(f"\ncluster ready in {time.monotonic() - t0:.1f}s at {c.server}"
          + (f" with the real node {c.real_node_name}" if reason is None else ""))
    yield c
    c.stop()


@pytest.fixture(scope="session")
def real_cluster(cluster, k8s_bin_dir):
    """The session's cluster, for tests that need real containers: skips without a real node
    (fails, under PADDLECLOUD_REQUIRE_REAL_NODE=1)."""
    if not cluster.real_node:
        skip_or_fail(f"real node: {real_node_missing(k8s_bin_dir)}")
    return cluster


@pytest.fixture(scope="session")
def kueue_cluster(cluster, k8s_bin_dir):
    """The session's cluster, for tests that need Kueue: skips without it (fails, under
    PADDLECLOUD_REQUIRE_REAL_NODE=1)."""
    if not cluster.kueue:
        skip_or_fail(f"kueue: {kueue_missing(k8s_bin_dir)}")
    return cluster


@pytest.fixture(scope="session")
def api_client(cluster):
    """An admin kubernetes.client.ApiClient for the test cluster."""
    client = kubernetes.config.new_client_from_config(config_file=cluster.kubeconfig)
    yield client
    client.close()


@pytest.fixture(scope="session")
def core_v1(api_client):
    return kubernetes.client.CoreV1Api(api_client)


@pytest.fixture(scope="session")
def batch_v1(api_client):
    return kubernetes.client.BatchV1Api(api_client)


@pytest.fixture(scope="session")
def rbac_v1(api_client):
    return kubernetes.client.RbacAuthorizationV1Api(api_client)


@pytest.fixture
def make_namespace(core_v1):
    """Create namespaces with unique names (optional labels); deleted after the test."""
    created = []

    def make(prefix="t", labels=None):
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        core_v1.create_namespace({"metadata": {"name": name, "labels": labels or {}}})
        created.append(name)
        return name

    yield make
    for name in created:
        try:
            core_v1.delete_namespace(name)
        except kubernetes.client.ApiException:
            pass


@pytest.fixture
def namespace(make_namespace):
    """A fresh namespace for one test."""
    return make_namespace()



@pytest.fixture(autouse=True)
def project_folder(tmp_path, monkeypatch):
    """Jobs are submitted from the current folder, as from a notebook's: a small project
    with the example training script and the test scripts (ticker.py, fail_rank.py, ...;
    the checkout itself is far too big to travel)."""
    folder = tmp_path / "project"
    folder.mkdir()
    scripts = [Path(REPO) / "paddle_ext" / "examples" / "train.py", *(Path(REPO) / "tests" / "local" / "scripts").glob("*.py")]
    for script in scripts:
        (folder / script.name).write_bytes(script.read_bytes())
    monkeypatch.chdir(folder)
    return folder


def needs_real_node(item) -> bool:
    return "real_cluster" in item.fixturenames or item.get_closest_marker("own_real_node") is not None


def pytest_collection_modifyitems(config, items):
    """This session's part of the tier (tests/tierparts.py), and in it the tests that start
    real-node clusters of their own (marked `own_real_node`) first, before the session's cluster
    takes the machine's one real node."""
    keep_this_part(config, items, needs_real_node)
    items.sort(key=lambda item: 0 if item.get_closest_marker("own_real_node") else 1)


@pytest.fixture(autouse=True)
def own_real_node_only_while_free(request):
    """A test marked `own_real_node` is skipped where this session's shared cluster has already
    taken the machine's one real node (only a run that picks tests out of order gets there): the
    marker alone says so, no such test has to remember it."""
    if request.node.get_closest_marker("own_real_node"):
        record = node.read_record()
        if record and record.get("owner_pid") == os.getpid():
            pytest.skip("this session already runs the shared real-node cluster; run this test first")


@pytest.fixture(scope="session")
def hub(cluster, core_v1, tmp_path_factory):
    """The Kubernetes hub (tests/cluster/kubehub.py) for the session, logged in as admin. On the
    KWOK part's cluster no notebook answers, and its KWOK nodes, GPU nodes too, take every test's
    pods (pods of deleted Jobs were seen there still terminating, with the Job controller's tracking
    finalizer, and holding their GPUs): a test that needs a notebook to start for real, or the GPU
    nodes to itself, asks for `real_cluster` too and runs in the real-node part. The hub's own checks
    need only this."""
    from kubehub import KubeHub, remove_storage_pool, storage_pool

    work = tmp_path_factory.mktemp("kubehub")
    os.chmod(work, 0o755)
    storage_pool(core_v1, work)
    hub = KubeHub(work / "hub", cluster.kubeconfig, api_ip=NODE_IP if cluster.real_node else "127.0.0.1")
    core_v1.create_namespace({"metadata": {"name": hub.namespace}})
    hub.start()
    hub.admin_token = hub.new_token(hub.login("admin"), "admin")
    try:
        yield hub
    finally:
        leftovers = hub.stop()
        remove_storage_pool(core_v1)
        assert not leftovers, leftovers
