"""Cluster-wide ValidatingAdmissionPolicies (pure functions -> dicts): what the API server
itself refuses in PaddleCloud user namespaces, and to the hub, whoever asks.

- `service_exposure_policy`: users' Services stay inside the cluster.
- `user_pod_policies`: pods and Jobs in user namespaces do not place themselves (nodeName),
  tolerate only the site's taints, take no priority class the site did not allow, set no
  GPU-runtime variables the GPU device plugin owns, mount the team's dataset claims
  read-only, give every emptyDir a sizeLimit and (with Kueue) name their queue.
- `hub_policy`: the hub's service account writes only in user namespaces (and its own quota
  ConfigMap), so a compromised hub cannot start a pod in kube-system.

CEL, evaluated by the API server (no webhook of ours). The spawner installs the first two
(paddle_ext.hub.spawner); the Helm chart installs all three (templates/services-policy.yaml,
user-pod-policy.yaml, hub/policy.yaml), and
tests/helm checks its text equals these functions' for the same settings. Pod Security
`restricted` (tenancy.pod_security_labels) already refuses hostPath, hostNetwork/PID/IPC,
host ports, privileged and added capabilities: nothing here repeats it.
"""

from __future__ import annotations

import dataclasses
import json

from .constants import (GPU_DEVICE_ENV, GPU_RESOURCE, GPU_RUNTIME_ENV_PREFIX, KUEUE_QUEUE_LABEL, MANAGED_BY, MANAGED_BY_LABEL,
                        QUOTA_CONFIGMAP, USER_LABEL)
from .tenancy import POD_SECURITY_PREFIX

API_VERSION = "admissionregistration.k8s.io/v1"
# What a ResourceQuota cannot count (a Service's externalIPs make every node's proxy answer
# for them), a cluster-wide admission policy refuses, in every namespace of a hub user.
EXPOSURE_POLICY_NAME = "paddlecloud-services-stay-inside"
POD_POLICY_NAME = "paddlecloud-user-pods"
JOB_POLICY_NAME = "paddlecloud-user-jobs"
HUB_POLICY_NAME = "paddlecloud-hub-stays-in-user-namespaces"
# The API server's DefaultTolerationSeconds admission plugin adds these to every pod before
# any validation runs: they must always pass.
DEFAULT_TOLERATIONS = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
)
POD_SECURITY_ENFORCE = f"{POD_SECURITY_PREFIX}enforce"
USER_NAMESPACE_LEVEL = "restricted"  # the Pod Security level of every user namespace


@dataclasses.dataclass(frozen=True)
class PodRules:
    """What the site allows pods in user namespaces (paddle_ext.hub.settings.pod_rules)."""

    gpu_resource: str = GPU_RESOURCE
    tolerations: tuple[dict, ...] = ()  # beyond DEFAULT_TOLERATIONS: the GPU nodes' and the site's
    priority_classes: tuple[str, ...] = ()
    dataset_claims: tuple[str, ...] = ()  # the catalogue's claims, mounted read-only only
    queue_required: bool = False  # with Kueue: every Job names its queue


def toleration_key(toleration: dict) -> str:
    """One toleration as the policy compares it: key|operator|value|effect (operator Equal
    when unset, as Kubernetes reads it; tolerationSeconds does not count)."""
    return "|".join((toleration.get("key") or "", toleration.get("operator") or "Equal",
                     str(toleration.get("value") or ""), toleration.get("effect") or ""))


def cel_literal(value) -> str:
    """A CEL literal of a list of strings, a string or a bool: JSON is CEL here (the chart
    writes the same with toJson)."""
    return json.dumps(value, separators=(",", ":"))


# The same normalisation as toleration_key, in CEL, of a toleration `t`.
_TOLERATION_KEY_CEL = ("(has(t.key) ? t.key : '') + '|' + (has(t.operator) && t.operator != '' ? t.operator : 'Equal')"
                       " + '|' + (has(t.value) ? t.value : '') + '|' + (has(t.effect) ? t.effect : '')")
_REQUESTS_GPU_CEL = ("(has(c.resources) && has(c.resources.limits) && variables.gpu in c.resources.limits"
                     " && string(c.resources.limits[variables.gpu]) != '0')")
_IN_USER_NAMESPACES = "in PaddleCloud user namespaces"


def _binding(name: str, namespace_selector: dict) -> dict:
    return {"apiVersion": API_VERSION, "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name, "labels": dict(MANAGED_BY)},
            "spec": {"policyName": name, "validationActions": ["Deny"],
                     "matchResources": {"namespaceSelector": namespace_selector}}}


USER_NAMESPACES = {"matchExpressions": [{"key": USER_LABEL, "operator": "Exists"}]}


