"""The admission policies (paddle_ext.policies) as the API server enforces them: its own CEL
engine, no webhook. Every hostile object is refused with the message a user reads, and what
the product itself makes (job pods with their code-unpack init container and dataset mounts,
KubeSpawner's notebook pods) is admitted.

Needs the API server only: objects are server-side dry runs (admission runs, nothing is kept)
or suspended Jobs, so the KWOK-only control plane is enough and no test here asks for the
real node. The policies are installed under names of this module's own, bound only to its
namespaces, so the rest of the session (and the Kubernetes hub's own copies) are untouched.
"""

from __future__ import annotations

import asyncio
import copy
import json
import uuid
from pathlib import Path
from types import SimpleNamespace

import kubernetes
import pytest

from cluster_helpers import GPU_TOLERATION, api_message, as_user, wait_for
from paddle_ext import policies, tenancy
from paddle_ext.constants import KUEUE_QUEUE_LABEL, NOTEBOOK_SERVICE_ACCOUNT, QUOTA_CONFIGMAP, USER_LABEL
from paddle_ext.jobkinds import job_objects
from paddle_ext.manifests import ManifestSettings
from paddle_ext.spec import JobSpec

REPO = Path(__file__).resolve().parents[2]
GPU = "nvidia.com/gpu"
QUEUE = "research"
TEST_LABEL = "paddlecloud.io/policy-test"  # binds this module's copies to this module's namespaces only
UID = uuid.uuid4().hex[:6]
# The session's hub (kubehub.py) installs the product's own pod policies for every user
# namespace, these tests' namespaces included, with its settings: it allows LOW too, so
# that whichever policy answers first, the verdict and the words are the same (any order).
LOW, HIGH = "research-low", "urgent"
DATASETS = (  # the site's catalogue: two datasets on one claim, one on another
    {"name": "imagenet", "mount_path": "/datasets/imagenet", "sub_path": "imagenet",
     "volume": {"persistentVolumeClaim": {"claimName": "team-datasets"}}},
    {"name": "coco", "mount_path": "/datasets/coco", "volume": {"persistentVolumeClaim": {"claimName": "coco"}}},
)
RULES = policies.PodRules(gpu_resource=GPU, tolerations=(GPU_TOLERATION,), priority_classes=(LOW,),
                          dataset_claims=("coco", "team-datasets"), queue_required=True)
DRY = {"dry_run": "All"}


def renamed(objects: list[dict], bind_to_test_namespaces: bool) -> list[dict]:
    """The policies and bindings under this module's names (bound to its namespaces only)."""
    result = []
    for obj in copy.deepcopy(objects):
        obj["metadata"]["name"] += f"-{UID}"
        if obj["kind"] == "ValidatingAdmissionPolicyBinding":
            obj["spec"]["policyName"] += f"-{UID}"
            if bind_to_test_namespaces:
                obj["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"].append(
                    {"key": TEST_LABEL, "operator": "In", "values": [UID]})
        result.append(obj)
    return result


def install(admission_v1, objects: list[dict]) -> list[tuple]:
    made = []
    for obj in objects:
        if obj["kind"] == "ValidatingAdmissionPolicy":
            admission_v1.create_validating_admission_policy(obj)
            made.append((admission_v1.delete_validating_admission_policy, obj["metadata"]["name"]))
        else:
            admission_v1.create_validating_admission_policy_binding(obj)
            made.append((admission_v1.delete_validating_admission_policy_binding, obj["metadata"]["name"]))
    return made


def remove(made: list[tuple]) -> None:
    for delete, name in reversed(made):
        try:
            delete(name)
        except kubernetes.client.ApiException:
            pass


def type_warnings(admission_v1, names: list[str]) -> dict[str, list]:
    """The API server's type check of each policy's CEL, once it has checked them all."""
    def checked():
        found = {name: admission_v1.read_validating_admission_policy(name).status for name in names}
        if all(status and status.type_checking is not None for status in found.values()):
            return {name: [w.warning for w in (status.type_checking.expression_warnings or [])]
                    for name, status in found.items()}
        return None

    return wait_for(checked, timeout=60, what="the API server to type-check the policies")


@pytest.fixture(scope="module")
def admission_v1(api_client):
    return kubernetes.client.AdmissionregistrationV1Api(api_client)


