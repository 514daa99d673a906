"""A real Kubernetes control plane for tests, with KWOK GPU nodes and (as root) a real node.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and KWOK (fake GPU
nodes) run as local processes on free ports of 127.0.0.1. Binaries come from
tools/k8s/build.sh. With real_node (tools/k8s/node.py: containerd, kubelet, kube-proxy,
CoreDNS on the bridge 198.18.0.1) the API server listens on 198.18.0.1 instead, pods
without GPUs run there for real, and the KWOK nodes are tainted nvidia.com/gpu=present:NoSchedule.

    python tools/k8s/cluster.py up --state-dir .cluster    # writes .cluster/kubeconfig
    python tools/k8s/cluster.py up --state-dir .cluster --real-node auto   # `make cluster`
    python tools/k8s/cluster.py down --state-dir .cluster

    from tools.k8s.cluster import Cluster
    c = Cluster(state_dir, bin_dir, nodes=2, real_node=None); c.start(); ...; c.stop()

With kueue (Cluster(kueue=True); `cluster.py up` by default) Kueue's controller manager
runs too, as a process, with its CRDs and its webhooks by URL, managing both job kinds of the
product (Indexed Jobs and Kubeflow PaddleJobs, whose CRD it installs first; no training
operator runs): see tools/k8s/kueue.py.

Pods owned by a Job complete after `complete_after` (per pod: annotation
kwok.paddlecloud.io/complete-after, a Go duration such as "3s"), with exit code 0
(per pod: annotation kwok.paddlecloud.io/exit-code; non-zero makes the pod Failed).
Other pods stay Running until deleted. Pod logs come from files: see set_pod_log.
"""

import argparse
import copy
import datetime
import json
import os
import shutil
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

import yaml

try:
    from . import images, node, node_config, storage
    from .kueue import Kueue, KueueError, release_metrics_certs, unavailable_reason as kueue_missing
    from .pki import kubeconfig_dict, make_pki
    from .procutil import CHILDREN, http_ok, pid_alive, process_record, read_json, runs_as_recorded, stop_in_turn, stop_pids, write_json
except ImportError:  # run as a script from tools/k8s (by any python3: the repo root gives paddle_ext)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    import images
    import node
    import node_config
    import storage
    from kueue import Kueue, KueueError, release_metrics_certs, unavailable_reason as kueue_missing
    from pki import kubeconfig_dict, make_pki
    from procutil import CHILDREN, http_ok, pid_alive, process_record, read_json, runs_as_recorded, stop_in_turn, stop_pids, write_json

from paddle_ext.ports import free_port  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
COMPLETE_AFTER_ANNOTATION = "kwok.paddlecloud.io/complete-after"
EXIT_CODE_ANNOTATION = "kwok.paddlecloud.io/exit-code"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
POD_CIDR = "127.1.0.0/16"  # KWOK's fake pod IPs
SERVICE_CIDR = node_config.SERVICE_CIDR  # routed by kube-proxy on the real node; only object fields otherwise
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}  # KWOK nodes, with a real node
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")  # KWOK manages the nodes that carry it
IMAGE_REFS = {"worker": images.WORKER_REF, "notebook": images.NOTEBOOK_REF, "hub": images.HUB_REF,
              "proxy": images.PROXY_REF, "pause": images.PAUSE_REF}
REAL_NODE_TIMEOUT = 900.0  # a cold start imports ~3 GB of images into containerd
KWOK_TIMEOUT = 120.0  # a start without the real node: the control plane and a few KWOK nodes
# restart_component's wait before SIGKILL. The API server drains its requests within
# milliseconds of SIGTERM, then waits up to its request timeout (60 s) for the connections its
# clients (Kueue's watches) keep open: a restart took 15 s, all of it that wait.
RESTART_STOP_SECONDS = 5.0


class ClusterError(RuntimeError):
    """The control plane failed to start or to answer."""


