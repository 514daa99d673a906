"""Kueue in the test cluster, for real: its controller manager as a process (tools/k8s/kueue.py)
against the control plane, with its CRDs and its webhooks reached by URL, admitting Indexed
Jobs whose pods run on the KWOK GPU nodes (2 nodes of 8 GPUs); one test runs real Paddle
workers on the real node through the queue.

The first tests get a user namespace (label paddlecloud.io/user, where Kueue's webhooks and job
management apply), a ResourceFlavor, a ClusterQueue of 8 GPUs for that namespace and a
LocalQueue pointing at it (all kueue.x-k8s.io/v1beta2). The queueing tests (`teams`) use the
queues the hub writes from the quota settings (paddle_ext.quota.queues: a ClusterQueue per
team, a LocalQueue `default` per user namespace), in a cohort of the test's own.

GPUs are held by a "holder" job whose pods KWOK keeps running for an hour: deleting it is the
gate that frees them, so nothing waits on a timer.
"""

import asyncio
import contextlib
import datetime
import os
import types
import uuid
from decimal import Decimal

import kubernetes
import pytest
import yaml
from cluster_helpers import (GATE, GPU_TOLERATION, KUEUE_PODS_READY_SECONDS, on_kwok_nodes, open_gate, wait_for,
                             wait_for_async)

from paddle_ext import tenancy
from paddle_ext.backends.kubernetes import KubernetesBackend
from paddle_ext.cli import _describe
from paddle_ext.constants import KUEUE_QUEUE_LABEL, MANAGED_BY, USER_LABEL
from paddle_ext.errors import JobNotFound
from paddle_ext.hub.quota_sync import QuotaSync
from paddle_ext.jobkinds import JOB_KINDS
from paddle_ext.jobs import Phase
from paddle_ext.kubeapi import KubeApi
from paddle_ext.quota import queue_admin, queues
from paddle_ext.quota.model import Entry, Limits, QuotaConfig, parse_patch
from paddle_ext.quota.store import KubernetesQuotaStore
from paddle_ext.spec import JobSpec
from paddle_ext.timestamps import parse_time
from tools.k8s import kueue
from tools.k8s.cluster import COMPLETE_AFTER_ANNOTATION

from test_k8s_backend import SMALL, backend, job_pods, wait_phase
from test_restarts_k8s import log_of, pod_of

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
QUEUE = "research"
GPU = "nvidia.com/gpu"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def custom(api_client):
    return kubernetes.client.CustomObjectsApi(api_client)


@pytest.fixture
def queue(kueue_cluster, custom, make_namespace):
    """A user namespace with a LocalQueue `research` -> a ClusterQueue of 8 GPUs (that
    namespace only) in a ResourceFlavor of its own; returns the namespace."""
    ns = make_namespace("kq", labels={USER_LABEL: "alice"})
    name = f"t-{uuid.uuid4().hex[:8]}"
    custom.create_cluster_custom_object(GROUP, VERSION, "resourceflavors", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor", "metadata": {"name": name}})
    custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue", "metadata": {"name": name},
        "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                 "resourceGroups": [{"coveredResources": ["cpu", "memory", GPU], "flavors": [{
                     "name": name, "resources": [{"name": "cpu", "nominalQuota": "32"},
                                                 {"name": "memory", "nominalQuota": "128Gi"},
                                                 {"name": GPU, "nominalQuota": "8"}]}]}]}})
    local = tenancy.local_queue(ns, QUEUE, name)  # as the spawner writes it
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, "localqueues", local)
    wait_for(lambda: condition(custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", name), "Active"),
             what="the ClusterQueue to become active")
    wait_for(lambda: condition(custom.get_namespaced_custom_object(GROUP, VERSION, ns, "localqueues", QUEUE),
                               "Active"), what="the LocalQueue to become active")
    yield ns
    for plural in ("clusterqueues", "resourceflavors"):  # Kueue's finalizers go once the namespace's jobs do
        try:
            custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)
        except kubernetes.client.ApiException:
            pass


def condition(obj, kind):
    """Whether obj's status has condition `kind` True."""
    return any(c["type"] == kind and c["status"] == "True" for c in (obj.get("status") or {}).get("conditions") or ())


def condition_time(obj: dict, kind: str) -> datetime.datetime | None:
    """When obj's condition `kind` turned True (None: it is not True)."""
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c["type"] == kind and c["status"] == "True":
            return parse_time(c.get("lastTransitionTime"))
    return None


def job(name, workers, gpus, queue=QUEUE, suspend=True, complete_after="2s"):
    """An Indexed Job of `workers` pods with `gpus` each on the KWOK nodes (which complete
    them after `complete_after`)."""
    labels = {KUEUE_QUEUE_LABEL: queue} if queue else {}
    container = {"name": "worker", "image": "paddle:3.3.1-cpu", "command": ["true"],
                 "resources": {"requests": {"cpu": "1", "memory": "1Gi", GPU: str(gpus)},
                               "limits": {GPU: str(gpus)}}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": labels},
            "spec": {"completionMode": "Indexed", "completions": workers, "parallelism": workers,
                     "suspend": suspend, "backoffLimit": 0,
                     "template": {"metadata": {"annotations": {COMPLETE_AFTER_ANNOTATION: complete_after}},
                                  "spec": on_kwok_nodes({"restartPolicy": "Never", "containers": [container]})}}}


def job_owners(workload, kind="Job") -> list[str]:
    """The names of the `kind` (Job, PaddleJob) objects that own `workload`."""
    return [o["name"] for o in workload["metadata"].get("ownerReferences", ()) if o["kind"] == kind]


def namespace_workloads(custom, ns) -> list[dict]:
    """Every Workload of namespace `ns`, in one list request."""
    return custom.list_namespaced_custom_object(GROUP, VERSION, ns, "workloads")["items"]


def workloads_of(custom, ns, job_name, kind="Job"):
    """Every Workload of namespace `ns` that the `kind` (Job, PaddleJob) `job_name` owns (Kueue
    makes one)."""
    return [wl for wl in namespace_workloads(custom, ns) if job_name in job_owners(wl, kind)]


def workload_of(custom, ns, job_name, kind="Job"):
    return next(iter(workloads_of(custom, ns, job_name, kind)), None)


def wait_admitted(custom, ns, job_name, what, timeout=60, kind="Job") -> dict:
    """The job's Workload once Kueue has admitted it (failing with its status)."""
    return wait_for(lambda: (found := workload_of(custom, ns, job_name, kind)) and condition(found, "Admitted") and found,
                    timeout=timeout, what=what, message=lambda: (workload_of(custom, ns, job_name, kind) or {}).get("status"))


def wait_local_queue_active(custom, ns, what):
    wait_for(lambda: condition(custom.get_namespaced_custom_object(GROUP, VERSION, ns, "localqueues",
                                                                   queues.LOCAL_QUEUE), "Active"), what=what)


def pods_of(core_v1, ns, job_name):
    return core_v1.list_namespaced_pod(ns, label_selector=f"batch.kubernetes.io/job-name={job_name}").items


def job_done(batch_v1, ns, name):
    status = batch_v1.read_namespaced_job(name, ns).status
    return any(c.type == "Complete" and c.status == "True" for c in status.conditions or ())


# ------------------------------------------------------------------ pure


def test_webhooks_go_by_url_to_127_0_0_1_only_for_kueue_and_both_job_kinds_in_user_namespaces(k8s_bin_dir):
    with open(os.path.join(kueue.manifests_dir(k8s_bin_dir), "webhook.yaml")) as fh:
        docs = kueue.webhook_configurations(list(yaml.safe_load_all(fh)), 12345, b"PEM")
    assert sorted(d["kind"] for d in docs) == ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]
    hooks = [h for d in docs for h in d["webhooks"]]
    names = {h["name"] for h in hooks}
    assert {"mjob.kb.io", "vjob.kb.io", "mpaddlejob.kb.io", "vpaddlejob.kb.io", "mworkload.kb.io", "vworkload.kb.io",
            "vclusterqueue.kb.io"} <= names
    # Not what Kueue does not manage here: pods, deployments, the other Kubeflow kinds (same API group).
    assert not names & {"mpod.kb.io", "mdeployment.kb.io", "mpytorchjob.kb.io", "vpytorchjob.kb.io", "mtfjob.kb.io",
                        "mmpijob.kb.io", "mxgboostjob.kb.io", "mjaxjob.kb.io", "mtrainjob.kb.io"}, names
    assert {(g, r.split("/")[0]) for h in hooks for rule in h["rules"] for g in rule["apiGroups"]
            for r in rule["resources"] if g != "kueue.x-k8s.io"} == {("batch", "jobs"), ("kubeflow.org", "paddlejobs")}
    for hook in hooks:
        assert hook["clientConfig"]["url"].startswith("https://127.0.0.1:12345/")
        assert "service" not in hook["clientConfig"] and hook["clientConfig"]["caBundle"] == "UEVN"
        assert hook["namespaceSelector"] == {"matchExpressions": [{"key": USER_LABEL, "operator": "Exists"}]}


