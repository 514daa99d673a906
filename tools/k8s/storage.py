"""The test cluster's default StorageClass: Rancher's local-path provisioner, run as a process.

kind and k3s give a new cluster a default StorageClass backed by this provisioner, so a
chart's PersistentVolumeClaims bind without an admin making volumes by hand. Ours is the
same program (github.com/rancher/local-path-provisioner, built by tools/k8s/build.sh),
run outside the cluster against the test control plane with the admin kubeconfig:

- StorageClass `local-path` (STORAGE_CLASS), annotated default, `WaitForFirstConsumer`,
  reclaim policy Delete: a claim binds once a pod that uses it is scheduled, on that
  pod's node, and its directory goes when the claim is deleted.
- Volumes are directories under `<state dir>/storage/volumes` on this machine (the real
  node's host), made by a helper pod the provisioner runs on the chosen node: the image
  is the worker image (`make images`; it has sh, mkdir and rm; imagePullPolicy Never,
  nothing is pulled), as root, with the setup script `mkdir -m 0777 -p "$VOL_DIR"`, so
  any pod user can write its volume (hostPath volumes ignore fsGroup).
- On a KWOK node the helper pod only runs on paper: KWOK marks it Succeeded
  (kwok_helper_stage), the provisioner then creates the PersistentVolume and the claim
  binds; no directory is made (KWOK pods run nothing).
- `Cluster.stop()` stops the process with the other components and removes
  `<state dir>/storage` (cleanup), volumes included.
- Its log (`<state dir>/logs/local-path-provisioner.log`) has one harmless error per
  helper pod, "failed to save helper-pod-... logs: unable to retrieve in cluster config":
  it copies helper pods' output only when it runs inside a cluster.

    from tools.k8s import storage
    storage.start(cluster, deadline)   # after the control plane (and real node) are up
    storage.cleanup(state_dir)         # after every process has stopped
"""

import copy
import json
import os
import shutil
import time

try:
    from . import images
    from .procutil import file_mentions
except ImportError:  # run as a script from tools/k8s
    import images
    from procutil import file_mentions

NAMESPACE = "local-path-storage"
STORAGE_CLASS = "local-path"
PROVISIONER_NAME = "rancher.io/local-path"
SERVICE_ACCOUNT = "local-path-provisioner-service-account"
CONFIG_MAP = "local-path-config"
BINARY = "local-path-provisioner"
PROCESS = "local-path-provisioner"  # its name in the cluster's pids
HELPER_LABEL = ("app.kubernetes.io/name", "local-path-helper")
HELPER_IMAGE = images.WORKER_REF  # on the real node (imported by node.py); has sh, mkdir, rm
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
STARTED_LINE = "Started provisioner controller"  # logged once its informers have synced
HELPER_TIMEOUT_S = 120  # how long the provisioner waits for one helper pod

# The provisioner's own scripts (deploy/local-path-storage.yaml upstream): the helper pod runs
# them with VOL_DIR set to the volume's directory on the node.
SETUP_SCRIPT = '#!/bin/sh\nset -eu\nmkdir -m 0777 -p "$VOL_DIR"\n'
TEARDOWN_SCRIPT = '#!/bin/sh\nset -eu\nrm -rf "$VOL_DIR"\n'


class StorageError(RuntimeError):
    """The provisioner cannot start."""


def storage_dir(state_dir):
    """Everything this module writes: config files and, under volumes/, the volumes."""
    return os.path.join(os.path.abspath(state_dir), "storage")


def volume_dir(state_dir):
    return os.path.join(storage_dir(state_dir), "volumes")


def provisioner_config(volumes):
    """The provisioner's config.json: every node keeps its volumes under `volumes`."""
    return {"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": [volumes]}],
            "cmdTimeoutSeconds": HELPER_TIMEOUT_S}


def helper_pod(image=HELPER_IMAGE):
    """The template of the pod that makes and removes a volume's directory on its node.

    The provisioner adds the node name, the hostPath and script volumes, the command and a
    toleration of every taint. Root, because the worker image runs as uid 1000 and the
    volumes' parent directory on the host is root's. No resource requests: the pod is bound
    to its node directly, and the kubelet must admit it even when the node is fully requested.
    """
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "helper-pod", "labels": dict([HELPER_LABEL])},
        "spec": {
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "helper-pod", "image": image, "imagePullPolicy": "Never",
                "securityContext": {"runAsUser": 0, "runAsGroup": 0},
            }],
        },
    }


