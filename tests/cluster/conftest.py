"""Fixtures for the cluster tier: a real control plane (tools/k8s) on 127.0.0.1.

Binaries come from `make k8s-bin`. Missing binaries are an error, unless
PADDLECLOUD_SKIP_CLUSTER=1, which skips the tier instead. `real_cluster` (and the
`real_*` fixtures) add a real node (root only; images from `make images`).
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

from tools.k8s.cluster import IMAGE_REFS, Cluster, default_bin_dir, missing_binaries  # noqa: E402

kubernetes = pytest.importorskip("kubernetes")


@pytest.fixture(scope="session")
def k8s_bin_dir():
    """The cached control-plane binaries (env PADDLECLOUD_K8S_BIN_DIR overrides)."""
    bin_dir = os.environ.get("PADDLECLOUD_K8S_BIN_DIR") or default_bin_dir()
    missing = missing_binaries(bin_dir)
    if missing:
        message = f"control-plane binaries missing in {bin_dir}: {missing}; run `make k8s-bin`"
        if os.environ.get("PADDLECLOUD_SKIP_CLUSTER") == "1":
            pytest.skip(message)
        pytest.fail(message, pytrace=False)
    return bin_dir


@pytest.fixture(scope="session")
def cluster(k8s_bin_dir, tmp_path_factory):
    """A started Cluster (2 fake GPU nodes; Job pods run 3s unless annotated)."""
    c = Cluster(str(tmp_path_factory.mktemp("cluster")), k8s_bin_dir, nodes=2, complete_after="3s")
    t0 = time.monotonic()
    c.start()
    print(f"\ncluster ready in {time.monotonic() - t0:.1f}s at {c.server}")
    yield c
    c.stop()


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
    with the example training script (the checkout itself is far too big to travel)."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "train.py").write_bytes((Path(REPO) / "paddle_ext" / "examples" / "train.py").read_bytes())
    monkeypatch.chdir(folder)
    return folder


# ---------------------------------------------------------------- the real node (issue 10)


@pytest.fixture(scope="session")
def real_cluster(k8s_bin_dir, tmp_path_factory):
    """A started Cluster with a real node (containerd, kubelet, kube-proxy, CoreDNS on
    198.18.0.1) beside 2 tainted KWOK GPU nodes; pods without GPUs run there for real.

    Needs root, the node's Debian packages and `make images`; skips with one line when
    this machine cannot run a node (not root, packages missing). Only one real node can
    run on a machine: a second session waits for the first (PADDLECLOUD_NODE_LOCK_TIMEOUT
    seconds, default 600).
    """
    from tools.k8s import images, node

    reason = node.host_unavailable_reason()
    if reason:
        pytest.skip(f"real node: {reason}")
    missing = node.missing_binaries(k8s_bin_dir)
    if missing:
        pytest.fail(f"real node: {missing} missing in {k8s_bin_dir}; run `make k8s-bin`", pytrace=False)
    missing = [ref for ref in IMAGE_REFS.values() if ref not in images.built_images()]
    if missing:
        pytest.fail(f"real node: images not built: {missing}; run `make images`", pytrace=False)
    c = Cluster(str(tmp_path_factory.mktemp("real-cluster")), k8s_bin_dir, nodes=2, complete_after="3s",
                real_node=True, node_lock_timeout=float(os.environ.get("PADDLECLOUD_NODE_LOCK_TIMEOUT", "600")))
    t0 = time.monotonic()
    c.start()
    print(f"\nreal-node cluster ready in {time.monotonic() - t0:.1f}s at {c.server}")
    yield c
    c.stop()


@pytest.fixture(scope="session")
def real_api_client(real_cluster):
    """An admin kubernetes.client.ApiClient for the real-node cluster."""
    client = kubernetes.config.new_client_from_config(config_file=real_cluster.kubeconfig)
    yield client
    client.close()


@pytest.fixture(scope="session")
def real_core_v1(real_api_client):
    return kubernetes.client.CoreV1Api(real_api_client)


@pytest.fixture(scope="session")
def real_batch_v1(real_api_client):
    return kubernetes.client.BatchV1Api(real_api_client)


@pytest.fixture(scope="session")
def real_rbac_v1(real_api_client):
    return kubernetes.client.RbacAuthorizationV1Api(real_api_client)


@pytest.fixture
def make_real_namespace(real_core_v1):
    """Create namespaces on the real-node cluster (optional labels); deleted after the test."""
    created = []

    def make(prefix="rn", labels=None):
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        real_core_v1.create_namespace({"metadata": {"name": name, "labels": labels or {}}})
        created.append(name)
        return name

    yield make
    for name in created:
        try:
            real_core_v1.delete_namespace(name, grace_period_seconds=0)
        except kubernetes.client.ApiException:
            pass