def test_kueue_manages_both_job_kinds_of_the_product():
    frameworks = kueue.configuration(1, 2, 3, "/certs")["integrations"]["frameworks"]
    assert frameworks == ["batch/job", "kubeflow.org/paddlejob"]
    assert {JOB_KINDS[k].api_group for k in JOB_KINDS} == {"batch", "kubeflow.org"}  # every kind of ours


def test_without_the_cached_paddlejob_crd_kueue_does_not_start_and_says_why(tmp_path, monkeypatch):
    """Kueue never runs here without PaddleJobs: a missing CRD (cache not built) stops start()
    with what to do, before it makes anything."""
    missing = tmp_path / "crds" / "kubeflow.org_paddlejobs.yaml"
    monkeypatch.setattr(kueue, "unavailable_reason", lambda bin_dir: None)
    monkeypatch.setattr(kueue, "paddlejob_crd_path", lambda: str(missing))
    cluster = types.SimpleNamespace(state_dir=str(tmp_path / "state"), bin_dir=str(tmp_path / "bin"))
    with pytest.raises(kueue.KueueError, match="PaddleJob CRD is not cached at .*run `make k8s-bin`") as info:
        kueue.Kueue(cluster).start(deadline=0)
    assert str(missing) in str(info.value)
    assert not (tmp_path / "state").exists()  # nothing made


def test_kueues_configuration_counts_only_gpus_in_admission_fair_sharing():
    afs = kueue.configuration(1, 2, 3, "/certs")["admissionFairSharing"]
    assert afs["usageSamplingInterval"] == "1s" and afs["usageHalfLifeTime"] == "30s"
    assert afs["resourceWeights"] == {"nvidia.com/gpu": 1.0, "cpu": 0.0, "memory": 0.0, "ephemeral-storage": 0.0}


# ------------------------------------------------------------------ the real Kueue


def test_a_suspended_labelled_indexed_job_is_admitted_runs_on_kwok_and_completes(
        queue, custom, batch_v1, core_v1):
    ns = queue
    batch_v1.create_namespaced_job(ns, job("fits", workers=2, gpus=2))
    wl = wait_for(lambda: workload_of(custom, ns, "fits"), what="Kueue to make the job's Workload")
    assert wl["spec"]["queueName"] == QUEUE
    wait_admitted(custom, ns, "fits", "the Workload admitted")
    wait_for(lambda: batch_v1.read_namespaced_job("fits", ns).spec.suspend is False, what="Kueue to unsuspend the job")
    wait_for(lambda: job_done(batch_v1, ns, "fits"), timeout=60, what="the job to complete")
    pods = pods_of(core_v1, ns, "fits")
    assert len(pods) == 2 and all(p.spec.node_name.startswith("kwok-gpu-") for p in pods)
    assert batch_v1.read_namespaced_job("fits", ns).status.succeeded == 2
    wait_for(lambda: condition(workload_of(custom, ns, "fits") or {}, "Finished"), what="the Workload finished")


def test_the_webhook_by_url_suspends_a_labelled_job_created_running_only_in_user_namespaces(
        queue, batch_v1, make_namespace):
    made = batch_v1.create_namespaced_job(queue, job("eager", workers=1, gpus=1, suspend=False))
    assert made.spec.suspend is True  # set by Kueue's mutating webhook, on the way in
    wait_for(lambda: job_done(batch_v1, queue, "eager"), timeout=60, what="the job admitted and completed")
    # Elsewhere (no user label) neither the webhook nor the job controller of Kueue applies.
    other = make_namespace("plain")
    assert batch_v1.create_namespaced_job(other, job("eager", workers=1, gpus=1, suspend=False)).spec.suspend is False
    wait_for(lambda: job_done(batch_v1, other, "eager"), timeout=60, what="the unmanaged job to complete")


def test_a_job_that_does_not_fit_waits_with_no_pods_and_starts_whole_when_quota_frees(
        queue, custom, batch_v1, core_v1):
    ns = queue
    batch_v1.create_namespaced_job(ns, job("holder", workers=1, gpus=4, complete_after="1h"))
    wait_for(lambda: [p for p in pods_of(core_v1, ns, "holder") if p.status.phase == "Running"],
             timeout=60, what="the holder's pod running")
    batch_v1.create_namespaced_job(ns, job("gang", workers=2, gpus=4))  # 8 GPUs; 4 are free

    def waiting():
        wl = workload_of(custom, ns, "gang") or {}
        return [c["message"] for c in (wl.get("status") or {}).get("conditions") or ()
                if c["type"] == "QuotaReserved" and c["status"] == "False"]

    message = wait_for(waiting, what="Kueue to find the gang job does not fit")
    assert "insufficient" in message[0] and GPU in message[0], message
    assert batch_v1.read_namespaced_job("gang", ns).spec.suspend is True
    assert pods_of(core_v1, ns, "gang") == []
    assert not condition(workload_of(custom, ns, "gang"), "Admitted")

    batch_v1.delete_namespaced_job("holder", ns, propagation_policy="Background")
    wait_admitted(custom, ns, "gang", "the gang job admitted once the holder is gone")
    wait_for(lambda: job_done(batch_v1, ns, "gang"), timeout=60, what="the gang job to complete")
    assert batch_v1.read_namespaced_job("gang", ns).status.succeeded == 2


def test_etc_kueue_is_removed_with_the_last_cluster_that_made_it(tmp_path, monkeypatch):
    """The bookkeeping of /etc/kueue, on a stand-in path: kept while another user runs,
    removed with the last."""
    etc = tmp_path / "etc-kueue"
    monkeypatch.setattr(kueue, "ETC_DIR", str(etc))
    monkeypatch.setattr(kueue, "METRICS_CERT_DIR", str(etc / "metrics" / "certs"))
    monkeypatch.setattr(kueue, "OWNERS_FILE", str(etc / "paddlecloud-owners.json"))
    assert kueue.claim_metrics_certs("/a", os.getpid()) is True
    assert (etc / "metrics" / "certs" / "tls.key").stat().st_mode & 0o077 == 0
    assert kueue.claim_metrics_certs("/b", os.getpid()) is True
    assert kueue.release_metrics_certs("/a") is False and etc.exists()
    assert kueue.release_metrics_certs("/b") is True and not etc.exists()
    # One it did not make is used as it is, and left alone.
    (etc / "metrics" / "certs").mkdir(parents=True)
    for name in ("tls.crt", "tls.key"):
        (etc / "metrics" / "certs" / name).write_text("theirs")
    assert kueue.claim_metrics_certs("/c", os.getpid()) is False
    assert kueue.release_metrics_certs("/c") is True and (etc / "metrics" / "certs" / "tls.crt").read_text() == "theirs"


# ------------------------------------------------------------------ queues from the quota model


