"""`cluster.py up|down` with warm binaries: ready within 60 s, nothing left behind."""

import json
import os
import subprocess
import sys
import time

import kubernetes
from cluster_helpers import wait_for

from tools.k8s.cluster import Cluster

LAUNCHER = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "k8s", "cluster.py")


def processes_mentioning(text):
    """Pids of live processes whose command line contains text."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{entry}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z" and int(entry) != os.getpid():
            found.append(int(entry))
    return found


def test_up_starts_and_down_leaves_nothing(k8s_bin_dir, tmp_path):
    state = str(tmp_path / "state")
    t0 = time.monotonic()
    up = subprocess.run([sys.executable, LAUNCHER, "up", "--state-dir", state, "--bin-dir", k8s_bin_dir],
                        capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - t0
    print(f"\nwarm start to ready: {elapsed:.1f}s")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        with open(os.path.join(state, "pids.json")) as fh:
            pids = [info["pid"] for info in json.load(fh).values()]
        with open(os.path.join(state, "cluster.json")) as fh:
            with_kueue = json.load(fh).get("kueue", False)
        # the control plane, KWOK, the local-path provisioner and (where it can run) Kueue
        assert len(pids) == 6 + with_kueue
        assert len(processes_mentioning(state)) >= 6
        client = kubernetes.config.new_client_from_config(config_file=os.path.join(state, "kubeconfig"))
        with client:
            nodes = kubernetes.client.CoreV1Api(client).list_node().items
            assert len(nodes) == 2  # (how long `up` took is printed above, not asserted: no timing luck)
            claim_binds_on_a_kwok_node(client)
    finally:
        down = subprocess.run([sys.executable, LAUNCHER, "down", "--state-dir", state],
                              capture_output=True, text=True, timeout=60)
    assert down.returncode == 0, down.stdout + down.stderr
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or _zombie(pid), f"pid {pid} still alive"
    assert processes_mentioning(state) == []
    assert not os.path.exists(os.path.join(state, "pids.json"))
    assert not os.path.exists(os.path.join(state, "storage"))  # the provisioner's config and volumes


def claim_binds_on_a_kwok_node(client):
    """`up` offers a default StorageClass: a claim that names none binds once a pod uses it,
    on the pod's (KWOK) node, where KWOK finishes the provisioner's helper pod on paper."""
    core = kubernetes.client.CoreV1Api(client)
    classes = kubernetes.client.StorageV1Api(client).list_storage_class().items
    default = [c.metadata.name for c in classes
               if (c.metadata.annotations or {}).get("storageclass.kubernetes.io/is-default-class") == "true"]
    assert default == ["local-path"]
    core.create_namespaced_persistent_volume_claim("default", {
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    core.create_namespaced_pod("default", {
        "metadata": {"name": "uses-data"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}],
                 "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}})
    wait_for(lambda: core.read_namespaced_persistent_volume_claim("data", "default").status.phase == "Bound",
             timeout=60, interval=0.5, what="the claim to bind")
    claim = core.read_namespaced_persistent_volume_claim("data", "default")
    assert claim.spec.storage_class_name == "local-path"
    wait_for(lambda: core.read_namespaced_pod("uses-data", "default").spec.node_name,  # bound after its volumes
             timeout=60, what="the pod to be bound to a node")
    pod = core.read_namespaced_pod("uses-data", "default")
    volume = core.read_persistent_volume(claim.spec.volume_name)
    term = volume.spec.node_affinity.required.node_selector_terms[0].match_expressions[0]
    assert pod.spec.node_name.startswith("kwok-gpu-") and term.values == [pod.spec.node_name]


def _zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_two_clusters_get_distinct_ports(cluster, k8s_bin_dir, tmp_path):
    other = Cluster(str(tmp_path / "other"), k8s_bin_dir, nodes=1)
    try:
        other.start()
        assert other.server != cluster.server
        assert not set(other.ports.values()) & set(cluster.ports.values())
        assert other.request("GET", "/api/v1/nodes")["items"][0]["metadata"]["name"] == "kwok-gpu-0"
    finally:
        other.stop()
    assert other.running_pids() == []
