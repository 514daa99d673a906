"""Kueue in the test cluster, for real: its controller manager as a process (tools/k8s/kueue.py)
against the control plane, with its CRDs and its webhooks reached by URL, admitting Indexed
Jobs whose pods run on the KWOK GPU nodes.

Each test gets a user namespace (label paddlecloud.io/user, where Kueue's webhooks and job
management apply), a ResourceFlavor, a ClusterQueue of 8 GPUs for that namespace and a
LocalQueue pointing at it (all kueue.x-k8s.io/v1beta2).
"""

import os
import subprocess
import sys
import uuid

import kubernetes
import pytest
import yaml
from cluster_helpers import on_kwok_nodes, wait_for

from paddle_ext import tenancy
from paddle_ext.constants import KUEUE_QUEUE_LABEL, USER_LABEL
from tools.k8s import kueue
from tools.k8s.cluster import COMPLETE_AFTER_ANNOTATION
from tools.k8s.procutil import pid_alive, read_json

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


def workload_of(custom, ns, job_name):
    for wl in custom.list_namespaced_custom_object(GROUP, VERSION, ns, "workloads")["items"]:
        if any(o["kind"] == "Job" and o["name"] == job_name for o in wl["metadata"].get("ownerReferences", ())):
            return wl
    return None


def pods_of(core_v1, ns, job_name):
    return core_v1.list_namespaced_pod(ns, label_selector=f"batch.kubernetes.io/job-name={job_name}").items


def job_done(batch_v1, ns, name):
    status = batch_v1.read_namespaced_job(name, ns).status
    return any(c.type == "Complete" and c.status == "True" for c in status.conditions or ())


# ------------------------------------------------------------------ pure


def test_webhooks_go_by_url_to_127_0_0_1_only_for_kueue_and_jobs_in_user_namespaces(k8s_bin_dir):
    with open(os.path.join(kueue.manifests_dir(k8s_bin_dir), "webhook.yaml")) as fh:
        docs = kueue.webhook_configurations(list(yaml.safe_load_all(fh)), 12345, b"PEM")
    assert sorted(d["kind"] for d in docs) == ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]
    hooks = [h for d in docs for h in d["webhooks"]]
    assert {"mjob.kb.io", "vjob.kb.io", "mworkload.kb.io", "vworkload.kb.io", "vclusterqueue.kb.io"} <= {
        h["name"] for h in hooks}
    assert not [h["name"] for h in hooks if h["name"] in ("mpod.kb.io", "mdeployment.kb.io", "mpaddlejob.kb.io")]
    for hook in hooks:
        assert hook["clientConfig"]["url"].startswith("https://127.0.0.1:12345/")
        assert "service" not in hook["clientConfig"] and hook["clientConfig"]["caBundle"] == "UEVN"
        assert hook["namespaceSelector"] == {"matchExpressions": [{"key": USER_LABEL, "operator": "Exists"}]}


# ------------------------------------------------------------------ the real Kueue


def test_a_suspended_labelled_indexed_job_is_admitted_runs_on_kwok_and_completes(
        queue, custom, batch_v1, core_v1):
    ns = queue
    batch_v1.create_namespaced_job(ns, job("fits", workers=2, gpus=2))
    wl = wait_for(lambda: workload_of(custom, ns, "fits"), what="Kueue to make the job's Workload")
    assert wl["spec"]["queueName"] == QUEUE
    wait_for(lambda: condition(workload_of(custom, ns, "fits") or {}, "Admitted"), what="the Workload admitted",
             message=lambda: workload_of(custom, ns, "fits"))
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
    wait_for(lambda: condition(workload_of(custom, ns, "gang") or {}, "Admitted"), timeout=60,
             what="the gang job admitted once the holder is gone")
    wait_for(lambda: job_done(batch_v1, ns, "gang"), timeout=60, what="the gang job to complete")
    assert batch_v1.read_namespaced_job("gang", ns).status.succeeded == 2


def test_cluster_py_up_runs_kueue_and_down_leaves_nothing(kueue_cluster, k8s_bin_dir, tmp_path):
    """`make cluster`'s command: Kueue runs; after `down` no process and no /etc/kueue of ours
    is left (the session's cluster keeps using /etc/kueue, so only its record is checked here:
    the directory goes with the last cluster that used it)."""
    state = tmp_path / "c"
    cli = [sys.executable, os.path.join(REPO, "tools", "k8s", "cluster.py")]
    up = subprocess.run([*cli, "up", "--state-dir", str(state), "--bin-dir", k8s_bin_dir, "--nodes", "1",
                         "--kueue", "yes"], capture_output=True, text=True, timeout=300)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        pids = read_json(state / "pids.json")
        assert pid_alive(pids["kueue"]["pid"])
        assert os.path.exists(os.path.join(kueue.METRICS_CERT_DIR, "tls.crt"))
        if os.path.exists(kueue.OWNERS_FILE):
            assert str(state) in read_json(kueue.OWNERS_FILE)
    finally:
        down = subprocess.run([*cli, "down", "--state-dir", str(state)], capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not [n for n, info in pids.items() if pid_alive(info["pid"])]
    if os.path.exists(kueue.OWNERS_FILE):
        assert str(state) not in read_json(kueue.OWNERS_FILE)
        assert kueue_cluster.state_dir in read_json(kueue.OWNERS_FILE)  # still in use by the session's


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