class Teams:
    """Team ClusterQueues as the hub writes them (paddle_ext.quota.queues), in a cohort of this
    test's own, each with a user namespace whose LocalQueue `default` points at it."""

    def __init__(self, custom, make_namespace):
        self.custom, self.make_namespace = custom, make_namespace
        self.tag = uuid.uuid4().hex[:6]
        self.made: list[tuple[str, str]] = []
        try:
            custom.create_cluster_custom_object(GROUP, VERSION, "resourceflavors", queues.resource_flavor())
        except kubernetes.client.ApiException as exc:
            if exc.status != 409:  # made by an earlier test: shared, like the hub's
                raise

    def make(self, group: str, gpus: int, borrowing: int | None = None,
             policy: queues.QueuePolicy | None = None, cpu: str = "64", memory: str = "256Gi") -> tuple[str, dict]:
        """A team `group` with `gpus` guaranteed GPUs (and `cpu`, `memory`); returns (a member's
        namespace, its ClusterQueue)."""
        name = f"{group}-{self.tag}"
        config = QuotaConfig(groups={name: Entry(Limits(gpus=gpus, cpu=cpu, memory=memory))})
        if policy is None:
            policy = queues.QueuePolicy(borrowing=Limits(gpus=borrowing) if borrowing is not None else Limits())
        cq = queues.cluster_queue(queues.team_queue(config, name), policy)
        cq["spec"]["cohortName"] = f"cohort-{self.tag}"
        self.custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", cq)
        self.made.append(("clusterqueues", cq["metadata"]["name"]))
        ns = self.make_namespace("kq", labels={USER_LABEL: f"user-{name}"})
        lq = tenancy.local_queue(ns, queues.LOCAL_QUEUE, cq["metadata"]["name"])
        self.custom.create_namespaced_custom_object(GROUP, VERSION, ns, "localqueues", lq)
        wait_for(lambda: condition(self.custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues",
                                                                         cq["metadata"]["name"]), "Active"),
                 what="the team's ClusterQueue to become active")
        wait_local_queue_active(self.custom, ns, what="the LocalQueue default to become active")
        return ns, cq

    def member(self, cluster_queue: str, user: str, weight: Decimal) -> str:
        """Another member's namespace with a LocalQueue `default` of `weight` into `cluster_queue`."""
        ns = self.make_namespace("kq", labels={USER_LABEL: f"{user}-{self.tag}"})
        lq = tenancy.local_queue(ns, queues.LOCAL_QUEUE, cluster_queue, queues.weight_quantity(weight))
        self.custom.create_namespaced_custom_object(GROUP, VERSION, ns, "localqueues", lq)
        wait_local_queue_active(self.custom, ns, what=f"{user}'s LocalQueue default to become active")
        return ns

    def priority_class(self, value: int) -> str:
        name = f"p{value}-{self.tag}"
        self.custom.create_cluster_custom_object(GROUP, VERSION, "workloadpriorityclasses", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "WorkloadPriorityClass", "metadata": {"name": name},
            "value": value})
        self.made.append(("workloadpriorityclasses", name))
        return name

    def cleanup(self):
        for plural, name in self.made:
            try:
                self.custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)
            except kubernetes.client.ApiException:
                pass


@pytest.fixture
def teams(kueue_cluster, custom, make_namespace):
    made = Teams(custom, make_namespace)
    yield made
    made.cleanup()


