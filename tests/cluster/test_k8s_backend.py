"""The Kubernetes job backend against the real control plane: real PaddlePaddle jobs on
the real node (worker-image pods, DNS, the kubelet's logs and status), GPU placement
and quotas on the KWOK GPU nodes, manifests through server-side dry-run."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess

import kubernetes
import pytest
import yaml

from cluster_helpers import GATE, GPU_TOLERATION, open_gate, own_gpu_nodes, wait_for, wait_for_async
from paddle_ext import tenancy
from paddle_ext.constants import NOTEBOOK_SERVICE_ACCOUNT, SPEC_ANNOTATION
from paddle_ext.backends.kubernetes import KubernetesBackend
from paddle_ext.errors import Forbidden, JobExists, QuotaExceeded
from paddle_ext.jobkinds import job_objects
from paddle_ext.manifests import ManifestSettings
from paddle_ext.spec import JobSpec
from serverutil import JupyterServer
from tools.k8s.cluster import IMAGE_REFS

DATASETS = [
    {"name": "imagenet", "mount_path": "/datasets/imagenet",
     "volume": {"persistentVolumeClaim": {"claimName": "team-datasets"}}, "sub_path": "imagenet"},
    {"name": "coco", "mount_path": "/datasets/coco",
     "volume": {"persistentVolumeClaim": {"claimName": "team-datasets"}}, "sub_path": "coco"},
]
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKER = IMAGE_REFS["worker"]
MISSING_IMAGE = "docker.io/paddlecloud/no-such-image:1.0"
# Real workers share the real node's 2 CPUs with whatever else runs: each asks for little.
SMALL = {"cpu": "500m", "memory": "1Gi"}


def backend(cluster, namespace, kubeconfig=None, **config):
    config = {"datasets": DATASETS, "images": [{"name": WORKER}, {"name": MISSING_IMAGE}],
              "gpu_tolerations": [GPU_TOLERATION], "log_idle_check_seconds": 0.5, **config}
    return KubernetesBackend(kubeconfig=kubeconfig or cluster.kubeconfig, namespace=namespace, **config)


def job_pods(core_v1, namespace, name):
    return core_v1.list_namespaced_pod(namespace, label_selector=f"paddlecloud.io/job={name}").items


def container_log(core_v1, namespace, pod) -> list[str]:
    """What the kubelet has of a container's output (the reference for our merged logs)."""
    return core_v1.read_namespaced_pod_log(pod.metadata.name, namespace, container="paddle").splitlines()


async def wait_phase(jobs, name, phases, timeout=240):
    async def reached():
        job = await jobs.get(name)
        return job if job.phase in phases else None
    return await wait_for_async(reached, timeout=timeout, interval=0.5, what=f"job {name} to reach {phases}")


def restricted_namespace(make_namespace):
    return make_namespace("pss", labels=tenancy.pod_security_labels())


@pytest.mark.parametrize("spec", [
    JobSpec(name="one-cpu", command=["python", "train.py"]),
    JobSpec(name="four-by-two", command=["python", "train.py"], workers=4, gpus_per_worker=2, cpu="8",
            memory="64Gi", datasets=["imagenet", "coco"], max_runtime_seconds=3600),
])
def test_manifests_pass_server_side_dry_run_under_pss_restricted(spec, make_namespace, core_v1, batch_v1):
    ns = restricted_namespace(make_namespace)
    settings = ManifestSettings(namespace=ns, image="paddle:3.3.1-cpu", datasets=tuple(DATASETS), user="alice",
                                ttl_seconds_after_finished=600)
    service, job = job_objects(spec, settings, {SPEC_ANNOTATION: json.dumps(spec.to_dict())})
    core_v1.create_namespaced_service(ns, service, dry_run="All")
    batch_v1.create_namespaced_job(ns, job, dry_run="All")
    # Pod Security admission enforces on pods, so also dry-run the pod the Job would make.
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{spec.name}-0", "labels": {
        "batch.kubernetes.io/job-completion-index": "0"}}, "spec": job["spec"]["template"]["spec"]}
    core_v1.create_namespaced_pod(ns, pod, dry_run="All")


