"""Manifests are pure: compared as whole dicts, and validated against Kubernetes 1.35 schemas."""

import json
from pathlib import Path

import kubernetes_validate
import pytest

from catalogue import DATASETS
from paddle_ext import manifests
from paddle_ext.constants import MAX_UNPACKED_BYTES, MAX_UNPACKED_FILES, SPEC_ANNOTATION
from paddle_ext.jobkinds import job_objects
from paddle_ext.manifests import MAX_NAMES_IN_SELECTOR, ManifestSettings, jobs_selector, label_selector, program
from paddle_ext.spec import JobSpec

K8S_VERSION = "1.35.0"


def settings(**overrides):
    return ManifestSettings(namespace="user-alice", image="paddle:3.3.1-cpu", user="alice", **overrides)


def test_one_cpu_worker_whole_objects():
    spec = JobSpec(name="tiny", command=["python", "train.py"])
    service, job = job_objects(spec, settings())
    labels = {
        "app.kubernetes.io/name": "paddlecloud-job", "app.kubernetes.io/instance": "tiny",
        "app.kubernetes.io/component": "worker", "app.kubernetes.io/managed-by": "paddlecloud",
        "paddlecloud.io/job": "tiny", "paddlecloud.io/kind": "job", "paddlecloud.io/user": "alice",
    }
    assert service == {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "tiny", "namespace": "user-alice", "labels": labels},
        "spec": {"clusterIP": "None", "selector": {"paddlecloud.io/job": "tiny"}, "publishNotReadyAddresses": True,
                 "ports": [{"name": "paddle-master", "port": 36789, "targetPort": 36789}]},
    }
    assert job == {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "tiny", "namespace": "user-alice", "labels": labels},
        "spec": {
            "completionMode": "Indexed", "completions": 1, "parallelism": 1, "backoffLimit": 0,
            "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "subdomain": "tiny",
                    "enableServiceLinks": False,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 100,
                                        "fsGroup": 100, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{
                        "name": "paddle",
                        "image": "paddle:3.3.1-cpu",
                        # the launcher under the trainer log relay (paddle_ext/trainer_logs.py, run from source)
                        "command": ["python", "-c", program("trainer_logs"), "/tmp/paddlecloud-launch", "1", "--",
                                    "python", "-m", "paddle.distributed.launch", "--master", "tiny-0.tiny:36789",
                                    "--nnodes", "1", "--rank", "$(JOB_COMPLETION_INDEX)", "--nproc_per_node", "1",
                                    "--job_id", "tiny", "--log_dir", "/tmp/paddlecloud-launch",
                                    "--host", "tiny-$(JOB_COMPLETION_INDEX).tiny", "python", "train.py"],
                        "env": [
                            {"name": "PADDLECLOUD_JOB_NAME", "value": "tiny"},
                            {"name": "PYTHONUNBUFFERED", "value": "1"},
                            {"name": "PADDLECLOUD_OUTPUT_DIR", "value": "/tmp/paddlecloud-outputs/tiny"},
                            {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
                                "fieldPath": "metadata.labels['batch.kubernetes.io/job-completion-index']"}}},
                        ],
                        "ports": [{"name": "paddle-master", "containerPort": 36789}],
                        "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}},
                        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                            "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                    }],
                    "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}],
                },
            },
        },
    }


def big_spec():
    return JobSpec(name="resnet", command=["python", "train.py", "--epochs", "90"], workers=4, gpus_per_worker=2,
                   cpu="8", memory="64Gi", datasets=["imagenet", "coco"], env={"NCCL_DEBUG": "INFO"},
                   max_runtime_seconds=3600)