def queued_job(name, workers, gpus, complete_after="2s", priority_class=None):
    """A job for the LocalQueue `default`, as the backend makes them (suspended, labelled)."""
    obj = job(name, workers, gpus, queue=queues.LOCAL_QUEUE, complete_after=complete_after)
    obj["metadata"]["labels"].update(MANAGED_BY)  # listed by the backend, as its own jobs are
    if priority_class:
        obj["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = priority_class
    return obj


def hold(batch_v1, core_v1, ns, gpus, name="holder", priority_class=None):
    """The gate: a job holding `gpus` GPUs until the test deletes it (with a priority above the
    queued jobs', so none of them preempts it: withinClusterQueue is LowerPriority)."""
    batch_v1.create_namespaced_job(ns, queued_job(name, 1, gpus, complete_after="1h", priority_class=priority_class))
    # Up to 3 minutes: it needs a KWOK node's GPUs free, and an earlier test's GPU pods may still
    # be going away with their namespace (a CI run at 0379730 timed out here after 60 s).
    wait_for(lambda: [p for p in pods_of(core_v1, ns, name) if p.status.phase == "Running"],
             timeout=180, what=f"the holder's pod running with {gpus} GPUs", message=lambda: gpu_pods(core_v1))


def gpu_pods(core_v1) -> str:
    """Which pods hold GPUs on which node, and which of them are going away (a wait's message)."""
    held = []
    for pod in core_v1.list_pod_for_all_namespaces().items:
        gpus = sum(int((c.resources.requests or {}).get(GPU, 0)) for c in pod.spec.containers)
        if gpus and pod.status.phase in ("Pending", "Running"):
            going = " (being deleted)" if pod.metadata.deletion_timestamp else ""
            held.append(f"{pod.metadata.namespace}/{pod.metadata.name} {gpus} on {pod.spec.node_name}{going}")
    return "pods with GPUs: " + ("; ".join(held) or "none")


def release(batch_v1, ns, name="holder"):
    batch_v1.delete_namespaced_job(name, ns, propagation_policy="Background")


def kueue_backend(cluster, ns, complete_after="2s", **config) -> KubernetesBackend:
    """The notebook's backend with Kueue, reading as an admin (every namespace's Workloads); its
    jobs' pods complete on the KWOK nodes after `complete_after`. `config`: more settings (e.g.
    job_kind="paddlejob")."""
    settings = {"gpu_node_selector": {"type": "kwok"}, **config}
    return KubernetesBackend(kubeconfig=cluster.kubeconfig, namespace=ns, queue_name=queues.LOCAL_QUEUE,
                             images=[{"name": "paddle:3.3.1-cpu"}], gpu_tolerations=[GPU_TOLERATION],
                             pod_annotations={COMPLETE_AFTER_ANNOTATION: complete_after}, **settings)


def waiting_message(custom, ns, job_name, kind="Job"):
    wl = workload_of(custom, ns, job_name, kind) or {}
    return [c["message"] for c in (wl.get("status") or {}).get("conditions") or ()
            if c["type"] == "QuotaReserved" and c["status"] == "False" and "insufficient" in c.get("message", "")]


def test_all_or_nothing_a_16_gpu_job_waits_with_no_pods_while_4_are_taken_and_starts_whole(
        teams, custom, batch_v1, core_v1):
    ns, _ = teams.make("vision", gpus=16)
    hold(batch_v1, core_v1, ns, 4)
    batch_v1.create_namespaced_job(ns, queued_job("gang", workers=2, gpus=8))
    message = wait_for(lambda: waiting_message(custom, ns, "gang"), what="Kueue to find the 16-GPU job does not fit")
    assert "4 more needed" in message[0], message
    assert batch_v1.read_namespaced_job("gang", ns).spec.suspend is True
    assert pods_of(core_v1, ns, "gang") == []  # no worker holds a GPU while it waits

    release(batch_v1, ns)
    wait_admitted(custom, ns, "gang", "the 16-GPU job admitted once the 4 GPUs are free")
    wait_for(lambda: job_done(batch_v1, ns, "gang"), timeout=90, what="the 16-GPU job to complete")
    pods = pods_of(core_v1, ns, "gang")
    assert len(pods) == 2 and {p.spec.node_name for p in pods} == {"kwok-gpu-0", "kwok-gpu-1"}, \
        [(p.metadata.name, p.spec.node_name) for p in pods]


def test_a_team_borrows_idle_gpus_gives_them_back_when_the_lender_needs_them_and_resumes_as_the_next_attempt(
        teams, custom, batch_v1, core_v1, kueue_cluster, tmp_path):
    """Team a's job (submitted by the backend, max_restarts 2) borrows 4 of team b's GPUs; b's job
    reclaims them, a's is preempted and requeued and says why; once b's job is gone, a's is
    readmitted as attempt 2 (its Workload's eviction count) while no restart is spent (the Job
    controller counts no failure for the pods it deleted on suspension)."""
    a_ns, a_cq = teams.make("a", gpus=8)
    b_ns, b_cq = teams.make("b", gpus=8)
    (tmp_path / "train.py").write_text("print('training')\n")
    spec = JobSpec(name="wide", command=["python", "train.py"], workers=3, gpus_per_worker=4, max_restarts=2)

    async def with_backend(action):
        jobs = kueue_backend(kueue_cluster, a_ns, complete_after="1h")  # a's pods run until b's job is gone
        try:
            return await action(jobs)
        finally:
            await jobs.close()

    def read_a():
        return asyncio.run(with_backend(lambda jobs: jobs.get("wide")))

    asyncio.run(with_backend(lambda jobs: jobs.submit(spec, str(tmp_path))))  # 12 GPUs > team a's 8
    wait_admitted(custom, a_ns, "wide", "team a's 12-GPU job admitted by borrowing 4 of team b's idle GPUs")
    first = wait_for(lambda: len(pods_of(core_v1, a_ns, "wide")) == 3 and pods_of(core_v1, a_ns, "wide"), timeout=60,
                     what="team a's 3 workers created")

    def borrowed():
        status = custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", a_cq["metadata"]["name"])
        usage = (status.get("status") or {}).get("flavorsUsage") or []
        return [r.get("borrowed") for f in usage for r in f.get("resources", ()) if r["name"] == GPU]

    assert wait_for(lambda: borrowed() == ["4"] and borrowed(), what="team a's queue to show 4 borrowed GPUs",
                    message=borrowed)

    # b's own 8 GPUs, held until the test deletes b's job (so team a's job stays queued while it is read)
    batch_v1.create_namespaced_job(b_ns, queued_job("mine", workers=2, gpus=4, complete_after="1h"))
    preempted = wait_for(lambda: condition(workload_of(custom, a_ns, "wide") or {}, "Preempted")
                         and workload_of(custom, a_ns, "wide"), timeout=30,
                         what="team a's job preempted to give team b its GPUs back")
    reason = next(c["reason"] for c in preempted["status"]["conditions"] if c["type"] == "Preempted")
    assert reason in ("InCohortReclamation", "InCohortReclaimWhileBorrowing"), preempted["status"]["conditions"]
    wait_admitted(custom, b_ns, "mine", "team b's job admitted on its reclaimed GPUs")
    wait_for(lambda: batch_v1.read_namespaced_job("wide", a_ns).spec.suspend is True,
             what="team a's job suspended again (requeued)")
    wait_for(lambda: not condition(workload_of(custom, a_ns, "wide") or {}, "QuotaReserved"),
             what="team a's Workload back in the queue")

    team_b = f"team b-{teams.tag}"
    job_a = read_a()
    assert job_a.phase == Phase.QUEUED, job_a
    assert job_a.message.startswith(f"Preempted: {team_b} reclaimed its GPUs; requeued."), job_a.message
    assert (job_a.requeues, job_a.restarts, job_a.attempt) == (1, 0, 2), job_a.to_dict()

    release(batch_v1, b_ns, "mine")
    old = {p.metadata.uid for p in first}

    def new_pods():
        pods = [p for p in pods_of(core_v1, a_ns, "wide") if p.metadata.uid not in old]
        return pods if len(pods) == 3 else None

    wait_admitted(custom, a_ns, "wide", "team a's job readmitted once team b's job is gone")
    pods = wait_for(new_pods, timeout=60, what="team a's 3 new workers created")
    for pod in pods:  # not a failure: the Job controller's count ($PADDLECLOUD_RESTART) stays 0
        annotations = pod.metadata.annotations or {}
        assert annotations.get("batch.kubernetes.io/job-index-failure-count") == "0", annotations

    job_a = wait_for(lambda: (lambda j: j.phase == Phase.RUNNING and j)(read_a()), timeout=60,
                     what="team a's job running again")
    assert (job_a.requeues, job_a.restarts, job_a.attempt) == (1, 0, 2), job_a.to_dict()
    # Readmitted, the job still says why its first attempt ended (Kueue's "Previously: " conditions).
    assert job_a.attempt_line() == f"attempt 2 of 4: preempted: {team_b} reclaimed its GPUs", job_a.attempt_line()
    # Its pods hold 12 of the KWOK nodes' 16 GPUs for an hour: gone before the next test.
    release(batch_v1, a_ns, "wide")
    wait_for(lambda: not pods_of(core_v1, a_ns, "wide"), timeout=60, what="team a's workers gone")


def test_ten_queued_jobs_start_in_the_order_their_positions_said(teams, custom, batch_v1, core_v1, kueue_cluster):
    ns, _ = teams.make("order", gpus=8)
    hold(batch_v1, core_v1, ns, 8, priority_class=teams.priority_class(100))
    priorities = [3, 7, 1, 9, 0, 5, 8, 2, 6, 4]  # not the order they are made in
    names = [f"j{i}" for i in range(10)]
    for name, value in zip(names, priorities):
        batch_v1.create_namespaced_job(ns, queued_job(name, workers=1, gpus=8,
                                                      priority_class=teams.priority_class(value)))
    wait_for(lambda: set(names) <= {owner for wl in namespace_workloads(custom, ns) for owner in job_owners(wl)},
             what="the 10 Workloads")

    async def positions():
        jobs = kueue_backend(kueue_cluster, ns)
        try:
            return {job.name: job.queue.position for job in await jobs.list() if job.name in names and job.queue}
        finally:
            await jobs.close()

    said = asyncio.run(positions())
    assert sorted(said.values()) == list(range(1, 11)), (said, [
        (w["metadata"]["name"], w["spec"].get("priority"), [(c["type"], c["status"]) for c in
                                                           (w.get("status") or {}).get("conditions") or ()])
        for w in namespace_workloads(custom, ns)])
    expected = sorted(names, key=lambda n: said[n])
    assert expected == [n for _, n in sorted(zip(priorities, names), reverse=True)]  # priority first

    started: list[str] = []

    def all_started():
        # One list of the namespace's Workloads a look. Each job takes all 8 GPUs for 2 s, so
        # admissions are seconds apart: those new in one look are put in the order Kueue
        # admitted them (the condition's time, in whole seconds).
        admitted = {owner: at for wl in namespace_workloads(custom, ns) for owner in job_owners(wl)
                    if owner in names and owner not in started and (at := condition_time(wl, "Admitted"))}
        started.extend(sorted(admitted, key=admitted.__getitem__))
        return len(started) == len(names)

    release(batch_v1, ns)
    wait_for(all_started, timeout=240, interval=0.5, what="the 10 jobs to start one by one", message=lambda: started)
    assert started == expected  # 10 of 10


def test_an_unlabeled_job_from_the_notebook_is_queued_in_the_users_default_queue(teams, custom, batch_v1, core_v1):
    ns, _ = teams.make("plainjob", gpus=8)
    hold(batch_v1, core_v1, ns, 8)
    made = batch_v1.create_namespaced_job(ns, job("sneaky", workers=1, gpus=4, queue=None, suspend=False))
    # Kueue's LocalQueueDefaulting (a LocalQueue named "default") labels it, its webhook suspends it.
    assert made.metadata.labels[KUEUE_QUEUE_LABEL] == queues.LOCAL_QUEUE and made.spec.suspend is True
    wait_for(lambda: waiting_message(custom, ns, "sneaky"), what="the unlabeled job waiting in the queue")
    assert pods_of(core_v1, ns, "sneaky") == []
    release(batch_v1, ns)
    wait_for(lambda: job_done(batch_v1, ns, "sneaky"), timeout=90, what="the unlabeled job admitted and completed")


async def test_a_two_worker_paddle_job_whose_team_has_room_is_admitted_once_and_succeeds_on_the_real_node(
        teams, custom, core_v1, real_cluster):
    """Real Paddle through the queue, as today without it: both workers on the real node,
    their lines in the merged log, one Workload admitted once (never evicted) and finished."""
    ns, _ = teams.make("realnode", gpus=8)
    jobs = backend(real_cluster, ns, queue_name=queues.LOCAL_QUEUE)
    try:
        await jobs.submit(JobSpec(name="queued-real", command=["python", "train.py", "--epochs", "1"], workers=2,
                                  **SMALL))
        job = await wait_phase(jobs, "queued-real", ("Succeeded", "Failed"), timeout=600)
        assert job.phase == Phase.SUCCEEDED, job.message
        assert (job.restarts, job.requeues, job.attempt) == (0, 0, 1), job.to_dict()
        pods = job_pods(core_v1, ns, "queued-real")
        assert len(pods) == 2 and {p.spec.node_name for p in pods} == {real_cluster.real_node_name}, \
            [(p.metadata.name, p.spec.node_name) for p in pods]
        lines = [line async for line in jobs.logs("queued-real")]
        for rank in (0, 1):
            assert f"[worker-{rank}] rank {rank}: all_reduce check ok: sum=3 over 2 workers" in lines, lines[-20:]
            assert f"[worker-{rank}] rank {rank}: done" in lines, lines[-20:]
    finally:
        await jobs.close()
    owned = workloads_of(custom, ns, "queued-real")
    assert len(owned) == 1, [wl["metadata"]["name"] for wl in owned]
    wl = wait_for(lambda: (found := workload_of(custom, ns, "queued-real")) and condition(found, "Finished") and found,
                  what="the Workload finished")
    status = wl["status"]
    assert not (status.get("schedulingStats") or {}).get("evictions"), status
    assert "requeueState" not in status, status
    assert not any(c["type"] in ("Evicted", "Preempted") for c in status["conditions"]), status["conditions"]


async def test_a_job_whose_workers_cannot_all_start_is_evicted_by_wait_for_pods_ready_and_the_user_reads_why(
        teams, custom, core_v1, kueue_cluster, tmp_path):
    """The site's GPU nodes are gone (their pool scaled to zero, say): the team's queue still
    admits the job, whose workers no node can take, so Kueue's waitForPodsReady
    (KUEUE_PODS_READY_SECONDS, or _KWOK on a KWOK-only cluster) takes the job's place back and requeues
    it; the user's status says why, and no pod of it is left. (A worker image missing on the
    real node is the kubelet's to report: test_real_node.py.)"""
    ns, _ = teams.make("podsready", gpus=8)
    (tmp_path / "train.py").write_text("print('training')\n")
    jobs = kueue_backend(kueue_cluster, ns, gpu_node_selector={"pool": f"scaled-to-zero-{teams.tag}"})
    try:
        await jobs.submit(JobSpec(name="ghost", command=["python", "train.py"], workers=2, gpus_per_worker=4),
                          str(tmp_path))
        started = await wait_phase(jobs, "ghost", (Phase.PENDING,), timeout=120)  # admitted, workers not starting
        assert started.requeues == 0, started.to_dict()

        async def sent_back():
            job = await jobs.get("ghost")
            return job if job.phase == Phase.QUEUED and job.requeues else None

        job = await wait_for_async(sent_back, timeout=KUEUE_PODS_READY_SECONDS + 180, interval=1,
                                   what="Kueue's waitForPodsReady to evict the job whose workers cannot start")
        assert job.message.startswith("Evicted: not all of its workers could start in time"), job.message
        assert job.last_restart_reason.startswith("evicted: not all of its workers could start"), job.to_dict()
        assert (job.restarts, job.requeues, job.attempt) == (0, 1, 2), job.to_dict()
        wl = workload_of(custom, ns, "ghost")
        assert [e["reason"] for e in wl["status"]["schedulingStats"]["evictions"]] == ["PodsReadyTimeout"], wl["status"]
        wait_for(lambda: not job_pods(core_v1, ns, "ghost"), timeout=60, what="the evicted job's pods deleted")
    finally:
        with contextlib.suppress(JobNotFound):  # readmitted, it would hold its place again for the timeout
            await jobs.cancel("ghost")
        await jobs.close()



def shared_workspace(core_v1, ns: str, tmp_path, project_folder) -> tuple[dict, str, str]:
    """A shared (ReadWriteMany) workspace for `ns`'s jobs, as the hub gives each user one (a
    claim on their home): a static PersistentVolume on the real node's disk bound to a claim in
    `ns`, writable by the workers' uid, holding a copy of the project (train.py). Mounted at its
    own host path, so the project's folder is the same in the test and in the job. Returns (the
    backend's `workspace`, the project folder on it, the PersistentVolume's name to delete)."""
    root = tmp_path / "workspace"
    project = root / "project"
    project.mkdir(parents=True)
    for folder in (root, project):
        os.chmod(folder, 0o777)
    (project / "train.py").write_bytes((project_folder / "train.py").read_bytes())
    pv = f"ws-{uuid.uuid4().hex[:8]}"
    core_v1.create_persistent_volume({"metadata": {"name": pv}, "spec": {
        "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
        "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": str(root)},
        "claimRef": {"namespace": ns, "name": "home"}}})
    try:
        core_v1.create_namespaced_persistent_volume_claim(ns, {"metadata": {"name": "home"}, "spec": {
            "accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": pv,
            "resources": {"requests": {"storage": "1Gi"}}}})
        wait_for(lambda: core_v1.read_namespaced_persistent_volume_claim("home", ns).status.phase == "Bound",
                 what="the workspace's claim bound")
    except BaseException:  # the volume is cluster-wide: it must not outlive a failed setup
        with contextlib.suppress(kubernetes.client.ApiException):
            core_v1.delete_persistent_volume(pv)
        raise
    return {"volume": {"persistentVolumeClaim": {"claimName": "home"}}, "mount_path": str(root)}, str(project), pv