def service_exposure_policy() -> list[dict]:
    """A ValidatingAdmissionPolicy and its binding: in user namespaces (labelled with the user),
    no Service of type NodePort or LoadBalancer, and none with externalIPs."""
    policy = {
        "apiVersion": API_VERSION, "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": EXPOSURE_POLICY_NAME, "labels": dict(MANAGED_BY)},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                    "operations": ["CREATE", "UPDATE"], "resources": ["services"]}]},
            "validations": [
                {"expression": "!has(object.spec.type) || object.spec.type in ['ClusterIP', 'ExternalName']",
                 "message": "Services in PaddleCloud user namespaces stay inside the cluster: "
                            "type NodePort and LoadBalancer are not allowed.", "reason": "Forbidden"},
                {"expression": "!has(object.spec.externalIPs) || size(object.spec.externalIPs) == 0",
                 "message": "Services in PaddleCloud user namespaces stay inside the cluster: "
                            "externalIPs are not allowed.", "reason": "Forbidden"},
            ],
        },
    }
    return [policy, _binding(EXPOSURE_POLICY_NAME, USER_NAMESPACES)]


def _pod_validations(path: str) -> list[dict]:
    """The rules on one pod spec (`variables.spec`; `path` names it in messages: "spec." for a
    Pod, "spec.template.spec." for a Job). Each holds while `variables.unchanged` (an update
    that leaves the pod template as it was: a setting changed later does not lock old Jobs)."""
    def rule(expression: str, message: str, message_expression: str = "") -> dict:
        entry = {"expression": f"variables.unchanged || {expression}", "message": message, "reason": "Forbidden"}
        if message_expression:
            entry["messageExpression"] = message_expression
        return entry

    return [
        rule("!has(variables.spec.nodeName) || variables.spec.nodeName == ''",
             f"{path}nodeName may not be set {_IN_USER_NAMESPACES}: the scheduler places pods."),
        rule(f"!has(variables.spec.tolerations) || variables.spec.tolerations.all(t, {_TOLERATION_KEY_CEL} "
             "in variables.tolerations)",
             f"{path}tolerations {_IN_USER_NAMESPACES} may only be the ones PaddleCloud adds for GPU nodes: "
             "tolerating other taints would place pods on nodes kept for others.",
             f"\"{path}tolerations {_IN_USER_NAMESPACES} may only be the ones PaddleCloud adds for GPU nodes, not \""
             f" + variables.spec.tolerations.filter(t, !(({_TOLERATION_KEY_CEL}) in variables.tolerations))"
             ".map(t, has(t.key) ? t.key : '(every taint)').join(', ')"
             " + \": tolerating other taints would place pods on nodes kept for others.\""),
        rule("!has(variables.spec.priorityClassName) || variables.spec.priorityClassName == '' || "
             "variables.spec.priorityClassName in variables.priorityClasses",
             f"{path}priorityClassName: this priority class is not allowed {_IN_USER_NAMESPACES}: "
             "a higher priority would let pods preempt other users' work.",
             f"\"{path}priorityClassName \" + variables.spec.priorityClassName + \" is not allowed "
             f"{_IN_USER_NAMESPACES} (\" + (size(variables.priorityClasses) == 0 ? \"none is\" : "
             "\"allowed: \" + variables.priorityClasses.join(', ')) + \"): a higher priority would let pods preempt "
             "other users' work.\""),
        rule("variables.containers.all(c, !has(c.env) || c.env.all(e, !(e.name in variables.deviceEnv)))",
             f"{path}containers may not set {', '.join(GPU_DEVICE_ENV)} {_IN_USER_NAMESPACES}: a container sees "
             "the GPUs it requests in resources.limits, which the GPU device plugin picks."),
        rule(f"variables.containers.all(c, {_REQUESTS_GPU_CEL} || !has(c.env) || "
             f"c.env.all(e, !e.name.startsWith('{GPU_RUNTIME_ENV_PREFIX}')))",
             f"{path}containers that request no GPU may not set {GPU_RUNTIME_ENV_PREFIX}* variables "
             f"{_IN_USER_NAMESPACES}: they tell the GPU runtime which GPUs to show; request GPUs in "
             "resources.limits instead."),
        rule("variables.containers.all(c, !has(c.envFrom) || c.envFrom.all(f, has(f.prefix) && f.prefix != '' && "
             f"!'{GPU_RUNTIME_ENV_PREFIX}'.startsWith(f.prefix) && !f.prefix.startsWith('{GPU_RUNTIME_ENV_PREFIX}')))",
             f"{path}containers' envFrom needs a prefix {_IN_USER_NAMESPACES}, one that cannot make "
             f"{GPU_RUNTIME_ENV_PREFIX}* names: variables from a ConfigMap or Secret cannot be checked for the GPU "
             "runtime's."),
        rule("!has(variables.spec.volumes) || variables.spec.volumes.all(v, !has(v.persistentVolumeClaim) || "
             "!(v.persistentVolumeClaim.claimName in variables.datasetClaims) || "
             "(has(v.persistentVolumeClaim.readOnly) && v.persistentVolumeClaim.readOnly))",
             f"{path}volumes: the team's dataset claims are mounted read-only {_IN_USER_NAMESPACES}: "
             "set persistentVolumeClaim.readOnly: true.",
             f"\"{path}volumes: the dataset claim \" + variables.spec.volumes.filter(v, has(v.persistentVolumeClaim) "
             "&& v.persistentVolumeClaim.claimName in variables.datasetClaims && !(has(v.persistentVolumeClaim.readOnly)"
             " && v.persistentVolumeClaim.readOnly)).map(v, v.persistentVolumeClaim.claimName).join(', ') + \" is "
             f"mounted read-only {_IN_USER_NAMESPACES}: set persistentVolumeClaim.readOnly: true (datasets are "
             "shared by the whole team).\""),
        rule("!has(variables.spec.volumes) || variables.spec.volumes.all(v, !has(v.emptyDir) || "
             "has(v.emptyDir.sizeLimit))",
             f"{path}volumes: every emptyDir needs a sizeLimit {_IN_USER_NAMESPACES}, so that what a pod "
             "writes there is bounded.",
             f"\"{path}volumes: every emptyDir needs a sizeLimit {_IN_USER_NAMESPACES}, not \" + "
             "variables.spec.volumes.filter(v, has(v.emptyDir) && !has(v.emptyDir.sizeLimit)).map(v, v.name)"
             ".join(', ') + \", so that what a pod writes there is bounded.\""),
    ]