def test_four_workers_two_gpus_two_datasets():
    s = settings(datasets=DATASETS, gpu_node_selector=(("nvidia.com/gpu.present", "true"),),
                 gpu_tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},),
                 ttl_seconds_after_finished=600, queue_name="team-queue")
    service, job = job_objects(big_spec(), s, {SPEC_ANNOTATION: json.dumps(big_spec().to_dict())})
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 4
    assert job["spec"]["activeDeadlineSeconds"] == 3600 and job["spec"]["ttlSecondsAfterFinished"] == 600
    assert job["spec"]["suspend"] is True and job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-queue"
    assert container["resources"]["limits"] == {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "2"}
    assert container["resources"]["requests"] == container["resources"]["limits"]
    assert container["command"][container["command"].index("--nproc_per_node") + 1] == "2"
    assert container["command"][container["command"].index("--master") + 1] == "resnet-0.resnet:36789"
    assert {"name": "NCCL_DEBUG", "value": "INFO"} in container["env"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert {"name": "dataset-imagenet", "mountPath": "/datasets/imagenet", "readOnly": True,
            "subPath": "imagenet"} in container["volumeMounts"]
    assert {"name": "dataset-coco", "mountPath": "/datasets/coco", "readOnly": True,
            "subPath": "coco"} in container["volumeMounts"]
    assert {"name": "dataset-imagenet", "persistentVolumeClaim": {"claimName": "team-datasets", "readOnly": True}} \
        in pod["volumes"]
    assert json.loads(job["metadata"]["annotations"]["paddlecloud.io/spec"])["workers"] == 4


def test_cpu_jobs_get_no_gpu_scheduling_constraints():
    s = settings(gpu_node_selector=(("gpu", "yes"),), gpu_tolerations=({"key": "gpu", "operator": "Exists"},))
    _, job = job_objects(JobSpec(name="cpu", command=["x"]), s)
    pod = job["spec"]["template"]["spec"]
    assert "nodeSelector" not in pod and "tolerations" not in pod


HOME = {"persistentVolumeClaim": {"claimName": "home-alice"}}


@pytest.mark.parametrize("module", ["trainer_logs", "job_folder"])
def test_a_program_rides_in_the_pod_compressed_and_is_the_module_without_its_docstrings(module):
    """Every Job, pod and Workload carries the relay: as plain source it was 13 of a Job's
    15.5 KB, which every listing decoded. (The unit tests of trainer_logs and job_folder run
    these very strings with `python -c`.)"""
    import ast
    import base64
    import re
    import zlib

    text = program(module)
    assert text.startswith(f"# paddle_ext/{module}.py\n") and len(text) < 5 * 1024
    packed = re.search(r"b64decode\('([A-Za-z0-9+/=]+)'\)", text).group(1)
    shipped = ast.parse(zlib.decompress(base64.b64decode(packed)).decode())
    source = ast.parse((Path(manifests.__file__).parent / f"{module}.py").read_text())
    defs = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)

    def named(tree):
        return [node.name for node in ast.walk(tree) if isinstance(node, defs[1:])]

    assert named(shipped) == named(source)
    assert any(ast.get_docstring(node) for node in ast.walk(source) if isinstance(node, defs))
    assert not any(ast.get_docstring(node) for node in ast.walk(shipped) if isinstance(node, defs))


