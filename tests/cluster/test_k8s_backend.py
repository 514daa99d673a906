"""The Kubernetes job backend against the real control plane (KWOK nodes run no containers:
pods complete after a delay and their logs come from tests/cluster/jobfeeder.py)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import kubernetes
import pytest
import yaml

from cluster_helpers import wait_for
from jobfeeder import LogFeeder
from paddle_ext import tenancy
from paddle_ext.constants import NOTEBOOK_SERVICE_ACCOUNT, SPEC_ANNOTATION
from paddle_ext.backends.kubernetes import KubernetesBackend
from paddle_ext.errors import Forbidden, JobExists, QuotaExceeded
from paddle_ext.manifests import ManifestSettings, job_objects
from paddle_ext.spec import JobSpec
from serverutil import JupyterServer

DATASETS = [
    {"name": "imagenet", "mount_path": "/datasets/imagenet",
     "volume": {"persistentVolumeClaim": {"claimName": "team-datasets"}}, "sub_path": "imagenet"},
    {"name": "coco", "mount_path": "/datasets/coco",
     "volume": {"persistentVolumeClaim": {"claimName": "team-datasets"}}, "sub_path": "coco"},
]
COMPLETE_AFTER = "kwok.paddlecloud.io/complete-after"
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def backend(cluster, namespace, kubeconfig=None, **config):
    return KubernetesBackend(kubeconfig=kubeconfig or cluster.kubeconfig, namespace=namespace,
                             datasets=DATASETS, images=[{"name": "paddle:3.3.1-cpu"}], **config)


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


def test_submit_through_rest_runs_to_success_with_merged_logs(cluster, core_v1, namespace, tmp_path):
    config = tmp_path / "jupyter_server_config.py"
    config.write_text(
        "c.PaddleCloudExtension.backend = 'kubernetes'\n"
        f"c.KubernetesBackend.namespace = {namespace!r}\n"
        f"c.KubernetesBackend.pod_annotations = {{{COMPLETE_AFTER!r}: '5s'}}\n"
        "c.KubernetesBackend.log_idle_check_seconds = 0.5\n"
    )
    server = JupyterServer(tmp_path, tmp_path, env={"KUBECONFIG": cluster.kubeconfig},
                           args=[f"--config={config}"]).start()
    try:
        with LogFeeder(cluster, core_v1, namespace, str(tmp_path / "logs")):
            job = server.submit(command=["python", "train.py"], workers=2, name="rest-job")
            assert job["backend"] == "kubernetes" and job["phase"] == "Pending"
            running = server.wait_for("rest-job", ("Running",), timeout=30)
            assert [w["phase"] for w in running["worker_states"]] == ["Running", "Running"]
            pods = core_v1.list_namespaced_pod(namespace, label_selector="paddlecloud.io/job=rest-job").items
            assert sorted(p.status.pod_ip.split(".")[0] for p in pods) == ["127", "127"]
            lines, end = server.follow_to_end("rest-job")
            assert end["phase"] == "Succeeded"
            assert "[worker-0] rank 0: all_reduce check ok: sum=3 over 2 workers" in lines
            assert "[worker-1] rank 1: all_reduce check ok: sum=3 over 2 workers" in lines
            assert len(lines) == 8  # every line once, none repeated by re-attaching
            final = server.api("GET", "/jobs/rest-job").json()
            assert final["phase"] == "Succeeded" and final["finished"]
            assert [j["name"] for j in server.api("GET", "/jobs").json()["jobs"]] == ["rest-job"]
            taken = server.api("POST", "/jobs", json={"name": "rest-job", "command": ["x"]})
            assert taken.status_code == 409 and taken.json()["error"] == "name_taken"
    finally:
        server.stop()


def test_cli_submit_follow_on_kubernetes(cluster, core_v1, namespace, tmp_path):
    env = {**os.environ, "KUBECONFIG": cluster.kubeconfig, "PADDLECLOUD_BACKEND": "kubernetes"}
    with LogFeeder(cluster, core_v1, namespace, str(tmp_path / "logs")):
        result = subprocess.run(
            [sys.executable, "-m", "paddle_ext.cli", "--backend", "kubernetes", "submit", "--namespace", namespace,
             "--workers", "2", "--follow", "--", "python", "train.py"],
            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "[worker-0] rank 0: done" in result.stdout and "[worker-1] rank 1: done" in result.stdout
    assert "Succeeded" in result.stderr


async def test_job_asking_more_gpus_than_any_node_is_unschedulable_with_numbers(cluster, namespace):
    jobs = backend(cluster, namespace, max_gpus_per_worker=16)  # an admin bound above any node's size
    try:
        await jobs.submit(JobSpec(name="too-big", command=["python", "train.py"], gpus_per_worker=16))
        start = time.monotonic()
        while time.monotonic() - start < 20:
            job = await jobs.get("too-big")
            if job.reason == "Unschedulable":
                break
            await asyncio.sleep(0.3)
        print(f"Unschedulable reported after {time.monotonic() - start:.1f}s: {job.message}")
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


async def test_cancel_removes_pods_and_service_and_reports_cancelled(cluster, core_v1, namespace):
    jobs = backend(cluster, namespace, pod_annotations={COMPLETE_AFTER: "10m"})
    try:
        await jobs.submit(JobSpec(name="long", command=["python", "train.py"], workers=2))
        for _ in range(100):
            if (await jobs.get("long")).phase == "Running":
                break
            await asyncio.sleep(0.2)
        assert core_v1.read_namespaced_service("long", namespace).spec.cluster_ip == "None"
        with pytest.raises(JobExists):
            await jobs.submit(JobSpec(name="long", command=["python", "train.py"]))
        job = await jobs.cancel("long")
        assert (job.phase, job.reason) == ("Cancelled", "Cancelled")
        wait_for(lambda: not core_v1.list_namespaced_pod(namespace, label_selector="paddlecloud.io/job=long").items,
                 timeout=30, what="pods deleted")
        assert core_v1.list_namespaced_service(namespace).items == []
        assert (await jobs.get("long")).phase == "Cancelled"
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
    bob_jobs = backend(cluster, bob_ns, pod_annotations={COMPLETE_AFTER: "10m"})
    own = KubernetesBackend(kubeconfig=alice_config)  # namespace from the context
    intruder = KubernetesBackend(kubeconfig=alice_config, namespace=bob_ns)
    try:
        assert own.namespace == alice_ns
        await own.submit(JobSpec(name="mine", command=["python", "train.py"]))
        assert [j.name for j in await own.list()] == ["mine"]
        await bob_jobs.submit(JobSpec(name="bobs", command=["python", "train.py"]))
        for action in (intruder.list, lambda: intruder.get("bobs"), lambda: intruder.cancel("bobs"),
                       lambda: intruder.submit(JobSpec(command=["x"]))):
            with pytest.raises(Forbidden) as info:
                await action()
            assert f"namespace '{bob_ns}'" in info.value.message and info.value.status == 403
        with pytest.raises(Forbidden):
            async for _ in intruder.logs("bobs"):
                pass
        assert (await bob_jobs.get("bobs")).phase in ("Pending", "Running")
    finally:
        for b in (bob_jobs, own, intruder):
            await b.close()


@pytest.fixture(scope="module")
def paddlejob_crd(api_client):
    """Kubeflow training-operator v1.9's PaddleJob CRD, installed into the test cluster."""
    path = subprocess.run([os.path.join(REPO_ROOT, "tools", "k8s", "fetch_crd.sh")], check=True,
                          capture_output=True, text=True).stdout.strip()
    crd = yaml.safe_load(open(path))
    extensions = kubernetes.client.ApiextensionsV1Api(api_client)
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