# ---------------------------------------------------------------- binaries


def default_bin_dir():
    """The cache bin dir that tools/k8s/build.sh builds into (does not build)."""
    out = subprocess.run([os.path.join(HERE, "build.sh"), "--print"],
                         check=True, capture_output=True, text=True).stdout
    return out.strip()


def missing_binaries(bin_dir):
    """Names of the needed binaries that are not executable in bin_dir."""
    return [n for n in COMPONENTS + ("kubectl",)
            if not os.access(os.path.join(bin_dir, n), os.X_OK)]


# ---------------------------------------------------------------- ports


def pick_ports(names):
    """Distinct free ports, one per name."""
    ports = {}
    while len(ports) < len(names):
        port = free_port()
        if port not in ports.values():
            ports[names[len(ports)]] = port
    return ports


# ---------------------------------------------------------------- command lines


def etcd_cmd(bin_dir, data_dir, client_port, peer_port):
    client = f"http://127.0.0.1:{client_port}"
    peer = f"http://127.0.0.1:{peer_port}"
    return [os.path.join(bin_dir, "etcd"), "--name=default", f"--data-dir={data_dir}",
            f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            "--unsafe-no-fsync", "--log-level=warn", "--quota-backend-bytes=4294967296"]


def apiserver_cmd(bin_dir, pki, etcd_port, port, real_node=False):
    """KWOK only: on 127.0.0.1, no endpoints for the `kubernetes` Service. With a real node:
    on 198.18.0.1 only (reachable from this machine and its pods, not from the network),
    advertised there, so the `kubernetes` Service (198.19.0.1:443) leads to it."""
    address = node_config.NODE_IP if real_node else "127.0.0.1"
    reconciler = [] if real_node else ["--endpoint-reconciler-type=none"]
    return [os.path.join(bin_dir, "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            f"--bind-address={address}", f"--secure-port={port}", f"--advertise-address={address}",
            *reconciler,
            f"--tls-cert-file={pki['apiserver.crt']}", f"--tls-private-key-file={pki['apiserver.key']}",
            f"--client-ca-file={pki['ca.crt']}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki['sa.pub']}",
            f"--service-account-signing-key-file={pki['sa.key']}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC", "--allow-privileged=true",
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            f"--kubelet-certificate-authority={pki['ca.crt']}",
            f"--kubelet-client-certificate={pki['admin.crt']}",
            f"--kubelet-client-key={pki['admin.key']}",
            "--enable-admission-plugins=NodeRestriction",
            "--profiling=false", "--v=1"]


def controller_manager_cmd(bin_dir, kubeconfig, pki, port, cert_dir):
    return [os.path.join(bin_dir, "kube-controller-manager"),
            f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={port}", f"--cert-dir={cert_dir}",
            "--leader-elect=false", "--controllers=*",
            f"--service-account-private-key-file={pki['sa.key']}",
            f"--root-ca-file={pki['ca.crt']}",
            f"--cluster-signing-cert-file={pki['ca.crt']}",
            f"--cluster-signing-key-file={pki['ca.key']}",
            "--use-service-account-credentials=false",
            "--concurrent-job-syncs=10", "--profiling=false", "--v=1"]


def scheduler_cmd(bin_dir, kubeconfig, port, cert_dir):
    return [os.path.join(bin_dir, "kube-scheduler"),
            f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={port}", f"--cert-dir={cert_dir}",
            "--leader-elect=false", "--profiling=false", "--v=1"]


def kwok_cmd(bin_dir, kubeconfig, config_path, pki, port):
    return [os.path.join(bin_dir, "kwok"), f"--kubeconfig={kubeconfig}", f"--config={config_path}",
            "--manage-nodes-with-annotation-selector={}={}".format(*KWOK_NODE_ANNOTATION),
            f"--cidr={POD_CIDR}", "--node-ip=127.0.0.1",
            f"--node-port={port}", f"--server-address=127.0.0.1:{port}",
            f"--tls-cert-file={pki['kwok.crt']}", f"--tls-private-key-file={pki['kwok.key']}",
            "--node-lease-duration-seconds=40", "--enable-crds=Logs,ClusterLogs"]


# ---------------------------------------------------------------- KWOK objects


def node_manifest(name, gpus=8, cpu="64", memory="512Gi", pods="110",
                  gpu_product="NVIDIA-H100-80GB-HBM3", taints=()):
    """A fake GPU node, managed by kwok (status is kept on create)."""
    resources = {"cpu": cpu, "memory": memory, "pods": pods, "nvidia.com/gpu": str(gpus),
                 "ephemeral-storage": "1Ti"}
    manifest = {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION[0]: KWOK_NODE_ANNOTATION[1], "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                       "kubernetes.io/arch": "amd64", "type": "kwok",
                       GPU_PRODUCT_LABEL: gpu_product, "nvidia.com/gpu.count": str(gpus)},
        },
        "status": {"allocatable": dict(resources), "capacity": dict(resources)},
    }
    if taints:
        manifest["spec"] = {"taints": [dict(t) for t in taints]}
    return manifest


