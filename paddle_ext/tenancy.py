"""Kubernetes objects that make a user's namespace theirs (pure functions -> dicts).

The hub's spawner (paddle_ext.hub.spawner) creates these before each notebook starts;
tests build the same objects. The notebook's service account may manage jobs and
read their pods, logs, services and events in its own namespace only.
"""

from __future__ import annotations

from .constants import (GPU_RESOURCE, HUB_API_PORT, LIMIT_RANGE_NAME, MANAGED_BY, MANAGED_BY_LABEL, NOTEBOOK_POD_LABELS,
                        NOTEBOOK_ROLE, NOTEBOOK_SERVICE_ACCOUNT, QUOTA_NAME, USER_LABEL)
from .jobkinds import JOB_KINDS, NOTEBOOK_JOB_VERBS
from .quota.model import Effective, quota_annotations, resource_quota_hard

NOTEBOOK_RULES = (
    *(kind.rule(NOTEBOOK_JOB_VERBS) for kind in JOB_KINDS.values()),
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete", "deletecollection"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
    # A job's code travels in an immutable ConfigMap of its own (paddle_ext.workspace).
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create", "patch", "delete"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["resourcequotas", "limitranges"], "verbs": ["get", "list", "watch"]},
    # Kueue: the job's Workload (admitted, queued, preempted) and the namespace's LocalQueue.
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads", "localqueues"], "verbs": ["get", "list", "watch"]},
)


# A user's Services stay inside the cluster: jobs need headless Services, never a NodePort
# or a LoadBalancer (either exposes pods outside it). In every user's ResourceQuota, always.
NO_EXPOSURE_HARD = {"services.nodeports": "0", "services.loadbalancers": "0"}
# How many objects of each kind a user's namespace may hold, and its scratch disk: each code
# snapshot is a ConfigMap of up to 1 MiB and each job a Job (+ a Service), so without counts
# one user could fill etcd. Generous for one notebook and a long job history (a job is a Job,
# a Service and a ConfigMap); a site changes them with settings.object_quota.
OBJECT_QUOTA = {
    **{f"count/{kind.plural}.{kind.api_group}": "200" for kind in JOB_KINDS.values()},
    "count/configmaps": "220", "count/services": "220", "count/secrets": "50", "persistentvolumeclaims": "20",
    "requests.ephemeral-storage": "100Gi", "limits.ephemeral-storage": "2Ti",
}


def pod_security_labels(level: str = "restricted") -> dict[str, str]:
    return {f"pod-security.kubernetes.io/{mode}": level for mode in ("enforce", "audit", "warn")}


POD_SECURITY_PREFIX = "pod-security.kubernetes.io/"


def user_namespace_labels(level: str = "restricted") -> dict[str, str]:
    """The labels a user namespace is created with (KubeSpawner expands {username}): ours,
    the user's, and Pod Security."""
    return {**MANAGED_BY, **pod_security_labels(level), USER_LABEL: "{username}"}


def namespace_owner_problem(name: str, present: dict | None, expected: dict) -> str | None:
    """Why the existing namespace `name` (labels `present`) is not ours to use for the user
    whose namespace labels are `expected` (expanded); None when it is. Ours: made by us
    (managed-by paddlecloud) for this very user (the user label, when the site sets one)."""
    present = present or {}
    required = {MANAGED_BY_LABEL: MANAGED_BY[MANAGED_BY_LABEL]}
    if USER_LABEL in expected:
        required[USER_LABEL] = expected[USER_LABEL]
    wrong = [f"{key}={value}" for key, value in required.items() if present.get(key) != value]
    if not wrong:
        return None
    return (f"The namespace {name} already exists and was not made by PaddleCloud for this user "
            f"(it lacks the label{'s' if len(wrong) > 1 else ''} {', '.join(wrong)}), so the server is not "
            "started there. Ask an admin to remove or relabel it, or to choose another user_namespace_template.")


