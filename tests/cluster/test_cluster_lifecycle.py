"""`cluster.py up|down` with warm binaries, beside the session's cluster: its own ports,
ready, and nothing left behind."""

import os
import subprocess
import sys
import time

import kubernetes
from cluster_helpers import wait_for

from tools.k8s import kueue
from tools.k8s.procutil import all_pids, pid_alive, pid_cmdline, read_json

LAUNCHER = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "k8s", "cluster.py")


def processes_mentioning(text):
    """Pids of live processes (not zombies) whose command line contains text."""
    return [pid for pid in all_pids()
            if pid != os.getpid() and text in " ".join(pid_cmdline(pid)) and pid_alive(pid)]


def test_up_beside_the_sessions_cluster_starts_and_down_leaves_nothing(cluster, k8s_bin_dir, tmp_path):
    """`make cluster`'s command while the session's cluster runs: ports of its own; the control
    plane, KWOK, the local-path provisioner and Kueue (where this machine runs it, as the
    session's cluster does) ready. After `down` no process, state or storage of it is left, and
    its record in /etc/kueue is gone while the session's stays (the directory goes with the
    last cluster that used it: test_kueue.py)."""
    state = str(tmp_path / "state")
    t0 = time.monotonic()
    up = subprocess.run([sys.executable, LAUNCHER, "up", "--state-dir", state, "--bin-dir", k8s_bin_dir],
                        capture_output=True, text=True, timeout=300)
    print(f"\nwarm start to ready: {time.monotonic() - t0:.1f}s")  # printed, not asserted: no timing luck
    pids = {}
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        pids = read_json(os.path.join(state, "pids.json"))
        info = read_json(os.path.join(state, "cluster.json"))
        with_kueue = info.get("kueue", False)
        assert with_kueue == bool(cluster.kueue), info
        assert len(pids) == 6 + with_kueue, sorted(pids)
        assert len(processes_mentioning(state)) >= 6
        assert info["server"] != cluster.server and not set(info["ports"].values()) & set(cluster.ports.values())
        if with_kueue:
            assert os.path.exists(os.path.join(kueue.METRICS_CERT_DIR, "tls.crt"))
            if os.path.exists(kueue.OWNERS_FILE):
                assert state in read_json(kueue.OWNERS_FILE)
        client = kubernetes.config.new_client_from_config(config_file=os.path.join(state, "kubeconfig"))
        with client:
            nodes = kubernetes.client.CoreV1Api(client).list_node().items
            assert sorted(n.metadata.name for n in nodes) == ["kwok-gpu-0", "kwok-gpu-1"]
            claim_binds_on_a_kwok_node(client)
    finally:
        down = subprocess.run([sys.executable, LAUNCHER, "down", "--state-dir", state],
                              capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not [name for name, record in pids.items() if pid_alive(record["pid"])]
    assert processes_mentioning(state) == []
    assert not os.path.exists(os.path.join(state, "pids.json"))
    assert not os.path.exists(os.path.join(state, "storage"))  # the provisioner's config and volumes
    if os.path.exists(kueue.OWNERS_FILE):
        owners = read_json(kueue.OWNERS_FILE)
        assert state not in owners and cluster.state_dir in owners, owners


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
