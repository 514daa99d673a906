"""The real node (tools/k8s/node.py): real pods from the images `make images` builds.

Nothing here is fed by the test: containers run in containerd under the kubelet, logs
come from the kubelet, DNS from CoreDNS, Service routing from kube-proxy. Needs root
(skips with one line otherwise; fails under PADDLECLOUD_REQUIRE_REAL_NODE=1). The tests marked `own_real_node` start and SIGKILL clusters
of their own; conftest orders them before the session's cluster takes the node.
"""

import fcntl
import json
import os
import signal
import subprocess
import sys
import time

import kubernetes
import pytest

from availability import skip_or_fail
from cluster_helpers import wait_for
from tools.k8s import node, node_config, procutil
from tools.k8s.cluster import GPU_TAINT, IMAGE_REFS, Cluster, ClusterError, cri_log_lines

LAUNCHER = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "k8s", "cluster.py")
WORKER = IMAGE_REFS["worker"]
NOTEBOOK = IMAGE_REFS["notebook"]
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}
GPU_TOLERATION = {"key": GPU_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}
LOCK_WAIT = float(os.environ.get("PADDLECLOUD_NODE_LOCK_TIMEOUT", "600"))  # another session's node may be up


@pytest.fixture(scope="module", autouse=True)
def host_runs_the_real_node():
    """Every test here needs a host that can run the real node: one reason for the module."""
    reason = node.host_unavailable_reason()
    if reason:
        skip_or_fail(f"real node: {reason}")


# ---------------------------------------------------------------- pods