def test_a_job_from_a_folder_off_the_workspace_unpacks_its_code_at_the_same_path():
    spec = JobSpec(name="tiny", command=["python", "my_train.py"])
    s = settings(workdir="/home/jovyan/project", code_configmap="tiny-code")
    pod = job_objects(spec, s)[1]["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    container = pod["containers"][0]
    assert container["workingDir"] == "/home/jovyan/project"
    assert {"name": "workdir", "mountPath": "/home/jovyan/project"} in container["volumeMounts"]
    assert {"name": "workdir", "emptyDir": {"sizeLimit": "8Gi"}} in pod["volumes"]
    assert {"name": "code", "configMap": {"name": "tiny-code"}} in pod["volumes"]
    assert init["command"][:2] == ["python", "-c"]
    assert init["command"][2] == manifests.program("job_folder")
    assert init["command"][3:] == ["/var/run/paddlecloud/code/code.tar.gz", "/home/jovyan/project",
                                   "/tmp/paddlecloud-outputs/tiny", str(MAX_UNPACKED_BYTES), str(MAX_UNPACKED_FILES)]
    # The outputs folder the init container makes is a volume the worker shares.
    outputs_mount = {"name": "outputs", "mountPath": "/tmp/paddlecloud-outputs"}
    assert {"name": "outputs", "emptyDir": {"sizeLimit": "8Gi"}} in pod["volumes"] and outputs_mount in container["volumeMounts"]
    assert init["volumeMounts"] == [{"name": "workdir", "mountPath": "/home/jovyan/project"}, outputs_mount,
                                    {"name": "code", "mountPath": "/var/run/paddlecloud/code", "readOnly": True}]
    assert init["resources"] == container["resources"] and init["securityContext"] == container["securityContext"]
    assert manifests.outputs(spec, s) == {"path": "/tmp/paddlecloud-outputs/tiny", "kept": False,
                                          "note": manifests.NO_OUTPUTS_NOTE}
    configmap = manifests.code_configmap(spec, s, "H4sI")
    assert configmap["immutable"] is True and configmap["binaryData"] == {"code.tar.gz": "H4sI"}
    assert configmap["metadata"]["name"] == "tiny-code" and configmap["metadata"]["labels"]["paddlecloud.io/job"] == "tiny"


@pytest.mark.parametrize("kind", ["job", "paddlejob"])
def test_where_the_image_carries_the_helpers_a_job_runs_them_from_it_and_is_smaller(kind):
    spec = JobSpec(name="tiny", command=["python", "my_train.py"], workers=2)
    folder = {"kind": kind, "workdir": "/home/jovyan/project", "code_configmap": "tiny-code"}
    carried, from_image = job_objects(spec, settings(**folder))[-1], job_objects(spec, settings(**folder,
                                                                                              helpers_in_image=True))[-1]

    def pod(job):
        return (job["spec"].get("template") or job["spec"]["paddleReplicaSpecs"]["Worker"]["template"])["spec"]

    container, init = pod(from_image)["containers"][0], pod(from_image)["initContainers"][0]
    assert container["command"][:4] == ["python", "-m", "paddle_ext.trainer_logs", "/tmp/paddlecloud-launch"]
    assert container["command"][4:] == pod(carried)["containers"][0]["command"][4:]  # the launcher as before
    assert init["command"][:3] == ["python", "-m", "paddle_ext.job_folder"]
    assert init["command"][3:] == pod(carried)["initContainers"][0]["command"][3:]
    saved = len(json.dumps(carried)) - len(json.dumps(from_image))
    assert saved > len(program("trainer_logs")) + len(program("job_folder")) - 100


def test_the_backend_runs_the_helpers_from_the_sites_images_only():
    from paddle_ext.backends.kubernetes import KubernetesBackend

    offered = [{"name": "reg/paddle:cpu"}, {"name": "reg/paddle:gpu"}]
    backend = KubernetesBackend(namespace="ns", images=offered)
    for image in (None, "reg/paddle:cpu", "reg/paddle:gpu"):
        spec = JobSpec(name="tiny", command=["python", "t.py"], image=image)
        assert backend.settings(spec).helpers_in_image is True, image
    unlisted = KubernetesBackend(namespace="ns", image="reg/site:1")
    assert unlisted.settings(JobSpec(name="tiny", command=["t"], image="me/own:1")).helpers_in_image is False
    assert unlisted.settings(JobSpec(name="tiny", command=["t"], image="reg/site:1")).helpers_in_image is True
    assert KubernetesBackend(namespace="ns", helpers_in_image=False).settings(
        JobSpec(name="tiny", command=["t"])).helpers_in_image is False


def test_a_job_from_a_folder_on_the_shared_workspace_runs_there_and_keeps_its_outputs_beside_it():
    spec = JobSpec(name="tiny", command=["python", "my_train.py"])
    s = settings(workdir="/home/jovyan/project", code_configmap="tiny-code", workspace=HOME,
                 workspace_mount="/home/jovyan")
    pod = job_objects(spec, s)[1]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["workingDir"] == "/home/jovyan/project"
    assert {"name": "workspace", "mountPath": "/home/jovyan"} in container["volumeMounts"]
    assert {"name": "workspace", **HOME} in pod["volumes"]
    assert not [v for v in pod["volumes"] if v["name"] in ("code", "workdir", "outputs")]  # nothing travels
    assert pod["initContainers"][0]["command"][3:6] == ["", "/home/jovyan/project",
                                                        "/home/jovyan/project/paddlecloud-outputs/tiny"]
    assert {"name": "PADDLECLOUD_OUTPUT_DIR", "value": "/home/jovyan/project/paddlecloud-outputs/tiny"} \
        in container["env"]
    assert manifests.outputs(spec, s)["kept"] is True
    # A folder beside the workspace (not under its mount) gets a snapshot instead.
    assert not manifests.runs_in_workspace(settings(workdir="/home/jovyanx", workspace=HOME,
                                                    workspace_mount="/home/jovyan"))


@pytest.mark.parametrize("kind, index_label", [("job", "batch.kubernetes.io/job-completion-index"),
                                               ("paddlejob", "training.kubeflow.org/replica-index")])
def test_where_outputs_are_kept_each_worker_keeps_a_copy_of_its_pods_log_beside_them(kind, index_label):
    spec = JobSpec(name="tiny", command=["python", "my_train.py"])
    kept = settings(kind=kind, workdir="/home/jovyan/project", workspace=HOME, workspace_mount="/home/jovyan")
    template = job_objects(spec, kept)[-1]["spec"]
    template = template.get("template") or template["paddleReplicaSpecs"]["Worker"]["template"]
    env = template["spec"]["containers"][0]["env"]
    assert [e for e in env if e["name"] in ("PADDLECLOUD_WORKER_INDEX", "PADDLECLOUD_POD_UID",
                                            "PADDLECLOUD_LOG_COPY_DIR")] == [
        {"name": "PADDLECLOUD_WORKER_INDEX", "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{index_label}']"}}},
        {"name": "PADDLECLOUD_POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
        {"name": "PADDLECLOUD_LOG_COPY_DIR",
         "value": "/home/jovyan/project/paddlecloud-outputs/tiny/logs/worker-$(PADDLECLOUD_WORKER_INDEX)"}]
    # Outputs that go with the pods: no copy (its log would go with them too).
    unkept = job_objects(spec, settings(kind=kind, workdir="/home/jovyan/project", code_configmap="tiny-code"))[-1]
    unkept = unkept["spec"].get("template") or unkept["spec"]["paddleReplicaSpecs"]["Worker"]["template"]
    assert not [e for e in unkept["spec"]["containers"][0]["env"] if e["name"] == "PADDLECLOUD_LOG_COPY_DIR"]