def pod_security_patch(present: dict | None, expected: dict) -> dict[str, str]:
    """The Pod Security labels to set on a namespace of ours so it carries the ones
    `expected` names (restricted when it names none); {} when it carries them already."""
    present = present or {}
    wanted = {key: value for key, value in expected.items() if key.startswith(POD_SECURITY_PREFIX)} \
        or pod_security_labels()
    return {key: value for key, value in wanted.items() if present.get(key) != value}


def service_account(ns: str) -> dict:
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": NOTEBOOK_SERVICE_ACCOUNT, "namespace": ns, "labels": dict(MANAGED_BY)}}


def role(ns: str) -> dict:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": NOTEBOOK_ROLE, "namespace": ns, "labels": dict(MANAGED_BY)},
            "rules": [dict(rule) for rule in NOTEBOOK_RULES]}


def role_binding(ns: str, service_account_name: str = NOTEBOOK_SERVICE_ACCOUNT, cluster_role: str = "") -> dict:
    """Grants the notebook's rules to its service account: the namespace's own Role, or, with
    `cluster_role`, a ClusterRole holding NOTEBOOK_RULES (bound here, so valid here only)."""
    ref = {"kind": "ClusterRole", "name": cluster_role} if cluster_role else {"kind": "Role", "name": NOTEBOOK_ROLE}
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": NOTEBOOK_ROLE, "namespace": ns, "labels": dict(MANAGED_BY)},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", **ref},
            "subjects": [{"kind": "ServiceAccount", "name": service_account_name, "namespace": ns}]}


# The most one container may ask for (LimitRange `max`): past any node of a normal site,
# so a typo or a hostile pod cannot take a whole node's disk or memory. Sites with bigger
# nodes raise it (settings.limit_range_max).
LIMIT_RANGE_MAX = {"cpu": "128", "memory": "1Ti", "ephemeral-storage": "100Gi"}
# Scratch disk (container writable layer, logs, disk emptyDirs) a container gets when it
# names none: requested / limited.
EPHEMERAL_STORAGE_REQUEST = "256Mi"
EPHEMERAL_STORAGE_LIMIT = "20Gi"


def limit_range(ns: str, cpu: str = "1", memory: str = "2Gi", maximum: dict | None = None,
                ephemeral_request: str = EPHEMERAL_STORAGE_REQUEST, ephemeral_limit: str = EPHEMERAL_STORAGE_LIMIT
                ) -> dict:
    """Defaults for containers that name no resources, so quota accounting always works, and
    the most one container may have (`maximum`, LIMIT_RANGE_MAX by default; {} for none)."""
    limits = {"type": "Container",
              "default": {"cpu": cpu, "memory": memory, "ephemeral-storage": ephemeral_limit},
              "defaultRequest": {"cpu": cpu, "memory": memory, "ephemeral-storage": ephemeral_request}}
    maximum = LIMIT_RANGE_MAX if maximum is None else maximum
    if maximum:
        limits["max"] = {key: str(value) for key, value in maximum.items()}
    return {"apiVersion": "v1", "kind": "LimitRange",
            "metadata": {"name": LIMIT_RANGE_NAME, "namespace": ns, "labels": dict(MANAGED_BY)},
            "spec": {"limits": [limits]}}


def resource_quota(ns: str, hard: dict[str, str], annotations: dict[str, str] | None = None) -> dict:
    metadata = {"name": QUOTA_NAME, "namespace": ns, "labels": dict(MANAGED_BY)}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": metadata, "spec": {"hard": dict(hard)}}


def user_resource_quota(ns: str, effective: Effective, gpu_resource: str = GPU_RESOURCE,
                        objects: dict | None = None, annotations: dict | None = None) -> dict:
    """The user's ResourceQuota: their effective limits, the object counts and scratch disk
    (`objects`, OBJECT_QUOTA by default), and no Service that leaves the cluster; `annotations`
    ride along (with Kueue: the user's queue)."""
    objects = OBJECT_QUOTA if objects is None else objects
    hard = {**{key: str(value) for key, value in objects.items()},
            **resource_quota_hard(effective.limits, gpu_resource), **NO_EXPOSURE_HARD}
    return resource_quota(ns, hard, {**quota_annotations(effective), **(annotations or {})})


