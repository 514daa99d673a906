"""The admission policies as objects (paddle_ext.policies): valid Kubernetes, built from the
site's settings, and the product's own pods carry only what they allow. What the API server
does with them is tested in tests/cluster/test_admission_policy.py (a real API server
evaluating the CEL)."""

from __future__ import annotations

import json

import kubernetes_validate
import pytest

from paddle_ext import policies
from paddle_ext.hub.settings import HubSettings, pod_rules
from paddle_ext.jobkinds import job_objects
from paddle_ext.manifests import ManifestSettings
from paddle_ext.errors import SpecError
from paddle_ext.spec import JobSpec

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
DATASETS = ({"name": "imagenet", "mount_path": "/datasets/imagenet",
             "volume": {"persistentVolumeClaim": {"claimName": "team-datasets"}}},
            {"name": "coco", "mount_path": "/datasets/coco", "sub_path": "coco",
             "volume": {"persistentVolumeClaim": {"claimName": "team-datasets"}}},
            {"name": "scratch", "mount_path": "/scratch", "volume": {"emptyDir": {"sizeLimit": "10Gi"}}})
SITE = HubSettings(gpu_tolerations=(GPU_TOLERATION,), datasets=DATASETS, allowed_priority_classes=("research-low",),
                   allowed_tolerations=({"key": "flavor", "operator": "Equal", "value": "a100", "effect": "NoSchedule"},),
                   queue_name="user-queue", cluster_queue="team")


def variables(policy: dict) -> dict[str, str]:
    return {v["name"]: v["expression"] for v in policy["spec"]["variables"]}


@pytest.mark.parametrize("objects", [
    policies.service_exposure_policy(), policies.user_pod_policies(pod_rules(SITE)),
    policies.user_pod_policies(pod_rules(HubSettings())), policies.hub_policy("paddlecloud", "hub")])
def test_every_policy_object_is_valid_kubernetes(objects):
    for obj in objects:
        kubernetes_validate.validate(obj, "1.35.0", strict=True)
    for policy, binding in zip(objects[::2], objects[1::2]):
        assert (policy["kind"], binding["kind"]) == ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
        assert binding["spec"]["policyName"] == policy["metadata"]["name"] == binding["metadata"]["name"]
        assert binding["spec"]["validationActions"] == ["Deny"] and policy["spec"]["failurePolicy"] == "Fail"


def test_the_pod_rules_come_from_the_sites_settings():
    rules = pod_rules(SITE)
    assert rules == policies.PodRules(
        gpu_resource="nvidia.com/gpu", tolerations=(GPU_TOLERATION, SITE.allowed_tolerations[0]),
        priority_classes=("research-low",), dataset_claims=("team-datasets",), queue_required=True)
    assert pod_rules(HubSettings()) == policies.PodRules()  # no GPU taint, no classes, no datasets, no Kueue
    pods, pod_binding, jobs, job_binding = policies.user_pod_policies(rules)
    for policy in (pods, jobs):
        given = variables(policy)
        assert json.loads(given["tolerations"]) == [
            "node.kubernetes.io/not-ready|Exists||NoExecute", "node.kubernetes.io/unreachable|Exists||NoExecute",
            "nvidia.com/gpu|Exists||NoSchedule", "flavor|Equal|a100|NoSchedule"]
        assert json.loads(given["priorityClasses"]) == ["research-low"]
        assert json.loads(given["datasetClaims"]) == ["team-datasets"]
        assert json.loads(given["gpu"]) == "nvidia.com/gpu"
    assert variables(pods)["spec"] == "object.spec" and variables(jobs)["spec"] == "object.spec.template.spec"
    for binding in (pod_binding, job_binding):  # only namespaces of hub users
        assert binding["spec"]["matchResources"]["namespaceSelector"] == {
            "matchExpressions": [{"key": "paddlecloud.io/user", "operator": "Exists"}]}
    # The queue label is asked of Jobs only, and only where Kueue is configured.
    assert policies.QUEUE_RULE in jobs["spec"]["validations"] and policies.QUEUE_RULE not in pods["spec"]["validations"]
    without_kueue = policies.user_pod_policies(pod_rules(HubSettings()))[2]
    assert policies.QUEUE_RULE not in without_kueue["spec"]["validations"]
    # Pods are checked when made (the backstop, whoever makes them); Jobs when made or changed.
    assert pods["spec"]["matchConstraints"]["resourceRules"][0]["operations"] == ["CREATE"]
    assert jobs["spec"]["matchConstraints"]["resourceRules"][0]["operations"] == ["CREATE", "UPDATE"]


@pytest.mark.parametrize("toleration, key", [
    ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, "nvidia.com/gpu|Exists||NoSchedule"),
    ({"key": "dedicated", "value": "gpu"}, "dedicated|Equal|gpu|"),  # no operator: Kubernetes reads Equal
    ({"operator": "Exists"}, "|Exists||"),  # every taint: never allowed unless a site lists exactly it
    ({"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
     "node.kubernetes.io/unreachable|Exists||NoExecute"),  # how long does not count
])
def test_a_toleration_is_compared_by_key_operator_value_and_effect(toleration, key):
    assert policies.toleration_key(toleration) == key


def test_each_message_names_the_field_and_why():
    pods, _, jobs, _ = policies.user_pod_policies(pod_rules(SITE))
    messages = [v["message"] for v in pods["spec"]["validations"]]
    assert messages[0] == ("spec.nodeName may not be set in PaddleCloud user namespaces: the scheduler places pods.")
    assert all("in PaddleCloud user namespaces" in m for m in messages)
    job_messages = [v["message"] for v in jobs["spec"]["validations"]]
    assert [m.split(" ")[0] for m in job_messages[:3]] == ["spec.template.spec.nodeName", "spec.template.spec.tolerations",
                                                           "spec.template.spec.priorityClassName:"]
    assert "kueue.x-k8s.io/queue-name" in job_messages[-1]