QUEUE_RULE = {
    # A new Job names its queue; an update may not take the name away (a suspended Job without
    # it would no longer wait for Kueue). Old Jobs made before Kueue keep working.
    "expression": f"(request.operation == 'UPDATE' && !(has(oldObject.metadata.labels) && "
                  f"'{KUEUE_QUEUE_LABEL}' in oldObject.metadata.labels)) || (has(object.metadata.labels) && "
                  f"'{KUEUE_QUEUE_LABEL}' in object.metadata.labels && object.metadata.labels['{KUEUE_QUEUE_LABEL}'] "
                  "!= '')",
    "message": f"Jobs {_IN_USER_NAMESPACES} must name their queue with the label {KUEUE_QUEUE_LABEL} "
               "(paddlecloud submit sets it): Kueue starts jobs in turn, within each team's share of the GPUs.",
    "reason": "Forbidden",
}


def _variables(rules: PodRules, spec: str, unchanged: str) -> list[dict]:
    allowed = [toleration_key(t) for t in (*DEFAULT_TOLERATIONS, *rules.tolerations)]
    return [
        {"name": "spec", "expression": spec},
        {"name": "unchanged", "expression": unchanged},
        {"name": "containers", "expression": "variables.spec.containers + (has(variables.spec.initContainers) ? "
                                             "variables.spec.initContainers : [])"},
        {"name": "gpu", "expression": cel_literal(rules.gpu_resource)},
        {"name": "tolerations", "expression": cel_literal(allowed)},
        {"name": "priorityClasses", "expression": cel_literal(list(rules.priority_classes))},
        {"name": "datasetClaims", "expression": cel_literal(list(rules.dataset_claims))},
        {"name": "deviceEnv", "expression": cel_literal(list(GPU_DEVICE_ENV))},
    ]


def user_pod_policies(rules: PodRules) -> list[dict]:
    """Two ValidatingAdmissionPolicies and their bindings, in user namespaces:
    - Pods (created): what any pod there may not do, whoever makes it (the job controller, the
      training operator, the hub): the backstop;
    - Jobs (created, or their pod template changed): the same rules, refused to the user's own
      kubectl with the field named, plus (rules.queue_required) the Kueue queue label."""
    pods = {
        "apiVersion": API_VERSION, "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POD_POLICY_NAME, "labels": dict(MANAGED_BY)},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                    "operations": ["CREATE"], "resources": ["pods"]}]},
            "variables": _variables(rules, "object.spec", "false"),
            "validations": _pod_validations("spec."),
        },
    }
    jobs = {
        "apiVersion": API_VERSION, "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": JOB_POLICY_NAME, "labels": dict(MANAGED_BY)},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": ["batch"], "apiVersions": ["v1"],
                                                    "operations": ["CREATE", "UPDATE"], "resources": ["jobs"]}]},
            "variables": _variables(rules, "object.spec.template.spec",
                                    "request.operation == 'UPDATE' && object.spec.template == oldObject.spec.template"),
            "validations": _pod_validations("spec.template.spec.") + ([dict(QUEUE_RULE)] if rules.queue_required else []),
        },
    }
    return [pods, _binding(POD_POLICY_NAME, USER_NAMESPACES), jobs, _binding(JOB_POLICY_NAME, USER_NAMESPACES)]