def _set_delay(stage, ms):
    """Fixed delay in ms, no jitter; per-pod annotation overrides are kept."""
    delay = stage["spec"].setdefault("delay", {})
    delay["durationMilliseconds"] = ms
    for key in ("jitterDurationMilliseconds", "jitterDurationFrom"):
        delay.pop(key, None)
    return stage


def _exit_code_expression(values, operator):
    return {"key": f'.metadata.annotations["{EXIT_CODE_ANNOTATION}"] // "0"',
            "operator": operator, "values": values}


def job_pod_stages(pod_complete, complete_after_ms):
    """Turn kwok's pod-complete stage into a success and a failure stage.

    Both fire complete_after_ms after the pod is Ready (per pod: annotation
    COMPLETE_AFTER_ANNOTATION, a Go duration); EXIT_CODE_ANNOTATION picks which.
    """
    ok = _set_delay(copy.deepcopy(pod_complete), complete_after_ms)
    ok["spec"]["delay"]["durationFrom"] = {
        "expressionFrom": f'.metadata.annotations["{COMPLETE_AFTER_ANNOTATION}"]'}
    fail = copy.deepcopy(ok)
    ok["spec"]["selector"]["matchExpressions"].append(_exit_code_expression(["0"], "In"))
    fail["metadata"]["name"] = "pod-fail"
    fail["spec"]["selector"]["matchExpressions"].append(_exit_code_expression(["0"], "NotIn"))
    fail["spec"]["next"]["statusTemplate"] = (
        "{{ $now := Now }}\n"
        "{{ $code := index .metadata.annotations \"" + EXIT_CODE_ANNOTATION + "\" }}\n"
        "containerStatuses:\n"
        "{{ range $index, $item := .spec.containers }}\n"
        "- image: {{ $item.image | Quote }}\n"
        "  name: {{ $item.name | Quote }}\n"
        "  ready: false\n"
        "  restartCount: 0\n"
        "  started: false\n"
        "  state:\n"
        "    terminated:\n"
        "      exitCode: {{ $code }}\n"
        "      finishedAt: {{ $now | Quote }}\n"
        "      reason: Error\n"
        "      startedAt: {{ $now | Quote }}\n"
        "{{ end }}\n"
        "phase: Failed\n")
    return [ok, fail]


def kwok_stages(stage_dir, pod_delay_ms=200, complete_after_ms=2000):
    """Stages for kwok: node init + lease heartbeat, pod lifecycle, Job pod completion."""
    def load(rel):
        with open(os.path.join(stage_dir, rel)) as fh:
            return yaml.safe_load(fh)

    stages = [load("node/fast/node-initialize.yaml"),
              load("node/heartbeat-with-lease/node-heartbeat-with-lease.yaml")]
    for name in ("pod-create", "pod-init-container-running", "pod-init-container-completed",
                 "pod-ready", "pod-delete"):
        stages.append(_set_delay(load(f"pod/general/{name}.yaml"), pod_delay_ms))
    stages += job_pod_stages(load("pod/general/pod-complete.yaml"), complete_after_ms)
    stages.append(storage.kwok_helper_stage(load("pod/general/pod-complete.yaml")))
    return stages