def test_the_products_own_job_pods_carry_only_what_the_rules_allow():
    """The data the CEL compares with covers every toleration, claim and variable the product
    itself writes (the cluster tier shows the API server admits them)."""
    rules = pod_rules(SITE)
    allowed = {policies.toleration_key(t) for t in (*policies.DEFAULT_TOLERATIONS, *rules.tolerations)}
    settings = ManifestSettings(namespace="paddlecloud-alice", image="worker:1", user="alice", datasets=DATASETS,
                                gpu_tolerations=SITE.gpu_tolerations, queue_name=SITE.queue_name,
                                workdir="/home/jovyan/project", code_configmap="code-x")
    spec = JobSpec(command=["python", "train.py"], name="train", workers=2, gpus_per_worker=1,
                   datasets=("imagenet", "coco"))
    (job,) = [o for o in job_objects(spec, settings) if o["kind"] == "Job"]
    pod = job["spec"]["template"]["spec"]
    assert {policies.toleration_key(t) for t in pod["tolerations"]} <= allowed
    assert "nodeName" not in pod and "priorityClassName" not in pod
    claims = [v["persistentVolumeClaim"] for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert claims and all(c["claimName"] in rules.dataset_claims and c["readOnly"] is True for c in claims)
    names = {e["name"] for c in pod["containers"] + pod["initContainers"] for e in c.get("env", [])}
    assert not {n for n in names if n.startswith(policies.GPU_RUNTIME_ENV_PREFIX)}
    assert all("envFrom" not in c for c in pod["containers"] + pod["initContainers"])
    empty_dirs = [v["emptyDir"] for v in pod["volumes"] if "emptyDir" in v]
    assert empty_dirs and all(d.get("sizeLimit") for d in empty_dirs)
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "user-queue"


def test_the_hub_policy_applies_to_the_hubs_service_account_only():
    policy, binding = policies.hub_policy("pc-system", "hub")
    assert policy["spec"]["matchConditions"] == [
        {"name": "the-hub", "expression": "request.userInfo.username == 'system:serviceaccount:pc-system:hub'"}]
    assert "namespaceSelector" not in binding["spec"].get("matchResources", {})  # everywhere, cluster-wide ones too
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    matched = {(r["apiGroups"][0], resource) for r in rules for resource in r["resources"]}
    assert {("", "pods"), ("", "namespaces"), ("", "secrets"), ("rbac.authorization.k8s.io", "rolebindings"),
            ("batch", "jobs")} <= matched
    assert all(r["operations"] == ["CREATE", "UPDATE", "DELETE"] for r in rules)
    own = policy["spec"]["validations"][1]["expression"]
    assert "request.namespace == 'pc-system'" in own and "request.name == 'paddlecloud-quotas'" in own


@pytest.mark.parametrize("field, value, problem", [
    ("allowed_tolerations", ({"key": "a", "operater": "Exists"},), "a toleration is a mapping of"),
    ("allowed_priority_classes", ("Not_A_Name",), "is not a PriorityClass name"),
])
def test_bad_policy_settings_are_refused_in_one_sentence(field, value, problem):
    with pytest.raises(ValueError, match=problem):
        HubSettings(**{field: value})


def test_the_policy_settings_load_from_the_environment():
    settings = HubSettings.load(environ={"PADDLECLOUD_ALLOWED_PRIORITY_CLASSES": "research-low, batch",
                                         "PADDLECLOUD_ALLOWED_TOLERATIONS": json.dumps([GPU_TOLERATION])})
    assert settings.allowed_priority_classes == ("research-low", "batch")
    assert settings.allowed_tolerations == (GPU_TOLERATION,)


@pytest.mark.parametrize("env, gpus, words", [
    ({"NVIDIA_VISIBLE_DEVICES": "all"}, 0, "NVIDIA_VISIBLE_DEVICES picks GPU devices"),
    ({"NVIDIA_VISIBLE_DEVICES": "0"}, 2, "NVIDIA_VISIBLE_DEVICES picks GPU devices"),
    ({"NVIDIA_MIG_CONFIG_DEVICES": "all"}, 1, "NVIDIA_MIG_CONFIG_DEVICES picks GPU devices"),
    ({"NVIDIA_DRIVER_CAPABILITIES": "all", "NVIDIA_REQUIRE_CUDA": "cuda>=12"}, 0,
     "NVIDIA_DRIVER_CAPABILITIES, NVIDIA_REQUIRE_CUDA: NVIDIA_* variables tell the GPU runtime which GPUs to show"),
])
def test_a_jobspec_refuses_the_gpu_runtimes_variables_up_front_as_the_policy_would(env, gpus, words):
    """Every submit path (CLI, REST, widgets, both backends) says it before a cluster would."""
    with pytest.raises(SpecError) as refused:
        JobSpec(command=["python", "train.py"], gpus_per_worker=gpus, env=env)
    assert words in refused.value.problems["env"]


def test_a_jobspec_keeps_what_only_narrows_the_gpus_a_job_has():
    assert JobSpec(command=["python"], env={"CUDA_VISIBLE_DEVICES": ""}).env["CUDA_VISIBLE_DEVICES"] == ""
    assert JobSpec(command=["python"], gpus_per_worker=1, env={"NVIDIA_DRIVER_CAPABILITIES": "compute,video"}).env