def test_pss_dry_run_is_a_real_check(make_namespace, core_v1):
    ns = restricted_namespace(make_namespace)
    settings = ManifestSettings(namespace=ns, image="img")
    _, job = job_objects(JobSpec(name="bad", command=["x"]), settings)
    pod_spec = job["spec"]["template"]["spec"]
    pod_spec["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    with pytest.raises(kubernetes.client.ApiException) as info:
        core_v1.create_namespaced_pod(ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad"},
                                           "spec": pod_spec}, dry_run="All")
    assert info.value.status == 403 and "allowPrivilegeEscalation" in info.value.body


def test_rest_runs_a_real_two_worker_job_and_its_logs_are_what_the_containers_wrote(
        real_cluster, core_v1, namespace, project_folder, tmp_path):
    config = tmp_path / "jupyter_server_config.py"
    config.write_text(
        "c.PaddleCloudExtension.backend = 'kubernetes'\n"
        f"c.KubernetesBackend.namespace = {namespace!r}\n"
        f"c.KubernetesBackend.images = [{{'name': {WORKER!r}}}]\n"
        "c.KubernetesBackend.log_idle_check_seconds = 0.5\n"
    )
    server = JupyterServer(tmp_path, project_folder, env={"KUBECONFIG": real_cluster.kubeconfig},
                           args=[f"--config={config}"]).start()
    try:
        job = server.submit(command=["python", "train.py", "--epochs", "1"], workers=2, name="rest-job", **SMALL)
        assert job["backend"] == "kubernetes" and job["phase"] == "Pending"
        lines, end = server.follow_to_end("rest-job")
        assert end["phase"] == "Succeeded", lines[-30:]
        for rank in (0, 1):  # they found worker 0's master by DNS and all-reduced for real
            assert f"[worker-{rank}] rank {rank}: all_reduce check ok: sum=3 over 2 workers" in lines
        pods = sorted(job_pods(core_v1, namespace, "rest-job"),
                      key=lambda p: p.metadata.labels["batch.kubernetes.io/job-completion-index"])
        assert {p.spec.node_name for p in pods} == {real_cluster.real_node_name}
        assert all(p.status.pod_ip.startswith("198.18.") for p in pods)
        # Exactly what each container wrote, prefixed, each line once.
        for rank, pod in enumerate(pods):
            ours = [line.split("] ", 1)[1] for line in lines if line.startswith(f"[worker-{rank}] ")]
            assert ours == container_log(core_v1, namespace, pod)
        plain = server.api("GET", "/jobs/rest-job/logs").text.splitlines()
        assert sorted(plain) == sorted(lines)
        final = server.api("GET", "/jobs/rest-job").json()
        assert final["phase"] == "Succeeded" and final["finished"]
        assert final["code"]["files"] >= 1 and final["code"]["stored"]
        taken = server.api("POST", "/jobs", json={"name": "rest-job", "command": ["x"]})
        assert taken.status_code == 409 and taken.json()["error"] == "name_taken"
    finally:
        server.stop()


async def test_job_asking_more_gpus_than_any_node_is_unschedulable_with_numbers(cluster, core_v1, namespace):
    """On GPU nodes of the test's own: the cluster's shared ones may still hold GPUs of other tests'
    pods going away with their namespaces (seen: 7 free, not 8)."""
    with own_gpu_nodes(core_v1, namespace, 2) as (selector, toleration):
        jobs = backend(cluster, namespace, max_gpus_per_worker=16,  # an admin bound above any node's size
                       gpu_node_selector=selector, gpu_tolerations=[GPU_TOLERATION, toleration])
        try:
            await jobs.submit(JobSpec(name="too-big", command=["python", "train.py"], gpus_per_worker=16))
            async def unschedulable():
                job = await jobs.get("too-big")
                return job if job.reason == "Unschedulable" else None

            job = await wait_for_async(unschedulable, timeout=60, interval=0.3, what="too-big reported Unschedulable")
            assert (job.phase, job.reason) == ("Pending", "Unschedulable")
            assert "Needs 16 GPUs per worker; the most free on any node is 8" in job.message
            assert "Insufficient nvidia.com/gpu" in job.message
        finally:
            await jobs.close()


