"""Job phase, reason and message from Kubernetes objects (pure)."""

import json

import pytest

from paddle_ext.backends.kubernetes_progress import related_events, worker_of_pod_name
from paddle_ext.backends.kubernetes_status import job_from_objects, max_free_gpus
from paddle_ext.constants import SPEC_ANNOTATION
from paddle_ext.errors import QuotaExceeded
from paddle_ext.jobkinds import JOB_KINDS, job_objects
from paddle_ext.manifests import ManifestSettings
from paddle_ext.quota.model import JobUsage, check_fits, resource_quota_terms
from paddle_ext.spec import JobSpec


def make_job(workers=2, gpus=0, **spec_fields):
    spec = JobSpec(name="j", command=["python", "t.py"], workers=workers, gpus_per_worker=gpus, **spec_fields)
    _, job = job_objects(spec, ManifestSettings(namespace="ns", image="img"), {SPEC_ANNOTATION: json.dumps(spec.to_dict())})
    job["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    job["status"] = {}
    return job


def make_paddle_job(workers=2, **spec_fields):
    spec = JobSpec(name="j", command=["python", "t.py"], workers=workers, **spec_fields)
    (job,) = job_objects(spec, ManifestSettings(namespace="ns", image="img", kind="paddlejob"),
                         {SPEC_ANNOTATION: json.dumps(spec.to_dict())})
    job["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    job["status"] = {}
    return job


def pod(index, phase="Running", state=None, conditions=None, created="2026-01-01T00:00:01Z",
        index_label="batch.kubernetes.io/job-completion-index"):
    return {
        "metadata": {"name": f"j-{index}-x", "uid": f"u{index}{created}", "creationTimestamp": created,
                     "labels": {index_label: str(index), "paddlecloud.io/job": "j"}},
        "status": {"phase": phase, "conditions": conditions or [],
                   "containerStatuses": [{"name": "paddle", "state": state or {}}] if state else []},
    }


def condition(job, type_, reason="", message=""):
    job["status"]["conditions"] = [{"type": type_, "status": "True", "reason": reason, "message": message,
                                    "lastTransitionTime": "2026-01-01T00:05:00Z"}]
    return job


def test_running_and_succeeded():
    job = make_job()
    pods = [pod(0, state={"running": {}}), pod(1, state={"running": {}})]
    assert job_from_objects(job, pods, []).phase == "Running"
    done = condition(make_job(), "Complete")
    result = job_from_objects(done, [pod(i, "Succeeded", {"terminated": {"exitCode": 0}}) for i in (0, 1)], [])
    assert (result.phase, result.reason, result.finished) == ("Succeeded", "Completed", "2026-01-01T00:05:00Z")
    assert result.spec["command"] == ["python", "t.py"]


def test_a_succeeded_job_without_its_pods_reads_as_with_them_but_for_the_node():
    """`list` does not read a succeeded job's pods (and they may be gone): every worker succeeded."""
    with_pods = job_from_objects(condition(make_job(), "Complete"),
                                 [pod(i, "Succeeded", {"terminated": {"exitCode": 0}}) for i in (0, 1)], [])
    without = job_from_objects(condition(make_job(), "Complete"), [], [])
    assert without.to_dict() == with_pods.to_dict()
    assert [(w.phase, w.exit_code) for w in without.worker_states] == [("Succeeded", 0), ("Succeeded", 0)]
    running = job_from_objects(make_job(), [], [])
    assert [w.phase for w in running.worker_states] == ["Pending", "Pending"]


def test_a_paddle_job_reads_as_its_kind_says():
    """A PaddleJob keeps suspend and its deadline in runPolicy and succeeds with `Succeeded`."""
    paddlejob = JOB_KINDS["paddlejob"]
    kubeflow = "training.kubeflow.org/replica-index"
    running = [pod(i, state={"running": {}}, index_label=kubeflow) for i in (0, 1)]
    assert job_from_objects(make_paddle_job(), running, [], kind=paddlejob).phase == "Running"
    queued = make_paddle_job()
    queued["spec"]["runPolicy"]["suspend"] = True
    assert job_from_objects(queued, [], [], kind=paddlejob).reason == "Queued"
    done = job_from_objects(condition(make_paddle_job(), "Succeeded"), [], [], kind=paddlejob)
    assert (done.phase, done.finished, done.workers) == ("Succeeded", "2026-01-01T00:05:00Z", 2)
    late = job_from_objects(condition(make_paddle_job(max_runtime_seconds=60), "Failed", "DeadlineExceeded"), [], [],
                            kind=paddlejob)
    assert late.reason == "DeadlineExceeded" and "60 seconds" in late.message


def test_worker_exit_code_is_the_reason():
    job = condition(make_job(), "Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
    pods = [pod(0, "Running", {"running": {}}), pod(1, "Failed", {"terminated": {"exitCode": 3, "reason": "Error"}})]
    result = job_from_objects(job, pods, [])
    assert (result.phase, result.reason) == ("Failed", "WorkerFailed")
    assert result.message == "Worker 1 exited with code 3."
    assert result.worker_states[1].exit_code == 3


def test_oom_killed():
    job = condition(make_job(memory="4Gi"), "Failed", "PodFailurePolicy")
    pods = [pod(0, "Failed", {"terminated": {"exitCode": 137, "reason": "OOMKilled"}})]
    result = job_from_objects(job, pods, [])
    assert result.reason == "OOMKilled" and "4Gi" in result.message and "Worker 0" in result.message


def test_deadline_exceeded():
    job = condition(make_job(max_runtime_seconds=60), "Failed", "DeadlineExceeded")
    result = job_from_objects(job, [], [])
    assert result.reason == "DeadlineExceeded" and "60 seconds" in result.message


def test_unschedulable_gives_the_numbers():
    job = make_job(gpus=16)
    unschedulable = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                      "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."}]
    pods = [pod(0, "Pending", conditions=unschedulable), pod(1, "Pending", conditions=unschedulable)]
    result = job_from_objects(job, pods, [], max_free_gpus=8)
    assert (result.phase, result.reason) == ("Pending", "Unschedulable")
    assert "Needs 16 GPUs per worker; the most free on any node is 8" in result.message
    assert "2 Insufficient nvidia.com/gpu" in result.message
    assert "most free" not in job_from_objects(job, pods, []).message


def test_image_pull_names_the_image():
    job = make_job()
    pods = [pod(0, "Pending", {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}})]
    result = job_from_objects(job, pods, [])
    assert result.reason == "ImagePullBackOff" and "'img'" in result.message