def logs_object(namespace, pod_name, path, containers=None, follow=True):
    """A kwok Logs object that serves a pod's containers' logs from a CRI log file."""
    log = {"logsFile": os.path.abspath(path), "follow": follow}
    if containers:
        log["containers"] = list(containers)
    return {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
            "metadata": {"name": pod_name, "namespace": namespace},
            "spec": {"logs": [log]}}


def cri_log_lines(lines, stream="stdout", when=None):
    """Format text lines the way the kubelet stores container logs (CRI format)."""
    when = when or datetime.datetime.now(datetime.timezone.utc)
    stamp = when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return "".join(f"{stamp} {stream} F {line}\n" for line in lines)


# ---------------------------------------------------------------- the cluster


def resolve_real_node(real_node, bin_dir):
    """(use a real node?, notice): True/False as asked (True fails where it cannot run);
    None picks it when it can run here, else returns a one-line notice why not."""
    reason = node.unavailable_reason(bin_dir) if real_node is not False else None
    if real_node is True and reason:
        raise ClusterError(f"cannot run a real node here: {reason}")
    if real_node is None and reason:
        return False, f"real node: off ({reason}); pods run on KWOK's fake nodes only"
    return real_node is not False, None


class Cluster:
    """A local control plane. Attributes after start(): kubeconfig, server, ports, pids.

    real_node: False (default: KWOK fake nodes only, as before), True (also a real node;
    fails where one cannot run), None (a real node when this machine can run one; else
    `real_node_notice` says why not). With a real node, `real_node` is its RealNode
    (truthy; `.name`), `real_node_name` its name, and `images` the image refs imported into it.
    """

    def __init__(self, state_dir, bin_dir=None, nodes=2, complete_after="2s", pod_delay_ms=200,
                 node_resources=None, real_node=False, node_lock_timeout=600.0, storage=False,
                 kueue=False, kueue_pods_ready_timeout="5m"):
        self.state_dir = os.path.abspath(state_dir)
        self.bin_dir = os.path.abspath(bin_dir or default_bin_dir())
        use_node, self.real_node_notice = resolve_real_node(real_node, self.bin_dir)
        self.real_node = node.RealNode(self.state_dir, self.bin_dir, owner_pid=os.getpid(),
                                       lock_timeout=node_lock_timeout) if use_node else None
        self.nodes = nodes
        self.storage = storage  # a default StorageClass (tools/k8s/storage.py)
        self.complete_after_ms = _duration_ms(complete_after)
        self.pod_delay_ms = pod_delay_ms
        self.node_resources = node_resources or {}
        self.kubeconfig = os.path.join(self.state_dir, "kubeconfig")
        self.server = None
        self.ports = {}
        self.pids = {}
        self._commands = {}  # name -> (argv, env) of each component, for restart_component
        self.pki = {}
        self._ssl = None
        # tools/k8s/kueue.py, started after the control plane; kueue_pods_ready_timeout is how long
        # its waitForPodsReady lets an admitted job's workers take to start (Kueue's duration form).
        self.kueue = Kueue(self, kueue_pods_ready_timeout) if kueue else None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc_info):
        self.stop()

    # -- paths
    def _path(self, *parts):
        return os.path.join(self.state_dir, *parts)

    def log_path(self, name):
        """Where component `name` (kube-apiserver, kubelet, kueue, ...) writes its output."""
        return self._path("logs", f"{name}.log")

    @property
    def pids_file(self):
        return self._path("pids.json")

    @property
    def node_names(self):
        """The KWOK GPU nodes."""
        return [f"kwok-gpu-{i}" for i in range(self.nodes)]

    @property
    def real_node_name(self):
        return self.real_node.name if self.real_node else None

    @property
    def images(self):
        """{ref: cache key} of the images in the real node's containerd ({} without one)."""
        return dict(self.real_node.images) if self.real_node else {}

    # -- lifecycle
    def start(self, timeout=None):
        """Start every component and wait until the cluster is ready."""
        missing = missing_binaries(self.bin_dir)
        if missing:
            raise ClusterError(f"missing binaries in {self.bin_dir}: {missing}; run `make k8s-bin`")
        if os.path.exists(self.pids_file) and any(
                runs_as_recorded(i) for i in read_json(self.pids_file).values()):
            raise ClusterError(f"a cluster is already running from {self.state_dir}; stop it first")
        deadline = time.monotonic() + (timeout or (REAL_NODE_TIMEOUT if self.real_node else KWOK_TIMEOUT))
        if self.real_node:  # the machine lock and the bridge come before anything binds 198.18.0.1
            try:
                self.real_node.prepare()
            except node.NodeError as exc:
                raise ClusterError(str(exc)) from exc
        for sub in ("etcd", "pki", "kcm", "scheduler", "logs"):  # every start is a fresh cluster
            shutil.rmtree(self._path(sub), ignore_errors=True)
        os.makedirs(self._path("logs"), exist_ok=True)
        self.pki = make_pki(self._path("pki"), real_node=bool(self.real_node))
        self.ports = pick_ports(["etcd", "etcd-peer", "apiserver", "controller-manager",
                                 "scheduler", "kwok"])
        host = node_config.NODE_IP if self.real_node else "127.0.0.1"
        self.server = f"https://{host}:{self.ports['apiserver']}"
        write_json(self.kubeconfig, kubeconfig_dict(
            self.server, self.pki["ca.crt"], self.pki["admin.crt"], self.pki["admin.key"]))
        write_json(self._path("cluster.json"), {"server": self.server, "ports": self.ports,
                                                 "bin_dir": self.bin_dir, "real_node": bool(self.real_node),
                                                 "kueue": bool(self.kueue)})
        try:
            self._start_all(deadline)
            if self.kueue:
                self.kueue.start(deadline)
            if self.real_node:
                self.real_node.start(self, deadline)
                self._wait(deadline, "`kubernetes` Service endpoints on the node IP", self._kubernetes_endpoints)
            if self.storage:
                storage.start(self, deadline)
        except (node.NodeError, storage.StorageError, KueueError) as exc:
            self.stop()
            raise ClusterError(str(exc)) from exc
        except BaseException:
            self.stop()
            raise

    def _start_all(self, deadline):
        self._spawn("etcd", etcd_cmd(self.bin_dir, self._path("etcd"), self.ports["etcd"],
                                     self.ports["etcd-peer"]))
        self._wait(deadline, "etcd health", lambda: http_ok(f"http://127.0.0.1:{self.ports['etcd']}/health"))
        self._spawn("kube-apiserver", apiserver_cmd(self.bin_dir, self.pki, self.ports["etcd"],
                                                    self.ports["apiserver"], real_node=bool(self.real_node)))
        self._wait(deadline, "kube-apiserver /readyz", lambda: self._get_ok("/readyz"))
        stage_dir = os.path.join(os.path.dirname(self.bin_dir), "kwok", "stage")
        crd_dir = os.path.join(os.path.dirname(self.bin_dir), "kwok", "crd", "bases")
        for name in ("kwok.x-k8s.io_logs.yaml", "kwok.x-k8s.io_clusterlogs.yaml"):
            with open(os.path.join(crd_dir, name)) as fh:
                self.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", yaml.safe_load(fh))
        taints = (GPU_TAINT,) if self.real_node else ()
        for name in self.node_names:
            self.create("/api/v1/nodes", node_manifest(name, taints=taints, **self.node_resources))
        config_path = self._path("kwok.yaml")
        with open(config_path, "w") as fh:
            yaml.safe_dump_all(kwok_stages(stage_dir, self.pod_delay_ms, self.complete_after_ms), fh)
        self._spawn("kube-controller-manager", controller_manager_cmd(
            self.bin_dir, self.kubeconfig, self.pki, self.ports["controller-manager"], self._path("kcm")))
        self._spawn("kube-scheduler", scheduler_cmd(
            self.bin_dir, self.kubeconfig, self.ports["scheduler"], self._path("scheduler")))
        self._spawn("kwok", kwok_cmd(self.bin_dir, self.kubeconfig, config_path, self.pki,
                                     self.ports["kwok"]))
        self._wait(deadline, "nodes Ready", self._nodes_ready)
        self._wait(deadline, "default ServiceAccount",
                   lambda: self._get_ok("/api/v1/namespaces/default/serviceaccounts/default"))
        self._wait(deadline, "kwok Logs CRD", lambda: self._get_ok("/apis/kwok.x-k8s.io/v1alpha1/logs"))
        self._wait(deadline, "scheduler healthz", lambda: http_ok(
            f"https://127.0.0.1:{self.ports['scheduler']}/healthz", insecure=True))
        self._wait(deadline, "controller-manager healthz", lambda: http_ok(
            f"https://127.0.0.1:{self.ports['controller-manager']}/healthz", insecure=True))

    def stop(self):
        """Stop all components (reverse order); raise if any process survives.

        With a real node, also remove everything the node made and release the machine lock.
        """
        problems = []
        if self.real_node:
            try:
                self.real_node.stop()
            except node.NodeError as exc:
                problems.append(str(exc))
        pids = self.pids or (read_json(self.pids_file) if os.path.exists(self.pids_file) else {})
        # Last started, first stopped, each in turn (stop_in_turn); etcd last: an API server whose
        # etcd is gone takes ~10 s to give up on shutting down cleanly.
        left = stop_in_turn({n: pids[n] for n in reversed(list(pids))})  # + storage's
        self.pids = {}
        if os.path.exists(self.pids_file):
            os.remove(self.pids_file)
        release_metrics_certs(self.state_dir)  # /etc/kueue, when the last cluster using it stops
        if left:
            problems.append(f"processes still alive after stop: {left}")
        problems += storage.cleanup(self.state_dir)
        if problems:
            raise ClusterError("; ".join(problems))

    def restart_component(self, name, timeout=120.0):
        """Stop one control-plane component (e.g. kube-apiserver) and start it again with
        the same command line; for tests of what survives such a restart."""
        cmd, env = self._commands[name]
        left = stop_pids({name: self.pids[name]}, timeout=RESTART_STOP_SECONDS)
        if left:
            raise ClusterError(f"{name} did not stop: {left}")
        self._spawn(name, cmd, env)
        deadline = time.monotonic() + timeout
        if name == "kube-apiserver":
            self._wait(deadline, "kube-apiserver /readyz", lambda: self._get_ok("/readyz"))

    def _spawn(self, name, cmd, env=None):
        self._commands[name] = (cmd, env)
        log = open(self.log_path(name), "ab")
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, cwd=self.state_dir, env=env)
        finally:
            log.close()
        CHILDREN[proc.pid] = proc
        self.pids[name] = process_record(proc.pid, cmd[0])
        write_json(self.pids_file, self.pids)
        if self.real_node:  # so a later start can clean up after a crash from the record alone
            self.real_node.add_pid(name, self.pids[name])

    def _wait(self, deadline, what, check):
        while True:
            for name, info in self.pids.items():
                if not pid_alive(info["pid"]):
                    raise ClusterError(f"{name} exited while waiting for {what}; "
                                       f"see {self.log_path(name)}:\n{self._log_tail(name)}")
            if check():
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"timed out waiting for {what}; logs in {self._path('logs')}")
            time.sleep(0.2)

    def _log_tail(self, name, lines=20):
        try:
            with open(self.log_path(name), errors="replace") as fh:
                return "".join(fh.readlines()[-lines:])
        except OSError:
            return ""

    def _ready_nodes(self):
        try:
            items = self.request("GET", "/api/v1/nodes")["items"]
        except ClusterError:
            return set()
        return {n["metadata"]["name"] for n in items for c in n.get("status", {}).get("conditions", [])
                if c["type"] == "Ready" and c["status"] == "True"
                and not any(t["key"] == "node.kubernetes.io/not-ready" for t in n["spec"].get("taints", []))}

    def _nodes_ready(self):
        return set(self.node_names) <= self._ready_nodes()

    def node_ready(self, name):
        return name in self._ready_nodes()

    def _kubernetes_endpoints(self):
        try:
            slices = self.request("GET", "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
                                         "?labelSelector=kubernetes.io/service-name%3Dkubernetes")["items"]
        except ClusterError:
            return False
        return any(node_config.NODE_IP in e.get("addresses", []) for s in slices for e in s.get("endpoints") or [])

    def write_kubeconfig(self, path, cert, key):
        """A kubeconfig for this cluster with the given client certificate; returns path."""
        write_json(path, kubeconfig_dict(self.server, self.pki["ca.crt"], cert, key))
        return path

    # -- API access (admin client cert, stdlib only)
    def _context(self):
        if self._ssl is None:
            ctx = ssl.create_default_context(cafile=self.pki["ca.crt"])
            ctx.load_cert_chain(self.pki["admin.crt"], self.pki["admin.key"])
            self._ssl = ctx
        return self._ssl

    def request(self, method, path, body=None, content_type="application/json"):
        """Call the API server as admin; return the decoded JSON (or text)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method,
                                     headers={"Content-Type": content_type, "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, context=self._context(), timeout=30) as resp:
                raw = resp.read().decode()
        except urllib.error.HTTPError as exc:
            raise ClusterError(f"{method} {path}: {exc.code} {exc.read().decode(errors='replace')}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise ClusterError(f"{method} {path}: {exc}") from exc
        try:
            return json.loads(raw)
        except ValueError:
            return raw

    def create(self, collection_path, obj):
        return self.request("POST", collection_path, obj)

    def _get_ok(self, path):
        try:
            self.request("GET", path)
            return True
        except ClusterError:
            return False

    # -- helpers for tests
    def set_pod_log(self, namespace, pod_name, path, containers=None, follow=True):
        """Serve `kubectl logs` of a pod from `path`, a file in CRI log format.

        Write it with cri_log_lines(); appended lines show up in `logs -f`.
        Works before or after the pod exists; replaces an earlier setting.
        """
        obj = logs_object(namespace, pod_name, path, containers, follow)
        base = f"/apis/kwok.x-k8s.io/v1alpha1/namespaces/{namespace}/logs"
        try:
            self.request("DELETE", f"{base}/{pod_name}")
        except ClusterError:
            pass
        return self.create(base, obj)

    def running_pids(self):
        """The recorded component pids that are still alive."""
        pids = self.pids or (read_json(self.pids_file) if os.path.exists(self.pids_file) else {})
        return [i["pid"] for i in pids.values() if runs_as_recorded(i)]

    @classmethod
    def from_state_dir(cls, state_dir):
        """A handle on a cluster started earlier (e.g. by `cluster.py up`).

        Its real node is attached only while the machine's node record still names this
        state dir, so stopping an old state dir never touches another cluster's node.
        """
        info = read_json(os.path.join(state_dir, "cluster.json"))
        c = cls(state_dir, info["bin_dir"], kueue=info.get("kueue", False))
        c.server, c.ports = info["server"], info["ports"]
        if os.path.isdir(c._path("pki")):
            c.pki = make_pki(c._path("pki"), real_node=info.get("real_node", False))  # reuses start()'s files
        if os.path.exists(c.pids_file):
            c.pids = read_json(c.pids_file)
        record = node.read_record()
        if info.get("real_node") and record and record.get("state_dir") == c.state_dir:
            c.real_node = node.RealNode(c.state_dir, c.bin_dir, owner_pid=record.get("owner_pid"))
            c.real_node.record = record
        return c


# ---------------------------------------------------------------- small utils


def _duration_ms(value):
    """'2s', '500ms', '1m' or a number of ms -> int ms."""
    if isinstance(value, (int, float)):
        return int(value)
    for unit, factor in (("ms", 1), ("s", 1000), ("m", 60000)):
        if value.endswith(unit) and value[:-len(unit)].replace(".", "", 1).isdigit():
            return int(float(value[:-len(unit)]) * factor)
    raise ValueError(f"bad duration {value!r}; use e.g. 500ms, 2s, 1m")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["up", "down"])
    parser.add_argument("--state-dir", default=".cluster")
    parser.add_argument("--bin-dir", default=None, help="default: tools/k8s/build.sh --print")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--complete-after", default="2s", help="default Job pod run time")
    parser.add_argument("--real-node", choices=["no", "yes", "auto"], default="no",
                        help="also run a real node (root): yes, no (default), or auto: when this machine can")
    parser.add_argument("--kueue", choices=["no", "yes", "auto"], default="auto",
                        help="run Kueue (tools/k8s/kueue.py): yes, no, or auto (default): when this machine can")
    parser.add_argument("--lock-timeout", type=float, default=float(os.environ.get(
        "PADDLECLOUD_NODE_LOCK_TIMEOUT", "600")), help="seconds to wait for another real-node cluster")
    args = parser.parse_args(argv)
    if args.action == "down":
        if not os.path.exists(os.path.join(args.state_dir, "cluster.json")):
            if os.geteuid() == 0 and (node.read_record() or {}).get("state_dir") == os.path.abspath(args.state_dir):
                problems = node.teardown()  # a start that died before writing cluster.json
                print("real node removed" if not problems else f"left behind: {problems}")
                return 1 if problems else 0
            print(f"no cluster in {args.state_dir}")
            return 0
        try:
            Cluster.from_state_dir(args.state_dir).stop()
        except ClusterError as exc:
            print(f"cluster stop: {exc}", file=sys.stderr)
            return 1
        print("cluster stopped")
        return 0
    kueue_notice = kueue_missing(args.bin_dir or default_bin_dir()) if args.kueue == "auto" else None
    if kueue_notice:
        print(f"kueue: off ({kueue_notice})")
    try:
        cluster = Cluster(args.state_dir, args.bin_dir, nodes=args.nodes, complete_after=args.complete_after,
                          real_node={"no": False, "yes": True, "auto": None}[args.real_node],
                          node_lock_timeout=args.lock_timeout, storage=True,
                          kueue=args.kueue == "yes" or (args.kueue == "auto" and not kueue_notice))
    except ClusterError as exc:
        print(f"cluster failed to start: {exc}", file=sys.stderr)
        return 1
    if cluster.real_node_notice:
        print(cluster.real_node_notice)
    if cluster.real_node:
        cluster.real_node.owner_pid = None  # outlives this command; `down` (or the next `up`) stops it
    t0 = time.monotonic()
    try:
        cluster.start()
    except ClusterError as exc:
        print(f"cluster failed to start: {exc}", file=sys.stderr)
        return 1
    print(f"cluster ready in {time.monotonic() - t0:.1f}s: {cluster.server}"
          + (f" (real node {cluster.real_node_name}, images: {', '.join(sorted(cluster.images))})"
             if cluster.real_node else ""))
    print(f"export KUBECONFIG={cluster.kubeconfig}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
