"""The NetworkPolicies of the chart and of user namespaces, enforced on the real node (issue 25).

The policies are the product's own: the chart's hub and proxy policies and its
user_network_policy setting, rendered by `helm template` (tests/helm/values/minimal.yaml,
with networkPolicy.apiServer and networkPolicy.dns set to this cluster's API server and
DNS), and the user namespaces' policies the spawner writes from that setting
(paddle_ext.tenancy.user_network_policies, called as the spawner calls it). kube-router's NetworkPolicy controller
(tools/k8s/netpol.py) enforces them on the real node for this module only. Pods are real
containers on the node's bridge; connections are tried from inside them (kubectl exec).

Stand-ins, all inside 198.18.0.0/15: the hub, its proxy and a database in a hub namespace
(pods with the chart's labels and named ports); a "metadata" server (TCP) and a DNS server that
answers anything (UDP), both run by this test on the host at METADATA_IP, an address it
adds to the node's bridge. The cluster's DNS is CoreDNS on the node's address.

Each test also checks something the policies forbid, so each fails without an enforcer:
PADDLECLOUD_NETPOL_OFF=1 runs the module without one (a negative control; expect failures).
"""

import json
import os
from pathlib import Path
import socketserver
import subprocess
import sys
import threading
import uuid

import kubernetes
import pytest
import yaml

from availability import skip_or_fail
from cluster_helpers import kubectl_exec, wait_for
from paddle_ext import tenancy
from paddle_ext.constants import NOTEBOOK_POD_LABELS
from tools.k8s import netpol, node, node_config
from tools.k8s.cluster import IMAGE_REFS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helm"))
from helmlib import documents, settings_text, template, values_file  # noqa: E402  (tests/helm)

WORKER = IMAGE_REFS["worker"]
DB_LABELS = {"app.kubernetes.io/component": "database"}
# The chart's ports (helm/paddlecloud-hub/templates/_helpers.tpl), by the names its policies use.
HUB_PORTS, PROXY_PORTS = {"hub": 8081, "quota": 10101}, {"http": 8000, "api": 8001}
HUB_API_PORT, DB_PORT, NOTEBOOK_PORT, WORKER_PORT = HUB_PORTS["hub"], 5432, tenancy.NOTEBOOK_PORT, 8000
METADATA_IP = "198.18.0.254"  # on the bridge, outside the pods' range (198.18.1.1 and up)
METADATA_PORT = 8080
CLUSTER_DNS = node_config.NODE_IP
OFF = os.environ.get("PADDLECLOUD_NETPOL_OFF") == "1"

LISTEN = """
import socket, sys, threading
def serve(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(64)
    while True:
        s.accept()[0].close()
for port in sys.argv[1:]:
    threading.Thread(target=serve, args=(int(port),), daemon=True).start()
threading.Event().wait()
"""

# Tries each target from inside a pod: tcp:HOST:PORT (a connection accepted) or
# dns:HOST:PORT (an answer to an A query for kubernetes.default.svc.cluster.local).
PROBE = """
import json, os, socket, struct, sys
def tcp(host, port):
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        return True
    except OSError:
        return False
def dns(host, port):
    name = b"".join(bytes([len(p)]) + p for p in b"kubernetes.default.svc.cluster.local".split(b".")) + b"\\0"
    query = struct.pack(">HHHHHH", 0x5043, 0x0100, 1, 0, 0, 0) + name + struct.pack(">HH", 1, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(2)
    try:
        s.sendto(query, (host, int(port)))
        return s.recvfrom(512)[0][:2] == query[:2]
    except OSError:
        return False
print(json.dumps({t: (dns if t.startswith("dns:") else tcp)(*t.split(":")[1:]) for t in sys.argv[1:]}))
"""


# ---------------------------------------------------------------- stand-ins on the host


class _Accept(socketserver.BaseRequestHandler):
    def handle(self):
        pass


