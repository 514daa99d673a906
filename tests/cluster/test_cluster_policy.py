"""Quota, RBAC and Pod Security admission are enforced by the real API server."""

import kubernetes
import pytest

from cluster_helpers import wait_for


def gpu_pod(name, gpus=1, privileged=False):
    container = {"name": "main", "image": "paddlepaddle/paddle:3.0.0",
                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
    if privileged:
        container["securityContext"] = {"privileged": True}
    return {"metadata": {"name": name}, "spec": {"containers": [container]}}


def test_resource_quota_rejects_second_gpu_pod(core_v1, namespace):
    core_v1.create_namespaced_resource_quota(namespace, {
        "metadata": {"name": "gpus"}, "spec": {"hard": {"requests.nvidia.com/gpu": "1"}}})
    wait_for(lambda: (core_v1.read_namespaced_resource_quota("gpus", namespace).status.hard or {})
             .get("requests.nvidia.com/gpu") == "1", timeout=30, what="quota status from the controller")
    core_v1.create_namespaced_pod(namespace, gpu_pod("first"))
    with pytest.raises(kubernetes.client.ApiException) as info:
        core_v1.create_namespaced_pod(namespace, gpu_pod("second"))
    assert info.value.status == 403
    assert "exceeded quota" in info.value.body
    used = core_v1.read_namespaced_resource_quota("gpus", namespace).status.used
    assert used["requests.nvidia.com/gpu"] == "1"


def test_service_account_role_is_namespace_scoped(cluster, core_v1, rbac_v1, make_namespace):
    team_a, team_b = make_namespace("team-a"), make_namespace("team-b")
    core_v1.create_namespaced_service_account(team_a, {"metadata": {"name": "robot"}})
    rbac_v1.create_namespaced_role(team_a, {
        "metadata": {"name": "pod-reader"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]})
    rbac_v1.create_namespaced_role_binding(team_a, {
        "metadata": {"name": "robot-reads-pods"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": team_a}]})
    token = core_v1.create_namespaced_service_account_token(
        "robot", team_a, {"spec": {"expirationSeconds": 600}}).status.token

    config = kubernetes.client.Configuration()
    config.host = cluster.server
    config.ssl_ca_cert = cluster.pki["ca.crt"]
    config.api_key = {"authorization": "Bearer " + token}
    with kubernetes.client.ApiClient(config) as robot_client:
        robot = kubernetes.client.CoreV1Api(robot_client)
        whoami = kubernetes.client.AuthenticationV1Api(robot_client).create_self_subject_review({})
        assert whoami.status.user_info.username == f"system:serviceaccount:{team_a}:robot"

        def can_list_a():  # the RBAC authorizer's cache catches up within moments
            try:
                return robot.list_namespaced_pod(team_a) is not None
            except kubernetes.client.ApiException as exc:
                assert exc.status == 403
                return False

        wait_for(can_list_a, timeout=15, what="robot allowed in its own namespace")
        with pytest.raises(kubernetes.client.ApiException) as info:
            robot.list_namespaced_pod(team_b)
        assert info.value.status == 403
        assert "forbidden" in info.value.body


def test_pod_security_restricted_rejects_privileged_pod(core_v1, make_namespace):
    ns = make_namespace("restricted", labels={"pod-security.kubernetes.io/enforce": "restricted"})
    with pytest.raises(kubernetes.client.ApiException) as info:
        core_v1.create_namespaced_pod(ns, gpu_pod("root", privileged=True))
    assert info.value.status == 403
    assert "violates PodSecurity" in info.value.body
    # A pod that meets the restricted profile is admitted in the same namespace.
    compliant = gpu_pod("ok")
    compliant["spec"]["securityContext"] = {"runAsNonRoot": True, "runAsUser": 1000,
                                            "seccompProfile": {"type": "RuntimeDefault"}}
    compliant["spec"]["containers"][0]["securityContext"] = {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    core_v1.create_namespaced_pod(ns, compliant)
