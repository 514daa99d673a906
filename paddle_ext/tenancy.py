"""Kubernetes objects that make a user's namespace theirs (pure functions -> dicts).

The hub creates these before each notebook starts (hub_config/jupyterhub_config.py);
tests build the same objects. The notebook's service account may manage jobs and
read their pods, logs, services and events in its own namespace only.
"""

from __future__ import annotations

NOTEBOOK_SERVICE_ACCOUNT = "paddlecloud-notebook"
NOTEBOOK_ROLE = "paddlecloud-notebook"
MANAGED_BY = {"app.kubernetes.io/managed-by": "paddlecloud"}

NOTEBOOK_RULES = (
    {"apiGroups": ["batch"], "resources": ["jobs"],
     "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
    {"apiGroups": ["kubeflow.org"], "resources": ["paddlejobs"],
     "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete", "deletecollection"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["resourcequotas", "limitranges"], "verbs": ["get", "list", "watch"]},
)


def pod_security_labels(level: str = "restricted") -> dict[str, str]:
    return {f"pod-security.kubernetes.io/{mode}": level for mode in ("enforce", "audit", "warn")}


def namespace(name: str, user: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": name, "labels": {**MANAGED_BY, "paddlecloud.io/user": user, **pod_security_labels()}}}


def service_account(ns: str) -> dict:
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": NOTEBOOK_SERVICE_ACCOUNT, "namespace": ns, "labels": dict(MANAGED_BY)}}


def role(ns: str) -> dict:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": NOTEBOOK_ROLE, "namespace": ns, "labels": dict(MANAGED_BY)},
            "rules": [dict(rule) for rule in NOTEBOOK_RULES]}


def role_binding(ns: str, service_account_name: str = NOTEBOOK_SERVICE_ACCOUNT) -> dict:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": NOTEBOOK_ROLE, "namespace": ns, "labels": dict(MANAGED_BY)},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NOTEBOOK_ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": service_account_name, "namespace": ns}]}


def limit_range(ns: str, cpu: str = "1", memory: str = "2Gi") -> dict:
    """Defaults for containers that name no resources, so quota accounting always works."""
    return {"apiVersion": "v1", "kind": "LimitRange",
            "metadata": {"name": "paddlecloud-defaults", "namespace": ns, "labels": dict(MANAGED_BY)},
            "spec": {"limits": [{"type": "Container",
                                 "default": {"cpu": cpu, "memory": memory},
                                 "defaultRequest": {"cpu": cpu, "memory": memory}}]}}


def resource_quota(ns: str, hard: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": "paddlecloud-quota", "namespace": ns, "labels": dict(MANAGED_BY)},
            "spec": {"hard": dict(hard)}}