def test_quota_event_becomes_quota_exceeded():
    events = [{"reason": "FailedCreate", "lastTimestamp": "2026-01-01T00:00:02Z",
               "message": 'Error creating: pods "j-0-abc" is forbidden: exceeded quota: compute, requested: '
                          "requests.nvidia.com/gpu=2, used: requests.nvidia.com/gpu=1, limited: requests.nvidia.com/gpu=2"}]
    result = job_from_objects(make_job(), [], events)
    assert result.reason == "QuotaExceeded"
    assert result.message == "Needs 2 GPUs; your quota is 2 and 1 are in use."


def test_cancelled_wins():
    job = make_job()
    job["metadata"]["annotations"]["paddlecloud.io/cancelled"] = "2026-01-01T00:03:00Z"
    result = job_from_objects(job, [pod(0, "Running", {"running": {}})], [])
    assert (result.phase, result.finished) == ("Cancelled", "2026-01-01T00:03:00Z")


@pytest.mark.parametrize("kind", ["job", "paddlejob"])
def test_a_job_stopped_under_kueue_reads_as_we_stopped_it_not_as_its_deadline(kind):
    """Under Kueue a cancel (or a stop for refused pods) also sets a 1-second deadline, so
    Kubernetes ends the job DeadlineExceeded: it must still read Cancelled (or Failed with our
    message), its spec keep the recorded max runtime, and nothing speak of a 1-second limit."""
    make = make_job if kind == "job" else make_paddle_job
    jobkind = JOB_KINDS[kind]
    for annotation, value, phase, message in (
            ("paddlecloud.io/cancelled", "2026-01-01T00:03:00Z", "Cancelled", "The job was cancelled."),
            ("paddlecloud.io/failed", "Worker pods are refused: x", "Failed", "Worker pods are refused: x")):
        job = condition(make(max_runtime_seconds=3600), jobkind.failed_condition, "DeadlineExceeded")
        job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "q"
        policy = job["spec"] if kind == "job" else job["spec"]["runPolicy"]
        policy.update(suspend=False, activeDeadlineSeconds=1)
        job["metadata"]["annotations"][annotation] = value
        result = job_from_objects(job, [], [], kind=jobkind)
        assert (result.phase, result.message) == (phase, message)
        assert result.spec["max_runtime_seconds"] == 3600 and "1 second" not in json.dumps(result.to_dict())