def objects():
    """What the provisioner expects in the cluster: its namespace, the helper pods' service
    account, the ConfigMap with the setup/teardown scripts, and the default StorageClass."""
    meta = {"namespace": NAMESPACE}
    return [
        ("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
        (f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
         {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SERVICE_ACCOUNT, **meta},
          "automountServiceAccountToken": False}),
        (f"/api/v1/namespaces/{NAMESPACE}/configmaps",
         {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIG_MAP, **meta},
          "data": {"setup": SETUP_SCRIPT, "teardown": TEARDOWN_SCRIPT}}),
        ("/apis/storage.k8s.io/v1/storageclasses", storage_class()),
    ]


def storage_class():
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": STORAGE_CLASS, "annotations": {DEFAULT_CLASS_ANNOTATION: "true"}},
            "provisioner": PROVISIONER_NAME, "volumeBindingMode": "WaitForFirstConsumer",
            "reclaimPolicy": "Delete"}


def provisioner_cmd(bin_dir, kubeconfig, config_path, helper_pod_path, image=HELPER_IMAGE):
    return [os.path.join(bin_dir, BINARY), "start",
            f"--kubeconfig={kubeconfig}", f"--config={config_path}",
            f"--helper-pod-file={helper_pod_path}", f"--helper-image={image}",
            f"--provisioner-name={PROVISIONER_NAME}", f"--namespace={NAMESPACE}",
            f"--configmap-name={CONFIG_MAP}", f"--service-account-name={SERVICE_ACCOUNT}",
            "--worker-threads=2"]


def kwok_helper_stage(pod_complete):
    """A KWOK stage that finishes helper pods on KWOK nodes (exit 0), from KWOK's
    pod-complete stage, which finishes only pods owned by a Job."""
    stage = copy.deepcopy(pod_complete)
    stage["metadata"]["name"] = "local-path-helper-complete"
    stage["spec"]["selector"]["matchExpressions"] = [
        e for e in stage["spec"]["selector"]["matchExpressions"] if "ownerReferences" not in e["key"]
    ] + [{"key": f'.metadata.labels["{HELPER_LABEL[0]}"]', "operator": "In", "values": [HELPER_LABEL[1]]}]
    delay = stage["spec"].setdefault("delay", {})
    delay["durationMilliseconds"] = 200
    for key in ("durationFrom", "jitterDurationMilliseconds", "jitterDurationFrom"):
        delay.pop(key, None)
    stage["spec"].pop("weightFrom", None)
    return stage


def start(cluster, deadline):
    """Create the StorageClass and its objects, start the provisioner as one of `cluster`'s
    processes (stopped by Cluster.stop) and wait until it watches claims."""
    binary = os.path.join(cluster.bin_dir, BINARY)
    if not os.access(binary, os.X_OK):
        raise StorageError(f"missing {binary}; run `make k8s-bin`")
    cleanup(cluster.state_dir)  # volumes of an earlier cluster from this state dir
    volumes = volume_dir(cluster.state_dir)
    os.makedirs(volumes, mode=0o755)
    config_path = os.path.join(storage_dir(cluster.state_dir), "config.json")
    helper_path = os.path.join(storage_dir(cluster.state_dir), "helper-pod.json")
    for path, data in ((config_path, provisioner_config(volumes)), (helper_path, helper_pod())):
        with open(path, "w") as fh:  # helper-pod.json: YAML is a superset of JSON
            json.dump(data, fh, indent=1)
    for collection, obj in objects():
        cluster.create(collection, obj)
    cluster._spawn(PROCESS, provisioner_cmd(cluster.bin_dir, cluster.kubeconfig, config_path, helper_path))
    log = cluster.log_path(PROCESS)
    cluster._wait(deadline, f"{PROCESS} started", lambda: file_mentions(log, STARTED_LINE))


def cleanup(state_dir):
    """Remove the config and every volume directory; returns what could not be removed."""
    path = storage_dir(state_dir)
    if not os.path.lexists(path):
        return []
    for _ in range(3):  # a helper pod's last write can race the first try
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.lexists(path):
            return []
        time.sleep(0.2)
    return [f"directory {path}"]
