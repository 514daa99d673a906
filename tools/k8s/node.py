"""A real node for the test cluster: containerd + runc + CNI bridge, kubelet, kube-proxy, CoreDNS.

Root only. Used by tools/k8s/cluster.py (Cluster(real_node=True)); one such node can exist
on a machine at a time (fixed bridge and addresses), guarded by a machine-wide lock.

The node's names, addresses and component configs live in tools/k8s/node_config.py.
Pods cannot reach anything beyond this machine: the bridge has no masquerading and a
FORWARD rule drops what pods send out of it; containerd's image pulls go to a proxy
address on 127.0.0.1 that refuses, so a missing image fails fast instead of dialling out.

What the node creates, and what stop (or the next start, after a crash) removes: the
processes (also every container process and containerd shim), the bridge and its veths,
network namespaces and mounts under the node's dirs, the kubepods cgroups under every
controller, iptables/ip6tables chains KUBE-*, CNI-* and PADDLECLOUD-*, kube-proxy's
nftables tables, the NetworkPolicy enforcer's process and ipsets (tools/k8s/netpol.py, which
starts it for the tests that need it), CNI cache files, /var/log/containers links, and the sysctls the
components change (restored to what they were). Everything it must undo is written to
RECORD before it is done, so a SIGKILLed run can be cleaned up from the record alone.
Images imported into containerd stay in a persistent root under ~/.cache/paddlecloud.
"""

import ctypes
import fcntl
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

from paddle_ext.ports import free_port, free_ports

try:
    from . import images
    from .node_config import (BRIDGE, BRIDGE_MAC, CNI_BIN_DIR, CNI_NETWORK, COREDNS_RBAC, NODE_IP, NODE_NAME,
                              cni_conflist, containerd_config, corefile, kube_proxy_config, kubelet_config)
    from .procutil import (all_pids, file_mentions, http_ok, kill_and_wait, pid_alive, pid_cmdline, pid_exe, process_record,
                           read_json, runs_as_recorded, signal_pids, stop_in_turn, write_json)
except ImportError:  # run as a script from tools/k8s
    import images
    from node_config import (BRIDGE, BRIDGE_MAC, CNI_BIN_DIR, CNI_NETWORK, COREDNS_RBAC, NODE_IP, NODE_NAME,
                             cni_conflist, containerd_config, corefile, kube_proxy_config, kubelet_config)
    from procutil import (all_pids, file_mentions, http_ok, kill_and_wait, pid_alive, pid_cmdline, pid_exe, process_record,
                          read_json, runs_as_recorded, signal_pids, stop_in_turn, write_json)

CACHE_ROOT = images.CACHE_ROOT

CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")
PULL_PROXY = "http://127.0.0.1:9"  # nothing listens there: pulls fail at once, never leave the machine

RUN_DIR = "/run/paddlecloud-node"  # tmpfs: the lock, the record, containerd's state and socket
LOCK_FILE = os.path.join(RUN_DIR, "lock")
RECORD = os.path.join(RUN_DIR, "node.json")
CLEANUP_LOCK = os.path.join(RUN_DIR, "cleanup.lock")
CONTAINERD_STATE = os.path.join(RUN_DIR, "containerd")
CONTAINERD_SOCKET = os.path.join(RUN_DIR, "containerd.sock")
RUNC_ROOT = os.path.join(RUN_DIR, "runc")
CONTAINERD_ROOT = os.path.join(CACHE_ROOT, "containerd")  # persistent: imported images survive
CRI_NAMESPACE = "k8s.io"
IMAGE_KEY_LABEL = images.KEY_LABEL
# While a new build of an image is unpacked, its old build is kept under this ref: the new
# layers' parent snapshots may be shared with the old build only, and containerd's garbage
# collector deleted them mid-unpack once the ref moved ("parent snapshot ... does not exist").
PREVIOUS_BUILD_SUFFIX = "-paddlecloud-previous"
IMPORT_ATTEMPTS = 2
POD_LOGS_DIRNAME = "paddlecloud-pod-logs"  # swept in /var/log/containers links by this name
SHIM_SOCKET_DIR = "/run/containerd/s"  # containerd 1.6 puts shim sockets here whatever its state dir

HOST_TOOLS = ("containerd", "containerd-shim-runc-v2", "ctr", "runc", "ip", "iptables", "ip6tables",
              "iptables-save", "conntrack", "buildah")
