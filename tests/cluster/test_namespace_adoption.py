"""Issue 25: an existing namespace is adopted. KubeSpawner ignores a 409 on namespace create;
the spawner must refuse a namespace it did not make for that user (nothing bound, nothing
replaced there) and make sure Pod Security labels on its own namespace at every spawn."""

from __future__ import annotations

import json

import kubernetes
import pytest

from cluster_helpers import wait_for
from kubehub import ns
from paddle_ext import tenancy
from paddle_ext.constants import LIMIT_RANGE_NAME, NOTEBOOK_ROLE, NOTEBOOK_SERVICE_ACCOUNT, USER_LABEL
from serverutil import sse_events

REFUSED = "not made by PaddleCloud for this user"


def spawn_failure(hub, user: str, token: str) -> str:
    """Start `user`'s server; the text of its failure (the POST's answer, or the spawn's
    progress stream when the hub answered 'pending')."""
    response = hub.start_server(user, token, "paddle-cpu")
    if response.status_code not in (201, 202):
        return response.text
    with hub.hub_api("GET", f"/users/{user}/server/progress", token, stream=True, timeout=180) as stream:
        for _event, data in sse_events(stream):
            event = json.loads(data)
            if event.get("failed") or event.get("ready"):
                return json.dumps(event)
    return ""


@pytest.mark.parametrize("labels", [
    {},  # somebody else's namespace that happens to have the name
    {"app.kubernetes.io/managed-by": "paddlecloud", USER_LABEL: "someone-else"},  # ours, for another user
])
def test_a_namespace_that_is_not_ours_is_refused_and_nothing_is_made_in_it(hub, core_v1, labels):
    rbac = kubernetes.client.RbacAuthorizationV1Api(core_v1.api_client)
    user, token = "oscar", hub.admin_token
    namespace = ns(user)
    core_v1.create_namespace({"metadata": {"name": namespace, "labels": dict(labels)}})
    try:
        failure = spawn_failure(hub, user, token)
        assert REFUSED in failure or REFUSED in hub.log_tail(), failure
        wait_for(lambda: not hub.server(user, token), timeout=60, what="oscar's failed spawn to end")
        assert [b.metadata.name for b in rbac.list_namespaced_role_binding(namespace).items] == []
        assert [r.metadata.name for r in rbac.list_namespaced_role(namespace).items] == []
        assert NOTEBOOK_SERVICE_ACCOUNT not in [a.metadata.name for a in
                                                core_v1.list_namespaced_service_account(namespace).items]
        assert [r.metadata.name for r in core_v1.list_namespaced_limit_range(namespace).items] == []
        assert [q.metadata.name for q in core_v1.list_namespaced_resource_quota(namespace).items] == []
        assert core_v1.list_namespaced_pod(namespace).items == []
        kept = core_v1.read_namespace(namespace).metadata.labels or {}
        assert {k: v for k, v in kept.items() if k != "kubernetes.io/metadata.name"} == labels
    finally:
        core_v1.delete_namespace(namespace)
        wait_for(lambda: namespace not in [n.metadata.name for n in core_v1.list_namespace().items],
                 timeout=120, what=f"{namespace} deleted")


def test_our_namespace_gets_its_pod_security_labels_back_at_the_next_spawn(hub, core_v1):
    rbac = kubernetes.client.RbacAuthorizationV1Api(core_v1.api_client)
    user, token = "petra", hub.admin_token
    namespace = ns(user)
    ours = {"app.kubernetes.io/managed-by": "paddlecloud", USER_LABEL: user}
    core_v1.create_namespace({"metadata": {"name": namespace, "labels": ours}})  # Pod Security labels lost
    try:
        response = hub.start_server(user, token, "paddle-cpu")
        assert response.status_code in (201, 202), response.text
        labels = wait_for(lambda: (got := core_v1.read_namespace(namespace).metadata.labels or {}).get(
            "pod-security.kubernetes.io/enforce") == "restricted" and got, timeout=120,
            what="the Pod Security labels put back")
        assert {k: labels[k] for k in tenancy.pod_security_labels()} == tenancy.pod_security_labels()
        wait_for(lambda: rbac.read_namespaced_role_binding(NOTEBOOK_ROLE, namespace), timeout=60,
                 what="the notebook's rights bound in its own namespace")
        limits = core_v1.read_namespaced_limit_range(LIMIT_RANGE_NAME, namespace).spec.limits[0]
        assert limits.max == tenancy.LIMIT_RANGE_MAX
        quota = core_v1.read_namespaced_resource_quota("paddlecloud-quota", namespace).spec.hard
        assert {k: quota[k] for k in tenancy.OBJECT_QUOTA} == tenancy.OBJECT_QUOTA
    finally:
        hub.hub_api("DELETE", f"/users/{user}/server", token)
        hub.wait_gone(user, token, timeout=180)
        core_v1.delete_namespace(namespace)
