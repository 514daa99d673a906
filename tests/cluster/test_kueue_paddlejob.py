"""Kueue queues the product's second job kind too: Kubeflow PaddleJobs (kubeflow.org/v1,
job_kind "paddlejob"), submitted by the product's own KubernetesBackend with a queue, are
created suspended with the queue label, and the session's real Kueue (tools/k8s/kueue.py:
integration kubeflow.org/paddlejob, the PaddleJob CRD installed before it starts, its
webhooks for kubeflow.org paddlejobs by URL in user namespaces) makes one Workload per job
(one pod set `worker`: the job's workers, each with the job's requests), admits the whole job
or nothing, and unsuspends it (spec.runPolicy.suspend false).

No training operator runs in the test cluster, so an admitted PaddleJob makes no pods: these
tests stop at Kueue's admission (the Workload admitted, the job unsuspended, the backend
reading it Pending: admitted, starting) and check that no pod appears. Kueue's waitForPodsReady
would evict such a job after KUEUE_PODS_READY_SECONDS (_KWOK on a KWOK-only cluster); nothing
here waits that long after an admission. The queues are the hub's (test_kueue.Teams); GPUs are
held by an Indexed Job whose pod KWOK keeps running until the test deletes it
(test_kueue.hold), so nothing waits on a timer.
"""

import asyncio
import os
from decimal import Decimal

import kubernetes

from paddle_ext.backends.kubernetes_queue import requests
from paddle_ext.constants import KUEUE_QUEUE_LABEL
from paddle_ext.jobkinds import JOB_KINDS, job_objects
from paddle_ext.jobs import Phase
from paddle_ext.manifests import ManifestSettings
from paddle_ext.quota import queues
from paddle_ext.spec import JobSpec
from tools.k8s import kueue

import test_kueue
from cluster_helpers import wait_for
from test_kueue import (GPU, GROUP, VERSION, condition, hold, kueue_backend, namespace_workloads, release,
                        wait_admitted, waiting_message, workload_of, workloads_of)

# test_kueue's fixtures, used here as they are: the admin's CustomObjectsApi, the hub's team queues.
custom = test_kueue.custom
teams = test_kueue.teams

KIND = JOB_KINDS["paddlejob"]
KF_GROUP, KF_VERSION = KIND.api_version.split("/")


def paddlejob(custom, ns, name):
    return custom.get_namespaced_custom_object(KF_GROUP, KF_VERSION, ns, KIND.plural, name)


def suspended(custom, ns, name):
    return KIND.is_suspended(paddlejob(custom, ns, name))


def pj_workload(custom, ns, name):
    return workload_of(custom, ns, name, kind="PaddleJob")


def run(coroutine_fn, cluster, ns, job_kind="paddlejob"):
    """`await coroutine_fn(backend)` with the notebook's backend with Kueue (test_kueue.kueue_backend)
    making `job_kind` jobs in `ns` (PaddleJobs unless said), closed after."""
    async def go():
        jobs = kueue_backend(cluster, ns, job_kind=job_kind)
        try:
            return await coroutine_fn(jobs)
        finally:
            await jobs.close()
    return asyncio.run(go())


def test_the_harness_installed_the_paddlejob_crd_before_kueue_which_set_up_its_controller_at_once(kueue_cluster,
                                                                                                   api_client):
    """tools/k8s/kueue.py applies the CRD and waits until it is served before Kueue starts, so
    Kueue sets its PaddleJob integration up at start, not after polling for the API."""
    extensions = kubernetes.client.ApiextensionsV1Api(api_client)
    crd = extensions.read_custom_resource_definition(kueue.PADDLEJOB_CRD)
    assert any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or ())
    assert [v.name for v in crd.spec.versions if v.served] == [KF_VERSION]

    def log():
        with open(os.path.join(kueue_cluster.state_dir, "logs", "kueue.log")) as fh:
            return fh.read()

    # Its PaddleJob controller watches PaddleJobs (controller-runtime's line for the watch it starts) ...
    wait_for(lambda: '"source":"kind source: *v1.PaddleJob"' in log(), what="Kueue's PaddleJob controller started",
             message=lambda: log()[-3000:])
    # ... set up with the others, not deferred until Kueue found the API (pkg/controller/jobframework/setup.go).
    assert "deferring setting up controller" not in log(), [line for line in log().splitlines() if "deferring" in line]