@pytest.fixture(scope="module")
def pod_policies(admission_v1, api_client):
    scheduling = kubernetes.client.SchedulingV1Api(api_client)
    for name, value in ((LOW, 10), (HIGH, 1_000_000)):  # the Priority admission plugin needs them to exist
        scheduling.create_priority_class({"metadata": {"name": name}, "value": value})
    objects = renamed(policies.user_pod_policies(RULES), bind_to_test_namespaces=True)
    made = install(admission_v1, objects)
    try:
        yield [o["metadata"]["name"] for o in objects if o["kind"] == "ValidatingAdmissionPolicy"]
    finally:
        remove(made)
        for name in (LOW, HIGH):
            scheduling.delete_priority_class(name)


@pytest.fixture
def user_ns(core_v1, rbac_v1, make_namespace, pod_policies):
    """A user namespace as the spawner prepares it (Pod Security restricted, the notebook's
    service account and role), in force for this module's policies."""
    ns = make_namespace("pol", labels={**tenancy.user_namespace_labels(), USER_LABEL: "alice", TEST_LABEL: UID})
    core_v1.create_namespaced_service_account(ns, tenancy.service_account(ns))
    rbac_v1.create_namespaced_role(ns, tenancy.role(ns))
    rbac_v1.create_namespaced_role_binding(ns, tenancy.role_binding(ns))
    probe = hostile_job(ns, "probe", lambda pod: pod.update(nodeName="probe"))
    wait_for(lambda: refused_with(lambda: kubernetes.client.BatchV1Api(core_v1.api_client).create_namespaced_job(
        ns, probe, **DRY), "nodeName may not be set"), timeout=30, what="the policies to be in force")
    return ns


def refused_with(create, words: str) -> bool:
    try:
        create()
    except kubernetes.client.ApiException as exc:
        return words in api_message(exc)
    return False


def refusal(create) -> str:
    with pytest.raises(kubernetes.client.ApiException) as info:
        create()
    assert info.value.status in (400, 403, 422), info.value.body
    return api_message(info.value)


def product_job(ns: str, name: str, gpus: int = 0, datasets: tuple = ("imagenet", "coco")) -> dict:
    """The Job paddlecloud submit makes on this site (GPU taint tolerated, datasets read-only,
    the code unpacked by its init container, the Kueue label)."""
    settings = ManifestSettings(namespace=ns, image="paddle:3.3.1-cpu", user="alice", datasets=DATASETS,
                                gpu_tolerations=(GPU_TOLERATION,), gpu_node_selector=(("type", "kwok"),),
                                queue_name=QUEUE, service_account=NOTEBOOK_SERVICE_ACCOUNT,
                                workdir="/home/jovyan/project", code_configmap=f"{name}-code")
    spec = JobSpec(command=["python", "train.py"], name=name, workers=2, gpus_per_worker=gpus, datasets=datasets,
                   env={"CUDA_VISIBLE_DEVICES": ""} if not gpus else {})
    (job,) = [o for o in job_objects(spec, settings) if o["kind"] == "Job"]
    return job


def hostile_job(ns: str, name: str, change, gpus: int = 0) -> dict:
    job = product_job(ns, name, gpus)
    change(job["spec"]["template"]["spec"])
    return job


def pod_of(job: dict, index: int = 0) -> dict:
    """Worker `index`'s pod as the job controller makes it from the template."""
    template = job["spec"]["template"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{job['metadata']['name']}-{index}", "namespace": job["metadata"]["namespace"],
                         "labels": {**template["metadata"]["labels"],
                                    "batch.kubernetes.io/job-completion-index": str(index)}},
            "spec": copy.deepcopy(template["spec"])}


def container(pod: dict) -> dict:
    return pod["containers"][0]


def add_env(name: str, value: str):
    return lambda pod: container(pod)["env"].append({"name": name, "value": value})


def add_toleration(toleration: dict):
    return lambda pod: pod.setdefault("tolerations", []).append(toleration)


def writable_dataset(pod: dict) -> None:
    pod["volumes"].append({"name": "grab", "persistentVolumeClaim": {"claimName": "team-datasets"}})
    container(pod)["volumeMounts"].append({"name": "grab", "mountPath": "/grab"})