def test_newest_pod_of_a_retried_worker_counts():
    job = make_job(workers=1)
    old = pod(0, "Failed", {"terminated": {"exitCode": 1}}, created="2026-01-01T00:00:01Z")
    new = pod(0, "Running", {"running": {}}, created="2026-01-01T00:01:00Z")
    assert job_from_objects(job, [old, new], []).phase == "Running"


def test_max_free_gpus():
    nodes = [{"metadata": {"name": n}, "spec": {}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}} for n in "ab"]
    pods = [{"spec": {"nodeName": "a", "containers": [{"resources": {"requests": {"nvidia.com/gpu": "6"}}}]},
             "status": {"phase": "Running"}},
            {"spec": {"nodeName": "b", "containers": [{"resources": {"requests": {"nvidia.com/gpu": "3"}}}]},
             "status": {"phase": "Running"}},
            {"spec": {"nodeName": "b", "containers": [{"resources": {"requests": {"nvidia.com/gpu": "5"}}}]},
             "status": {"phase": "Succeeded"}}]
    assert max_free_gpus(nodes, pods, "nvidia.com/gpu") == 5


def check_resource_quotas(spec, quotas):
    for quota in quotas:
        limits, in_use = resource_quota_terms(quota)
        check_fits(JobUsage.of_spec(spec), limits, [], in_use)


def quota(hard, used):
    return {"status": {"hard": hard, "used": used}}


def test_preflight_refuses_with_numbers():
    spec = JobSpec(command=["x"], workers=2, gpus_per_worker=2)
    with pytest.raises(QuotaExceeded) as info:
        check_resource_quotas(spec, [quota({"requests.nvidia.com/gpu": "2"}, {"requests.nvidia.com/gpu": "0"})])
    assert info.value.message == "Needs 4 GPUs; your quota is 2 and 0 are in use."
    check_resource_quotas(spec, [quota({"requests.nvidia.com/gpu": "4"}, {"requests.nvidia.com/gpu": "0"})])


def test_preflight_counts_usage_memory_and_pods():
    spec = JobSpec(command=["x"], workers=2, memory="8Gi")
    with pytest.raises(QuotaExceeded) as info:
        check_resource_quotas(spec, [quota({"requests.memory": "20Gi"}, {"requests.memory": "6Gi"})])
    assert info.value.message == "Needs 16Gi memory; your quota is 20Gi and 6Gi is in use."
    with pytest.raises(QuotaExceeded):
        check_resource_quotas(spec, [quota({"pods": "3"}, {"pods": "2"})])
    check_resource_quotas(spec, [quota({"pods": "4"}, {"pods": "2"})])


def failed_create(message):
    return {"reason": "FailedCreate", "message": message, "lastTimestamp": "2026-01-01T00:00:02Z",
            "involvedObject": {"name": "j"}}


@pytest.mark.parametrize("message", [
    'pods "j-0-x" is forbidden: maximum cpu usage per Container is 1, but limit is 2',
    'pods "j-0-x" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false',
    'admission webhook "policy.example.com" denied the request: pods "j-0-x" is forbidden: no GPUs here',
    'Pod "j-0-x" is invalid: spec.containers[0].image: Invalid value',
])
def test_pods_refused_for_good_fail_the_job_with_the_reason_not_pending_forever(message):
    job = job_from_objects(make_job(), [], [failed_create(message)])
    assert (job.phase, job.reason) == ("Failed", "WorkerFailed") and job.done
    assert job.message.startswith("Kubernetes refused to create the workers: ") and message.rstrip(".") in job.message