async def test_log_follow_survives_a_worker_pod_being_replaced(cluster, core_v1, namespace, tmp_path):
    """An evicted worker pod is replaced by the Job (a disruption does not fail the job);
    the follower moves to the new pod, repeats no line, and ends with the job."""
    jobs = backend(cluster, namespace, pod_annotations={COMPLETE_AFTER: "8s"}, log_idle_check_seconds=0.5)
    lines: list[str] = []
    try:
        with LogFeeder(cluster, core_v1, namespace, str(tmp_path / "logs")):
            await jobs.submit(JobSpec(name="evicted", command=["python", "train.py"], workers=2))

            async def follow():
                async for line in jobs.logs("evicted", follow=True):
                    lines.append(line)

            follower = asyncio.ensure_future(follow())
            for _ in range(100):
                if "[worker-1] rank 1: done" in lines:
                    break
                await asyncio.sleep(0.1)
            (victim,) = [p for p in core_v1.list_namespaced_pod(namespace, label_selector="paddlecloud.io/job=evicted").items
                         if p.metadata.labels["batch.kubernetes.io/job-completion-index"] == "1"]
            core_v1.create_namespaced_pod_eviction(victim.metadata.name, namespace, {
                "metadata": {"name": victim.metadata.name, "namespace": namespace}})
            # What a kubelet does on eviction (KWOK does not): kill the container, pod Failed.
            when = "2026-01-01T00:00:00Z"
            core_v1.patch_namespaced_pod_status(victim.metadata.name, namespace, {"status": {
                "phase": "Failed", "containerStatuses": [{
                    "name": "paddle", "image": victim.spec.containers[0].image, "imageID": "", "ready": False,
                    "restartCount": 0, "state": {"terminated": {"exitCode": 137, "reason": "Error",
                                                                "startedAt": when, "finishedAt": when}}}]}})
            await asyncio.wait_for(follower, 60)
        assert lines.count("[worker-1] rank 1: done") == 2  # the old pod's lines, then the new pod's
        assert lines.count("[worker-0] rank 0: done") == 1
        assert (await jobs.get("evicted")).phase == "Succeeded"
    finally:
        await jobs.close()
