"""Helpers shared by the cluster tier tests."""

import contextlib
import json
import os
import subprocess

import kubernetes
from serverutil import wait_for, wait_for_async  # noqa: F401 (the suite's one wait; cluster tests import it from here)

from paddle_ext.constants import NOTEBOOK_SERVICE_ACCOUNT
from tools.k8s.cluster import GPU_TAINT, node_manifest


# KWOK's fake GPU nodes: placement, scheduling and scale (nothing runs there). With a real
# node in the cluster they carry the taint real GPU nodes usually have; GPU pods tolerate it.
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
KWOK_NODES = {"type": "kwok"}
# How long the session cluster's Kueue lets an admitted job's workers take to start before its
# waitForPodsReady evicts the job (tools/k8s/kueue.py; `make cluster` keeps Kueue's 5 minutes).
# Short enough for a test to wait it out; long for the real node's start of a 2-worker job.
KUEUE_PODS_READY_SECONDS = 120
# The same on a cluster of KWOK nodes only (the tier's kwok part), whose pods start within a
# second: the eviction test waits this out there.
KUEUE_PODS_READY_SECONDS_KWOK = 40
# A file a test creates in a job's container (open_gate) to let a gated script go on (ticker.py --until).
GATE = "/tmp/paddlecloud-test-gate"


def on_kwok_nodes(pod_spec: dict) -> dict:
    """`pod_spec` placed on the KWOK nodes (their label, their taint tolerated)."""
    return {**pod_spec, "nodeSelector": {**pod_spec.get("nodeSelector", {}), **KWOK_NODES},
            "tolerations": [*pod_spec.get("tolerations", []), GPU_TOLERATION]}


def kubectl_exec(cluster, namespace: str, pod: str, container: str, *command: str,
                 timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `command` inside a running container (kubectl exec: the container's own env and identity)."""
    return subprocess.run([os.path.join(cluster.bin_dir, "kubectl"), "--kubeconfig", cluster.kubeconfig, "exec",
                           "-n", namespace, pod, "-c", container, "--", *command],
                          capture_output=True, text=True, timeout=timeout)


def open_gate(cluster, namespace: str, pod: str, path: str, container: str = "paddle") -> None:
    """Create `path` inside a job's running container: the gate its script waits at
    (`ticker.py --until PATH`), so the test, not a timer, says when the job may go on."""
    result = kubectl_exec(cluster, namespace, pod, container, "touch", path, timeout=120)
    assert result.returncode == 0, f"could not open the gate {path} in {namespace}/{pod}: {result.stderr}"


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


@contextlib.contextmanager
def own_gpu_nodes(core_v1, owner: str, count: int):
    """`count` KWOK GPU nodes (8 GPUs each) that only pods selecting and tolerating
    `paddlecloud.io/test-node=<owner>` use, so other tests' GPU pods (in any order, still
    going away with their namespaces) cannot take them; deleted afterwards. Yields the
    (node selector, toleration) to place pods there."""
    mark = {"key": "paddlecloud.io/test-node", "value": owner, "effect": "NoSchedule"}
    names = [f"{owner}-gpu-{i}" for i in range(count)]
    for name in names:
        node = node_manifest(name, taints=[GPU_TAINT, mark])
        node["metadata"]["labels"][mark["key"]] = owner
        core_v1.create_node(node)
    try:
        wait_for(lambda: all(any(c.type == "Ready" and c.status == "True" for c in core_v1.read_node(name).status.conditions or [])
                             for name in names), timeout=60, what=f"KWOK nodes {names} ready")
        yield {mark["key"]: owner}, {**mark, "operator": "Equal"}
    finally:
        for name in names:
            core_v1.delete_node(name)