def _ours(metadata: str) -> str:
    """CEL: the object with this metadata is a PaddleCloud user namespace."""
    return (f"(has({metadata}.labels) && '{MANAGED_BY_LABEL}' in {metadata}.labels && "
            f"{metadata}.labels['{MANAGED_BY_LABEL}'] == '{MANAGED_BY[MANAGED_BY_LABEL]}' && "
            f"'{USER_LABEL}' in {metadata}.labels)")


# What the hub writes (and what it might be made to write): refused outside user namespaces.
HUB_RESOURCES = (
    ("", ("namespaces", "pods", "persistentvolumeclaims", "serviceaccounts", "limitranges", "resourcequotas",
          "services", "configmaps", "secrets")),
    ("rbac.authorization.k8s.io", ("roles", "rolebindings")),
    ("networking.k8s.io", ("networkpolicies",)),
    ("batch", ("jobs",)),
    ("kubeflow.org", ("paddlejobs",)),
    ("kueue.x-k8s.io", ("localqueues",)),
)


def hub_policy(hub_namespace: str, hub_service_account: str) -> list[dict]:
    """A ValidatingAdmissionPolicy and its binding for requests of the hub's service account
    only: it may make or change namespaces only as PaddleCloud user namespaces under Pod
    Security restricted (never relabel another into one), and write objects only in those,
    or the quota ConfigMap in its own namespace. RBAC cannot say "namespaces with this label";
    this does, so a compromised hub cannot start a pod, bind a role or read a token elsewhere."""
    user = f"system:serviceaccount:{hub_namespace}:{hub_service_account}"
    policy = {
        "apiVersion": API_VERSION, "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": HUB_POLICY_NAME, "labels": dict(MANAGED_BY)},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [
                {"apiGroups": [group], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE", "DELETE"],
                 "resources": list(resources)} for group, resources in HUB_RESOURCES]},
            "matchConditions": [{"name": "the-hub", "expression": f"request.userInfo.username == '{user}'"}],
            "validations": [
                {"expression": "request.resource.resource != 'namespaces' || (request.operation == 'DELETE' ? "
                               f"{_ours('oldObject.metadata')} : ({_ours('object.metadata')} && "
                               f"'{POD_SECURITY_ENFORCE}' in object.metadata.labels && "
                               f"object.metadata.labels['{POD_SECURITY_ENFORCE}'] == '{USER_NAMESPACE_LEVEL}' && "
                               f"(request.operation == 'CREATE' || {_ours('oldObject.metadata')})))",
                 "message": "The PaddleCloud hub may only make and change its users' namespaces: labelled "
                            f"{MANAGED_BY_LABEL}={MANAGED_BY[MANAGED_BY_LABEL]} and {USER_LABEL} (before the change "
                            f"too), with {POD_SECURITY_ENFORCE}={USER_NAMESPACE_LEVEL}.",
                 "reason": "Forbidden"},
                {"expression": "request.resource.resource == 'namespaces' || "
                               f"(request.namespace == '{hub_namespace}' && request.resource.resource == 'configmaps' "
                               f"&& request.name == '{QUOTA_CONFIGMAP}') || {_ours('namespaceObject.metadata')}",
                 "message": "The PaddleCloud hub acts only in its users' namespaces (labelled "
                            f"{MANAGED_BY_LABEL}={MANAGED_BY[MANAGED_BY_LABEL]} and {USER_LABEL}) and on its quota "
                            "settings in its own namespace.",
                 "messageExpression": "\"The PaddleCloud hub acts only in its users' namespaces (labelled "
                                      f"{MANAGED_BY_LABEL}={MANAGED_BY[MANAGED_BY_LABEL]} and {USER_LABEL}) and on "
                                      "its quota settings in its own namespace: \" + request.namespace + "
                                      "\" is not a user namespace.\"",
                 "reason": "Forbidden"},
            ],
        },
    }
    binding = {"apiVersion": API_VERSION, "kind": "ValidatingAdmissionPolicyBinding",
               "metadata": {"name": HUB_POLICY_NAME, "labels": dict(MANAGED_BY)},
               "spec": {"policyName": HUB_POLICY_NAME, "validationActions": ["Deny"]}}
    return [policy, binding]