def restricted_pod(name, image, command, restart="Never", memory=None, service_account=None, **spec):
    """A pod that passes Pod Security `restricted` (uid from the image: 1000)."""
    container = {"name": "main", "image": image, "imagePullPolicy": "Never", "command": command,
                 "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                 "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}}}
    if memory:
        container["resources"]["limits"] = {"memory": memory}
    pod_spec = {"restartPolicy": restart, "terminationGracePeriodSeconds": 1,
                "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [container], **spec}
    if service_account:
        pod_spec["serviceAccountName"] = service_account
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": pod_spec}


def pod_phase(core_v1, namespace, name):
    return core_v1.read_namespaced_pod(name, namespace).status.phase


def wait_pod_done(core_v1, namespace, name, timeout=120):
    return wait_for(lambda: pod_phase(core_v1, namespace, name) in ("Succeeded", "Failed")
                    and core_v1.read_namespaced_pod(name, namespace), timeout=timeout, what=f"pod {name} done")


def waiting_reason(core_v1, namespace, name):
    statuses = core_v1.read_namespaced_pod(name, namespace).status.container_statuses or []
    waiting = statuses[0].state.waiting if statuses else None
    return (waiting.reason, waiting.message or "") if waiting else (None, "")


def wait_waiting_reason(core_v1, namespace, name, want=None, timeout=90):
    """(reason, message) of the pod's container once the kubelet reports why it waits
    (not just ContainerCreating); with `want`, until it is that reason."""
    def reported():
        reason, message = waiting_reason(core_v1, namespace, name)
        done = reason == want if want else reason not in (None, "ContainerCreating")
        return (reason, message) if done else None
    return wait_for(reported, timeout=timeout, what=f"pod {name} waiting reason {want or ''}")


def logs(core_v1, namespace, name):
    return core_v1.read_namespaced_pod_log(name, namespace)


# ---------------------------------------------------------------- what a node leaves on the host


def _run(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True).stdout


def host_state():
    """What a real node could leave behind, as seen by the usual tools."""
    chains = sorted(line.split()[0] for tool in ("iptables-save", "ip6tables-save")
                    for line in _run(tool).splitlines()
                    if line.startswith(":") and line[1:].startswith(node.OUR_CHAIN_PREFIXES))
    rules = sorted(line for tool in ("iptables-save", "ip6tables-save") for line in _run(tool).splitlines()
                   if line.startswith("-A") and any(p in line for p in node.OUR_CHAIN_PREFIXES))
    procs = sorted(f"{p} {' '.join(procutil.pid_cmdline(p))[:100]}" for p in node.node_processes({}))
    return {
        "links": sorted(line.split(":")[1].strip().split("@")[0] for line in _run("ip", "-o", "link").splitlines()
                        if node_config.BRIDGE in line or "veth" in line),
        "netns": _run("ip", "netns", "list").split(),
        "mounts": sorted(line for line in _run("mount").splitlines()
                         if any(d in line for d in (node.RUN_DIR, "/kubelet/", node.CONTAINERD_ROOT))),
        "iptables chains": chains, "iptables rules": rules,
        "nft tables": sorted(t for t in _run("nft", "list", "tables").splitlines() if "kube" in t),
        "ipsets": node.ipsets(),
        "kubepods cgroups": node.cgroup_dirs(),
        "processes": procs,
        "containerd state": os.path.exists(node.CONTAINERD_STATE) or os.path.exists(node.CONTAINERD_SOCKET),
        "machine lock held": _lock_held(),
        "host dirs": {path: os.path.exists(path) for path in node.HOST_DIRS},
        "sysctls": {name: node.read_sysctl(name) for name in node.SYSCTLS},
    }


def _lock_held():
    with open(node.LOCK_FILE, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return False
        except BlockingIOError:
            return True


def cli(*args, timeout=900):
    return subprocess.run([sys.executable, LAUNCHER, *args], capture_output=True, text=True, timeout=timeout)


def run_a_pod(kubeconfig, namespace="default"):
    """Start a plain pod on the real node and wait until it runs (containers, netns, veth, mounts)."""
    with kubernetes.config.new_client_from_config(config_file=kubeconfig) as client:
        core = kubernetes.client.CoreV1Api(client)
        core.create_namespaced_pod(namespace, restricted_pod("sleeper", WORKER, ["sleep", "3600"]))
        wait_for(lambda: pod_phase(core, namespace, "sleeper") == "Running", timeout=120, what="sleeper Running")


def sigkill_everything(state_dir):
    """Crash a real-node cluster: SIGKILL its processes, its containerd shims and the lock holder."""
    with open(os.path.join(state_dir, "pids.json")) as fh:
        pids = [info["pid"] for info in json.load(fh).values()]
    pids += node.node_processes(node.read_record())
    for pid in set(pids):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    wait_for(lambda: not any(procutil.pid_alive(p) for p in pids), timeout=10, what="killed processes gone")


# ---------------------------------------------------------------- clean-up first (own clusters)


@pytest.mark.own_real_node
def test_a_sigkilled_cluster_leaves_nothing_after_down_or_the_next_up(k8s_bin_dir, tmp_path):
    node.teardown_when_free(LOCK_WAIT)  # whatever an earlier run left; `before` is the clean machine
    before = host_state()
    state = str(tmp_path / "crash")
    t0 = time.monotonic()
    up = cli("up", "--state-dir", state, "--bin-dir", k8s_bin_dir, "--real-node", "yes", "--lock-timeout", "60")
    print(f"\nreal-node cluster up in {time.monotonic() - t0:.1f}s")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        kubeconfig = os.path.join(state, "kubeconfig")
        run_a_pod(kubeconfig)
        assert host_state() != before  # there is something to clean up
        sigkill_everything(state)
        # The next `up` cleans up after the killed run by itself...
        up = cli("up", "--state-dir", state, "--bin-dir", k8s_bin_dir, "--real-node", "yes", "--lock-timeout", "60")
        assert up.returncode == 0, up.stdout + up.stderr
        ctr = ["ctr", "--address", node.CONTAINERD_SOCKET, "-n", node.CRI_NAMESPACE]
        assert _run(*ctr, "containers", "ls", "-q").split() == []  # the killed run's containers are gone
        assert _run(*ctr, "tasks", "ls", "-q").split() == []
        # ...and after a crash of that one, `down` leaves the machine as it was.
        run_a_pod(kubeconfig)
        sigkill_everything(state)
        down = cli("down", "--state-dir", state)
        assert down.returncode == 0, down.stdout + down.stderr
        assert host_state() == before
    finally:
        down = cli("down", "--state-dir", state)
    assert down.returncode == 0, down.stdout + down.stderr
    assert host_state() == before
    assert node.read_record() is None


OWNER = """
import sys, time
sys.path.insert(0, {repo!r})
from tools.k8s.cluster import Cluster
Cluster({state!r}, {bin_dir!r}, nodes=1, real_node=True).start()
print("ready", flush=True)
time.sleep(3600)
"""


@pytest.mark.own_real_node
def test_a_node_whose_owner_was_killed_is_taken_over_by_the_next_start(k8s_bin_dir, tmp_path):
    """A test session SIGKILLed mid-run leaves its cluster running: the next start stops it."""
    node.teardown_when_free(LOCK_WAIT)
    before = host_state()
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    owner = subprocess.Popen([sys.executable, "-c", OWNER.format(repo=repo, state=str(tmp_path / "owned"),
                                                                 bin_dir=k8s_bin_dir)],
                             stdout=subprocess.PIPE, text=True)
    try:
        said = []  # "ready" after what the start printed (images it imported, ...)
        for line in owner.stdout:
            said.append(line.strip())
            if said[-1] == "ready":
                break
        assert said[-1:] == ["ready"], said
        orphaned = [info["pid"] for info in node.read_record()["pids"].values()]
    finally:
        owner.kill()
        owner.wait()
    assert all(procutil.pid_alive(p) for p in orphaned)  # the cluster outlives its owner
    state = str(tmp_path / "next")
    # without Kueue, as the owner's cluster ran: the takeover is the node's, Kueue has no part in it
    up = cli("up", "--state-dir", state, "--bin-dir", k8s_bin_dir, "--real-node", "yes", "--kueue", "no",
             "--lock-timeout", "60")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        # Taken over, not waited out: with the owner alive, `up` would give up after its 60 s lock timeout.
        assert "outlived its owner" in up.stdout
        assert not any(procutil.pid_alive(p) for p in orphaned)
        assert node.read_record()["state_dir"] == state
    finally:
        down = cli("down", "--state-dir", state)
    assert down.returncode == 0, down.stdout + down.stderr
    assert host_state() == before


# ---------------------------------------------------------------- the shared real-node cluster


def test_placement_cpu_pods_on_the_real_node_gpu_pods_on_kwok(real_cluster, core_v1, make_namespace):
    nodes = {n.metadata.name: n for n in core_v1.list_node().items}
    assert set(nodes) == {real_cluster.real_node_name, *real_cluster.node_names}
    real = nodes[real_cluster.real_node_name]
    assert [a.address for a in real.status.addresses if a.type == "InternalIP"] == [node_config.NODE_IP]
    for name in real_cluster.node_names:
        assert [t.to_dict() for t in nodes[name].spec.taints] == [
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule", "time_added": None}]
    ns = make_namespace()
    core_v1.create_namespaced_pod(ns, restricted_pod("cpu", WORKER, ["true"]))
    gpu = restricted_pod("gpu", WORKER, ["true"], tolerations=[GPU_TOLERATION])
    gpu["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    core_v1.create_namespaced_pod(ns, gpu)
    placed = wait_for(lambda: all(core_v1.read_namespaced_pod(p, ns).spec.node_name for p in ("cpu", "gpu"))
                      and {p: core_v1.read_namespaced_pod(p, ns).spec.node_name for p in ("cpu", "gpu")},
                      timeout=30, what="both pods scheduled")
    assert placed["cpu"] == real_cluster.real_node_name
    assert placed["gpu"] in real_cluster.node_names
    assert wait_pod_done(core_v1, ns, "cpu").status.phase == "Succeeded"


def bridge_ports_and_address():
    """The node bridge's ports (its pods' veths) and its MAC address."""
    with open(f"/sys/class/net/{node_config.BRIDGE}/address") as fh:
        return node.bridge_ports(), fh.read().strip()


def test_the_node_bridge_keeps_its_address_as_pods_come_and_go(real_cluster, core_v1, make_namespace):
    """A bridge takes the lowest MAC of its ports unless given one: as pods came and went it
    changed, and a pod's packets to the node (198.18.0.1: DNS, the API server) went to the old
    address for seconds (a job's worker failed on its own name not resolving)."""
    ns = make_namespace()
    before, _ = bridge_ports_and_address()
    for i in range(3):
        core_v1.create_namespaced_pod(ns, restricted_pod(f"p{i}", WORKER, ["sleep", "600"]))
    wait_for(lambda: all(pod_phase(core_v1, ns, f"p{i}") == "Running" for i in range(3)), timeout=60,
             what="3 pods Running")
    during = wait_for(lambda: (found := bridge_ports_and_address()) and len(set(found[0]) - set(before)) >= 3
                      and found, timeout=30, what="the 3 pods' veths on the bridge")
    for i in range(3):
        core_v1.delete_namespaced_pod(f"p{i}", ns, grace_period_seconds=0)
    after = wait_for(lambda: (found := bridge_ports_and_address()) and not set(found[0]) - set(before) and found,
                     timeout=60, what="the pods' veths gone from the bridge")
    assert during[1] == after[1] == node_config.BRIDGE_MAC


def test_kwok_gpu_pods_still_serve_logs_from_files(real_cluster, core_v1, make_namespace, tmp_path):
    ns = make_namespace()
    pod = restricted_pod("fake-gpu", "docker.io/paddlecloud/not-pulled:0", ["true"], tolerations=[GPU_TOLERATION])
    pod["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    core_v1.create_namespaced_pod(ns, pod)
    wait_for(lambda: pod_phase(core_v1, ns, "fake-gpu") == "Running", timeout=30, what="KWOK pod Running")
    log_file = tmp_path / "fake.log"
    log_file.write_text(cri_log_lines(["from a file"]))
    real_cluster.set_pod_log(ns, "fake-gpu", str(log_file))
    assert wait_for(lambda: _log_or_none(core_v1, ns, "fake-gpu"), timeout=15, what="log") == "from a file\n"


def _log_or_none(core_v1, namespace, name):
    try:
        return logs(core_v1, namespace, name)
    except kubernetes.client.ApiException:
        return None


def test_a_second_real_node_cluster_waits_then_gives_up_and_the_first_keeps_running(real_cluster, core_v1,
                                                                                    k8s_bin_dir, tmp_path):
    second = Cluster(str(tmp_path / "second"), k8s_bin_dir, nodes=1, real_node=True, node_lock_timeout=3)
    with pytest.raises(ClusterError) as info:
        second.start()
    assert "waited 3s for" in str(info.value)  # it gave up at its own lock timeout, not at once
    assert "another real-node cluster is running" in str(info.value)
    assert real_cluster.state_dir in str(info.value)
    assert real_cluster.node_ready(real_cluster.real_node_name)
    assert node.read_record()["state_dir"] == real_cluster.state_dir


def test_restricted_notebook_pod_runs_as_uid_1000_and_root_is_refused(real_cluster, core_v1,
                                                                      make_namespace):
    ns = make_namespace("pss", labels=RESTRICTED)
    script = ("id -u; id -g; echo HOME=$HOME; command -v jupyterhub-singleuser; "
              "python -c 'import paddle_ext, paddle; print(\"paddle\", paddle.__version__)'; "
              "jupyter server extension list 2>&1 | grep paddle_ext; echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES")
    core_v1.create_namespaced_pod(ns, restricted_pod("notebook", NOTEBOOK, ["sh", "-c", script]))
    pod = wait_pod_done(core_v1, ns, "notebook", timeout=180)
    out = logs(core_v1, ns, "notebook")
    assert pod.status.phase == "Succeeded", out
    lines = out.splitlines()
    assert lines[:3] == ["1000", "100", "HOME=/home/jovyan"], out
    assert lines[3].endswith("/bin/jupyterhub-singleuser")
    assert "paddle 3.3.1" in lines
    assert any("paddle_ext" in line and "enabled" in line for line in lines), out
    # Our images show no GPU to a container that requests none, even on a GPU node (issue 25).
    assert lines[-1] == "NVIDIA_VISIBLE_DEVICES=void", out

    root = restricted_pod("root", NOTEBOOK, ["id"])
    root["spec"]["securityContext"] = {"runAsUser": 0, "seccompProfile": {"type": "RuntimeDefault"}}
    with pytest.raises(kubernetes.client.ApiException) as info:
        core_v1.create_namespaced_pod(ns, root)
    assert info.value.status == 403 and "violates PodSecurity" in info.value.body

    # Where admission lets it through, the kubelet itself refuses a root container under runAsNonRoot.
    open_ns = make_namespace("open")
    root["spec"]["securityContext"] = {"runAsNonRoot": True, "runAsUser": 0}
    core_v1.create_namespaced_pod(open_ns, root)
    reason, message = wait_waiting_reason(core_v1, open_ns, "root")
    assert reason == "CreateContainerConfigError" and "non-root" in message


def test_logs_plain_and_followed_are_what_the_container_wrote(real_cluster, core_v1, make_namespace):
    ns = make_namespace(labels=RESTRICTED)
    script = "for i in 1 2 3 4 5; do echo \"line $i\"; sleep 0.5; done; echo done >&2"
    core_v1.create_namespaced_pod(ns, restricted_pod("talker", WORKER, ["sh", "-c", script]))
    wait_for(lambda: pod_phase(core_v1, ns, "talker") != "Pending", timeout=60, what="talker started")
    resp = core_v1.read_namespaced_pod_log("talker", ns, follow=True, _preload_content=False,
                                                _request_timeout=60)
    try:
        followed = b"".join(resp.stream(amt=None)).decode()
    finally:
        resp.close()
    want = "line 1\nline 2\nline 3\nline 4\nline 5\ndone\n"
    assert followed == want
    assert wait_pod_done(core_v1, ns, "talker").status.phase == "Succeeded"
    assert logs(core_v1, ns, "talker") == want
    kubectl = subprocess.run([os.path.join(real_cluster.bin_dir, "kubectl"), "--kubeconfig", real_cluster.kubeconfig,
                              "-n", ns, "logs", "talker"], capture_output=True, text=True, check=True)
    assert kubectl.stdout == want


API_PROBE = """
import json, os, ssl, sys, urllib.error, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
token = open(f"{sa}/token").read()
ctx = ssl.create_default_context(cafile=f"{sa}/ca.crt")
base = f"https://{os.environ['KUBERNETES_SERVICE_HOST']}:{os.environ['KUBERNETES_SERVICE_PORT']}"
print("server", base)
for ns in sys.argv[1:]:
    req = urllib.request.Request(f"{base}/api/v1/namespaces/{ns}/pods", headers={"Authorization": "Bearer " + token})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            print(ns, resp.status, len(json.load(resp)["items"]))
    except urllib.error.HTTPError as exc:
        print(ns, exc.code, json.load(exc)["reason"])
"""


def test_a_pod_reaches_the_api_server_through_the_kubernetes_service_with_its_own_token(
        real_cluster, core_v1, rbac_v1, make_namespace):
    mine, other = make_namespace("mine", labels=RESTRICTED), make_namespace("other")
    core_v1.create_namespaced_service_account(mine, {"metadata": {"name": "robot"}})
    rbac_v1.create_namespaced_role(mine, {
        "metadata": {"name": "pod-reader"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]})
    rbac_v1.create_namespaced_role_binding(mine, {
        "metadata": {"name": "robot"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": mine}]})
    svc = core_v1.read_namespaced_service("kubernetes", "default")
    assert svc.spec.cluster_ip == node_config.KUBERNETES_SERVICE_IP
    core_v1.create_namespaced_pod(mine, restricted_pod(
        "probe", WORKER, ["python", "-c", API_PROBE, mine, other], service_account="robot"))
    pod = wait_pod_done(core_v1, mine, "probe")
    out = logs(core_v1, mine, "probe")
    assert pod.status.phase == "Succeeded", out
    assert out.splitlines() == [f"server https://{node_config.KUBERNETES_SERVICE_IP}:443", f"{mine} 200 1",
                                f"{other} 403 Forbidden"]


DNS_PROBE = """
import os, socket, time
job, names = os.environ["JOB"], []
for name in (f"{job}-0.{job}", f"{job}-1.{job}", "kubernetes.default.svc.cluster.local"):
    for _ in range(120):
        try:
            print(name, socket.gethostbyname(name), flush=True)
            break
        except OSError:
            time.sleep(0.5)
    else:
        print(name, "unresolved", flush=True)
time.sleep(3)  # stay up until the other worker resolved this one too
"""


def headless_service(name, publish_not_ready=True):
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"clusterIP": "None", "selector": {"job-name": name},
                     "publishNotReadyAddresses": publish_not_ready}}


def indexed_job(name, command, image=WORKER, workers=2, env=None, memory=None):
    pod = restricted_pod(name, image, command, memory=memory, subdomain=name)["spec"]
    pod["containers"][0]["env"] = [{"name": k, "value": v} for k, v in (env or {}).items()]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"completionMode": "Indexed", "completions": workers, "parallelism": workers,
                     "backoffLimit": 0, "template": {"spec": pod}}}


def job_pods(core_v1, namespace, job):
    pods = core_v1.list_namespaced_pod(namespace, label_selector=f"job-name={job}").items
    return sorted(pods, key=lambda p: p.metadata.annotations["batch.kubernetes.io/job-completion-index"])


def wait_job(batch_v1, namespace, name, timeout):
    def finished():
        conditions = batch_v1.read_namespaced_job_status(name, namespace).status.conditions or []
        done = [c.type for c in conditions if c.type in ("Complete", "Failed") and c.status == "True"]
        return done[0] if done else None
    return wait_for(finished, timeout=timeout, interval=1, what=f"job {name} finished")


def test_dns_resolves_indexed_job_workers_and_services_in_pods(real_cluster, core_v1, batch_v1,
                                                                make_namespace):
    ns = make_namespace(labels=RESTRICTED)
    core_v1.create_namespaced_service(ns, headless_service("dnsjob"))
    batch_v1.create_namespaced_job(ns, indexed_job("dnsjob", ["python", "-c", DNS_PROBE], env={"JOB": "dnsjob"}))
    assert wait_job(batch_v1, ns, "dnsjob", timeout=120) == "Complete"
    pods = job_pods(core_v1, ns, "dnsjob")
    ips = [p.status.pod_ip for p in pods]
    for pod in pods:
        out = logs(core_v1, ns, pod.metadata.name).splitlines()
        assert out == [f"dnsjob-0.dnsjob {ips[0]}", f"dnsjob-1.dnsjob {ips[1]}",
                       f"kubernetes.default.svc.cluster.local {node_config.KUBERNETES_SERVICE_IP}"], out
    assert all(ip.startswith("198.18.") for ip in ips)


def test_over_its_memory_limit_a_container_is_oomkilled(real_cluster, core_v1, make_namespace):
    ns = make_namespace(labels=RESTRICTED)
    hog = "x = bytearray(512 * 1024 * 1024); print('survived')"
    core_v1.create_namespaced_pod(ns, restricted_pod("hog", WORKER, ["python", "-c", hog], memory="64Mi"))
    pod = wait_pod_done(core_v1, ns, "hog")
    terminated = pod.status.container_statuses[0].state.terminated
    assert pod.status.phase == "Failed"
    assert (terminated.reason, terminated.exit_code) == ("OOMKilled", 137)


def test_a_missing_image_is_reported_by_the_kubelet_and_never_pulled_from_outside(real_cluster, core_v1,
                                                                                 make_namespace):
    ns = make_namespace(labels=RESTRICTED)
    missing = "docker.io/paddlecloud/no-such-image:0.0.0"
    core_v1.create_namespaced_pod(ns, restricted_pod("never", missing, ["true"]))
    if_absent = restricted_pod("pull", missing, ["true"])
    if_absent["spec"]["containers"][0]["imagePullPolicy"] = "IfNotPresent"
    core_v1.create_namespaced_pod(ns, if_absent)

    reason, message = wait_waiting_reason(core_v1, ns, "never")
    assert reason == "ErrImageNeverPull" and missing in message
    _, message = wait_waiting_reason(core_v1, ns, "pull", want="ImagePullBackOff")
    assert missing in message
    events = core_v1.list_namespaced_event(ns, field_selector="involvedObject.name=pull").items
    failed = [e.message for e in events if e.reason == "Failed" and "Failed to pull" in e.message]
    assert failed and all(node.PULL_PROXY.removeprefix("http://") in m for m in failed), failed


def test_hub_and_proxy_images_run(real_cluster, core_v1, make_namespace):
    ns = make_namespace(labels=RESTRICTED)
    core_v1.create_namespaced_pod(ns, restricted_pod("hub", IMAGE_REFS["hub"], ["jupyterhub", "--version"]))
    core_v1.create_namespaced_pod(ns, restricted_pod("proxy", IMAGE_REFS["proxy"],
                                                          ["configurable-http-proxy", "--version"]))
    for name, want in (("hub", "6."), ("proxy", "5.3.0")):
        pod = wait_pod_done(core_v1, ns, name)
        assert pod.status.phase == "Succeeded" and logs(core_v1, ns, name).startswith(want)