async def test_a_borrowing_paddle_job_preempted_by_the_lending_team_resumes_from_its_checkpoint_on_the_real_node(
        teams, custom, core_v1, batch_v1, real_cluster, project_folder, tmp_path):
    """Issue 24 with Kueue, for real: team borrower (no quota of its own) runs a 2-worker Paddle
    job (max_restarts 1) on CPU and memory it borrows from team lender's idle quota; the job
    checkpoints at step 10 to the user's shared workspace and waits there at a gate (the pause
    file, on the workspace: only the test makes it). Team lender then submits a job that needs its
    quota back: Kueue preempts the borrower's job (reclaimWithinCohort), suspends it and its pods
    go; its user reads "Preempted: team lender ... requeued", attempt 2, no restart spent. The
    test opens the gate, lets the lender's job finish (a ticker held at a gate of its own), and
    the borrower's job is readmitted, resumes from step 10 (not 0), Succeeds, and its status
    still says both: requeued once by the preemption, now attempt 2 (restarts 0 of at most 1).
    The real node has no GPUs, so the teams' quotas are CPU and memory (what Kueue admits by)."""
    lender_ns, _ = teams.make("lender", gpus=0, cpu="1", memory="2Gi")  # room for one 2-worker SMALL job
    borrower_ns, borrower_cq = teams.make("borrower", gpus=0, cpu="0", memory="0")
    workspace, workdir, pv = shared_workspace(core_v1, borrower_ns, tmp_path, project_folder)
    gate = os.path.join(workdir, "gate")
    borrower = backend(real_cluster, borrower_ns, queue_name=queues.LOCAL_QUEUE, workspace=workspace)
    lender = backend(real_cluster, lender_ns, queue_name=queues.LOCAL_QUEUE)
    lender_team, name = f"team lender-{teams.tag}", "borrows"
    try:
        await borrower.submit(JobSpec(name=name, workers=2, max_restarts=1, **SMALL, command=[
            "python", "train.py", "--epochs", "2", "--steps", "10", "--checkpoint-every", "10",
            "--pause-at", "10", "--pause-file", gate]), workdir)

        def borrowed():
            cq = custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", borrower_cq["metadata"]["name"])
            usage = (cq.get("status") or {}).get("flavorsUsage") or []
            return {r["name"]: r.get("borrowed") for f in usage for r in f.get("resources", ()) if r["name"] in
                    ("cpu", "memory")}

        wait_for(lambda: borrowed() == {"cpu": "1", "memory": "2Gi"}, timeout=60,
                 what="the borrower's job admitted on 1 CPU and 2Gi borrowed from the lender", message=borrowed)

        def paused():
            pods = [pod_of(core_v1, borrower_ns, name, i) for i in (0, 1)]
            if all(pods) and all(f"rank {i}: paused at step 10" in log_of(core_v1, borrower_ns, pods[i])
                                 for i in (0, 1)):
                return pods
            return None

        first = wait_for(paused, timeout=600, interval=1, what="both workers paused at step 10, after its checkpoint")
        job = await borrower.get(name)
        checkpoints = os.path.join(job.outputs["path"], "checkpoints")
        assert job.outputs["kept"] and os.listdir(checkpoints) == ["step-000000010.pdckpt"], job.outputs

        # The lender takes its quota back: a 1-worker job (half of it) held at a gate until it is opened.
        await lender.submit(JobSpec(name="reclaims", workers=1, command=["python", "ticker.py", "--until", GATE],
                                    **SMALL))
        preempted = wait_for(lambda: condition(workload_of(custom, borrower_ns, name) or {}, "Preempted")
                             and workload_of(custom, borrower_ns, name), timeout=120,
                             what="the borrower's job preempted to give the lender its quota back")
        reason = next(c["reason"] for c in preempted["status"]["conditions"] if c["type"] == "Preempted")
        assert reason in ("InCohortReclamation", "InCohortReclaimWhileBorrowing"), preempted["status"]["conditions"]
        wait_for(lambda: batch_v1.read_namespaced_job(name, borrower_ns).spec.suspend is True,
                 what="the borrower's job suspended")
        wait_for(lambda: not job_pods(core_v1, borrower_ns, name), timeout=180,
                 what="the borrower's workers deleted on suspension")
        wait_for(lambda: not condition(workload_of(custom, borrower_ns, name) or {}, "QuotaReserved"),
                 what="the borrower's Workload back in the queue, its quota released")
        reclaims = await wait_phase(lender, "reclaims", (Phase.RUNNING,), timeout=300)
        assert reclaims.requeues == 0, reclaims.to_dict()

        job = await borrower.get(name)  # waits: the lender's job holds the quota until its gate opens
        assert job.phase == Phase.QUEUED, job.to_dict()
        assert job.message.startswith(f"Preempted: {lender_team} reclaimed its capacity; requeued."), job.message
        assert "; requeued. Now " in job.message, job.message
        assert (job.requeues, job.restarts, job.attempt) == (1, 0, 2), job.to_dict()

        with open(gate, "w"):  # attempt 2 goes on past step 10 (attempt 1's workers are gone)
            pass
        open_gate(real_cluster, lender_ns, job_pods(core_v1, lender_ns, "reclaims")[0].metadata.name, GATE)
        reclaims = await wait_phase(lender, "reclaims", (Phase.SUCCEEDED, Phase.FAILED), timeout=300)
        assert reclaims.phase == Phase.SUCCEEDED, reclaims.message

        job = await wait_phase(borrower, name, (Phase.SUCCEEDED, Phase.FAILED), timeout=600)
        assert job.phase == Phase.SUCCEEDED, job.message
        assert (job.requeues, job.restarts, job.attempt) == (1, 0, 2), job.to_dict()
        # readmitted: no time (Kueue's conditions carry the readmission's); the step from the resume record
        assert job.attempt_line() == (f"attempt 2 of 3: preempted: {lender_team} reclaimed its capacity; "
                                      "resumed from step 10"), job.to_dict()
        status = _describe(job)  # what `paddlecloud status` prints
        assert "Phase:    Succeeded" in status and ("Restarts: 0 of at most 1; requeued once by the queue (not counted) "
                                                    f"(now {job.attempt_line()})") in status, status
        old = {p.metadata.uid for p in first}
        pods = job_pods(core_v1, borrower_ns, name)
        assert len(pods) == 2 and not {p.metadata.uid for p in pods} & old, [p.metadata.name for p in pods]
        # Every attempt's log: attempt 1's pods are gone, but each worker kept a copy of its log
        # beside the job's outputs on the workspace; each line once, the requeue marked between.
        lines = [line async for line in borrower.logs(name)]
        marker = f"--- attempt 2 of 3: preempted: {lender_team} reclaimed its capacity; restarting ---"
        for rank in (0, 1):
            own = [line.removeprefix(f"[worker-{rank}] ") for line in lines if line.startswith(f"[worker-{rank}] ")]
            started, epoch_1, paused_at, marked, resumed, epoch_2, done = (
                [number for number, line in enumerate(own) if line.startswith(text)] for text in (
                    f"rank {rank}: started", f"rank {rank}: epoch 1/2 step 10 loss", f"rank {rank}: paused at step 10",
                    marker, "paddlecloud: resumed from checkpoint at step 10 (", f"rank {rank}: epoch 2/2 step 20 loss",
                    f"rank {rank}: done"))
            assert [len(found) for found in (epoch_1, paused_at, marked, resumed, epoch_2, done)] == [1] * 6, own
            assert len(started) == 2, own  # once in each attempt
            assert started[0] < epoch_1[0] < paused_at[0] < marked[0] < started[1] < epoch_2[0] < done[0], own
            # the attempt read from the checkpoint: a requeue is no failure, $PADDLECLOUD_RESTART stays 0
            assert marked[0] < resumed[0] and own[resumed[0]].endswith("), attempt 2"), own
        copies = os.path.join(job.outputs["path"], "logs")
        assert sorted(os.listdir(copies)) == ["worker-0", "worker-1"], os.listdir(copies)
        assert all(len(os.listdir(os.path.join(copies, worker))) == 2 for worker in ("worker-0", "worker-1"))
        assert os.path.exists(os.path.join(job.outputs["path"], "final.pdparams"))
    finally:
        for jobs, job_name in ((borrower, name), (lender, "reclaims")):
            with contextlib.suppress(JobNotFound):
                await jobs.cancel(job_name)
            await jobs.close()
        with contextlib.suppress(kubernetes.client.ApiException):
            core_v1.delete_persistent_volume(pv)