def unsized_scratch(pod: dict) -> None:
    pod["volumes"].append({"name": "scratch", "emptyDir": {}})
    container(pod)["volumeMounts"].append({"name": "scratch", "mountPath": "/scratch"})


# (what, change to the pod spec, GPUs, words of the message after the field's path)
HOSTILE = [
    ("nodeName", lambda pod: pod.update(nodeName="kwok-gpu-0"), 0,
     "nodeName may not be set in PaddleCloud user namespaces: the scheduler places pods."),
    ("a toleration of another taint", add_toleration(
        {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}), 0,
     "tolerations in PaddleCloud user namespaces may only be the ones PaddleCloud adds for GPU nodes, not "
     "node-role.kubernetes.io/control-plane: tolerating other taints"),
    ("a toleration of every taint", add_toleration({"operator": "Exists"}), 1,
     "tolerations in PaddleCloud user namespaces may only be the ones PaddleCloud adds for GPU nodes, not "
     "(every taint):"),
    ("the GPU taint with another effect", add_toleration(
        {"key": GPU, "operator": "Exists", "effect": "NoExecute"}), 1,
     f"tolerations in PaddleCloud user namespaces may only be the ones PaddleCloud adds for GPU nodes, not {GPU}:"),
    ("a priority class not allowed", lambda pod: pod.update(priorityClassName=HIGH), 0,
     f"priorityClassName {HIGH} is not allowed in PaddleCloud user namespaces (allowed: {LOW}): a higher "
     "priority would let pods preempt other users' work."),
    ("NVIDIA_VISIBLE_DEVICES without a GPU", add_env("NVIDIA_VISIBLE_DEVICES", "all"), 0,
     "containers may not set NVIDIA_VISIBLE_DEVICES, NVIDIA_MIG_CONFIG_DEVICES, NVIDIA_MIG_MONITOR_DEVICES in "
     "PaddleCloud user namespaces"),
    ("NVIDIA_VISIBLE_DEVICES with a GPU", add_env("NVIDIA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7"), 1,
     "containers may not set NVIDIA_VISIBLE_DEVICES"),
    ("NVIDIA_DRIVER_CAPABILITIES without a GPU", add_env("NVIDIA_DRIVER_CAPABILITIES", "all"), 0,
     "containers that request no GPU may not set NVIDIA_* variables in PaddleCloud user namespaces"),
    ("envFrom without a prefix", lambda pod: container(pod).setdefault("envFrom", []).append(
        {"configMapRef": {"name": "gpus"}}), 0, "containers' envFrom needs a prefix"),
    ("envFrom with a prefix that makes NVIDIA_ names", lambda pod: container(pod).setdefault("envFrom", []).append(
        {"prefix": "NVIDIA", "configMapRef": {"name": "gpus"}}), 1, "containers' envFrom needs a prefix"),
    ("a dataset claim mounted writable", writable_dataset, 0,
     "volumes: the dataset claim team-datasets is mounted read-only in PaddleCloud user namespaces: set "
     "persistentVolumeClaim.readOnly: true"),
    ("an emptyDir without a size", unsized_scratch, 0,
     "volumes: every emptyDir needs a sizeLimit in PaddleCloud user namespaces, not scratch, so that what a pod "
     "writes there is bounded."),
]


@pytest.mark.parametrize("what, change, gpus, words", HOSTILE, ids=[case[0] for case in HOSTILE])
def test_each_rule_refuses_the_users_job_and_any_pod_naming_the_field(cluster, core_v1, user_ns, what, change,
                                                                      gpus, words):
    user = kubernetes.client.BatchV1Api(as_user(cluster, core_v1, user_ns))
    job = hostile_job(user_ns, "hostile", change, gpus)
    message = refusal(lambda: user.create_namespaced_job(user_ns, job, **DRY))
    assert f"spec.template.spec.{words}" in message, message
    # Whoever makes the pod (the job controller, the training operator, the hub), it is refused too.
    message = refusal(lambda: core_v1.create_namespaced_pod(user_ns, pod_of(job), **DRY))
    assert f"spec.{words}" in message, message