class _TCPServer(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


class _UDPServer(socketserver.ThreadingUDPServer):
    allow_reuse_address = True
    daemon_threads = True


class _Answer(socketserver.BaseRequestHandler):
    """Answers any DNS query with an empty response (same id, QR bit set)."""

    def handle(self):
        data, sock = self.request
        if len(data) >= 12:
            sock.sendto(data[:2] + b"\x81\x80" + data[4:], self.client_address)


@pytest.fixture(scope="module")
def metadata_server(real_cluster):
    """A TCP listener and a DNS responder at METADATA_IP (added to the node's bridge)."""
    add = ["ip", "addr", "add", f"{METADATA_IP}/32", "dev", node_config.BRIDGE]
    subprocess.run(add, check=True, capture_output=True)
    servers = []
    try:
        for server_class, handler, port in ((_TCPServer, _Accept, METADATA_PORT), (_UDPServer, _Answer, 53)):
            server = server_class((METADATA_IP, port), handler)
            servers.append(server)
            threading.Thread(target=server.serve_forever, daemon=True).start()
        yield METADATA_IP
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
        subprocess.run(["ip", "addr", "del", f"{METADATA_IP}/32", "dev", node_config.BRIDGE], capture_output=True)


# ---------------------------------------------------------------- the enforcer and the pods


@pytest.fixture(scope="module")
def enforcer(real_cluster):
    """kube-router's policy controller on the real node for this module (None with PADDLECLOUD_NETPOL_OFF=1)."""
    reason = netpol.unavailable_reason(real_cluster)
    if reason:
        skip_or_fail(f"NetworkPolicy enforcer: {reason}")
    if OFF:
        yield None
        return
    enforcer = netpol.Enforcer(real_cluster)
    enforcer.start()
    try:
        yield enforcer
    finally:
        enforcer.stop()


def listener_pod(name, labels, ports):
    """A restricted pod that accepts TCP connections on `ports` ({name: port}; Ready once the
    first accepts)."""
    container = {"name": "main", "image": WORKER, "imagePullPolicy": "Never",
                 "command": ["python", "-c", LISTEN, *map(str, ports.values())],
                 "ports": [{"name": port_name, "containerPort": port} for port_name, port in ports.items()],
                 "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                 "resources": {"requests": {"cpu": "20m", "memory": "32Mi"}},
                 "readinessProbe": {"tcpSocket": {"port": next(iter(ports.values()))}, "periodSeconds": 1}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                     "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                     "containers": [container]}}


def chart_policies(hub_ns, api_server, dns):
    """The chart's NetworkPolicies and the hub's user_network_policy setting, as `helm
    template` renders them into `hub_ns` for a site that names its API server and DNS."""
    docs = documents(template(values_file("minimal"), namespace=hub_ns, extra=(
        "--set-json", f"networkPolicy.apiServer={json.dumps(api_server)}",
        "--set-json", f"networkPolicy.dns={json.dumps(dns)}")))
    policies = [doc for doc in docs if doc["kind"] == "NetworkPolicy"]
    return policies, yaml.safe_load(settings_text(docs))["user_network_policy"]


def api_server_endpoint(api_client):
    """(address, port) the `kubernetes` Service sends pods to (the policies name that, not the ClusterIP)."""
    slices = kubernetes.client.DiscoveryV1Api(api_client).list_namespaced_endpoint_slice(
        "default", label_selector="kubernetes.io/service-name=kubernetes").items
    return slices[0].endpoints[0].addresses[0], slices[0].ports[0].port


class Net:
    """The pods of two users and of the hub, and how to try connections between them."""

    def __init__(self, cluster, core_v1, hub_ns, users, setting):
        self.cluster, self.core_v1, self.hub_ns, self.users = cluster, core_v1, hub_ns, users
        self.setting = setting  # the hub's user_network_policy, as the chart renders it
        self.ips = {}

    def ip(self, ns, pod):
        if (ns, pod) not in self.ips:
            self.ips[ns, pod] = self.core_v1.read_namespaced_pod(pod, ns).status.pod_ip
        return self.ips[ns, pod]

    def reaches(self, ns, pod, *targets):
        """{target: whether `pod` reached it}, targets as tcp:HOST:PORT or dns:HOST:PORT."""
        result = kubectl_exec(self.cluster, ns, pod, "main", "python", "-c", PROBE, *targets, timeout=120)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)


@pytest.fixture(scope="module")
def net(real_cluster, enforcer, metadata_server, api_client, core_v1):
    """Hub namespace (hub, proxy, database; the chart's policies), users a and b (a notebook
    and two job workers each, with the policies the spawner writes), all Ready, with the rules
    in place."""
    suffix = uuid.uuid4().hex[:6]
    hub_ns = f"np-hub-{suffix}"
    users = {user: f"np-{user}-{suffix}" for user in ("a", "b")}
    core_v1.create_namespace({"metadata": {"name": hub_ns}})
    for user, ns in users.items():
        labels = {key: value.replace("{username}", user) for key, value in tenancy.user_namespace_labels().items()}
        core_v1.create_namespace({"metadata": {"name": ns, "labels": labels}})
    try:
        api_ip, api_port = api_server_endpoint(api_client)
        chart, setting = chart_policies(hub_ns, [{"cidr": f"{api_ip}/32", "port": api_port}],
                                        [{"ipBlock": {"cidr": f"{CLUSTER_DNS}/32"}}])
        pods = [(hub_ns, listener_pod("hub", setting["hub_pod_labels"], HUB_PORTS)),
                (hub_ns, listener_pod("proxy", setting["proxy_pod_labels"], PROXY_PORTS)),
                (hub_ns, listener_pod("db", DB_LABELS, {"db": DB_PORT}))]
        for ns in users.values():
            pods += [(ns, listener_pod("notebook", dict(NOTEBOOK_POD_LABELS), {"notebook": NOTEBOOK_PORT})),
                     (ns, listener_pod("job-0", {"job": "train"}, {"worker": WORKER_PORT})),
                     (ns, listener_pod("job-1", {"job": "train"}, {"worker": WORKER_PORT}))]
        for ns, pod in pods:
            core_v1.create_namespaced_pod(ns, pod)
        for ns, pod in pods:
            name = pod["metadata"]["name"]
            wait_for(lambda ns=ns, name=name: _ready(core_v1, ns, name), timeout=120, what=f"pod {ns}/{name} Ready")
        networking = kubernetes.client.NetworkingV1Api(api_client)
        for policy in chart:
            networking.create_namespaced_network_policy(hub_ns, policy)
        for ns in users.values():  # as the spawner makes them (HubSpawner._make_network_policies)
            for policy in tenancy.user_network_policies(
                    ns, hub_ns, setting["hub_pod_labels"], setting.get("proxy_pod_labels"),
                    setting.get("api_server", ()), setting["hub_api_port"], setting.get("egress", ()),
                    setting.get("dns", ())):
                networking.create_namespaced_network_policy(ns, policy)
        if enforcer:
            enforcer.wait_synced()
        yield Net(real_cluster, core_v1, hub_ns, users, setting)
    finally:
        for ns in [hub_ns, *users.values()]:
            try:
                core_v1.delete_namespace(ns)
            except kubernetes.client.ApiException:
                pass


def _ready(core_v1, ns, name):
    pod = core_v1.read_namespaced_pod(name, ns)
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


# ---------------------------------------------------------------- the tests


def test_a_users_pods_cannot_reach_another_users_notebook_or_job_pods(net):
    a, b = net.users["a"], net.users["b"]
    targets = [f"tcp:{net.ip(b, 'notebook')}:{NOTEBOOK_PORT}", f"tcp:{net.ip(b, 'job-0')}:{WORKER_PORT}"]
    for pod in ("notebook", "job-0"):
        assert net.reaches(a, pod, *targets) == {t: False for t in targets}, f"from {a}/{pod}"
    # not even from a pod of the hub's namespace that is not the hub or the proxy
    assert net.reaches(net.hub_ns, "db", *targets) == {t: False for t in targets}


def test_a_job_pod_cannot_reach_the_hub_database_or_a_metadata_server(net):
    a = net.users["a"]
    hub_api = f"tcp:{net.ip(net.hub_ns, 'hub')}:{HUB_API_PORT}"
    database = f"tcp:{net.ip(net.hub_ns, 'db')}:{DB_PORT}"
    metadata = f"tcp:{METADATA_IP}:{METADATA_PORT}"
    assert net.reaches(a, "job-0", hub_api, database, metadata) == {hub_api: True, database: False, metadata: False}


def test_dns_goes_to_the_clusters_dns_only(net):
    cluster_dns, elsewhere = f"dns:{CLUSTER_DNS}:53", f"dns:{METADATA_IP}:53"
    assert net.reaches(net.users["a"], "job-0", cluster_dns, elsewhere) == {cluster_dns: True, elsewhere: False}


def test_what_the_policies_allow_still_works(net):
    a = net.users["a"]
    notebook = f"tcp:{net.ip(a, 'notebook')}:{NOTEBOOK_PORT}"
    job0, job1 = (f"tcp:{net.ip(a, pod)}:{WORKER_PORT}" for pod in ("job-0", "job-1"))
    api = f"tcp:{node_config.KUBERNETES_SERVICE_IP}:443"  # through kube-proxy, as pods reach it
    proxy = f"tcp:{net.ip(net.hub_ns, 'proxy')}:{PROXY_PORTS['http']}"
    # the proxy and the hub reach the notebook (the proxy not the job pods)
    assert net.reaches(net.hub_ns, "proxy", notebook, job0) == {notebook: True, job0: False}
    assert net.reaches(net.hub_ns, "hub", notebook) == {notebook: True}
    # job pods reach each other and the API server (not the proxy)
    assert net.reaches(a, "job-0", job1, api, proxy) == {job1: True, api: True, proxy: False}
    assert net.reaches(a, "job-1", job0) == {job0: True}
    # the notebook reaches its job pods
    assert net.reaches(a, "notebook", job0, api) == {job0: True, api: True}


def test_the_charts_hub_and_proxy_policies(net):
    """The hub takes its API port from the proxy and users' pods, its quota port from the
    proxy only; the proxy's public port is open, its API port is the hub's only."""
    hub_ns, a = net.hub_ns, net.users["a"]
    hub, quota = (f"tcp:{net.ip(hub_ns, 'hub')}:{HUB_PORTS[name]}" for name in ("hub", "quota"))
    public, api = (f"tcp:{net.ip(hub_ns, 'proxy')}:{PROXY_PORTS[name]}" for name in ("http", "api"))
    assert net.setting["hub_api_port"] == HUB_PORTS["hub"]
    assert net.reaches(hub_ns, "proxy", hub, quota) == {hub: True, quota: True}
    assert net.reaches(hub_ns, "hub", api, public) == {api: True, public: True}
    assert net.reaches(a, "job-0", hub, quota) == {hub: True, quota: False}
    # another pod of the hub's namespace: the proxy's public port only
    assert net.reaches(hub_ns, "db", hub, quota, public, api) == {hub: False, quota: False, public: True, api: False}


def _iptables_save(table):
    return subprocess.run(["iptables-save", "-t", table], capture_output=True, text=True).stdout


def test_a_killed_enforcer_is_cleaned_up_by_the_next_start(enforcer, net):
    """What a SIGKILLed kube-router left (its chains, jumps and ipsets, the mangle-table egress
    drop, the record) is removed by netpol.remove_leftovers(), which the next start, `cluster.py
    down` and the node's teardown run; the node's own rules stay. Then it starts again."""
    if enforcer is None:
        pytest.fail("no enforcer (PADDLECLOUD_NETPOL_OFF=1)")
    assert node.ipsets() and "-j KUBE-ROUTER-FORWARD" in _iptables_save("filter")
    assert os.path.exists(netpol.RECORD)
    enforcer.proc.kill()
    enforcer.proc.wait()
    assert netpol.remove_leftovers() == []
    text = _iptables_save("filter") + _iptables_save("mangle")
    assert [line for line in text.splitlines() if "KUBE-ROUTER" in line or any(
        p in line for p in (*netpol.CHAIN_PREFIXES, netpol.EGRESS_CHAIN))] == []
    assert node.ipsets() == [] and not os.path.exists(netpol.RECORD)
    assert f"-j {node.EGRESS_CHAIN}" in text  # the node's own egress drop
    enforcer.start()  # for the tests after this one and the module's teardown
    assert net.reaches(net.users["a"], "job-0", f"tcp:{METADATA_IP}:{METADATA_PORT}") == {
        f"tcp:{METADATA_IP}:{METADATA_PORT}": False}