@pytest.mark.parametrize("spec", [JobSpec(name="tiny", command=["python", "t.py"]), big_spec(),
                                  JobSpec(name="again", command=["python", "t.py"], workers=2, max_restarts=3)])
@pytest.mark.parametrize("folder", [{}, {"workdir": "/home/jovyan/p", "code_configmap": "x-code"},
                                    {"workdir": "/home/jovyan/p", "workspace": HOME, "workspace_mount": "/home/jovyan"}])
def test_objects_match_kubernetes_schemas(spec, folder):
    s = settings(datasets=DATASETS, ttl_seconds_after_finished=60, **folder)
    for obj in job_objects(spec, s) + [manifests.code_configmap(spec, s, "H4sI")]:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_schema_check_is_real():
    _, job = job_objects(JobSpec(name="tiny", command=["x"]), settings())
    job["spec"]["completionMode"] = 3
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, K8S_VERSION, strict=True)


def test_a_job_that_may_restart_counts_lost_workers_not_the_users_errors():
    spec = JobSpec(name="again", command=["python", "t.py"], workers=2, max_restarts=3)
    _, job = job_objects(spec, settings())
    policy = {key: value for key, value in job["spec"].items()
              if key not in ("completionMode", "completions", "parallelism", "template")}
    assert policy == {
        "backoffLimitPerIndex": 3, "maxFailedIndexes": 0, "podReplacementPolicy": "Failed",
        "podFailurePolicy": {"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            {"action": "FailJob", "onExitCodes": {"containerName": "paddle", "operator": "In",
                                                  "values": list(range(1, 129))}},
        ]},
    }
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][:12] == [
        "python", "-m", "paddle_ext.worker", "--index", "$(JOB_COMPLETION_INDEX)", "--workers", "2",
        "--peer", "again-{i}.again", "--port", "36790", "--"]
    relayed = container["command"][12:]  # the trainer log relay, then the launcher after its "--"
    assert relayed[:2] == ["python", "-c"]
    launcher = relayed[relayed.index("--") + 1:]
    assert launcher[:3] == ["python", "-m", "paddle.distributed.launch"]
    assert {"name": "paddle-peers", "containerPort": 36790} in container["ports"]
    assert {"name": "PADDLECLOUD_RESTART", "valueFrom": {"fieldRef": {
        "fieldPath": "metadata.annotations['batch.kubernetes.io/job-index-failure-count']"}}} in container["env"]
    # The rule's exit codes are the ones paddle_ext.restarts does not retry.
    from paddle_ext.restarts import exit_cause

    values = policy["podFailurePolicy"]["rules"][1]["onExitCodes"]["values"]
    assert values == sorted(values) and len(values) <= 255
    assert all(not exit_cause(code).retryable for code in values)
    assert all(exit_cause(code).retryable for code in range(129, 256))
    # Without restarts, the job is what it always was: any failure fails it.
    _, plain = job_objects(JobSpec(name="once", command=["python", "t.py"], max_restarts=0), settings())
    assert plain["spec"]["backoffLimit"] == 0 and "backoffLimitPerIndex" not in plain["spec"]
    assert plain["spec"]["template"]["spec"]["containers"][0]["command"][:2] == ["python", "-c"]  # the relay, unwrapped