def test_a_job_without_the_queue_label_is_refused_with_kueue_configured(cluster, core_v1, user_ns):
    user = kubernetes.client.BatchV1Api(as_user(cluster, core_v1, user_ns))
    job = product_job(user_ns, "unqueued")
    del job["metadata"]["labels"][KUEUE_QUEUE_LABEL]
    job["spec"]["suspend"] = False
    message = refusal(lambda: user.create_namespaced_job(user_ns, job, **DRY))
    assert message.endswith(f"Jobs in PaddleCloud user namespaces must name their queue with the label "
                            f"{KUEUE_QUEUE_LABEL} (paddlecloud submit sets it): Kueue starts jobs in turn, within "
                            "each team's share of the GPUs."), message
    job["metadata"]["labels"][KUEUE_QUEUE_LABEL] = ""
    assert "must name their queue" in refusal(lambda: user.create_namespaced_job(user_ns, job, **DRY))


def test_what_pod_security_refuses_is_left_to_it(core_v1, user_ns):
    """hostPath, host networking and privileged containers: Pod Security `restricted` on every
    user namespace refuses them already, so the policies do not say it twice."""
    cases = {
        "hostPath": lambda pod: pod["volumes"].append({"name": "root", "hostPath": {"path": "/"}}),
        "hostNetwork": lambda pod: pod.update(hostNetwork=True),
        "privileged": lambda pod: container(pod).update(securityContext={"privileged": True}),
    }
    for what, change in cases.items():
        pod = pod_of(product_job(user_ns, "psa"))
        change(pod["spec"])
        message = refusal(lambda pod=pod: core_v1.create_namespaced_pod(user_ns, pod, **DRY))
        assert 'violates PodSecurity "restricted:latest"' in message and what in message, (what, message)


@pytest.mark.parametrize("gpus", [0, 2])
def test_the_products_own_job_and_its_pods_are_admitted(cluster, core_v1, user_ns, gpus):
    user = kubernetes.client.BatchV1Api(as_user(cluster, core_v1, user_ns))
    job = product_job(user_ns, f"train-{gpus}", gpus)
    pod = job["spec"]["template"]["spec"]
    assert pod["initContainers"][0]["name"] == "prepare" and any("persistentVolumeClaim" in v for v in pod["volumes"])
    assert bool(pod.get("tolerations")) == bool(gpus)
    user.create_namespaced_job(user_ns, job, **DRY)
    for index in range(2):
        core_v1.create_namespaced_pod(user_ns, pod_of(job, index), **DRY)


@pytest.mark.parametrize("what, change, gpus", [
    ("CUDA_VISIBLE_DEVICES on a CPU job (it only narrows what the container has)",
     add_env("CUDA_VISIBLE_DEVICES", "-1"), 0),
    ("NVIDIA_DRIVER_CAPABILITIES on a GPU job", add_env("NVIDIA_DRIVER_CAPABILITIES", "compute,utility,video"), 1),
    ("an allowed priority class", lambda pod: pod.update(priorityClassName=LOW), 0),
    ("envFrom with a prefix", lambda pod: container(pod).setdefault("envFrom", []).append(
        {"prefix": "CFG_", "configMapRef": {"name": "settings"}}), 0),
    ("the GPU taint's toleration on a CPU job", add_toleration(GPU_TOLERATION), 0),
    ("a longer grace on an unreachable node", add_toleration(
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
         "tolerationSeconds": 3600}), 0),
])
def test_what_the_rules_leave_to_users_is_admitted(cluster, core_v1, user_ns, what, change, gpus):
    user = kubernetes.client.BatchV1Api(as_user(cluster, core_v1, user_ns))
    job = hostile_job(user_ns, "fine", change, gpus)
    user.create_namespaced_job(user_ns, job, **DRY)
    core_v1.create_namespaced_pod(user_ns, pod_of(job), **DRY)


def test_a_job_changed_later_is_checked_and_one_left_as_it_was_is_not_locked(cluster, core_v1, user_ns):
    user = kubernetes.client.BatchV1Api(as_user(cluster, core_v1, user_ns))
    job = product_job(user_ns, "later")
    assert job["spec"]["suspend"] is True  # waits for Kueue: its template's scheduling fields may still change
    user.create_namespaced_job(user_ns, job)
    # A change that leaves the template alone passes (the product's cancel, a user's label).
    user.patch_namespaced_job("later", user_ns, {"metadata": {"labels": {"note": "kept"}}}, **DRY)
    # A new toleration in the template is checked as on create.
    message = refusal(lambda: user.patch_namespaced_job("later", user_ns, {"spec": {"template": {"spec": {
        "tolerations": [{"key": "dedicated", "operator": "Exists"}]}}}}, **DRY))
    assert "spec.template.spec.tolerations in PaddleCloud user namespaces may only be" in message
    # The queue label may not be taken away (the Job would no longer wait for Kueue).
    message = refusal(lambda: user.patch_namespaced_job(
        "later", user_ns, {"metadata": {"labels": {KUEUE_QUEUE_LABEL: None}}}, **DRY))
    assert "must name their queue" in message


