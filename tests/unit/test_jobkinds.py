"""The job kinds: each entry of JOB_KINDS reads its own objects back, and everything that
names kinds (the backend's setting, the notebook's rules, the chart's enum and
ClusterRoles) agrees with the registry. The chart's files are read as YAML, no helm."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from mergepatch import merge_patch
from paddle_ext import tenancy
from paddle_ext.backends.kubernetes import KubernetesBackend
from paddle_ext.constants import (CANCELLED_ANNOTATION, CONTAINER_NAME, DEFAULT_JOB_KIND, FAILED_ANNOTATION, KIND_LABEL,
                                  KUEUE_QUEUE_LABEL)
from paddle_ext.jobkinds import HUB_JOB_VERBS, JOB_KINDS, NOTEBOOK_JOB_VERBS, job_objects, queued_by_kueue
from paddle_ext.manifests import ManifestSettings
from paddle_ext.spec import JobSpec

CHART = Path(__file__).resolve().parents[2] / "helm" / "paddlecloud-hub"
KINDS = sorted(JOB_KINDS)


def cluster_role_rules(template: str) -> list[dict]:
    """The rules of the first document of a ClusterRole template, read without helm: template
    directives dropped (so every conditional rule counts), inline values made a placeholder."""
    text = (CHART / "templates" / template).read_text().split("\n---")[0]
    lines = [line for line in text[text.index("\nrules:"):].splitlines() if not line.strip().startswith("{{")]
    return yaml.safe_load(re.sub(r"\{\{.*?\}\}", "TEMPLATE", "\n".join(lines)))["rules"]


def build(kind: str, **settings) -> dict:
    spec = JobSpec(name="j", command=["python", "t.py"], workers=3, max_runtime_seconds=600)
    return job_objects(spec, ManifestSettings(namespace="ns", image="img", kind=kind, **settings))[-1]


def test_the_default_kind_is_a_kind():
    assert DEFAULT_JOB_KIND in JOB_KINDS and ManifestSettings(namespace="ns", image="i").kind == DEFAULT_JOB_KIND


@pytest.mark.parametrize("name", KINDS)
def test_a_kind_reads_its_own_objects(name):
    kind = JOB_KINDS[name]
    job = build(name)
    assert job["apiVersion"] == kind.api_version and job["metadata"]["labels"][KIND_LABEL] == name
    assert kind.workers(job) == 3 and kind.deadline_seconds(job) == 600
    assert kind.pod_spec(job)["containers"][0]["name"] == CONTAINER_NAME
    assert not kind.is_suspended(job) and kind.is_suspended(build(name, queue_name="q"))
    assert not kind.has_finished(job)


@pytest.mark.parametrize("name", KINDS)
def test_a_kinds_suspend_patch_suspends_its_object(name):
    kind = JOB_KINDS[name]
    cancelled = merge_patch(build(name), kind.suspend_patch("2026-01-01T00:00:00Z"))
    failed = merge_patch(build(name), kind.fail_patch("refused"))
    assert kind.is_suspended(cancelled) and kind.is_suspended(failed)
    assert kind.workers(cancelled) == 3  # the rest of the spec stays


@pytest.mark.parametrize("name", KINDS)
def test_a_kinds_stop_patch_under_kueue_also_sets_a_one_second_deadline(name):
    """Kueue resumes a suspended job whose Workload is admitted, so under Kueue suspend alone
    does not stop it: the 1-second deadline makes the job's own controller end it. Without
    Kueue the job's deadline is left alone (suspend is enough)."""
    kind = JOB_KINDS[name]
    queued = build(name, queue_name="q")
    assert queued_by_kueue(queued) and not queued_by_kueue(build(name))
    for patch, annotation in ((kind.suspend_patch("2026-01-01T00:00:00Z", True), CANCELLED_ANNOTATION),
                              (kind.fail_patch("refused", True), FAILED_ANNOTATION),
                              (kind.stop_patch(CANCELLED_ANNOTATION, "t", queued_by_kueue=True), CANCELLED_ANNOTATION)):
        stopped = merge_patch(queued, patch)
        assert kind.is_suspended(stopped) and kind.deadline_seconds(stopped) == 1
        assert annotation in stopped["metadata"]["annotations"] and kind.workers(stopped) == 3
        assert stopped["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "q"
    plain = merge_patch(build(name), kind.stop_patch(CANCELLED_ANNOTATION, "t", queued_by_kueue=False))
    assert kind.is_suspended(plain) and kind.deadline_seconds(plain) == 600


@pytest.mark.parametrize("name", KINDS)
def test_a_kind_reads_success_and_failure_from_its_own_conditions(name):
    kind = JOB_KINDS[name]

    def with_condition(type_):
        return {**build(name), "status": {"conditions": [{"type": type_, "status": "True"}]}}

    assert kind.has_succeeded(with_condition(kind.succeeded_condition)) and kind.has_finished(
        with_condition(kind.succeeded_condition))
    assert kind.has_failed(with_condition(kind.failed_condition)) and kind.has_finished(
        with_condition(kind.failed_condition))
    assert not kind.has_finished({**build(name), "status": {"conditions": [
        {"type": kind.succeeded_condition, "status": "False"}]}})


def test_the_backend_setting_offers_every_kind_and_says_what_each_is():
    trait = KubernetesBackend.class_traits()["job_kind"]
    assert list(trait.values) == list(JOB_KINDS) and trait.default_value == DEFAULT_JOB_KIND
    assert all(f"'{name}'" in trait.help for name in JOB_KINDS)


def test_the_notebook_may_manage_jobs_of_every_kind():
    for kind in JOB_KINDS.values():
        assert kind.rule(NOTEBOOK_JOB_VERBS) in tenancy.NOTEBOOK_RULES


def test_the_charts_job_kind_enum_is_the_registry():
    schema = yaml.safe_load((CHART / "values.schema.yaml").read_text())
    assert schema["properties"]["settings"]["properties"]["job_kind"]["enum"] == list(JOB_KINDS)
    assert yaml.safe_load((CHART / "values.yaml").read_text())["settings"]["job_kind"] == DEFAULT_JOB_KIND


def test_the_charts_notebook_cluster_role_holds_the_notebook_rules():
    assert cluster_role_rules("notebook-clusterrole.yaml") == list(tenancy.NOTEBOOK_RULES)


def test_the_charts_hub_cluster_role_may_read_and_suspend_jobs_of_every_kind_and_no_more():
    rules = cluster_role_rules("hub/rbac.yaml")
    for kind in JOB_KINDS.values():
        assert kind.rule(HUB_JOB_VERBS) in rules
        assert [rule for rule in rules if kind.plural in rule["resources"]] == [kind.rule(HUB_JOB_VERBS)]