def test_the_backend_reads_a_waiting_job_as_queued_with_its_position(teams, custom, batch_v1, core_v1,
                                                                      kueue_cluster):
    ns, _ = teams.make("status", gpus=8)
    hold(batch_v1, core_v1, ns, 8)

    async def submit_and_read():
        jobs = kueue_backend(kueue_cluster, ns)
        try:
            for name in ("first", "second", "third"):
                await jobs.submit(JobSpec(name=name, command=["python", "train.py"], workers=2, gpus_per_worker=2))
                # Kueue lines Workloads up by their own creation time: one at a time, in this order
                await asyncio.to_thread(wait_for, lambda name=name: workload_of(custom, ns, name),
                                        what=f"Kueue to make the Workload of {name}")
            await asyncio.to_thread(wait_for, lambda: all(waiting_message(custom, ns, n)
                                                          for n in ("first", "second", "third")),
                                    what="Kueue to have tried the three jobs")
            return await jobs.get("third")
        finally:
            await jobs.close()

    third = asyncio.run(submit_and_read())
    assert third.phase == Phase.QUEUED and third.reason == "Queued", third
    assert (third.queue.position, third.queue.ahead) == (3, 2), third.queue
    team = f"team status-{teams.tag}'s queue"
    assert third.queue.queue == team
    assert third.queue.waiting_for == "4 more GPUs", third.queue  # the words after "needs"
    assert third.message == f"Queued: needs 4 more GPUs in {team}; 2 jobs ahead of yours.", third.message
    assert pods_of(core_v1, ns, "third") == []


def live_pods(core_v1, ns, job_name):
    """The job's pods that run or may run (not ended, not being deleted)."""
    return [p.metadata.name for p in pods_of(core_v1, ns, job_name)
            if p.status.phase not in ("Succeeded", "Failed") and p.metadata.deletion_timestamp is None]


def job_failed(batch_v1, ns, name):
    """The Job's Failed condition's reason once it holds (Kubernetes ended it), else None."""
    status = batch_v1.read_namespaced_job(name, ns).status
    return next((c.reason or "Failed" for c in status.conditions or () if c.type == "Failed" and c.status == "True"), None)