@pytest.mark.parametrize("message", [
    'pods "j-0-x" is forbidden: exceeded quota: q, requested: requests.cpu=2, used: requests.cpu=0, limited: '
    'requests.cpu=1',
    'pods "j-0-x" is forbidden: error looking up service account ns/default: serviceaccount "default" not found',
])
def test_refusals_that_pass_leave_the_job_pending(message):
    assert job_from_objects(make_job(), [], [failed_create(message)]).phase == "Pending"


def test_a_job_we_stopped_for_refused_pods_stays_failed_once_its_events_are_gone():
    job = make_job()
    job["metadata"]["annotations"]["paddlecloud.io/failed"] = "Kubernetes refused to create the workers: no."
    job["spec"]["suspend"] = True
    state = job_from_objects(job, [], [])
    assert (state.phase, state.reason, state.message) == ("Failed", "WorkerFailed",
                                                          "Kubernetes refused to create the workers: no.")


def killing(pod_name, at):
    return {"reason": "Killing", "message": "Stopping container paddle", "firstTimestamp": at,
            "involvedObject": {"kind": "Pod", "name": pod_name, "uid": "gone-" + pod_name}}


def deleted_by_job_controller(pod_name, at):
    return {"reason": "SuccessfulDelete", "message": f"Deleted pod: {pod_name}", "firstTimestamp": at,
            "involvedObject": {"kind": "Job", "name": "j"}}