async def test_over_quota_submit_is_refused_naming_limit_and_usage(cluster, core_v1, namespace):
    core_v1.create_namespaced_resource_quota(namespace, tenancy.resource_quota(
        namespace, {"requests.nvidia.com/gpu": "2"}))
    wait_for(lambda: (core_v1.read_namespaced_resource_quota("paddlecloud-quota", namespace).status.hard),
             what="quota status")
    jobs = backend(cluster, namespace)
    try:
        with pytest.raises(QuotaExceeded) as info:
            await jobs.submit(JobSpec(command=["python", "train.py"], workers=2, gpus_per_worker=2))
        assert info.value.to_dict()["error"] == "quota_exceeded"
        assert info.value.message == "Needs 4 GPUs; your quota is 2 and 0 are in use."
        assert (await jobs.list()) == []  # nothing half-created
        assert core_v1.list_namespaced_service(namespace).items == []
    finally:
        await jobs.close()


async def test_cancel_removes_pods_and_service_and_leaves_no_container_running(real_cluster, core_v1, namespace):
    jobs = backend(real_cluster, namespace)
    try:
        await jobs.submit(JobSpec(name="long", command=["python", "ticker.py", "--count", "100000"], workers=2,
                                  **SMALL))
        await wait_phase(jobs, "long", ("Running",))
        containers = [s.container_id.split("://", 1)[1] for p in job_pods(core_v1, namespace, "long")
                      for s in p.status.container_statuses or []]
        assert len(containers) == 2 and all(c in running_tasks(real_cluster) for c in containers)
        assert core_v1.read_namespaced_service("long", namespace).spec.cluster_ip == "None"
        with pytest.raises(JobExists):
            await jobs.submit(JobSpec(name="long", command=["python", "train.py"]))
        job = await jobs.cancel("long")
        assert (job.phase, job.reason) == ("Cancelled", "Cancelled")
        wait_for(lambda: not job_pods(core_v1, namespace, "long"), timeout=60, what="pods deleted")
        wait_for(lambda: not set(containers) & running_tasks(real_cluster), timeout=60,
                 what="the containers gone from containerd")
        assert core_v1.list_namespaced_service(namespace).items == []
        assert (await jobs.get("long")).phase == "Cancelled"
    finally:
        await jobs.close()


def running_tasks(cluster) -> set[str]:
    """Container ids with a live task in the real node's containerd."""
    out = cluster.real_node.ctr("tasks", "list").stdout.splitlines()[1:]
    return {line.split()[0] for line in out if line.split() and line.split()[-1] == "RUNNING"}


async def test_deleting_a_worker_pod_mid_run_fails_the_job_naming_the_worker(real_cluster, core_v1, namespace):
    jobs = backend(real_cluster, namespace)
    try:
        await jobs.submit(JobSpec(name="lost", command=["python", "ticker.py", "--count", "100000"], workers=2,
                                  **SMALL))
        await wait_phase(jobs, "lost", ("Running",))
        (victim,) = [p for p in job_pods(core_v1, namespace, "lost")
                     if p.metadata.labels["batch.kubernetes.io/job-completion-index"] == "1"]
        core_v1.delete_namespaced_pod(victim.metadata.name, namespace)
        job = await wait_phase(jobs, "lost", ("Failed",))
        assert job.reason == "WorkerFailed" and job.message.startswith("Worker 1 "), job.message
    finally:
        await jobs.close()


async def test_oom_and_a_missing_image_are_reported_from_the_kubelet(real_cluster, namespace):
    jobs = backend(real_cluster, namespace)
    try:
        hog = ["python", "-c", "x = bytearray(600 * 1024 * 1024); print(len(x))"]
        await jobs.submit(JobSpec(name="hog", command=hog, cpu="500m", memory="256Mi"))
        await jobs.submit(JobSpec(name="ghost", command=["python", "train.py"], image=MISSING_IMAGE, **SMALL))
        hog_job = await wait_phase(jobs, "hog", ("Failed", "Succeeded"))
        assert (hog_job.phase, hog_job.reason) == ("Failed", "OOMKilled")
        assert "Worker 0 ran out of memory (its limit is 256Mi)" in hog_job.message
        async def pull_backoff():
            ghost = await jobs.get("ghost")
            return ghost if ghost.reason == "ImagePullBackOff" else None

        ghost = await wait_for_async(pull_backoff, timeout=120, interval=0.5, what="ghost reported ImagePullBackOff")
        assert (ghost.phase, ghost.reason) == ("Pending", "ImagePullBackOff"), ghost.message
        assert f"Cannot pull image '{MISSING_IMAGE}' for worker 0" in ghost.message
    finally:
        await jobs.close()