NODE_BINARIES = ("kubelet", "kube-proxy", "coredns", "pause")
OUR_CHAIN_PREFIXES = ("KUBE-", "CNI-", "PADDLECLOUD-")
IPSET_PREFIXES = ("KUBE-SRC-", "KUBE-DST-")  # kube-router's (tools/k8s/netpol.py)
# Rules of ours in the built-in chains that jump to none of our chains, known by their comment:
# kube-router's ACCEPT of what its policies passed (in INPUT, FORWARD and OUTPUT).
OUR_RULE_MARKERS = ('--comment "KUBE-ROUTER rule',)
EGRESS_CHAIN = "PADDLECLOUD-EGRESS"
NFT_TABLES = (("ip", "kube-proxy"), ("ip6", "kube-proxy"))
# Kernel settings kubelet and kube-proxy (or the bridge plugin) may change; restored on stop.
SYSCTLS = ("net/ipv4/ip_forward", "net/ipv4/conf/all/route_localnet", "net/bridge/bridge-nf-call-iptables",
           "net/bridge/bridge-nf-call-ip6tables", "vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic",
           "kernel/panic_on_oops", "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
           "net/netfilter/nf_conntrack_max")
# Host paths that are created on demand by the components; removed again when we made them and they are empty.
HOST_DIRS = ("/var/log/containers", "/var/lib/cni/results", "/var/lib/cni", SHIM_SOCKET_DIR, "/run/containerd",
             "/run/containers/networks", "/run/containers")  # the last two: buildah, when importing images
NODE_COMPONENTS = ("coredns", "kube-proxy", "kubelet", "containerd")
# Daemons found by name (run from the cache) when no record names them; kube-router runs only
# while tools/k8s/netpol.py enforces NetworkPolicies.
NODE_DAEMONS = ("kubelet", "kube-proxy", "coredns", "kube-router")


# kubelet 1.35.4 can crash as it starts: its DRA plugin manager reads the node's capacity
# (cm.hardEvictionReservation) while the container manager still writes it, and Go stops the
# process on "fatal error: concurrent map read and map write" (seen once in a CI run). Nodes run
# the kubelet under systemd with Restart=always; here that crash, and only it, gets more starts.
KUBELET_START_RACE = "fatal error: concurrent map"
KUBELET_STARTS = 3


def kubelet_hit_start_race(log_path, offset):
    """Whether the kubelet log, from byte `offset` on, holds the start-up data race's crash."""
    try:
        with open(log_path, "rb") as fh:
            fh.seek(offset)
            return KUBELET_START_RACE.encode() in fh.read()
    except OSError:
        return False


class NodeError(RuntimeError):
    """The real node cannot run here, or failed to start or stop."""


def log(message):
    print(f"node: {message}", flush=True)


# ---------------------------------------------------------------- can it run here?


def host_unavailable_reason():
    """None when this machine can run a real node, else one sentence saying why not."""
    if os.geteuid() != 0:
        return "not running as root"
    missing = [name for name in HOST_TOOLS if not shutil.which(name)]
    missing += [f"{CNI_BIN_DIR}/{p}" for p in CNI_PLUGINS if not os.access(os.path.join(CNI_BIN_DIR, p), os.X_OK)]
    if missing:
        return ("missing " + ", ".join(missing) + " (`make node-deps` installs containerd runc "
                "containernetworking-plugins conntrack iptables buildah)")
    if not os.path.isdir("/sys/fs/cgroup"):
        return "no /sys/fs/cgroup"
    return None


def missing_binaries(bin_dir):
    """The node's binaries that `make k8s-bin` has not built into bin_dir."""
    return [n for n in NODE_BINARIES if not os.access(os.path.join(bin_dir, n), os.X_OK)]


def unavailable_reason(bin_dir):
    """None when a real node can run here with bin_dir, else one sentence saying why not."""
    missing = missing_binaries(bin_dir)
    return host_unavailable_reason() or (
        f"missing {', '.join(missing)} in {bin_dir} (run `make k8s-bin`)" if missing else None)


# ---------------------------------------------------------------- small system helpers


def run(cmd, check=True, timeout=120, **kwargs):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    if check and proc.returncode != 0:
        raise NodeError(f"{' '.join(cmd)} failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()[-1500:]}")
    return proc


def read_sysctl(name):
    try:
        with open(f"/proc/sys/{name}") as fh:
            return fh.read().strip()
    except OSError:
        return None


def write_sysctl(name, value):
    try:
        with open(f"/proc/sys/{name}", "w") as fh:
            fh.write(value)
    except OSError:
        pass


# ---------------------------------------------------------------- the machine lock


def read_record():
    """The record of the real node on this machine (running or left by a crash), or None."""
    try:
        return read_json(RECORD)
    except (FileNotFoundError, ValueError):
        return None