def test_a_cancelled_admitted_job_ends_frees_its_quota_and_reads_cancelled_kueue_cannot_resume_it(
        teams, custom, batch_v1, core_v1, kueue_cluster):
    """Kueue resumes a suspended job whose Workload is admitted, so cancel (suspend) alone was
    undone: the pods came back and ran to the end. Cancel under Kueue also sets a 1-second
    deadline: the Job ends, its Workload is Finished, the team's quota is free again (a job
    needing all of it is admitted) and the job reads Cancelled. A queued job cancelled (behind
    it) never runs to the end either: it ends as soon as Kueue lets it start, and reads Cancelled."""
    ns, cq = teams.make("cancel", gpus=8)

    def used():
        status = custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", cq["metadata"]["name"]).get("status") or {}
        gpus = [r.get("total") for f in status.get("flavorsUsage") or () for r in f.get("resources", ()) if r["name"] == GPU]
        return status.get("admittedWorkloads"), status.get("reservingWorkloads"), gpus

    def ended(name):
        """Wait for the Job to end, its Workload to be Finished and its pods gone; its Failed reason."""
        reason = wait_for(lambda: job_failed(batch_v1, ns, name), timeout=90, what=f"the cancelled job {name} to end",
                          message=lambda: str(batch_v1.read_namespaced_job(name, ns).status))
        wait_for(lambda: condition(workload_of(custom, ns, name) or {}, "Finished"), timeout=60,
                 what=f"the Workload of {name} Finished")
        wait_for(lambda: not live_pods(core_v1, ns, name), timeout=60, what=f"no pod of {name} left running",
                 message=lambda: str(live_pods(core_v1, ns, name)))
        return reason

    async def scenario():
        jobs = kueue_backend(kueue_cluster, ns, complete_after="1h")  # workers that would run for an hour
        try:
            for name in ("running", "waiting"):
                await jobs.submit(JobSpec(name=name, command=["python", "train.py"], workers=2, gpus_per_worker=4))
            await asyncio.to_thread(wait_admitted, custom, ns, "running", "the 8-GPU job admitted")
            await asyncio.to_thread(wait_for, lambda: len([p for p in pods_of(core_v1, ns, "running")
                                                           if p.status.phase == "Running"]) == 2,
                                    timeout=60, what="its 2 workers running on the KWOK nodes")
            await asyncio.to_thread(wait_for, lambda: waiting_message(custom, ns, "waiting"), timeout=60,
                                    what="Kueue to find the second 8-GPU job does not fit")

            waiting = await jobs.cancel("waiting")  # queued, not admitted
            assert waiting.phase == Phase.CANCELLED, waiting
            running = await jobs.cancel("running")
            assert running.phase == Phase.CANCELLED, running

            for name in ("running", "waiting"):  # each: Kueue lets it start, its 1-second deadline ends it
                assert await asyncio.to_thread(ended, name) == "DeadlineExceeded"
            await asyncio.to_thread(wait_for, lambda: used() in ((0, 0, ["0"]), (0, 0, []), (None, None, [])),
                                    timeout=60, what="the team queue's admitted usage back to 0", message=lambda: str(used()))

            await jobs.submit(JobSpec(name="next", command=["python", "train.py"], workers=2, gpus_per_worker=4))
            await asyncio.to_thread(wait_admitted, custom, ns, "next",
                                    "a job needing the whole quota admitted after the cancels")
            read = await jobs.get("running"), await jobs.get("waiting")
            # Its workers would hold 8 KWOK GPUs for an hour; left to the namespace's deletion they
            # held both nodes for minutes, and the next test's 8-GPU holder could not start.
            await jobs.cancel("next")
            await asyncio.to_thread(ended, "next")
            return read
        finally:
            await jobs.close()

    running, waiting = asyncio.run(scenario())
    for job in (running, waiting):
        assert (job.phase, job.message) == (Phase.CANCELLED, "The job was cancelled."), job
        assert "1 second" not in str(job.to_dict()), job
    assert not live_pods(core_v1, ns, "running") and not live_pods(core_v1, ns, "waiting")
    for name in ("running", "waiting"):  # ended for good: Kueue does not start a finished job again
        assert job_failed(batch_v1, ns, name) == "DeadlineExceeded"