def test_outside_user_namespaces_the_rules_do_not_apply(core_v1, make_namespace, pod_policies):
    ns = make_namespace("admins", labels={TEST_LABEL: UID})
    core_v1.create_namespaced_service_account(ns, tenancy.service_account(ns))
    job = hostile_job(ns, "admin", lambda pod: pod.update(nodeName="kwok-gpu-0"))
    core_v1.create_namespaced_pod(ns, {**pod_of(job), "metadata": {"name": "admin-0"}}, **DRY)


def test_the_api_server_type_checks_every_expression_without_a_warning(admission_v1, pod_policies):
    assert type_warnings(admission_v1, pod_policies) == {name: [] for name in pod_policies}


# ------------------------------------------------------------------ KubeSpawner's notebook pods

def notebook_pod(monkeypatch, tmp_path, ns: str, profile: str) -> dict:
    """The pod KubeSpawner makes from hub_config/jupyterhub_config.py for `profile`, with this
    site's GPU toleration and datasets."""
    from kubernetes_asyncio.client import ApiClient
    from traitlets.config import PyFileConfigLoader

    import kubespawner.spawner
    from paddle_ext.hub.spawner import PaddleCloudSpawner

    for key, value in {"PADDLECLOUD_AUTHENTICATOR_CLASS": "dummy", "PADDLECLOUD_ALLOWED_USERS": "alice",
                       "PADDLECLOUD_HUB_STATE_DIR": str(tmp_path / "state"),
                       "PADDLECLOUD_GPU_TOLERATIONS": json.dumps([GPU_TOLERATION]),
                       "PADDLECLOUD_DATASETS": json.dumps(DATASETS)}.items():
        monkeypatch.setenv(key, value)
    config = PyFileConfigLoader("jupyterhub_config.py", str(REPO / "hub_config")).load_config()
    monkeypatch.setattr(kubespawner.spawner, "load_config", lambda **_kwargs: None)  # the pod is only built
    monkeypatch.setattr(kubespawner.spawner, "shared_client", lambda _name: None)

    async def build():
        spawner = PaddleCloudSpawner(config=config, _mock=True)
        spawner.user_options = {"profile": profile}
        await spawner.load_user_options()
        async with ApiClient() as client:
            return client.sanitize_for_serialization(await spawner.get_pod_manifest())

    pod = asyncio.run(build())
    for item in pod["spec"]["containers"]:  # KubeSpawner writes 8.0 and 32000000000: the same quantities as text,
        for kind, amounts in item.get("resources", {}).items():  # which this client insists on
            item["resources"][kind] = {name: str(value) for name, value in amounts.items()}
    pod["metadata"] = {"name": f"jupyter-{profile}", "namespace": ns, "labels": pod["metadata"].get("labels", {})}
    return pod


@pytest.mark.parametrize("profile", ["paddle-gpu", "paddle-cpu"])
def test_kubespawners_notebook_pods_are_admitted(core_v1, user_ns, monkeypatch, tmp_path, profile):
    pod = notebook_pod(monkeypatch, tmp_path, user_ns, profile)
    claims = [v["persistentVolumeClaim"] for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v]
    assert {c["claimName"] for c in claims if c.get("readOnly")} == {"team-datasets", "coco"}
    assert bool(pod["spec"].get("tolerations")) == (profile == "paddle-gpu")
    core_v1.create_namespaced_pod(user_ns, pod, **DRY)


# ------------------------------------------------------------------ the hub confined

HUB_SA = "hub"