def test_kueues_webhook_suspends_a_labelled_paddlejob_created_running_only_in_user_namespaces(
        teams, custom, make_namespace):
    """Kueue's mutating webhook for PaddleJobs (mpaddlejob.kb.io, by URL) suspends a queue-labelled
    PaddleJob made running in a user namespace, on the way in; elsewhere (no user label) neither
    the webhook nor Kueue's PaddleJob controller touches one."""
    ns, _ = teams.make("pjhook", gpus=8)
    spec = JobSpec(name="eager", command=["python", "train.py"], workers=2, gpus_per_worker=1)

    def running(namespace):
        settings = ManifestSettings(namespace=namespace, image="paddle:3.3.1-cpu", kind="paddlejob",
                                    queue_name=queues.LOCAL_QUEUE)
        (obj,) = job_objects(spec, settings)
        obj["spec"]["runPolicy"]["suspend"] = False  # made running, as a user might by hand
        return obj

    made = custom.create_namespaced_custom_object(KF_GROUP, KF_VERSION, ns, KIND.plural, running(ns))
    assert made["spec"]["runPolicy"]["suspend"] is True  # set by Kueue's webhook, on the way in
    assert made["metadata"]["labels"][KUEUE_QUEUE_LABEL] == queues.LOCAL_QUEUE
    wait_for(lambda: pj_workload(custom, ns, "eager"), what="Kueue to make the PaddleJob's Workload")

    other = make_namespace("plain")
    made = custom.create_namespaced_custom_object(KF_GROUP, KF_VERSION, other, KIND.plural, running(other))
    assert made["spec"]["runPolicy"]["suspend"] is False
    assert namespace_workloads(custom, other) == []


def test_a_paddlejob_that_fits_is_one_workload_of_its_workers_admitted_whole_and_unsuspended(
        teams, custom, core_v1, kueue_cluster):
    """The backend's PaddleJob is created suspended with its queue label; while the team's queue
    is held (stopPolicy Hold) it stays so, and Kueue has made ONE Workload for it in the user's
    LocalQueue: one pod set `worker` of 2 (the job's workers), each asking what the job's workers
    ask. Once the queue is open Kueue admits it whole (2 workers, 4 GPUs) and unsuspends it; the
    backend then reads it Pending (admitted, starting). No training operator runs here: no pod
    of it appears."""
    ns, cq = teams.make("pjfits", gpus=8)
    name = cq["metadata"]["name"]
    custom.patch_cluster_custom_object(GROUP, VERSION, "clusterqueues", name, {"spec": {"stopPolicy": "Hold"}})
    spec = JobSpec(name="fits", command=["python", "train.py"], workers=2, gpus_per_worker=2, cpu="1", memory="2Gi")
    made = run(lambda jobs: jobs.submit(spec), kueue_cluster, ns)
    assert made.phase == Phase.QUEUED, made  # created suspended

    wl = wait_for(lambda: pj_workload(custom, ns, "fits"), what="Kueue to make the PaddleJob's Workload")
    job = paddlejob(custom, ns, "fits")
    assert job["metadata"]["labels"][KUEUE_QUEUE_LABEL] == queues.LOCAL_QUEUE
    assert KIND.is_suspended(job), job["spec"]["runPolicy"]
    assert wl["spec"]["queueName"] == queues.LOCAL_QUEUE
    (owner,) = wl["metadata"]["ownerReferences"]
    assert (owner["apiVersion"], owner["kind"], owner["uid"]) == (KIND.api_version, "PaddleJob", job["metadata"]["uid"])
    (pod_set,) = wl["spec"]["podSets"]
    assert (pod_set["name"], pod_set["count"]) == ("worker", 2), pod_set
    (container,) = pod_set["template"]["spec"]["containers"]
    worker = KIND.pod_spec(job)["containers"][0]
    assert container["name"] == "paddle" and container["resources"] == worker["resources"], container
    assert {k: container["resources"]["requests"][k] for k in ("cpu", "memory", GPU)} == {
        "cpu": "1", "memory": "2Gi", GPU: "2"}, container["resources"]
    asked = requests(wl, GPU)  # the product's reading of a Workload: the whole job
    assert (asked[GPU], asked["cpu"], asked["memory"]) == (Decimal(4), Decimal(2), Decimal(4 * 2**30)), asked
    assert not condition(wl, "QuotaReserved") and not condition(wl, "Admitted")

    custom.patch_cluster_custom_object(GROUP, VERSION, "clusterqueues", name, {"spec": {"stopPolicy": "None"}})
    wl = wait_admitted(custom, ns, "fits", "the PaddleJob's Workload admitted", kind="PaddleJob")
    admission = wl["status"]["admission"]
    assert admission["clusterQueue"] == name
    (assigned,) = admission["podSetAssignments"]
    assert (assigned["name"], assigned["count"], assigned["resourceUsage"][GPU]) == ("worker", 2, "4"), assigned
    wait_for(lambda: not suspended(custom, ns, "fits"), what="Kueue to unsuspend the PaddleJob (runPolicy.suspend)")
    assert paddlejob(custom, ns, "fits")["spec"]["runPolicy"]["suspend"] is False

    job = run(lambda jobs: jobs.get("fits"), kueue_cluster, ns)
    assert job.phase == Phase.PENDING and job.queue is None, job.to_dict()
    assert (job.requeues, job.restarts, job.attempt) == (0, 0, 1), job.to_dict()
    assert len(workloads_of(custom, ns, "fits", kind="PaddleJob")) == 1
    assert len(namespace_workloads(custom, ns)) == 1
    assert core_v1.list_namespaced_pod(ns).items == []  # no training operator: nothing makes its pods