def token_kubeconfig(cluster, core_v1, namespace, path):
    """A kubeconfig for the notebook service account of `namespace` (Role from paddle_ext.tenancy)."""
    rbac = kubernetes.client.RbacAuthorizationV1Api(core_v1.api_client)
    core_v1.create_namespaced_service_account(namespace, tenancy.service_account(namespace))
    rbac.create_namespaced_role(namespace, tenancy.role(namespace))
    rbac.create_namespaced_role_binding(namespace, tenancy.role_binding(namespace))
    token = core_v1.create_namespaced_service_account_token(
        NOTEBOOK_SERVICE_ACCOUNT, namespace, {"spec": {"expirationSeconds": 3600}}).status.token
    admin = yaml.safe_load(open(cluster.kubeconfig))
    cluster_entry = admin["clusters"][0]
    config = {"apiVersion": "v1", "kind": "Config", "clusters": [cluster_entry],
              "users": [{"name": "sa", "user": {"token": token}}],
              "contexts": [{"name": "sa", "context": {"cluster": cluster_entry["name"], "user": "sa",
                                                     "namespace": namespace}}],
              "current-context": "sa"}
    path.write_text(yaml.safe_dump(config))
    return str(path)


async def test_a_users_token_cannot_touch_another_users_jobs(cluster, core_v1, make_namespace, tmp_path):
    alice_ns, bob_ns = make_namespace("alice"), make_namespace("bob")
    alice_config = token_kubeconfig(cluster, core_v1, alice_ns, tmp_path / "alice.kubeconfig")
    bob_jobs = backend(cluster, bob_ns)
    own = KubernetesBackend(kubeconfig=alice_config)  # namespace from the context
    intruder = KubernetesBackend(kubeconfig=alice_config, namespace=bob_ns)
    try:
        assert own.namespace == alice_ns
        own.images = [{"name": WORKER}]
        await own.submit(JobSpec(name="mine", command=["python", "train.py"], **SMALL))
        assert [j.name for j in await own.list()] == ["mine"]
        await bob_jobs.submit(JobSpec(name="bobs", command=["python", "ticker.py", "--count", "100000"], **SMALL))
        for action in (intruder.list, lambda: intruder.get("bobs"), lambda: intruder.cancel("bobs"),
                       lambda: intruder.submit(JobSpec(command=["x"]))):
            with pytest.raises(Forbidden) as info:
                await action()
            assert f"namespace '{bob_ns}'" in info.value.message and info.value.status == 403
        with pytest.raises(Forbidden):
            async for _ in intruder.logs("bobs"):
                pass
        assert (await bob_jobs.get("bobs")).phase in ("Pending", "Running")
        await bob_jobs.cancel("bobs")
    finally:
        for b in (bob_jobs, own, intruder):
            await b.close()


@pytest.fixture(scope="module")
def paddlejob_crd(cluster, api_client):
    """Kubeflow training-operator v1.9's PaddleJob CRD in the test cluster. With Kueue the harness
    installed it before Kueue started (tools/k8s/kueue.py: Kueue manages PaddleJobs too), and it
    is used as it is; without Kueue it is installed here. Never deleted: Kueue's PaddleJob
    controller watches it for the whole session."""
    path = subprocess.run([os.path.join(REPO_ROOT, "tools", "k8s", "fetch_crd.sh")], check=True,
                          capture_output=True, text=True).stdout.strip()
    with open(path) as fh:
        crd = yaml.safe_load(fh)
    extensions = kubernetes.client.ApiextensionsV1Api(api_client)
    if not cluster.kueue:
        try:
            extensions.create_custom_resource_definition(crd)
        except kubernetes.client.ApiException as exc:
            if exc.status != 409:
                raise
    wait_for(lambda: any(c.type == "Established" and c.status == "True" for c in
                         extensions.read_custom_resource_definition(crd["metadata"]["name"]).status.conditions or []),
             what="PaddleJob CRD established")
    return crd


