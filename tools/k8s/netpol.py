"""NetworkPolicy enforcement on the real node, for the tests that prove the policies.

The test cluster's real node has no enforcer of its own (the bridge CNI plugin ignores
NetworkPolicies), and the other tests do not want one. `Enforcer(cluster).start()` runs
kube-router's NetworkPolicy controller (tools/k8s/kube-router, iptables + ipset) against
the session's cluster; `stop()` removes everything it made. Root only, real node only.

What it makes on the host, and what stop (or the next start, `cluster.py down` or the
node's teardown, after a crash) removes: the kube-router process; its iptables chains
(KUBE-ROUTER-*, KUBE-POD-FW-*, KUBE-NWPLCY-*, in the filter table) and the rules that
jump to them from INPUT, FORWARD and OUTPUT; its ipsets (KUBE-SRC-*, KUBE-DST-*); and
PADDLECLOUD-NETPOL-EGRESS in the mangle table. That last one keeps pods from sending
anything beyond this machine while kube-router runs: kube-router puts its own FORWARD
jump first and ACCEPTs the traffic the policies allow, so the node's filter-table drop
(node.EGRESS_CHAIN, after it) would no longer see it; the mangle table's FORWARD runs
before the filter table's. What it will make is written to RECORD before it is made.
In the cluster it makes a ClusterRole and binding for its client (system:kube-router),
deleted by stop.
"""

import os
import shutil
import subprocess
import time

try:
    from . import node
    from .cluster import ClusterError
    from .node_config import BRIDGE, NODE_NAME, SERVICE_CIDR
    from .pki import client_cert
    from .procutil import CHILDREN, kill_and_wait, pid_cmdline, process_record, read_json, runs_as_recorded, write_json
except ImportError:  # run as a script from tools/k8s
    import node
    from cluster import ClusterError
    from node_config import BRIDGE, NODE_NAME, SERVICE_CIDR
    from pki import client_cert
    from procutil import CHILDREN, kill_and_wait, pid_cmdline, process_record, read_json, runs_as_recorded, write_json

RECORD = os.path.join(node.RUN_DIR, "netpol.json")  # removed with the rest of RUN_DIR by node teardown
CHAIN_PREFIXES = ("KUBE-ROUTER-", "KUBE-POD-FW-", "KUBE-NWPLCY-")
EGRESS_CHAIN = "PADDLECLOUD-NETPOL-EGRESS"
CLIENT = "system:kube-router"
RBAC_NAME = "paddlecloud:kube-router"
# What the controller reads: pods, namespaces and policies (informers), its own Node (addresses).
RBAC = [
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": RBAC_NAME},
     "rules": [{"apiGroups": [""], "resources": ["pods", "namespaces", "nodes"], "verbs": ["get", "list", "watch"]},
               {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["list", "watch"]}]},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": RBAC_NAME},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": RBAC_NAME},
     "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": CLIENT}]},
]
RBAC_PATHS = ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
              "/apis/rbac.authorization.k8s.io/v1/clusterroles")
SYNC_PERIOD = "2s"  # a full sync this often, so the count of finished syncs keeps moving


class EnforcerError(RuntimeError):
    """The enforcer cannot run here, or failed to start or to clean up."""


def unavailable_reason(cluster):
    """None when NetworkPolicies can be enforced on this cluster, else one sentence why not."""
    if not cluster.real_node:
        return "the cluster has no real node"
    if not os.access(os.path.join(cluster.bin_dir, "kube-router"), os.X_OK):
        return f"no kube-router in {cluster.bin_dir} (run `make k8s-bin`)"
    if not shutil.which("ipset"):
        return "no ipset (`make node-deps` installs it)"
    return None


def egress_rule():
    """The mangle-table rule of EGRESS_CHAIN: what leaves the bridge for elsewhere is dropped."""
    return ["-i", BRIDGE, "!", "-o", BRIDGE, "-j", "DROP"]


def _kube_routers():
    return [p for p in node.node_processes({}) if os.path.basename((pid_cmdline(p) or [""])[0]) == "kube-router"]


def remove_leftovers():
    """Remove what an enforcer made (from RECORD, and kube-router's chains and ipsets by
    name); idempotent. Returns a list of what could not be removed."""
    try:
        record = read_json(RECORD)
    except (FileNotFoundError, ValueError):
        record = {}
    info = record.get("pid")
    pids = [info["pid"]] if info and runs_as_recorded(info) else []
    kill_and_wait(sorted(set(pids + _kube_routers())), timeout=10)
    problems = [f"process {p}" for p in _kube_routers()]
    left = node.remove_chains("iptables", CHAIN_PREFIXES + (EGRESS_CHAIN,))
    problems += [f"iptables -t {t} chain {c}" for t, chains in left.items() for c in chains]
    problems += [f"ipset {name}" for name in node.remove_ipsets()]
    if not problems and os.path.exists(RECORD):
        os.remove(RECORD)
    return problems