def test_the_worker_that_failed_first_is_named_not_the_ones_stopped_because_of_it():
    job = condition(make_job(), "Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
    first = pod(1, "Failed", {"terminated": {"exitCode": 2, "reason": "Error", "finishedAt": "2026-01-01T00:04:00Z"}})
    stopped = pod(0, "Failed", {"terminated": {"exitCode": 143, "reason": "Error",
                                               "finishedAt": "2026-01-01T00:04:01Z"}})
    events = [deleted_by_job_controller("j-0-x", "2026-01-01T00:04:00Z")]
    assert job_from_objects(job, [stopped, first], events).message == "Worker 1 exited with code 2."


def test_a_worker_whose_pod_was_deleted_is_named_while_its_pod_lingers_and_after_it_is_gone():
    job = condition(make_job(), "Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
    lingering = pod(1, "Failed", {"terminated": {"exitCode": 143, "reason": "Error"}})
    lingering["metadata"]["deletionTimestamp"] = "2026-01-01T00:04:00Z"
    result = job_from_objects(job, [lingering], [])
    assert (result.reason, result.message) == (
        "WorkerFailed", "Worker 1 was stopped before it finished: its pod was deleted (exit code 143).")
    # Both pods gone: the kubelet's first "Killing" that the Job controller did not cause.
    events = [killing("j-1-abcde", "2026-01-01T00:04:00Z"), killing("j-0-fghij", "2026-01-01T00:04:00Z"),
              deleted_by_job_controller("j-0-fghij", "2026-01-01T00:04:00Z")]
    result = job_from_objects(job, [], related_events("j", [], events))
    assert (result.reason, result.message) == (
        "WorkerFailed", "Worker 1 was stopped before it finished: its pod was deleted.")
    # Nothing known: Kubernetes' own words.
    assert job_from_objects(job, [], []).message == "Job has reached the specified backoff limit"


def test_pod_names_of_the_job_give_the_worker_and_others_none():
    assert worker_of_pod_name("j", "j-1-abcde") == 1 and worker_of_pod_name("j", "j-worker-3") == 3
    for other in ("j-2-0-abcde", "jx-1-abcde", "j-1", "j-notebook"):
        assert worker_of_pod_name("j", other) is None, other


def test_the_init_container_that_unpacks_the_code_counts_for_pulls_and_failures():
    job = make_job()
    pulling = pod(0, "Pending")
    pulling["spec"] = {"nodeName": "n"}
    pulling["status"]["initContainerStatuses"] = [{"name": "prepare", "state": {"waiting": {
        "reason": "ImagePullBackOff", "message": "Back-off pulling image \"img\""}}}]
    pulling["status"]["containerStatuses"] = [{"name": "paddle", "state": {"waiting": {"reason": "PodInitializing"}}}]
    result = job_from_objects(job, [pulling], [])
    assert (result.phase, result.reason) == ("Pending", "ImagePullBackOff")
    assert result.message.startswith("Cannot pull image 'img' for worker 0: Back-off pulling image")
    assert result.progress[0].step == "Pulling"
    failed = pod(1, "Failed")
    failed["status"]["initContainerStatuses"] = [{"name": "prepare", "state": {"terminated": {
        "exitCode": 1, "reason": "Error", "message": "no space left on device"}}}]
    result = job_from_objects(condition(make_job(), "Failed", "BackoffLimitExceeded"), [failed], [])
    assert result.message == "Worker 1 exited with code 1. no space left on device"


def ended(index, code, created, finished, conditions=None, deleted=False):
    failed = pod(index, "Failed", {"terminated": {"exitCode": code, "finishedAt": finished}}, conditions, created)
    if deleted:
        failed["metadata"]["deletionTimestamp"] = finished
    return failed


def test_restarts_are_counted_from_the_replaced_pods_and_the_cause_is_the_lost_worker():
    """Worker 1's trainer was killed (247 from Paddle's launcher); worker 0 then stopped for the
    lost peer (paddle_ext.worker's code, 200): one restart of both, caused by worker 1."""
    job = make_job(max_restarts=2)
    pods = [ended(0, 200, "2026-01-01T00:00:01Z", "2026-01-01T00:02:05Z"),
            ended(1, 247, "2026-01-01T00:00:01Z", "2026-01-01T00:02:00Z"),
            pod(0, state={"running": {}}, created="2026-01-01T00:02:10Z"),
            pod(1, state={"running": {}}, created="2026-01-01T00:02:11Z")]
    result = job_from_objects(job, pods, [])
    assert (result.phase, result.restarts, result.attempt) == ("Running", 1, 2)
    assert result.last_restart_reason == "worker 1 was killed by signal 9"
    assert result.to_dict()["max_restarts"] == 2 and result.attempt_line() == (
        "attempt 2 of 3: worker 1 was killed by signal 9 at 00:02 UTC")  # when the cause's container ended
    assert result.last_restart_at == "2026-01-01T00:02:00Z" == result.to_dict()["last_restart_at"]
    assert [w.phase for w in result.worker_states] == ["Running", "Running"]  # the newest pods


def test_an_evicted_worker_is_said_so_and_a_job_without_old_pods_has_no_restarts():
    disrupted = [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]
    pods = [ended(1, 143, "2026-01-01T00:00:01Z", "2026-01-01T00:01:00Z", disrupted),
            pod(0, state={"running": {}}), pod(1, state={"running": {}}, created="2026-01-01T00:01:30Z")]
    result = job_from_objects(make_job(max_restarts=1), pods, [])
    assert (result.restarts, result.last_restart_reason) == (1, "worker 1 was evicted or preempted")
    plain = job_from_objects(make_job(), [pod(0, state={"running": {}}), pod(1, state={"running": {}})], [])
    assert (plain.restarts, plain.last_restart_reason, plain.to_dict()["max_restarts"]) == (0, "", 0)


def test_a_job_out_of_restarts_fails_with_the_count():
    job = condition(make_job(max_restarts=1), "Failed", "FailedIndexes", "Job has failed indexes")
    pods = [ended(1, 137, "2026-01-01T00:00:01Z", "2026-01-01T00:01:00Z"),
            ended(0, 200, "2026-01-01T00:00:01Z", "2026-01-01T00:01:01Z"),
            ended(1, 137, "2026-01-01T00:01:10Z", "2026-01-01T00:03:00Z"),
            ended(0, 200, "2026-01-01T00:01:10Z", "2026-01-01T00:03:01Z")]
    result = job_from_objects(job, pods, [])
    assert (result.phase, result.reason, result.restarts) == ("Failed", "WorkerFailed", 1)
    assert result.message == "Worker 1 exited with code 137. Restarted 1 of at most 1 times."


@pytest.mark.parametrize("reason", ["MaxFailedIndexesExceeded", "FailedIndexes"])
def test_a_job_whose_deleted_worker_ran_out_of_restarts_fails_with_the_count_though_the_pods_are_gone(reason):
    """max_restarts 1, worker 1's pod deleted in both attempts: what is left when the job has
    failed is worker 0's first pod (stopped for the lost peer); both of worker 1's pods and
    worker 0's second (deleted by the Job controller as the job failed) are gone. The count
    is the Job controller's (either of its reasons for an index out of restarts: all of them
    were spent), the cause the kubelet's Killing events (the real-node case:
    cluster/test_restarts_k8s.py)."""
    job = condition(make_job(max_restarts=1), "Failed", reason, "Job has failed indexes")
    pods = [ended(0, 200, "2026-01-01T00:00:01Z", "2026-01-01T00:02:05Z")]
    events = [killing("j-1-aaaaa", "2026-01-01T00:02:00Z"), killing("j-1-bbbbb", "2026-01-01T00:04:00Z"),
              killing("j-0-ccccc", "2026-01-01T00:04:01Z"), deleted_by_job_controller("j-0-ccccc", "2026-01-01T00:04:01Z")]
    result = job_from_objects(job, pods, related_events("j", pods, events))
    assert (result.phase, result.reason, result.restarts, result.attempt) == ("Failed", "WorkerFailed", 1, 2)
    assert result.message == ("Worker 1 was stopped before it finished: its pod was deleted. "
                              "Restarted 1 of at most 1 times.")
    assert result.last_restart_reason == "worker 1 was stopped: its pod was deleted"
    # Without the events, what is known: worker 0 stopped for a lost peer; still 1 restart.
    alone = job_from_objects(job, pods, [])
    assert (alone.restarts, alone.message) == (1, "Worker 0 exited with code 200. Restarted 1 of at most 1 times.")


def test_a_deleted_worker_pod_that_is_gone_is_named_by_the_kubelets_killing_event():
    """Worker 1's pod was deleted and is gone; worker 0's old pod stopped for the lost peer."""
    pods = [ended(0, 200, "2026-01-01T00:00:01Z", "2026-01-01T00:02:05Z"),
            pod(0, state={"running": {}}, created="2026-01-01T00:02:10Z"),
            pod(1, state={"running": {}}, created="2026-01-01T00:02:11Z")]
    killing = {"reason": "Killing", "message": "Stopping container paddle", "firstTimestamp": "2026-01-01T00:02:00Z",
               "involvedObject": {"kind": "Pod", "name": "j-1-abcde"}}
    result = job_from_objects(make_job(max_restarts=2), pods, [killing])
    assert (result.restarts, result.last_restart_reason) == (1, "worker 1 was stopped: its pod was deleted")
    assert result.last_restart_at == "2026-01-01T00:02:00Z"  # the event's time: the pod that said it is gone
    assert job_from_objects(make_job(max_restarts=2), pods, []).last_restart_reason == (
        "worker 0 stopped because a peer worker was lost")  # without the event: what is known


def test_the_users_own_error_fails_a_restartable_job_at_once_and_says_so():
    job = condition(make_job(max_restarts=2), "Failed", "PodFailurePolicy",
                    "Container paddle for pod ns/j-1-abcde failed with exit code 1 matching FailJob rule at index 1")
    pods = [pod(0, "Succeeded", {"terminated": {"exitCode": 0}}),
            ended(1, 1, "2026-01-01T00:00:01Z", "2026-01-01T00:01:00Z")]
    result = job_from_objects(job, pods, [])
    assert (result.phase, result.reason, result.restarts) == ("Failed", "WorkerFailed", 0)
    assert result.message == ("Worker 1 exited with code 1. Not restarted: an error in the job's own code fails "
                              "it at once.")