@pytest.fixture
def hub_namespace(core_v1, rbac_v1, admission_v1, make_namespace):
    """A hub's namespace and service account that RBAC lets do anything (cluster-admin), under
    this module's copy of the hub's policy: what it refuses, it refuses whatever RBAC says."""
    ns = make_namespace("hub")
    core_v1.create_namespaced_service_account(ns, {"metadata": {"name": HUB_SA}})
    binding = f"hub-admin-{ns}"
    rbac_v1.create_cluster_role_binding({
        "metadata": {"name": binding}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                                   "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": HUB_SA, "namespace": ns}]})
    objects = renamed(policies.hub_policy(ns, HUB_SA), bind_to_test_namespaces=False)
    made = install(admission_v1, objects)
    try:
        yield ns
    finally:
        remove(made)
        rbac_v1.delete_cluster_role_binding(binding)


def as_hub(cluster, core_v1, ns) -> SimpleNamespace:
    client = as_user(cluster, core_v1, ns, HUB_SA)
    return SimpleNamespace(core=kubernetes.client.CoreV1Api(client), rbac=kubernetes.client.RbacAuthorizationV1Api(client))


OUTSIDE = "The PaddleCloud hub acts only in its users' namespaces"
NAMESPACES = "The PaddleCloud hub may only make and change its users' namespaces"


