"""Many jobs' views at once (pure): one namespace's jobs with their own pods and refusals
(job_views, which KubernetesBackend.list reads through), and cluster-wide lists grouped by
namespace (by_namespace, views_by_namespace) read as each namespace's own listing reads them."""

from __future__ import annotations

import json

from paddle_ext.backends.kubernetes_status import (by_namespace, job_views, open_job_pods, open_jobs, pods_by_job,
                                                   refusals_needed, views_by_namespace)
from paddle_ext.constants import JOB_LABEL, SPEC_ANNOTATION
from paddle_ext.jobs import Phase
from paddle_ext.jobkinds import JOB_KINDS, job_objects
from paddle_ext.manifests import ManifestSettings
from paddle_ext.spec import JobSpec

KIND = JOB_KINDS["job"]
REFUSED = 'pods "x" is forbidden: maximum cpu usage per Container is 1, but limit is 2'


def job(name: str, namespace: str = "ns-a", created: str = "2026-01-01T00:00:00Z", status: str = "") -> dict:
    spec = JobSpec(name=name, command=["python", "t.py"], workers=2)
    obj = job_objects(spec, ManifestSettings(namespace=namespace, image="img"),
                      {SPEC_ANNOTATION: json.dumps(spec.to_dict())})[-1]
    obj["metadata"]["creationTimestamp"] = created
    obj["status"] = {"conditions": [{"type": status, "status": "True", "lastTransitionTime": created}]} if status else {}
    return obj


def pod(job_name: str, index: int, namespace: str = "ns-a", phase: str = "Running") -> dict:
    return {"metadata": {"name": f"{job_name}-{index}", "namespace": namespace, "creationTimestamp": "2026-01-01T00:00:01Z",
                         "labels": {JOB_LABEL: job_name, "batch.kubernetes.io/job-completion-index": str(index)}},
            "status": {"phase": phase, "containerStatuses": [{"name": "paddle", "state": {"running": {}}}]}}


def refusal(job_name: str, namespace: str = "ns-a") -> dict:
    return {"metadata": {"namespace": namespace}, "reason": "FailedCreate", "message": REFUSED,
            "involvedObject": {"name": job_name, "namespace": namespace}}


def test_by_namespace_keeps_only_the_namespaces_asked_for_each_one_a_key():
    objects = [pod("a", 0, "ns-a"), pod("b", 0, "ns-b"), pod("c", 0, "kube-system"), {"metadata": {}}]
    grouped = by_namespace(objects, ["ns-a", "ns-b", "ns-empty"])
    assert {ns: [p["metadata"]["name"] for p in pods] for ns, pods in grouped.items()} == {
        "ns-a": ["a-0"], "ns-b": ["b-0"], "ns-empty": []}


def test_pods_by_job_groups_by_the_job_label():
    unlabelled = {"metadata": {"name": "loose"}}
    grouped = pods_by_job([pod("a", 0), pod("b", 0), pod("a", 1), unlabelled])
    assert {name: [p["metadata"]["name"] for p in pods] for name, pods in grouped.items()} == {
        "a": ["a-0", "a-1"], "b": ["b-0"], "": ["loose"]}


def test_only_the_pods_of_jobs_not_succeeded_are_kept():
    jobs = [job("done", status="Complete"), job("running"), job("failed", status="Failed")]
    assert open_jobs(KIND, jobs) == ["running", "failed"]
    pods = [pod("done", 0), pod("running", 0), pod("failed", 0), pod("elsewhere", 0)]
    assert [p["metadata"]["name"] for p in open_job_pods(KIND, jobs, pods)] == ["running-0", "failed-0"]


def test_refusals_are_needed_only_while_a_job_that_has_not_ended_has_no_pods():
    assert refusals_needed(KIND, [job("a"), job("b")], [pod("a", 0)])
    assert not refusals_needed(KIND, [job("a"), job("b", status="Failed")], [pod("a", 0)])
    assert not refusals_needed(KIND, [], [])
    queued = job("queued")
    queued["spec"]["suspend"] = True  # waiting in Kueue's queue: no pods by design
    assert not refusals_needed(KIND, [job("a"), queued], [pod("a", 0)])
    # ... and its view is the same either way: a queued job reads no refusal
    (_, with_refusal), = job_views([queued], [], [refusal("queued")], kind=KIND)
    (_, without), = job_views([queued], [], [], kind=KIND)
    assert with_refusal == without and with_refusal.phase == Phase.QUEUED


def test_job_views_give_each_job_its_own_pods_and_refusals_newest_first():
    jobs = [job("old", created="2026-01-01T00:00:00Z"), job("new", created="2026-01-02T00:00:00Z"),
            job("refused", created="2026-01-01T12:00:00Z")]
    views = job_views(jobs, [pod("old", 0), pod("old", 1), pod("new", 0)], [refusal("refused")], kind=KIND)
    assert [(obj["metadata"]["name"], view.name) for obj, view in views] == [
        ("new", "new"), ("refused", "refused"), ("old", "old")]
    by_name = {view.name: view for _, view in views}
    assert by_name["old"].phase == "Running"
    assert by_name["new"].phase == "Pending"  # one of its two workers has no pod yet
    assert by_name["refused"].phase == "Failed" and REFUSED in by_name["refused"].message


def test_views_by_namespace_read_each_namespace_as_its_own_listing_does():
    """The same job name in two namespaces; a succeeded job's pods and a refusal in a namespace
    where every job has pods are not read by a listing of that namespace, so not here either."""
    namespaces = ["ns-a", "ns-b", "ns-c"]
    jobs = [job("train", "ns-a", status="Complete"), job("train", "ns-b"), job("queued", "ns-b"),
            job("stray", "kube-system")]
    pods = [pod("train", 0, "ns-a", "Succeeded"), pod("train", 0, "ns-b"), pod("train", 1, "ns-b"),
            pod("stray", 0, "kube-system")]
    refusals = [refusal("queued", "ns-b"), refusal("train", "ns-a")]
    views = views_by_namespace(by_namespace(jobs, namespaces), by_namespace(pods, namespaces),
                               by_namespace(refusals, namespaces), kind=KIND)
    assert set(views) == set(namespaces) and views["ns-c"] == []
    for namespace in namespaces:  # what KubernetesBackend.list_views reads in the namespace alone
        own = [j for j in jobs if j["metadata"]["namespace"] == namespace]
        own_pods = [p for p in pods if p["metadata"]["namespace"] == namespace
                    and p["metadata"]["labels"][JOB_LABEL] in open_jobs(KIND, own)]
        own_refusals = [r for r in refusals if r["metadata"]["namespace"] == namespace]
        alone = job_views(own, own_pods, own_refusals if refusals_needed(KIND, own, own_pods) else [], kind=KIND)
        assert [v.to_dict() for v in views[namespace]] == [view.to_dict() for _, view in alone]
    assert [(v.name, v.phase) for v in views["ns-a"]] == [("train", "Succeeded")]
    assert {v.name: v.phase for v in views["ns-b"]} == {"train": "Running", "queued": "Failed"}
