"""The real node's names and addresses, and the configuration its components run with (pure).

Addresses (all inside 198.18.0.0/15, the range reserved for network tests):
    bridge pcbr0     198.18.0.1/16  the node's IP: kubelet :10250, CoreDNS :53, kube-apiserver
    pods             198.18.1.1 - 198.18.255.254 (host-local IPAM, gateway 198.18.0.1)
    Services         198.19.0.0/16  (`kubernetes` = 198.19.0.1:443, routed by kube-proxy)
"""

NODE_NAME = "paddlecloud-node"
BRIDGE = "pcbr0"
# The bridge's own MAC address, set when it is made (locally administered). A bridge without one
# takes the lowest of its ports' addresses and changes it as pods come and go; the pods' ARP
# entries for 198.18.0.1 then point at an address nobody answers for until they expire: a DNS
# query (or any packet to the node) is lost for seconds about 20 s after another pod went away.
BRIDGE_MAC = "02:50:43:00:00:01"
NODE_IP = "198.18.0.1"
POD_SUBNET = "198.18.0.0/16"
POD_RANGE = ("198.18.1.1", "198.18.255.254")
SERVICE_CIDR = "198.19.0.0/16"
KUBERNETES_SERVICE_IP = "198.19.0.1"
CLUSTER_DOMAIN = "cluster.local"
KUBELET_PORT = 10250
CNI_NETWORK = "paddlecloud"
CNI_BIN_DIR = "/usr/lib/cni"


def containerd_config(root, state, socket, cni_conf_dir, runc_root, sandbox_image, cri=True):
    """containerd's config.toml (version 2): our own root/state/socket, CRI with our CNI dirs."""
    disabled = ['"io.containerd.snapshotter.v1.aufs"', '"io.containerd.snapshotter.v1.btrfs"',
                '"io.containerd.snapshotter.v1.zfs"', '"io.containerd.snapshotter.v1.devmapper"',
                '"io.containerd.tracing.processor.v1.otlp"', '"io.containerd.internal.v1.tracing"']
    if not cri:
        disabled.append('"io.containerd.grpc.v1.cri"')
    return f"""version = 2
root = "{root}"
state = "{state}"
disabled_plugins = [{", ".join(disabled)}]

[grpc]
  address = "{socket}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{root}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{cni_conf_dir}"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "{runc_root}"
        SystemdCgroup = false
"""


def cni_conflist(ipam_dir):
    """The pod network: bridge pcbr0 (gateway 198.18.0.1, no masquerading), host-local IPAM, portmap."""
    return {
        "cniVersion": "1.0.0", "name": CNI_NETWORK,
        "plugins": [
            {"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False, "hairpinMode": True,
             "ipam": {"type": "host-local", "dataDir": ipam_dir,
                      "ranges": [[{"subnet": POD_SUBNET, "rangeStart": POD_RANGE[0],
                                   "rangeEnd": POD_RANGE[1], "gateway": NODE_IP}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def kubelet_config(pki, healthz_port, pod_logs_dir, containerd_socket):
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "failCgroupV1": False, "cgroupDriver": "cgroupfs", "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{containerd_socket}",
        "address": NODE_IP, "port": KUBELET_PORT, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": healthz_port,
        "clusterDNS": [NODE_IP], "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": "",  # pods never inherit this machine's resolvers
        "tlsCertFile": pki["kubelet.crt"], "tlsPrivateKeyFile": pki["kubelet.key"],
        "authentication": {"x509": {"clientCAFile": pki["ca.crt"]}, "webhook": {"enabled": True},
                           "anonymous": {"enabled": False}},
        "authorization": {"mode": "Webhook"},
        "podLogsDir": pod_logs_dir,
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,  # never delete our images
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                         "nodefs.inodesFree": "1%"},
        "serializeImagePulls": False, "registerNode": True, "maxPods": 110,
        "protectKernelDefaults": False, "rotateCertificates": False, "serverTLSBootstrap": False,
        "staticPodPath": "", "shutdownGracePeriod": "0s", "shutdownGracePeriodCriticalPods": "0s",
    }


def kube_proxy_config(kubeconfig, healthz_port, metrics_port):
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": kubeconfig},
        "mode": "iptables", "clusterCIDR": POD_SUBNET, "hostnameOverride": NODE_NAME,
        "healthzBindAddress": f"127.0.0.1:{healthz_port}", "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        "nodePortAddresses": [f"{NODE_IP}/32"],
        "iptables": {"localhostNodePorts": False},  # so route_localnet stays as it is
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }


def corefile(kubeconfig, health_port, ready_port):
    """CoreDNS on 198.18.0.1:53 answering cluster names only (no forwarding: nothing dials out)."""
    return f""".:53 {{
    bind {NODE_IP}
    errors
    health 127.0.0.1:{health_port}
    ready 127.0.0.1:{ready_port}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    cache 5
}}
"""


COREDNS_RBAC = [
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
     "metadata": {"name": "system:coredns"},
     "rules": [{"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
                "verbs": ["list", "watch"]},
               {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}]},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
     "metadata": {"name": "system:coredns"},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
     "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "system:coredns"}]},
]