async def test_the_quota_page_moves_the_team_queue_and_the_resource_quota_admits_all_kueue_admits(
        kueue_cluster, custom, core_v1, batch_v1, make_namespace):
    """The hub's own path (quota store + QuotaSync, as a PUT on the quota page runs it): the
    team's ClusterQueue follows its quota, and a job Kueue admits at the most it may (guarantee +
    borrowing limit, borrowed from an idle team) has every pod admitted by the ResourceQuota."""
    tag = uuid.uuid4().hex[:6]
    vision, audio, user = f"vision-{tag}", f"audio-{tag}", f"u-{tag}"
    hub_ns, ns = make_namespace("hub"), make_namespace("kq", labels={USER_LABEL: user})
    core_v1.create_namespaced_limit_range(ns, tenancy.limit_range(ns))  # as the spawner makes it
    api = KubeApi.connect(kueue_cluster.kubeconfig)
    store = KubernetesQuotaStore(api, hub_ns)
    sync = QuotaSync(api, store, kueue=queues.QueuePolicy(borrowing=Limits(gpus=4)))
    names = [queues.dns_name(queues.TEAM_PREFIX, group) for group in (vision, audio)]

    def gpu_quota(cq_name):
        cq = custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", cq_name)
        return next(r for r in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"] if r["name"] == GPU)

    try:
        await store.update("groups", vision, parse_patch({"gpus": 4, "cpu": "32", "memory": "128Gi"}))
        config = await store.update("groups", audio, parse_patch({"gpus": 8, "cpu": "32", "memory": "128Gi"}))
        assert sorted(await sync.sync_teams(config)) == sorted(names)
        await sync.sync_user(user, [vision], namespace=ns, config=config)
        assert gpu_quota(names[0]) == {"name": GPU, "nominalQuota": "4", "borrowingLimit": "4"}
        assert core_v1.read_namespaced_resource_quota("paddlecloud-quota", ns).spec.hard[f"requests.{GPU}"] == "8"

        config = await store.update("groups", vision, parse_patch({"gpus": 8}))  # the quota page's PUT
        await sync.sync_teams(config)
        await sync.sync_user(user, [vision], namespace=ns, config=config)
        assert gpu_quota(names[0])["nominalQuota"] == "8"
        assert core_v1.read_namespaced_resource_quota("paddlecloud-quota", ns).spec.hard[f"requests.{GPU}"] == "12"
        wait_local_queue_active(custom, ns, what="the user's LocalQueue default active")

        # 12 GPUs: vision's 8 + 4 borrowed from audio's idle 8; every pod gets past the ResourceQuota.
        batch_v1.create_namespaced_job(ns, queued_job("most", workers=3, gpus=4, complete_after="1h"))
        wait_admitted(custom, ns, "most", "Kueue to admit 12 GPUs (8 guaranteed + 4 borrowed)")
        wait_for(lambda: len([p for p in pods_of(core_v1, ns, "most") if p.status.phase == "Running"]) == 3,
                 timeout=60, what="all 3 workers running: none refused by the ResourceQuota",
                 message=lambda: [e.message for e in core_v1.list_namespaced_event(ns).items])
    finally:
        await api.close()
        delete_leftovers(core_v1, custom, [], names)


def delete_leftovers(core_v1, custom, namespaces, cluster_queues) -> None:
    """After a quota-service test: its namespaces and the ClusterQueues it wrote, where still there."""
    for name in namespaces:
        try:
            core_v1.delete_namespace(name)
        except kubernetes.client.ApiException:
            pass
    for name in cluster_queues:
        try:
            custom.delete_cluster_custom_object(GROUP, VERSION, "clusterqueues", name)
        except kubernetes.client.ApiException:
            pass


async def test_quota_page_edits_write_the_queues_through_the_quota_service(kueue_cluster, custom, core_v1, tmp_path,
                                                                          monkeypatch):
    """The quota service with Kueue (the hub's settings.kueue_enabled), its PUTs as the page sends
    them, the real local hub saying who is in which group: a team's quota is its ClusterQueue,
    its members' LocalQueue `default` points there, a personal override moves the user to a queue
    of their own, and each ResourceQuota is the queue's guarantee + borrowing limit."""
    from hubutil import LocalHub
    from paddle_ext.hub.quota_service import QuotaService

    tag = uuid.uuid4().hex[:6]
    ann, ben, team = f"ann-{tag}", f"ben-{tag}", f"ml-{tag}"
    prefix = f"pcq-{tag}-"
    hub_ns = prefix + "hub"
    for name, user in ((hub_ns, None), (prefix + ann, ann), (prefix + ben, ben)):
        core_v1.create_namespace({"metadata": {"name": name, "labels": {USER_LABEL: user} if user else {}}})
    written = [queues.dns_name(queues.TEAM_PREFIX, team), queues.dns_name(queues.USER_PREFIX, ann),
               queues.dns_name(queues.USER_PREFIX, ben)]

    def local_queue(user):
        return custom.get_namespaced_custom_object(GROUP, VERSION, prefix + user, "localqueues",
                                                   queues.LOCAL_QUEUE)["spec"]["clusterQueue"]

    def gpu_hard(user):
        return core_v1.read_namespaced_resource_quota("paddlecloud-quota", prefix + user).spec.hard[f"requests.{GPU}"]

    hub = LocalHub(tmp_path / "paddlecloud")
    try:
        hub.start()
        token = hub.new_token(hub.login("admin"), "admin")
        for user in (ann, ben):
            assert hub.hub_api("POST", f"/users/{user}", token).status_code == 201
        assert hub.hub_api("POST", f"/groups/{team}", token).status_code == 201
        assert hub.hub_api("POST", f"/groups/{team}/users", token, json={"users": [ann]}).status_code == 200
        monkeypatch.setenv("JUPYTERHUB_API_URL", f"{hub.url}/hub/api")
        monkeypatch.setenv("JUPYTERHUB_API_TOKEN", token)
        monkeypatch.setenv("PADDLECLOUD_KUEUE", '{"borrowing_limit": {"gpus": 2}}')  # as the hub passes it
        service = QuotaService(store_kind="kubernetes", kubeconfig=kueue_cluster.kubeconfig, hub_namespace=hub_ns,
                               namespace_template=prefix + "{username}")
        await service.setup()
        try:
            view = await service.update("groups", team, parse_patch({"gpus": 4}))
            assert "sync_errors" not in view, view
            cq = custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", written[0])
            gpu = next(r for r in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"] if r["name"] == GPU)
            assert gpu == {"name": GPU, "nominalQuota": "4", "borrowingLimit": "2"}
            assert local_queue(ann) == written[0] and gpu_hard(ann) == "6"

            await service.update("default", None, parse_patch({"gpus": 1}))
            assert local_queue(ben) == written[2] and gpu_hard(ben) == "3"  # a queue of the default's 1 GPU

            await service.update("users", ann, parse_patch({"gpus": 2}))  # a personal override
            assert local_queue(ann) == written[1] and gpu_hard(ann) == "4"
        finally:
            await service.store.api.close()
    finally:
        hub.stop()
        delete_leftovers(core_v1, custom, [hub_ns, prefix + ann, prefix + ben], written)


async def test_the_overview_shows_a_teams_borrowed_gpus_and_a_deleted_groups_queue_goes_once_empty(
        kueue_cluster, custom, core_v1, batch_v1, tmp_path, monkeypatch):
    """The quota service with Kueue, as the admin page reads and edits it: team a (4 GPUs
    guaranteed) runs a 6-GPU job by borrowing 2 of team b's idle GPUs, and the overview's queues
    section and the quota page's group row say so; when team a's quota is removed its ClusterQueue
    stays while the job is admitted there, and goes at the next sync once the job has."""
    from hubutil import LocalHub
    from paddle_ext.hub.quota_service import QuotaService

    tag = uuid.uuid4().hex[:6]
    ann, team_a, team_b = f"ann-{tag}", f"a-{tag}", f"b-{tag}"
    prefix = f"pcq-{tag}-"
    hub_ns, ns = prefix + "hub", prefix + ann
    core_v1.create_namespace({"metadata": {"name": hub_ns}})
    core_v1.create_namespace({"metadata": {"name": ns, "labels": {USER_LABEL: ann}}})
    core_v1.create_namespaced_limit_range(ns, tenancy.limit_range(ns))  # as the spawner makes it
    a_cq, b_cq = (queues.dns_name(queues.TEAM_PREFIX, g) for g in (team_a, team_b))
    written = [a_cq, b_cq, queues.dns_name(queues.USER_PREFIX, ann)]

    def cluster_queue(name):
        try:
            return custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", name)
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    hub = LocalHub(tmp_path / "paddlecloud")
    try:
        hub.start()
        token = hub.new_token(hub.login("admin"), "admin")
        assert hub.hub_api("POST", f"/users/{ann}", token).status_code == 201
        for group in (team_a, team_b):
            assert hub.hub_api("POST", f"/groups/{group}", token).status_code == 201
        assert hub.hub_api("POST", f"/groups/{team_a}/users", token, json={"users": [ann]}).status_code == 200
        monkeypatch.setenv("JUPYTERHUB_API_URL", f"{hub.url}/hub/api")
        monkeypatch.setenv("JUPYTERHUB_API_TOKEN", token)
        monkeypatch.setenv("PADDLECLOUD_KUEUE", "{}")  # Kueue on, no lending or borrowing limits
        service = QuotaService(store_kind="kubernetes", kubeconfig=kueue_cluster.kubeconfig, hub_namespace=hub_ns,
                               namespace_template=prefix + "{username}")
        await service.setup()
        try:
            for group, gpus in ((team_a, 4), (team_b, 8)):
                view = await service.update("groups", group, parse_patch({"gpus": gpus, "cpu": "32",
                                                                          "memory": "128Gi"}))
                assert "sync_errors" not in view, view
            wait_local_queue_active(custom, ns, what="ann's LocalQueue default active")
            batch_v1.create_namespaced_job(ns, queued_job("wide", workers=3, gpus=2, complete_after="1h"))
            wait_admitted(custom, ns, "wide", "team a's 6-GPU job admitted by borrowing 2 of team b's idle GPUs")

            async def rows():
                section = (await service.cluster_overview())["queues"]
                assert "error" not in section, section
                return {row["name"]: row for row in section["rows"]}

            seen = {}

            async def team_a_borrowing():
                seen["row"] = (await rows()).get(a_cq)
                return seen["row"] if seen["row"] and seen["row"]["borrowed_gpus"] == 2 else None

            row = await wait_for_async(team_a_borrowing, what="the overview's queues to show team a borrowing 2 GPUs",
                                       message=lambda: repr(seen.get("row")))
            assert row == {"name": a_cq, "kind": "team", "owner": team_a, "title": f"team {team_a}'s queue",
                           "guaranteed_gpus": 4, "used_gpus": 6, "borrowed_gpus": 2, "idle_gpus": 0,
                           "admitted": 1, "pending": 0}
            b_row = (await rows())[b_cq]
            assert (b_row["guaranteed_gpus"], b_row["used_gpus"], b_row["idle_gpus"]) == (8, 0, 8)
            groups = {g["group"]: g for g in (await service.overview())["groups"]}
            assert (groups[team_a]["guaranteed_gpus"], groups[team_a]["borrowed_gpus"]) == (4, 2)
            assert (groups[team_b]["guaranteed_gpus"], groups[team_b]["borrowed_gpus"]) == (8, 0)

            # Team a's quota removed: ann moves to a queue of her own; team a's queue stays while
            # her job is admitted in it (Kueue could not finish deleting it, and it must not strand it).
            view = await service.update("groups", team_a, parse_patch({"gpus": None, "cpu": None, "memory": None}))
            assert "sync_errors" not in view, view
            assert custom.get_namespaced_custom_object(GROUP, VERSION, ns, "localqueues",
                                                       queues.LOCAL_QUEUE)["spec"]["clusterQueue"] == written[2]
            kept = cluster_queue(a_cq)
            assert kept is not None and not kept["metadata"].get("deletionTimestamp"), kept
            assert team_a not in {g["group"] for g in (await service.overview())["groups"] if "guaranteed_gpus" in g}

            batch_v1.delete_namespaced_job("wide", ns, propagation_policy="Background")
            wait_for(lambda: not any(((cluster_queue(a_cq) or {}).get("status") or {}).get(key)
                                     for key in queue_admin.WORKLOAD_COUNTS),
                     what="team a's queue empty once the job is gone", message=lambda: cluster_queue(a_cq))
            service.kueue_resync_seconds = 0.5  # the service's own periodic sync (serve() runs it)
            resync = asyncio.create_task(service.keep_queues_in_sync())
            try:
                await wait_for_async(lambda: cluster_queue(a_cq) is None, what="team a's empty queue deleted",
                                     message=lambda: repr(cluster_queue(a_cq)))
            finally:
                resync.cancel()
            assert a_cq not in await rows() and cluster_queue(b_cq) is not None  # b still has its quota
        finally:
            await service.store.api.close()
    finally:
        hub.stop()
        delete_leftovers(core_v1, custom, [hub_ns, ns], written)