def test_a_paddlejob_that_fits_but_not_now_waits_queued_behind_a_job_with_its_position_and_starts_when_room_frees(
        teams, custom, batch_v1, core_v1, kueue_cluster):
    """The team's 8 GPUs are held by an Indexed Job; the backend's Indexed Job `first` (2 x 2
    GPUs) and then its PaddleJob `second` (2 x 2 GPUs) fit the team's quota but not now: both
    wait, suspended, with no pods. The backend reads the PaddleJob Queued, second in the team's
    line behind the Indexed Job, needing 4 more GPUs, in `get` and `list` alike. When the holder
    goes, Kueue admits the PaddleJob whole and unsuspends it (no training operator runs here:
    it makes no pods)."""
    ns, cq = teams.make("pjwaits", gpus=8)
    hold(batch_v1, core_v1, ns, 8)
    worker = dict(command=["python", "train.py"], workers=2, gpus_per_worker=2)
    run(lambda jobs: jobs.submit(JobSpec(name="first", **worker)), kueue_cluster, ns, job_kind="job")
    # Kueue lines Workloads up by their own creation time: `first`'s must exist before `second`
    # is submitted, or on a loaded machine Kueue may make `second`'s first (a CI run saw that).
    wait_for(lambda: workload_of(custom, ns, "first"), what="Kueue to make the Workload of `first`")
    made = run(lambda jobs: jobs.submit(JobSpec(name="second", **worker)), kueue_cluster, ns)
    assert made.phase == Phase.QUEUED, made
    wait_for(lambda: waiting_message(custom, ns, "first") and waiting_message(custom, ns, "second", kind="PaddleJob"),
             what="Kueue to have tried both jobs and found they do not fit now")

    async def read(jobs):
        return await jobs.get("second"), [j for j in await jobs.list() if j.name == "second"]

    second, listed = run(read, kueue_cluster, ns)
    team = f"team pjwaits-{teams.tag}'s queue"
    assert second.phase == Phase.QUEUED and second.reason == "Queued", second.to_dict()
    assert (second.queue.position, second.queue.ahead, second.queue.queue) == (2, 1, team), second.queue
    assert second.queue.waiting_for == "4 more GPUs", second.queue  # the words after "needs"
    assert second.message == f"Queued: needs 4 more GPUs in {team}; 1 job ahead of yours.", second.message
    assert [(j.phase, j.queue) for j in listed] == [(second.phase, second.queue)], listed
    first = run(lambda jobs: jobs.get("first"), kueue_cluster, ns, job_kind="job")
    assert (first.phase, first.queue.position) == (Phase.QUEUED, 1), first.to_dict()
    assert suspended(custom, ns, "second")
    assert core_v1.list_namespaced_pod(ns, label_selector="paddlecloud.io/job=second").items == []
    assert not condition(pj_workload(custom, ns, "second"), "QuotaReserved")

    release(batch_v1, ns)
    wl = wait_admitted(custom, ns, "second", "the PaddleJob admitted once the holder is gone", kind="PaddleJob")
    assert wl["status"]["admission"]["clusterQueue"] == cq["metadata"]["name"]
    (assigned,) = wl["status"]["admission"]["podSetAssignments"]
    assert (assigned["name"], assigned["count"], assigned["resourceUsage"][GPU]) == ("worker", 2, "4"), assigned
    wait_for(lambda: not suspended(custom, ns, "second"), what="Kueue to unsuspend the PaddleJob")
    second = run(lambda jobs: jobs.get("second"), kueue_cluster, ns)
    assert second.phase == Phase.PENDING and second.queue is None, second.to_dict()
    assert core_v1.list_namespaced_pod(ns, label_selector="paddlecloud.io/job=second").items == []
