"""A job's view, usage and GPU-hours come from what Kubernetes enforces (the job object and
its pods), never from the user-writable `paddlecloud.io/spec` annotation: hostile
annotations (huge, negative, wrong types, not JSON, nested past the parser) raise
nothing, cost bounded work, and change no number the quota service or overview shows."""

from __future__ import annotations

import copy
import datetime
import json
from decimal import Decimal

import pytest

from paddle_ext.backends.kubernetes_status import MAX_VIEWED_WORKERS, SPEC_PROBLEM_KEY, job_from_objects
from paddle_ext.capacity import pod_requests
from paddle_ext.constants import CANCELLED_ANNOTATION, CODE_ANNOTATION, OUTPUTS_ANNOTATION, SPEC_ANNOTATION
from paddle_ext.hub.overview import overview
from paddle_ext.jobkinds import JOB_KINDS, job_objects
from paddle_ext.manifests import ManifestSettings
from paddle_ext.quota.model import JobUsage, job_record, report, resolve, QuotaConfig
from paddle_ext.spec import JobSpec

NOW = datetime.datetime(2026, 1, 10, 12, 0, tzinfo=datetime.timezone.utc)
HONEST = JobSpec(name="j", command=["python", "t.py"], workers=2, gpus_per_worker=1, cpu="2", memory="4Gi")

HOSTILE = {
    "huge workers": json.dumps({**HONEST.to_dict(), "workers": 200_000}),
    "astronomical workers": json.dumps({**HONEST.to_dict(), "workers": 10 ** 30}),
    "workers as text": json.dumps({**HONEST.to_dict(), "workers": "many"}),
    "workers as float": json.dumps({**HONEST.to_dict(), "workers": 2.5}),
    "workers as bool": json.dumps({**HONEST.to_dict(), "workers": True}),
    "negative gpus": json.dumps({**HONEST.to_dict(), "gpus_per_worker": -50}),
    "gpus as list": json.dumps({**HONEST.to_dict(), "gpus_per_worker": [1, 2]}),
    "cpu not a quantity": json.dumps({**HONEST.to_dict(), "cpu": "lots"}),
    "cpu huge": json.dumps({**HONEST.to_dict(), "cpu": "1e30"}),
    "memory negative": json.dumps({**HONEST.to_dict(), "memory": "-4Gi"}),
    "memory as object": json.dumps({**HONEST.to_dict(), "memory": {"a": 1}}),
    "command as text": json.dumps({**HONEST.to_dict(), "command": "rm -rf /"}),
    "env not a mapping": json.dumps({**HONEST.to_dict(), "env": [1, 2, 3]}),
    "many unknown keys": json.dumps({f"k{i}": i for i in range(5000)}),
    "not JSON": "{workers: 200000",
    "a list": json.dumps([1, 2, 3]),
    "a number": "200000",
    "null": "null",
    "empty": "",
    "nested arrays": "[" * 200_000 + "]" * 200_000,
    "nested objects": '{"a":' * 100_000 + "1" + "}" * 100_000,
    "nested inside a field": json.dumps({**HONEST.to_dict(), "env": {"A": "x"}}).replace(
        '"x"', '{"b":' * 50_000 + "1" + "}" * 50_000),
}


def make_job(annotation: str | None, kind: str = "job") -> dict:
    settings = ManifestSettings(namespace="ns", image="img", kind=kind)
    annotations = {SPEC_ANNOTATION: json.dumps(HONEST.to_dict())}
    job = job_objects(HONEST, settings, annotations)[-1]
    if annotation is None:
        del job["metadata"]["annotations"][SPEC_ANNOTATION]
    else:
        job["metadata"]["annotations"][SPEC_ANNOTATION] = annotation
    job["metadata"]["creationTimestamp"] = "2026-01-10T10:00:00Z"
    job["status"] = {}
    return job


def worker_pod(job: dict, index: int, kind: str = "job", phase: str = "Running") -> dict:
    """A worker pod as Kubernetes makes it from the job's template."""
    template = JOB_KINDS[kind].pod_spec(job)
    label = JOB_KINDS[kind].index_label
    return {"metadata": {"name": f"j-{index}", "creationTimestamp": "2026-01-10T10:00:01Z",
                         "labels": {label: str(index), "paddlecloud.io/job": "j"}},
            "spec": copy.deepcopy(template),
            "status": {"phase": phase, "containerStatuses": [{"name": "paddle", "state": {"running": {}}}]}}


def pods_usage(pods: list[dict]) -> JobUsage:
    held = [pod_requests(pod) for pod in pods]
    return JobUsage("j", gpus=Decimal(sum(h.gpus for h in held)), cpu=sum((h.cpu for h in held), Decimal(0)),
                    memory=sum((h.memory for h in held), Decimal(0)), pods=Decimal(len(pods)))


@pytest.mark.parametrize("kind", list(JOB_KINDS))
@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_spec_annotation_changes_no_number_and_raises_nothing(case, kind):
    job = make_job(HOSTILE[case], kind)
    pods = [worker_pod(job, i, kind) for i in (0, 1)]
    view = job_from_objects(job, pods, [], kind=JOB_KINDS[kind])
    assert view.workers == 2 and len(view.worker_states) == 2 and len(view.progress) == 2
    assert view.phase == "Running"
    usage = JobUsage.of(view.name, view.spec)
    assert usage == pods_usage(pods) == JobUsage("j", Decimal(2), Decimal(4), Decimal(8 * 2 ** 30), Decimal(2))
    record = job_record(view)
    assert record.gpus == 2
    # The view says what was wrong with the annotation (nothing, for an empty one)
    assert bool(view.spec.get(SPEC_PROBLEM_KEY)) == (case != "empty")
    json.dumps(view.to_dict())  # `status --json` can print it