def test_a_paddlejob_that_may_restart_uses_the_operators_exit_code_policy():
    (job,) = job_objects(JobSpec(name="again", command=["python", "t.py"], workers=2, max_restarts=3),
                         settings(kind="paddlejob"))
    assert job["spec"]["paddleReplicaSpecs"]["Worker"]["restartPolicy"] == "ExitCode"
    assert job["spec"]["runPolicy"]["backoffLimit"] == 6


def test_paddlejob_variant():
    (job,) = job_objects(big_spec(), settings(kind="paddlejob", datasets=DATASETS))
    assert job["apiVersion"] == "kubeflow.org/v1" and job["kind"] == "PaddleJob"
    worker = job["spec"]["paddleReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 4 and worker["restartPolicy"] == "Never"
    container = worker["template"]["spec"]["containers"][0]
    assert container["name"] == "paddle"
    assert "--master" not in container["command"] and "--rank" not in container["command"]
    assert job["spec"]["runPolicy"]["activeDeadlineSeconds"] == 3600
    assert "subdomain" not in worker["template"]["spec"]


def test_jobs_selector_names_a_few_jobs_and_falls_back_to_all_of_ours():
    assert jobs_selector(["b", "a"]) == "paddlecloud.io/job in (a,b)"
    assert jobs_selector(["a"]) == label_selector("a")
    many = [f"j{i}" for i in range(MAX_NAMES_IN_SELECTOR + 1)]
    assert jobs_selector(many) == label_selector()


@pytest.mark.parametrize("kind", ["job", "paddlejob"])
def test_with_a_queue_every_kind_is_created_suspended_with_the_queue_label(kind):
    from paddle_ext.jobkinds import JOB_KINDS

    queued = job_objects(big_spec(), settings(kind=kind, queue_name="default", datasets=DATASETS))[-1]
    assert JOB_KINDS[kind].is_suspended(queued)
    assert queued["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
    # Kueue copies the job's maximum runtime into its Workload (the queue's start estimates read it)
    assert queued["metadata"]["labels"]["kueue.x-k8s.io/max-exec-time-seconds"] == "3600"
    plain = job_objects(big_spec(), settings(kind=kind, datasets=DATASETS))[-1]
    assert not JOB_KINDS[kind].is_suspended(plain) and not [
        key for key in plain["metadata"]["labels"] if key.startswith("kueue.x-k8s.io/")]