def test_paddlejob_variant_passes_dry_run_against_the_training_operator_crd(paddlejob_crd, api_client,
                                                                            make_namespace):
    ns = restricted_namespace(make_namespace)
    spec = JobSpec(name="pj", command=["python", "train.py"], workers=4, gpus_per_worker=2,
                   datasets=["imagenet"], max_runtime_seconds=600)
    settings = ManifestSettings(namespace=ns, image="paddle:3.3.1-gpu", kind="paddlejob",
                                datasets=tuple(DATASETS), ttl_seconds_after_finished=60)
    (job,) = job_objects(spec, settings)
    custom = kubernetes.client.CustomObjectsApi(api_client)
    created = custom.create_namespaced_custom_object("kubeflow.org", "v1", ns, "paddlejobs", job, dry_run="All")
    assert created["spec"]["paddleReplicaSpecs"]["Worker"]["replicas"] == 4
    job["spec"]["paddleReplicaSpecs"]["Worker"]["replicas"] = "four"  # the CRD's schema really checks
    with pytest.raises(kubernetes.client.ApiException) as info:
        custom.create_namespaced_custom_object("kubeflow.org", "v1", ns, "paddlejobs", job, dry_run="All")
    assert info.value.status == 422


async def test_log_follow_survives_an_evicted_worker_pod_being_replaced(real_cluster, core_v1, namespace):
    """An evicted worker pod is replaced by the Job (a disruption does not fail the job);
    the follower moves to the new pod, repeats no line, and ends with the job. The worker
    ticks until the test opens its gate, so the eviction and the move happen mid-stream
    whatever the machine's speed."""
    jobs = backend(real_cluster, namespace)
    lines: list[str] = []
    try:
        command = ["python", "ticker.py", "--until", GATE, "--interval", "0.25"]
        await jobs.submit(JobSpec(name="evicted", command=command, **SMALL))

        async def follow():
            async for line in jobs.logs("evicted", follow=True):
                lines.append(line)

        follower = asyncio.ensure_future(follow())
        await wait_for_async(lambda: "tick 0 5" in lines or follower.done(), timeout=300, interval=0.1,
                             what="the follower to read 'tick 0 5'")
        assert not follower.done(), ("the follower ended before the eviction", lines[-5:])
        (victim,) = job_pods(core_v1, namespace, "evicted")
        core_v1.create_namespaced_pod_eviction(victim.metadata.name, namespace, {
            "metadata": {"name": victim.metadata.name, "namespace": namespace}})
        await wait_for_async(lambda: lines.count("tick 0 0") == 2 or follower.done(), timeout=300, interval=0.1,
                             what="the follower to read the replacement pod's first tick")
        assert not follower.done(), ("the follower ended before the replacement pod's lines", lines[-5:])
        (replacement,) = [p for p in job_pods(core_v1, namespace, "evicted") if p.metadata.uid != victim.metadata.uid]
        open_gate(real_cluster, namespace, replacement.metadata.name, GATE)
        await asyncio.wait_for(follower, 300)
        first = container_log_of(core_v1, namespace, victim)  # gone by now: what the follower kept
        assert lines.count("ticker 0 done") == 1  # the replacement ran to the end
        assert lines.count("tick 0 0") == 2  # the evicted pod's start, then the new pod's
        assert first is None or lines[:len(first)] == first
        assert (await jobs.get("evicted")).phase == "Succeeded"
    finally:
        await jobs.close()


def container_log_of(core_v1, namespace, pod):
    try:
        return container_log(core_v1, namespace, pod)
    except kubernetes.client.ApiException:
        return None


async def test_a_job_past_its_max_runtime_ends_deadline_exceeded_on_the_real_node(real_cluster, core_v1, namespace):
    jobs = backend(real_cluster, namespace)
    try:
        await jobs.submit(JobSpec(name="overtime", command=["python", "ticker.py", "--count", "100000"],
                                  max_runtime_seconds=12, **SMALL))
        job = await wait_phase(jobs, "overtime", ("Failed", "Succeeded"), timeout=300)
        assert (job.phase, job.reason) == ("Failed", "DeadlineExceeded")
        assert job.message == "The job ran longer than its limit of 12 seconds and was stopped."
        wait_for(lambda: not [p for p in job_pods(core_v1, namespace, "overtime") if p.status.phase == "Running"],
                 timeout=60, what="its workers stopped")
    finally:
        await jobs.close()