def _wait_for_machine_lock(timeout):
    """Wait until this process holds the machine-wide real-node lock; the locked file's fd.
    A node whose owner process (e.g. a killed pytest) is gone is torn down and taken over;
    one started by `cluster.py up` (no owner) is waited for until `timeout`, then NodeError."""
    os.makedirs(RUN_DIR, exist_ok=True)
    fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + timeout
    announced = False
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                pass
            record = read_record() or {}
            owner = record.get("owner_pid")
            if owner and not pid_alive(owner):
                log(f"the real node of {record.get('state_dir')} outlived its owner (pid {owner}); removing it")
                teardown(record)
                continue
            if time.monotonic() > deadline:
                who = f"from {record.get('state_dir')}" if record else "(no record)"
                raise NodeError(
                    f"another real-node cluster is running on this machine {who}; only one can run at a "
                    f"time. Stop it (`python tools/k8s/cluster.py down --state-dir "
                    f"{record.get('state_dir', 'DIR')}` or `make cluster-down`); waited {timeout:.0f}s for {LOCK_FILE}")
            if not announced:
                log(f"waiting up to {timeout:.0f}s for the real node of {record.get('state_dir')} to stop")
                announced = True
            time.sleep(1)
    except BaseException:
        os.close(fd)
        raise