def test_an_honest_job_reads_as_submitted_with_no_problem_noted():
    view = job_from_objects(make_job(json.dumps(HONEST.to_dict())), [], [])
    assert view.spec == HONEST.to_dict()


def test_without_an_annotation_the_job_object_says_everything():
    view = job_from_objects(make_job(None), [], [])
    assert {k: view.spec[k] for k in ("workers", "gpus_per_worker", "cpu", "memory")} == {
        "workers": 2, "gpus_per_worker": 1, "cpu": "2", "memory": "4Gi"}
    assert SPEC_PROBLEM_KEY not in view.spec


def test_a_job_object_with_a_vast_worker_count_is_viewed_in_bounded_work():
    """A user's own Job (NonIndexed: any int32 completions) lists at most MAX_VIEWED_WORKERS
    states; its count and usage still say what the object asks for."""
    job = make_job(json.dumps(HONEST.to_dict()))
    job["spec"]["completions"] = 2 ** 31 - 1
    job["spec"]["parallelism"] = 3
    view = job_from_objects(job, [], [])
    assert view.workers == 2 ** 31 - 1
    assert len(view.worker_states) == len(view.progress) == MAX_VIEWED_WORKERS
    assert JobUsage.of("j", view.spec).pods == 3  # what runs at once: parallelism
    del job["spec"]["parallelism"]
    assert JobUsage.of("j", job_from_objects(job, [], []).spec).gpus == 2 ** 31 - 1


def test_a_pod_whose_admission_added_requests_counts_what_it_holds():
    """The live pod's requests (a LimitRange default applied) win over the template's."""
    job = make_job(json.dumps({**HONEST.to_dict(), "gpus_per_worker": 0}))
    pods = [worker_pod(job, i) for i in (0, 1)]
    for pod in pods:
        pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "3"
    view = job_from_objects(job, pods, [])
    assert view.spec["cpu"] == "3" and JobUsage.of("j", view.spec) == pods_usage(pods)


def test_gpu_limits_without_requests_count_as_requests():
    """Kubernetes requests a resource at its limit when only the limit is set."""
    job = make_job(None)
    del job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
    view = job_from_objects(job, [], [])
    assert (view.spec["gpus_per_worker"], view.spec["cpu"]) == (1, "2")


@pytest.mark.parametrize("label", ["abc", "-1", "9" * 40, ""])
def test_a_pod_with_a_bad_index_label_is_not_a_worker(label):
    job = make_job(None)
    pod = worker_pod(job, 0)
    pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] = label
    view = job_from_objects(job, [pod], [])
    assert [w.phase for w in view.worker_states] == ["Pending", "Pending"]


@pytest.mark.parametrize("key", [CODE_ANNOTATION, OUTPUTS_ANNOTATION])
@pytest.mark.parametrize("text", ["not json", "[" * 100_000, "[]", "7"])
def test_bad_code_and_outputs_annotations_read_as_absent(key, text):
    job = make_job(None)
    job["metadata"]["annotations"][key] = text
    view = job_from_objects(job, [], [])
    assert getattr(view, "code" if key == CODE_ANNOTATION else "outputs") is None


@pytest.mark.parametrize("spec", [
    {"workers": "x"}, {"workers": -3}, {"workers": 10 ** 40}, {"gpus_per_worker": -50}, {"cpu": -1},
    {"cpu": "abc"}, {"memory": ["1Gi"]}, {"memory": "-1Gi"}, {"workers": None, "cpu": None}])
def test_job_usage_of_a_bad_spec_is_nothing_of_that_field(spec):
    usage = JobUsage.of("j", spec)
    assert usage.gpus >= 0 and usage.cpu >= 0 and usage.memory >= 0 and usage.pods >= 0


def test_the_overview_and_a_users_report_answer_with_hostile_jobs():
    views = []
    for text in HOSTILE.values():
        job = make_job(text)
        job["metadata"]["name"] = f"j{len(views)}"
        views.append(job_from_objects(job, [worker_pod(job, i) for i in (0, 1)], []))
    cancelled = make_job(HOSTILE["negative gpus"])
    cancelled["metadata"]["annotations"][CANCELLED_ANNOTATION] = "not a time"
    views.append(job_from_objects(cancelled, [], []))
    document = overview({"source": "kubernetes", "nodes": [], "total": {}}, {"mallory": ([], views)}, NOW)
    running = document["jobs"]
    assert len(running) == len(HOSTILE) and all(row["gpus"] == 2 and row["workers"] == 2 for row in running)
    hours = document["gpu_hours"]["users"][0]
    assert hours["7d"] == pytest.approx((len(HOSTILE) + 1) * 2 * 2)  # 2 GPUs for 2 hours each
    made = report("mallory", resolve(QuotaConfig(), "mallory", []), views, NOW)
    assert made.gpu_hours["7d"] >= 0 and made.used["gpus"] == 2 * len(HOSTILE)