def local_queue(ns: str, name: str, cluster_queue: str, weight: str | None = None) -> dict:
    """The Kueue LocalQueue a user's jobs are submitted to (label kueue.x-k8s.io/queue-name);
    `weight` (a quantity): the user's weight in the ClusterQueue's Admission Fair Sharing."""
    spec: dict = {"clusterQueue": cluster_queue}
    if weight is not None:
        spec["fairSharing"] = {"weight": weight}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": ns, "labels": dict(MANAGED_BY)}, "spec": spec}


NOTEBOOK_PORT = 8888  # KubeSpawner's default port of the single-user server
NETWORK_POLICY_NAMES = ("paddlecloud-notebook-ingress", "paddlecloud-pods-ingress", "paddlecloud-egress")
# Where users' pods may send DNS queries unless the site names its DNS (user_network_policy
# "dns"): the cluster DNS pods, k8s-app=kube-dns in kube-system (kubeadm, kind, k3s, GKE, EKS).
CLUSTER_DNS_PEERS = ({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                      "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}},)


def user_network_policies(ns: str, hub_namespace: str, hub_pod_labels: dict, proxy_pod_labels: dict | None = None,
                          api_server: list | tuple = (), hub_api_port: int = HUB_API_PORT, egress: list | tuple = (),
                          dns: list | tuple = ()) -> list[dict]:
    """NetworkPolicies of a user namespace:
    - nothing reaches the notebook pod but the proxy and the hub (its port only);
    - the namespace's other pods (job workers) are reached from the namespace's own pods only;
    - its pods reach their own namespace's pods, the hub API, the cluster's DNS (port 53 of
      `dns`: NetworkPolicyPeers, by default CLUSTER_DNS_PEERS) and the API server
      (`api_server`: [{"cidr", "port"}]), plus any `egress` rules the site adds."""
    hub_ns = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": hub_namespace}}}
    hub = {**hub_ns, "podSelector": {"matchLabels": dict(hub_pod_labels)}}
    peers = [hub] + ([{**hub_ns, "podSelector": {"matchLabels": dict(proxy_pod_labels)}}] if proxy_pod_labels else [])

    def policy(name: str, selector: dict, kind: str, rules: list[dict]) -> dict:
        return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": name, "namespace": ns, "labels": dict(MANAGED_BY)},
                "spec": {"podSelector": selector, "policyTypes": [kind], kind.lower(): rules}}

    notebook_key, notebook_value = next(iter(NOTEBOOK_POD_LABELS.items()))
    egress_rules: list[dict] = [
        {"to": [{"podSelector": {}}]},
        {"to": [hub], "ports": [{"protocol": "TCP", "port": hub_api_port}]},
        {"to": [dict(peer) for peer in (dns or CLUSTER_DNS_PEERS)],
         "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
        *({"to": [{"ipBlock": {"cidr": entry["cidr"]}}], "ports": [{"protocol": "TCP", "port": int(entry["port"])}]}
          for entry in api_server),
        *(dict(rule) for rule in egress),
    ]
    return [
        policy(NETWORK_POLICY_NAMES[0], {"matchLabels": dict(NOTEBOOK_POD_LABELS)}, "Ingress",
               [{"from": peers, "ports": [{"protocol": "TCP", "port": NOTEBOOK_PORT}]}]),
        policy(NETWORK_POLICY_NAMES[1],
               {"matchExpressions": [{"key": notebook_key, "operator": "NotIn", "values": [notebook_value]}]},
               "Ingress", [{"from": [{"podSelector": {}}]}]),
        policy(NETWORK_POLICY_NAMES[2], {}, "Egress", egress_rules),
    ]