def acquire_machine_lock(owner_pid, timeout):
    """Take the machine-wide real-node lock and hand it to a holder process.

    The lock stays held as long as that holder (a `sleep infinity` that inherited the
    locked file) lives; teardown kills it last. A waiting starter takes over a node whose
    owner process (e.g. a killed pytest) is gone; it waits for one started by
    `cluster.py up` (no owner) until `timeout`, then fails naming it. Returns the holder's
    record (procutil.process_record, to recognise it later).
    """
    fd = _wait_for_machine_lock(timeout)
    try:
        sleep = shutil.which("sleep") or "/bin/sleep"
        holder = subprocess.Popen([sleep, "infinity"], pass_fds=(fd,), stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    finally:
        os.close(fd)
    return process_record(holder.pid, sleep)


# ---------------------------------------------------------------- teardown (works from the record alone)


def _mountpoints():
    points = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            point = line.split()[4]
            points.append(point.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n")
                          .replace("\\134", "\\"))
    return points


def mounts_under(prefixes):
    prefixes = [p.rstrip("/") for p in prefixes if p]
    return [m for m in _mountpoints() if any(m == p or m.startswith(p + "/") for p in prefixes)]


def unmount_under(prefixes):
    """Lazily unmount everything at or below prefixes, deepest first; return what stays."""
    libc = ctypes.CDLL(None, use_errno=True)
    for _ in range(5):
        points = mounts_under(prefixes)
        if not points:
            return []
        for point in sorted(points, key=len, reverse=True):
            libc.umount2(point.encode(), 2)  # MNT_DETACH
    return mounts_under(prefixes)


def cgroup_dirs(name="kubepods"):
    """Every <controller>/kubepods dir (cgroup v1) and the unified one (v2)."""
    found = []
    base = "/sys/fs/cgroup"
    candidates = [os.path.join(base, name)] + [os.path.join(base, c, name) for c in sorted(os.listdir(base))
                                                  if os.path.isdir(os.path.join(base, c))]
    for path in candidates:
        if os.path.isdir(path) and path not in found:
            found.append(path)
    return found


def cgroup_pids(roots):
    pids = set()
    for root in roots:
        for dirpath, _dirs, _files in os.walk(root):
            try:
                with open(os.path.join(dirpath, "cgroup.procs")) as fh:
                    pids.update(int(p) for p in fh.read().split())
            except OSError:
                pass
    return sorted(pids)


def remove_cgroups(roots, timeout=20.0):
    """Kill every process in the cgroup trees, then remove them bottom-up; return what stays."""
    deadline = time.monotonic() + timeout
    while True:
        signal_pids(cgroup_pids(roots), signal.SIGKILL)
        for root in roots:
            for dirpath, _dirs, _files in sorted(os.walk(root), key=lambda w: len(w[0]), reverse=True):
                try:
                    os.rmdir(dirpath)
                except OSError:
                    pass
        left = [r for r in roots if os.path.isdir(r)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def our_chains(save_text, prefixes=OUR_CHAIN_PREFIXES):
    """{table: [chain, ...]} of our chains (by prefix) in iptables-save output."""
    tables, table = {}, None
    for line in save_text.splitlines():
        if line.startswith("*"):
            table = line[1:]
        elif line.startswith(":") and table:
            chain = line[1:].split()[0]
            if chain.startswith(prefixes):
                tables.setdefault(table, []).append(chain)
    return tables


def rules_to_delete(save_text, prefixes=OUR_CHAIN_PREFIXES, markers=OUR_RULE_MARKERS):
    """[(table, rule)] of the rules outside our chains that belong to us, from iptables-save
    output (`rule`: the text after "-A ", as `iptables -D` takes it): those jumping to one of
    our chains, and those with one of `markers` in their text."""
    found, table = [], None
    for line in save_text.splitlines():
        if line.startswith("*"):
            table = line[1:]
        elif line.startswith("-A ") and table:
            words = line.split()
            target = words[words.index("-j") + 1] if "-j" in words else (
                words[words.index("-g") + 1] if "-g" in words else "")
            ours = target.startswith(prefixes) or any(m in line for m in markers)
            if ours and not words[1].startswith(prefixes):
                found.append((table, line[3:]))
    return found


def _save(tool):
    return subprocess.run([f"{tool}-save"], capture_output=True, text=True).stdout


def remove_chains(tool, prefixes=OUR_CHAIN_PREFIXES, markers=OUR_RULE_MARKERS):
    """Delete our rules in other chains (rules_to_delete), then flush and delete our chains
    (named with `prefixes`), in every table; {table: [chain, ...]} of the chains that stay."""
    if not shutil.which(f"{tool}-save"):
        return {}
    text = _save(tool)
    for table, rule in rules_to_delete(text, prefixes, markers):
        subprocess.run(["sh", "-c", f"{tool} -w -t {table} -D {rule}"], capture_output=True)
    for table, chains in our_chains(text, prefixes).items():
        for chain in chains:
            subprocess.run([tool, "-w", "-t", table, "-F", chain], capture_output=True)
        for chain in chains:
            subprocess.run([tool, "-w", "-t", table, "-X", chain], capture_output=True)
    return our_chains(_save(tool), prefixes)


def ipsets(prefixes=IPSET_PREFIXES):
    """Names of the ipsets named with `prefixes` that exist now."""
    if not shutil.which("ipset"):
        return []
    out = subprocess.run(["ipset", "list", "-n"], capture_output=True, text=True).stdout
    return [name for name in out.split() if name.startswith(prefixes)]


def remove_ipsets(prefixes=IPSET_PREFIXES):
    """Destroy those ipsets (once no iptables rule uses them); return the names that stay.
    A set that is a member of another (list:set) goes on a later pass."""
    for _ in range(3):
        for name in ipsets(prefixes):
            subprocess.run(["ipset", "destroy", name], capture_output=True)
    return ipsets(prefixes)


def nft_tables():
    """["family name", ...] of the nftables tables that exist now."""
    if not shutil.which("nft"):
        return []
    out = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    return [line.split(None, 1)[1] for line in out.splitlines() if line.startswith("table ")]


def _nft_table_has_rules(table):
    out = subprocess.run(["nft", "-j", "list", "table", *table.split()], capture_output=True, text=True).stdout
    try:
        return any("rule" in item for item in json.loads(out)["nftables"])
    except (ValueError, KeyError):
        return True


def remove_nft_tables(existed_before=None):
    """Delete kube-proxy's nftables tables, and tables that did not exist before the node
    and are empty now (iptables-nft creates e.g. `ip6 mangle` the first time it is used)."""
    left = []
    for family, name in NFT_TABLES:
        table = f"{family} {name}"
        if table in nft_tables():
            subprocess.run(["nft", "delete", "table", family, name], capture_output=True)
            if table in nft_tables():
                left.append(table)
    if existed_before is not None:
        for table in nft_tables():
            if table not in existed_before and not _nft_table_has_rules(table):
                subprocess.run(["nft", "delete", "table", *table.split()], capture_output=True)
    return left


def bridge_ports():
    """The names of the bridge's ports (its pods' veths)."""
    proc = subprocess.run(["ip", "-o", "link", "show", "master", BRIDGE], capture_output=True, text=True)
    return [line.split(":")[1].strip().split("@")[0] for line in proc.stdout.splitlines()]


def remove_bridge():
    for port in bridge_ports():
        subprocess.run(["ip", "link", "del", port], capture_output=True)
    subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)


def _holds_lock_file(pid):
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") == LOCK_FILE for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


def node_processes(record, keep=()):
    """Pids of processes that belong to a real node: recorded ones (if still the same
    program) plus, by name, our containerd, its shims, kubelet/kube-proxy/coredns from
    the cache (and the NetworkPolicy enforcer, kube-router), and holders of the machine lock;
    minus `keep`."""
    pids = []
    for info in (record or {}).get("pids", {}).values():
        if runs_as_recorded(info):
            pids.append(info["pid"])
    for pid in all_pids():
        argv = pid_cmdline(pid)
        if not argv or pid == os.getpid() or not pid_alive(pid):
            continue
        exe = pid_exe(pid)
        name = os.path.basename(argv[0])
        if name in NODE_DAEMONS and exe.startswith(CACHE_ROOT + "/"):
            pids.append(pid)
        elif name.startswith("containerd") and any(a.startswith(RUN_DIR) or a == CONTAINERD_SOCKET for a in argv):
            pids.append(pid)  # our containerd (--config under RUN_DIR) and its shims (-address)
        elif name == "sleep" and _holds_lock_file(pid):
            pids.append(pid)
    return sorted(set(pids) - set(keep))


def purge_containers(sandbox_image=""):
    """Remove every container left in the persistent containerd root (images stay).

    Runs a containerd without CRI on a private socket, so nothing starts or restores pods.
    """
    if not os.path.isdir(os.path.join(CONTAINERD_ROOT, "io.containerd.metadata.v1.bolt")):
        return
    work = os.path.join(RUN_DIR, "purge")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    socket = os.path.join(work, "containerd.sock")
    config = os.path.join(work, "config.toml")
    with open(config, "w") as fh:
        fh.write(containerd_config(CONTAINERD_ROOT, os.path.join(work, "state"), socket, work,
                                   os.path.join(work, "runc"), sandbox_image, cri=False))
    with open(os.path.join(work, "containerd.log"), "w") as logf:
        proc = subprocess.Popen(["containerd", "--config", config], stdout=logf, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        ctr = ["ctr", "--address", socket, "-n", CRI_NAMESPACE]
        deadline = time.monotonic() + 30
        while subprocess.run(ctr + ["version"], capture_output=True).returncode != 0:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise NodeError(f"containerd (purge) did not start; see {work}/containerd.log")
            time.sleep(0.1)
        tasks = run(ctr + ["tasks", "ls", "-q"], check=False).stdout.split()
        for task in tasks:
            run(ctr + ["tasks", "delete", "-f", task], check=False)
        containers = run(ctr + ["containers", "ls", "-q"], check=False).stdout.split()
        if containers:
            run(ctr + ["containers", "delete", *containers], check=False)
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    unmount_under([work])
    shutil.rmtree(work, ignore_errors=True)
    for sub in ("sandboxes", "containers"):  # CRI's per-container files (hosts, resolv.conf, ...)
        shutil.rmtree(os.path.join(CONTAINERD_ROOT, "io.containerd.grpc.v1.cri", sub), ignore_errors=True)


def _remove_stale_shim_sockets():
    """Shim sockets in /run/containerd/s that no process listens on any more."""
    if not os.path.isdir(SHIM_SOCKET_DIR):
        return
    with open("/proc/net/unix") as fh:
        bound = {line.split()[-1] for line in fh.readlines()[1:] if len(line.split()) >= 8}
    for name in os.listdir(SHIM_SOCKET_DIR):
        path = os.path.join(SHIM_SOCKET_DIR, name)
        if path not in bound:
            try:
                os.remove(path)
            except OSError:
                pass


def _remove_host_leftovers(record):
    results = "/var/lib/cni/results"  # libcni's cache: <network>-<container>-<ifname>
    if os.path.isdir(results):
        for name in os.listdir(results):
            path = os.path.join(results, name)
            ours = name.startswith(CNI_NETWORK + "-") or (
                name.startswith("cni-loopback-") and file_mentions(path, RUN_DIR + "/"))
            if ours:
                os.remove(path)
    links = "/var/log/containers"
    if os.path.isdir(links):
        for name in os.listdir(links):
            path = os.path.join(links, name)
            if os.path.islink(path) and f"/{POD_LOGS_DIRNAME}/" in os.readlink(path):
                os.remove(path)
    _remove_stale_shim_sockets()
    existed = record.get("host_dirs_existed", {})
    for path in HOST_DIRS:
        if existed.get(path) is False:
            try:
                os.rmdir(path)  # only when empty
            except OSError:
                pass


def teardown_when_free(timeout=600.0):
    """Remove what an earlier, dead real node left, once no live cluster holds the machine:
    wait for the lock (taking over a node whose owner died), tear down, release it."""
    fd = _wait_for_machine_lock(timeout)
    try:
        return teardown()
    finally:
        os.close(fd)  # releases the lock


def teardown(record=None, keep=()):
    """Remove everything a real node created (from `record`, else RECORD, plus sweeps by name),
    sparing the processes in `keep` (a new lock holder). Idempotent; safe after a crash or
    SIGKILL. Returns a list of what could not be removed.
    """
    os.makedirs(RUN_DIR, exist_ok=True)
    cleanup_fd = os.open(CLEANUP_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(cleanup_fd, fcntl.LOCK_EX)
    try:
        return _teardown(record or read_record() or {}, keep)
    finally:
        os.close(cleanup_fd)


def _teardown(record, keep):
    problems = []
    pids = record.get("pids", {})
    # 1. the node's own daemons (not containerd yet), then every container process
    for name in NODE_COMPONENTS[:-1]:
        info = pids.get(name)
        if info and runs_as_recorded(info):
            kill_and_wait([info["pid"]], timeout=10)
    kill_and_wait([p for p in node_processes({}) if os.path.basename(pid_cmdline(p)[0]) in NODE_DAEMONS],
                  timeout=10)
    signal_pids(cgroup_pids(cgroup_dirs()), signal.SIGKILL)
    # 2. containerd and its shims
    kill_and_wait([p for p in node_processes(record) if os.path.basename(pid_cmdline(p)[0]).startswith("containerd")],
                  timeout=15)
    # 3. the control plane started with this node (recorded pids only), etcd last: the API
    #    server removes its `kubernetes` endpoint from etcd as it shuts down
    control = [(name, info) for name, info in pids.items() if name not in NODE_COMPONENTS and name != "lock"]
    stop_in_turn(dict(reversed(control)))  # last started first
    # 4. mounts, cgroups, containers left in the persistent root
    prefixes = [RUN_DIR, record.get("kubelet_root"), CONTAINERD_ROOT]
    problems += [f"mount {m}" for m in unmount_under(prefixes)]
    problems += [f"cgroup {c}" for c in remove_cgroups(cgroup_dirs())]
    try:
        purge_containers()
    except NodeError as exc:
        problems.append(str(exc))
    problems += [f"mount {m}" for m in unmount_under(prefixes)]
    # 5. network: iptables rules (kube-proxy's own cleanup first), nftables, bridge and veths
    kube_proxy = record.get("kube_proxy_bin")
    if kube_proxy and os.access(kube_proxy, os.X_OK):
        subprocess.run([kube_proxy, "--cleanup", "--proxy-mode=iptables"], capture_output=True, timeout=60)
    for tool in ("iptables", "ip6tables"):
        left = remove_chains(tool)
        problems += [f"{tool} -t {t} chain {c}" for t, chains in left.items() for c in chains]
    problems += [f"ipset {name}" for name in remove_ipsets()]
    problems += [f"nft table {t}" for t in remove_nft_tables(record.get("nft_tables"))]
    remove_bridge()
    if subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True).returncode == 0:
        problems.append(f"bridge {BRIDGE}")
    # 6. kernel settings, host files, our state
    for name, value in (record.get("sysctls") or {}).items():
        if value is not None and read_sysctl(name) != value:
            write_sysctl(name, value)
    _remove_host_leftovers(record)
    for name in os.listdir(RUN_DIR):  # containerd's state, sockets, runc's root; not the locks
        path = os.path.join(RUN_DIR, name)
        if path in (LOCK_FILE, CLEANUP_LOCK, RECORD):
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.remove(path)
    node_dir = record.get("node_dir")
    if node_dir and not mounts_under([node_dir]):
        shutil.rmtree(node_dir, ignore_errors=True)
    left = node_processes(record, keep)
    holders = [p for p in left if _holds_lock_file(p)]
    problems += [f"process {p} ({' '.join(pid_cmdline(p))[:80]})" for p in left if p not in holders]
    # 7. last: forget the node and release the machine lock
    if os.path.exists(RECORD):
        os.remove(RECORD)
    kill_and_wait(holders, timeout=5)
    return problems


# ---------------------------------------------------------------- the node


class RealNode:
    """The real node of one Cluster. prepare() before the control plane starts (lock,
    clean-up of leftovers, bridge); start() once the API server is up; stop() undoes all.

    Node processes are started with the Cluster's _spawn and awaited with its _wait, so
    they are logged, recorded and supervised like the control plane's.
    """

    def __init__(self, state_dir, bin_dir, owner_pid=None, lock_timeout=600.0):
        self.state_dir = os.path.abspath(state_dir)
        self.bin_dir = bin_dir
        self.node_dir = os.path.join(self.state_dir, "node")
        self.kubelet_root = os.path.join(self.node_dir, "kubelet")
        self.pod_logs_dir = os.path.join(self.node_dir, POD_LOGS_DIRNAME)
        self.cni_conf_dir = os.path.join(self.node_dir, "cni")
        self.owner_pid = owner_pid
        self.lock_timeout = lock_timeout
        self.record = None
        self.images = {}  # ref -> key of the images imported into the node's containerd

    @property
    def name(self):
        return NODE_NAME

    def _path(self, *parts):
        return os.path.join(self.node_dir, *parts)

    def _save(self):
        write_json(RECORD, self.record)

    def add_pid(self, name, info):
        if self.record is not None:
            self.record["pids"][name] = info
            self._save()

    # -- before the control plane
    def prepare(self):
        lock = acquire_machine_lock(self.owner_pid, self.lock_timeout)
        try:
            stale = read_record() or {}
            stale.get("pids", {}).pop("lock", None)  # the lock is ours now
            problems = teardown(stale, keep=(lock["pid"],))  # a crashed run's leftovers, and anything found by name
            if problems:
                raise NodeError("could not remove what an earlier real node left: " + "; ".join(problems))
        except BaseException:
            kill_and_wait([lock["pid"]], timeout=5)
            raise
        self.record = {
            "state_dir": self.state_dir, "node_dir": self.node_dir, "owner_pid": self.owner_pid,
            "kubelet_root": self.kubelet_root, "kube_proxy_bin": os.path.join(self.bin_dir, "kube-proxy"),
            "pids": {"lock": lock},
            "sysctls": {name: read_sysctl(name) for name in SYSCTLS},
            "host_dirs_existed": {path: os.path.isdir(path) for path in HOST_DIRS},
            "nft_tables": nft_tables(),
            "started": time.time(),
        }
        self._save()
        try:
            shutil.rmtree(self.node_dir, ignore_errors=True)
            os.makedirs(self.node_dir)
            self._make_bridge()
        except BaseException:
            self.stop()
            raise

    def _make_bridge(self):
        run(["ip", "link", "add", BRIDGE, "address", BRIDGE_MAC, "type", "bridge"])
        run(["ip", "addr", "add", f"{NODE_IP}/16", "dev", BRIDGE])
        run(["ip", "link", "set", BRIDGE, "up"])
        # Pods may talk to each other and to this machine, never beyond it.
        run(["iptables", "-w", "-N", EGRESS_CHAIN])
        run(["iptables", "-w", "-A", EGRESS_CHAIN, "-i", BRIDGE, "!", "-o", BRIDGE, "-j", "DROP"])
        run(["iptables", "-w", "-I", "FORWARD", "1", "-j", EGRESS_CHAIN])

    # -- after the control plane
    def start(self, cluster, deadline):
        """Start containerd, import images, then kubelet, kube-proxy and CoreDNS."""
        pki = cluster.pki
        self._start_containerd(cluster, deadline)
        self.images = self._import_images()
        self._start_kubelet(cluster, pki, deadline)
        self._start_kube_proxy(cluster, pki, deadline)
        self._start_coredns(cluster, pki, deadline)

    def _write(self, name, text):
        path = self._path(name)
        with open(path, "w") as fh:
            fh.write(text if isinstance(text, str) else json.dumps(text, indent=1))
        return path

    def _kubeconfig(self, cluster, name, cert, key):
        return cluster.write_kubeconfig(self._path(f"{name}.kubeconfig"), cert, key)

    def _start_containerd(self, cluster, deadline):
        os.makedirs(self.cni_conf_dir)
        with open(os.path.join(self.cni_conf_dir, f"10-{CNI_NETWORK}.conflist"), "w") as fh:
            json.dump(cni_conflist(self._path("cni-ipam")), fh, indent=1)
        os.makedirs(CONTAINERD_ROOT, exist_ok=True)
        config = self._write("containerd.toml", containerd_config(
            CONTAINERD_ROOT, CONTAINERD_STATE, CONTAINERD_SOCKET, self.cni_conf_dir, RUNC_ROOT, images.PAUSE_REF))
        env = dict(os.environ, HTTP_PROXY=PULL_PROXY, HTTPS_PROXY=PULL_PROXY, http_proxy=PULL_PROXY,
                   https_proxy=PULL_PROXY, NO_PROXY="", no_proxy="")
        cluster._spawn("containerd", [shutil.which("containerd"), "--config", config], env=env)
        cluster._wait(deadline, "containerd", lambda: self.ctr("version", check=False).returncode == 0)

    def ctr(self, *args, check=True, timeout=300):
        return run(["ctr", "--address", CONTAINERD_SOCKET, "-n", CRI_NAMESPACE, *args], check=check, timeout=timeout)

    def imported_keys(self):
        """{ref: key label} of the images in the node's containerd."""
        keys = {}
        lines = self.ctr("images", "ls").stdout.splitlines()[1:]
        for line in lines:
            words = line.split()
            labels = dict(kv.split("=", 1) for kv in words[-1].split(",") if "=" in kv)
            keys[words[0]] = labels.get(IMAGE_KEY_LABEL)
        return keys

    def _import_images(self):
        """Import every image `make images` built whose key the node does not have yet."""
        wanted = images.built_images()
        if images.PAUSE_REF not in wanted:
            raise NodeError(f"the sandbox image {images.PAUSE_REF} is not built; run `make images`")
        have = self.imported_keys()
        for ref, key in wanted.items():
            if have.get(ref) == key:
                continue
            t0 = time.monotonic()
            previous = ref + PREVIOUS_BUILD_SUFFIX
            if ref in have:
                self.ctr("images", "rm", previous, check=False)
                self.ctr("images", "tag", ref, previous)
            for attempt in range(1, IMPORT_ATTEMPTS + 1):
                try:
                    self._import(ref)
                    break
                except NodeError as exc:
                    if attempt == IMPORT_ATTEMPTS or "snapshot" not in str(exc):
                        raise
                    log(f"importing {ref} again: {exc}")
            self.ctr("images", "label", ref, f"{IMAGE_KEY_LABEL}={key}")
            if ref in have:
                self.ctr("images", "rm", previous, check=False)
            log(f"imported {ref} in {time.monotonic() - t0:.0f}s")
        return wanted

    def _import(self, ref):
        with tempfile.TemporaryFile() as errors:
            push = subprocess.Popen(images.export_command(ref), stdout=subprocess.PIPE, stderr=errors)
            try:
                result = run(["ctr", "--address", CONTAINERD_SOCKET, "-n", CRI_NAMESPACE, "images", "import", "-"],
                             check=False, timeout=900, stdin=push.stdout)
            finally:
                push.stdout.close()
                push.wait()
            errors.seek(0)
            if push.returncode != 0:
                raise NodeError(f"cannot export {ref} from buildah's storage (run `make images`): "
                                f"{errors.read().decode(errors='replace').strip()[-1500:]}")
        if result.returncode != 0:
            raise NodeError(f"importing {ref} into containerd failed: {result.stderr.strip()[-1500:]}")

    def _start_kubelet(self, cluster, pki, deadline):
        kubeconfig = self._kubeconfig(cluster, "kubelet", pki["kubelet-client.crt"], pki["kubelet-client.key"])
        os.makedirs(self.pod_logs_dir)
        config = self._write("kubelet.yaml", kubelet_config(pki, free_port(), self.pod_logs_dir, CONTAINERD_SOCKET))
        cmd = [os.path.join(self.bin_dir, "kubelet"), f"--config={config}", f"--kubeconfig={kubeconfig}",
               f"--root-dir={self.kubelet_root}", f"--hostname-override={NODE_NAME}", f"--node-ip={NODE_IP}",
               "--node-labels=paddlecloud.io/real-node=true", "--v=1"]
        log_path = cluster.log_path("kubelet")
        for start in range(1, KUBELET_STARTS + 1):
            logged_before = os.path.getsize(log_path) if os.path.exists(log_path) else 0
            cluster._spawn("kubelet", cmd)
            try:
                cluster._wait(deadline, f"node {NODE_NAME} Ready", lambda: cluster.node_ready(NODE_NAME))
                return
            except Exception:
                if start == KUBELET_STARTS or pid_alive(cluster.pids["kubelet"]["pid"]) \
                        or not kubelet_hit_start_race(log_path, logged_before):
                    raise
            log(f"the kubelet crashed on its start-up data race ({KUBELET_START_RACE!r} in {log_path});"
                " starting it again, as its systemd unit would")

    def _start_kube_proxy(self, cluster, pki, deadline):
        kubeconfig = self._kubeconfig(cluster, "kube-proxy", pki["kube-proxy.crt"], pki["kube-proxy.key"])
        healthz, metrics = free_ports(2)
        config = self._write("kube-proxy.yaml", kube_proxy_config(kubeconfig, healthz, metrics))
        cluster._spawn("kube-proxy", [os.path.join(self.bin_dir, "kube-proxy"), f"--config={config}", "--v=1"])
        cluster._wait(deadline, "kube-proxy healthz", lambda: http_ok(f"http://127.0.0.1:{healthz}/healthz"))

    def _start_coredns(self, cluster, pki, deadline):
        for obj in COREDNS_RBAC:
            kind = "clusterroles" if obj["kind"] == "ClusterRole" else "clusterrolebindings"
            cluster.create(f"/apis/rbac.authorization.k8s.io/v1/{kind}", obj)
        kubeconfig = self._kubeconfig(cluster, "coredns", pki["coredns.crt"], pki["coredns.key"])
        health, ready = free_ports(2)
        conf = self._write("Corefile", corefile(kubeconfig, health, ready))
        cluster._spawn("coredns", [os.path.join(self.bin_dir, "coredns"), "-conf", conf])
        cluster._wait(deadline, "CoreDNS ready", lambda: http_ok(f"http://127.0.0.1:{ready}/ready"))

    # -- stop
    def stop(self):
        """Remove everything this node made; raise NodeError naming what stayed.
        A node that never got the machine lock touches nothing (another cluster may own it)."""
        if self.record is None:
            return
        problems = teardown(self.record)
        self.record = None
        if problems:
            raise NodeError("real node left behind: " + "; ".join(problems))