def test_the_hub_acts_only_in_user_namespaces(cluster, core_v1, make_namespace, hub_namespace):
    hub = as_hub(cluster, core_v1, hub_namespace)
    plain = make_namespace("plain")
    core_v1.create_namespaced_config_map(plain, {"metadata": {"name": "precious"}})
    wait_for(lambda: refused_with(lambda: hub.core.create_namespaced_service_account(
        "kube-system", {"metadata": {"name": "probe"}}, **DRY), OUTSIDE), timeout=30, what="the hub policy in force")
    pod = pod_of(product_job("kube-system", "grab"))
    pod["spec"]["serviceAccountName"] = "default"  # one that is there: the API server looks it up first
    refused = {
        "a pod in kube-system": lambda: hub.core.create_namespaced_pod("kube-system", pod, **DRY),
        "a secret in kube-system": lambda: hub.core.create_namespaced_secret(
            "kube-system", {"metadata": {"name": "grab"}, "stringData": {"a": "b"}}, **DRY),
        "a role binding in default": lambda: hub.rbac.create_namespaced_role_binding("default", {
            "metadata": {"name": "grab"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                                      "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "default"}]}, **DRY),
        "deleting another namespace's ConfigMap": lambda: hub.core.delete_namespaced_config_map(
            "precious", plain, **DRY),
        "another ConfigMap in its own namespace": lambda: hub.core.create_namespaced_config_map(
            hub_namespace, {"metadata": {"name": "other"}}, **DRY),
    }
    for what, call in refused.items():
        message = refusal(call)
        assert OUTSIDE in message, (what, message)
    assert "kube-system is not a user namespace" in refusal(refused["a pod in kube-system"])
    # What it does there: its quota ConfigMap at home, and the spawner's objects in a user namespace.
    hub.core.create_namespaced_config_map(hub_namespace, {"metadata": {"name": QUOTA_CONFIGMAP}}, **DRY)
    user = make_namespace("user", labels={**tenancy.user_namespace_labels(), USER_LABEL: "alice"})
    hub.core.create_namespaced_service_account(user, tenancy.service_account(user), **DRY)
    core_v1.create_namespaced_service_account(user, tenancy.service_account(user))  # the pod's, for real
    hub.core.create_namespaced_pod(user, pod_of(product_job(user, "ok")), **DRY)
    hub.rbac.create_namespaced_role_binding(user, tenancy.role_binding(user), **DRY)


def test_the_hub_makes_and_changes_only_its_users_namespaces(cluster, core_v1, make_namespace, hub_namespace):
    hub = as_hub(cluster, core_v1, hub_namespace)
    wait_for(lambda: refused_with(lambda: hub.core.create_namespace({"metadata": {"name": "probe"}}, **DRY),
                                  NAMESPACES), timeout=30, what="the hub policy in force")
    ours = {**tenancy.user_namespace_labels(), USER_LABEL: "alice"}
    refused = {
        "an unlabelled namespace": {"metadata": {"name": f"grab-{UID}"}},
        "ours, without Pod Security": {"metadata": {"name": f"grab-{UID}", "labels": {
            k: v for k, v in ours.items() if not k.startswith(tenancy.POD_SECURITY_PREFIX)}}},
        "ours, but privileged": {"metadata": {"name": f"grab-{UID}", "labels": {
            **ours, "pod-security.kubernetes.io/enforce": "privileged"}}},
    }
    for what, body in refused.items():
        assert NAMESPACES in refusal(lambda body=body: hub.core.create_namespace(body, **DRY)), what
    hub.core.create_namespace({"metadata": {"name": f"alice-{UID}", "labels": ours}}, **DRY)
    # Never relabel another namespace into ours, nor lower a user namespace's Pod Security.
    plain = make_namespace("plain")
    for name in (plain, "kube-system"):
        message = refusal(lambda name=name: hub.core.patch_namespace(name, {"metadata": {"labels": ours}}, **DRY))
        assert NAMESPACES in message, (name, message)
    user = make_namespace("user", labels=ours)
    message = refusal(lambda: hub.core.patch_namespace(user, {"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "privileged"}}}, **DRY))
    assert "pod-security.kubernetes.io/enforce=restricted" in message
    # The spawner putting the labels back (tenancy.pod_security_patch) passes.
    hub.core.patch_namespace(user, {"metadata": {"labels": tenancy.pod_security_labels()}}, **DRY)


def test_the_hub_policy_type_checks_without_a_warning(admission_v1, hub_namespace):
    name = f"{policies.HUB_POLICY_NAME}-{UID}"
    assert type_warnings(admission_v1, [name]) == {name: []}


# ------------------------------------------------------------------ the spawner keeps them

async def test_the_spawner_makes_the_pod_policies_and_brings_them_to_changed_settings(cluster, admission_v1,
                                                                                    monkeypatch):
    """PaddleCloudSpawner._ensure_pod_policy against the API server: created on a first spawn,
    replaced (not left stale) when a hub with other settings starts."""
    import kubespawner.spawner
    from kubernetes_asyncio import config as async_config

    import paddle_ext.hub.spawner
    from paddle_ext.hub.settings import HubSettings
    from paddle_ext.hub.spawner import PaddleCloudSpawner

    monkeypatch.setattr(kubespawner.spawner, "load_config", lambda **_kwargs: None)
    monkeypatch.setattr(kubespawner.spawner, "shared_client", lambda _name: None)
    uid = uuid.uuid4().hex[:6]  # this test's own names, bound to no namespace of anyone's

    original = policies.user_pod_policies

    def own_names(rules):
        objects = copy.deepcopy(original(rules))
        for obj in objects:
            obj["metadata"]["name"] += f"-{uid}"
            if obj["kind"] == "ValidatingAdmissionPolicyBinding":
                obj["spec"]["policyName"] += f"-{uid}"
                obj["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"].append(
                    {"key": TEST_LABEL, "operator": "In", "values": [uid]})
        return objects

    monkeypatch.setattr(paddle_ext.hub.spawner.policies, "user_pod_policies", own_names)
    api = await async_config.new_client_from_config(config_file=cluster.kubeconfig)
    jobs = f"{policies.JOB_POLICY_NAME}-{uid}"
    try:
        for settings in (HubSettings(allowed_priority_classes=(LOW,)), HubSettings(queue_name=QUEUE)):
            monkeypatch.setattr(PaddleCloudSpawner, "_pod_policy_ensured", False)  # a hub process starting
            spawner = PaddleCloudSpawner(_mock=True, paddlecloud_settings=settings)
            spawner.api = SimpleNamespace(api_client=api)
            await spawner._ensure_pod_policy()
            made = admission_v1.read_validating_admission_policy(jobs).to_dict()["spec"]
            given = {v["name"]: v["expression"] for v in made["variables"]}
            assert json.loads(given["priorityClasses"]) == list(settings.allowed_priority_classes)
            assert any("must name their queue" in v["message"] for v in made["validations"]) == bool(
                settings.queue_name)
            binding = admission_v1.read_validating_admission_policy_binding(jobs)
            assert binding.spec.policy_name == jobs
    finally:
        await api.close()
        for name in (f"{policies.POD_POLICY_NAME}-{uid}", jobs):
            for delete in (admission_v1.delete_validating_admission_policy_binding,
                           admission_v1.delete_validating_admission_policy):
                try:
                    delete(name)
                except kubernetes.client.ApiException:
                    pass