class Enforcer:
    """kube-router's NetworkPolicy controller on `cluster`'s real node; start(), stop()."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.dir = os.path.join(cluster.state_dir, "netpol")
        self.sync_file = os.path.join(self.dir, "syncs")
        self.log = cluster.log_path("kube-router")
        self.proc = None

    def start(self, timeout=120.0):
        reason = unavailable_reason(self.cluster)
        if reason:
            raise EnforcerError(f"cannot enforce NetworkPolicies: {reason}")
        problems = remove_leftovers()
        if problems:
            raise EnforcerError("could not remove what an earlier enforcer left: " + "; ".join(problems))
        os.makedirs(self.dir, exist_ok=True)
        record = {"state_dir": self.cluster.state_dir, "pid": None}
        write_json(RECORD, record)
        try:
            node.run(["iptables", "-w", "-t", "mangle", "-N", EGRESS_CHAIN])
            node.run(["iptables", "-w", "-t", "mangle", "-A", EGRESS_CHAIN, *egress_rule()])
            node.run(["iptables", "-w", "-t", "mangle", "-I", "FORWARD", "1", "-j", EGRESS_CHAIN])
            for obj in RBAC:
                self._apply(obj)
            cert, key = client_cert(self.cluster.pki, "kube-router", CLIENT)
            kubeconfig = self.cluster.write_kubeconfig(os.path.join(self.dir, "kubeconfig"), cert, key)
            if os.path.exists(self.sync_file):
                os.remove(self.sync_file)
            exe = os.path.join(self.cluster.bin_dir, "kube-router")
            with open(self.log, "ab") as log:
                self.proc = subprocess.Popen(
                    [exe, f"--kubeconfig={kubeconfig}", f"--hostname-override={NODE_NAME}",
                     f"--service-cluster-ip-range={SERVICE_CIDR}", f"--iptables-sync-period={SYNC_PERIOD}",
                     f"--sync-file={self.sync_file}", "--v=1"],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            CHILDREN[self.proc.pid] = self.proc
            record["pid"] = process_record(self.proc.pid, exe)
            write_json(RECORD, record)
            self.wait_synced(timeout)
        except BaseException:
            self.stop()
            raise

    def _apply(self, obj):
        kind = "clusterroles" if obj["kind"] == "ClusterRole" else "clusterrolebindings"
        path = f"/apis/rbac.authorization.k8s.io/v1/{kind}"
        try:
            self.cluster.create(path, obj)
        except ClusterError as exc:  # AlreadyExists: from an earlier start in this cluster
            if "AlreadyExists" not in str(exc):
                raise

    def syncs(self):
        """How many full syncs of the rules kube-router has finished."""
        try:
            with open(self.sync_file) as fh:
                return int(fh.read().strip() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def wait_synced(self, timeout=60.0):
        """Wait until a full sync that started after this call has finished: the rules of the
        pods and policies the API server had by now are in place."""
        deadline = time.monotonic() + timeout
        target = self.syncs() + 2  # the sync running now may have read the old state
        while self.syncs() < target:
            if self.proc is None or self.proc.poll() is not None:
                raise EnforcerError(f"kube-router exited; see {self.log}:\n{self._log_tail()}")
            if time.monotonic() > deadline:
                raise EnforcerError(f"kube-router finished no sync of its rules in {timeout:.0f}s; see {self.log}")
            time.sleep(0.2)

    def _log_tail(self, lines=20):
        try:
            with open(self.log, errors="replace") as fh:
                return "".join(fh.readlines()[-lines:])
        except OSError:
            return ""

    def stop(self):
        """Stop kube-router and remove its rules, ipsets, egress chain and RBAC; raise
        EnforcerError naming what stayed."""
        if self.proc is not None:
            kill_and_wait([self.proc.pid], timeout=10)
            self.proc = None
        problems = remove_leftovers()
        for path, obj in zip(RBAC_PATHS, reversed(RBAC)):
            try:
                self.cluster.request("DELETE", f"{path}/{obj['metadata']['name']}")
            except ClusterError as exc:
                if "NotFound" not in str(exc):
                    problems.append(f"{obj['kind']} {RBAC_NAME}: {exc}")
        if problems:
            raise EnforcerError("the NetworkPolicy enforcer left behind: " + "; ".join(problems))
