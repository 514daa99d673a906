"""The pure quota model: validation, merge, resolution, ResourceQuota form, preflight, GPU-hours."""

from __future__ import annotations

import datetime
import json

import pytest

from paddle_ext.errors import QuotaExceeded
from paddle_ext.quota import model
from paddle_ext.quota.model import (Effective, Entry, JobRecord, JobUsage, Limits, QuotaConfig, QuotaConflict,
                                    QuotaInputError, apply_update, check_fits, gpu_hours, parse_patch,
                                    parse_quota_rejection, quota_sources, resolve, resource_quota_hard,
                                    resource_quota_terms, running_jobs_cap)
from paddle_ext.spec import JobSpec
from paddle_ext.tenancy import NO_EXPOSURE_HARD, user_resource_quota


def test_parse_patch_normalizes_and_keeps_nulls():
    assert parse_patch({"gpus": 2, "cpu": "8", "memory": "32Gi", "pods": "10", "running_jobs": None}) == \
        {"gpus": 2, "cpu": "8", "memory": "32Gi", "pods": 10, "running_jobs": None}
    assert parse_patch({"cpu": 4}) == {"cpu": "4"}
    assert parse_patch({"cpu": 0.5}) == {"cpu": "0.5"}
    assert parse_patch({}) == {}


@pytest.mark.parametrize("body, field, words", [
    ({"gpus": -1}, "gpus", "must not be negative (got -1)"),
    ({"gpus": "two"}, "gpus", "must be a whole number (got 'two')"),
    ({"gpus": "-3"}, "gpus", "must not be negative (got -3)"),
    ({"gpus": 1.5}, "gpus", "must be a whole number (got 1.5)"),
    ({"gpus": True}, "gpus", "must be a whole number (got True)"),
    ({"cpu": "-2"}, "cpu", "must not be negative"),
    ({"memory": "lots"}, "memory", "is not a Kubernetes quantity"),
    ({"memory": [1]}, "memory", "must be a quantity"),
    ({"gpu": 2}, "gpu", "unknown field (allowed: gpus, cpu, memory, pods, running_jobs)"),
])
def test_parse_patch_rejects_naming_the_field(body, field, words):
    with pytest.raises(QuotaInputError) as info:
        parse_patch(body)
    assert info.value.status == 400
    assert words in info.value.problems[field]
    assert info.value.message.startswith(f"Invalid quota: {field}: ")
    assert info.value.to_dict()["fields"] == info.value.problems


def test_parse_patch_reports_every_bad_field_and_rejects_non_objects():
    with pytest.raises(QuotaInputError) as info:
        parse_patch({"gpus": -1, "pods": "x", "cpu": "2"})
    assert set(info.value.problems) == {"gpus", "pods"}
    with pytest.raises(QuotaInputError, match="body: must be a JSON object"):
        parse_patch([1, 2])
    with pytest.raises(QuotaInputError, match="revision: unknown field"):
        parse_patch({"revision": 3})
    assert parse_patch({"revision": 3, "gpus": 1}, allow_revision=True) == {"revision": 3, "gpus": 1}


def test_merge_keeps_left_out_fields_and_null_clears():
    limits = Limits(gpus=2, cpu="8", memory="16Gi")
    assert model.merge(limits, {"gpus": 4}) == Limits(gpus=4, cpu="8", memory="16Gi")
    assert model.merge(limits, {"cpu": None}) == Limits(gpus=2, memory="16Gi")


def test_apply_update_stamps_revisions_drops_empty_entries_and_detects_stale_writes():
    config = apply_update(QuotaConfig(), "users", "alice", {"gpus": 2})
    assert config.version == 1 and config.users["alice"] == Entry(Limits(gpus=2), 1)
    config = apply_update(config, "default", None, {"gpus": 1, "running_jobs": 3})
    assert config.version == 2 and config.default.revision == 2 and config.users["alice"].revision == 1
    # An editor who read alice at revision 1 may write; one who read revision 0 may not.
    updated = apply_update(config, "users", "alice", {"cpu": "4", "revision": 1})
    assert updated.users["alice"].limits == Limits(gpus=2, cpu="4")
    with pytest.raises(QuotaConflict) as info:
        apply_update(updated, "users", "alice", {"gpus": 8, "revision": 1})
    assert info.value.status == 409 and "user 'alice'" in info.value.message
    cleared = apply_update(updated, "users", "alice", {"gpus": None, "cpu": None})
    assert "alice" not in cleared.users
    assert QuotaConfig.from_dict(cleared.to_dict()) == cleared


def test_resolution_user_override_then_most_generous_group_then_default():
    config = QuotaConfig(
        default=Entry(Limits(gpus=1, cpu="4", memory="8Gi", running_jobs=2)),
        groups={"ml": Entry(Limits(gpus=4, cpu="16")), "vision": Entry(Limits(gpus=8, cpu="2000m")),
                "other": Entry(Limits(gpus=100))},
        users={"alice": Entry(Limits(gpus=2))},
    )
    effective = resolve(config, "bob", ["ml", "vision"])
    assert effective.limits == Limits(gpus=8, cpu="16", memory="8Gi", running_jobs=2)
    assert effective.sources == {"gpus": "group:vision", "cpu": "group:ml", "memory": "default",
                                 "running_jobs": "default"}
    # A user override wins even when it is lower than the group's.
    alice = resolve(config, "alice", ["ml"])
    assert alice.limits.gpus == 2 and alice.sources["gpus"] == "user"
    assert resolve(config, "carol", []).limits == config.default.limits
    assert resolve(QuotaConfig(), "dave", ["ml"]).limits == Limits()


# A user's own notebook and a long history of jobs fit (each job: a Job, a Service, a code
# ConfigMap), while no user can fill etcd or every node's disk.
OBJECTS = {"count/jobs.batch": "200", "count/paddlejobs.kubeflow.org": "200", "count/configmaps": "220",
           "count/services": "220", "count/secrets": "50", "persistentvolumeclaims": "20",
           "requests.ephemeral-storage": "100Gi", "limits.ephemeral-storage": "2Ti"}


def test_resource_quota_form():
    limits = Limits(gpus=2, cpu="8", memory="32Gi", pods=10, running_jobs=3)
    sources = {"gpus": "group:ml", "cpu": "default", "memory": "default", "pods": "user", "running_jobs": "default"}
    assert resource_quota_hard(limits) == {"requests.nvidia.com/gpu": "2", "requests.cpu": "8",
                                           "requests.memory": "32Gi", "pods": "10"}
    quota = user_resource_quota("paddlecloud-alice", Effective(limits, sources))
    assert quota == {
        "apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": "paddlecloud-quota", "namespace": "paddlecloud-alice",
                     "labels": {"app.kubernetes.io/managed-by": "paddlecloud"},
                     "annotations": {"paddlecloud.io/running-jobs": "3",
                                     "paddlecloud.io/quota-sources": json.dumps(sources, sort_keys=True)}},
        "spec": {"hard": {**OBJECTS, "requests.nvidia.com/gpu": "2", "requests.cpu": "8",
                          "requests.memory": "32Gi", "pods": "10", "services.nodeports": "0",
                          "services.loadbalancers": "0"}}}
    # Nothing limited: still a quota, counting objects and barring Services that would expose
    # pods outside the cluster.
    assert user_resource_quota("ns", Effective(Limits(), {}))["spec"]["hard"] == {
        **OBJECTS, "services.nodeports": "0", "services.loadbalancers": "0"}
    # A site's own counts replace the defaults; none at all leaves only the exposure bar.
    assert user_resource_quota("ns", Effective(Limits(), {}), objects={"count/secrets": 5})["spec"]["hard"] == {
        "count/secrets": "5", "services.nodeports": "0", "services.loadbalancers": "0"}
    assert user_resource_quota("ns", Effective(Limits(), {}), objects={})["spec"]["hard"] == NO_EXPOSURE_HARD
    assert running_jobs_cap([quota]) == 3 and quota_sources([quota]) == sources
    assert running_jobs_cap([user_resource_quota("ns", Effective(Limits(gpus=1), {"gpus": "user"}))]) is None
    # The same limits read back from the API server's view of that ResourceQuota.
    status = {**quota, "status": {"hard": quota["spec"]["hard"],
                                  "used": {"requests.nvidia.com/gpu": "1", "requests.memory": "34359738368"}}}
    limits_back, in_use = resource_quota_terms(status)
    assert limits_back == Limits(gpus=2, cpu="8", memory="32Gi", pods=10)
    assert in_use == {"gpus": 1, "cpu": 0, "memory": 32 * 2**30, "pods": 0}


def test_several_resources_of_one_field_count_the_tightest():
    quota = {"status": {"hard": {"requests.cpu": "8", "limits.cpu": "4", "count/pods": "3"},
                        "used": {"requests.cpu": "1", "limits.cpu": "3", "count/pods": "1"}}}
    limits, in_use = resource_quota_terms(quota)
    assert limits == Limits(cpu="4", pods=3) and in_use["cpu"] == 3


def spec(**kw):
    return JobSpec(command=("python", "train.py"), name="new-job", **kw)


def check_job(spec, limits, running, in_use=None):
    check_fits(JobUsage.of_spec(spec), limits, running, in_use)


def test_check_job_names_the_jobs_holding_resources():
    running = [JobUsage.of("resnet-3", {"workers": 2, "gpus_per_worker": 1, "cpu": "1", "memory": "2Gi"})]
    with pytest.raises(QuotaExceeded) as info:
        check_job(spec(workers=4, gpus_per_worker=1), Limits(gpus=2), running)
    assert info.value.message == "Needs 4 GPUs; your quota is 2 and 2 are in use by job resnet-3."
    with pytest.raises(QuotaExceeded, match=r"^Needs 8Gi memory; your quota is 10Gi and 4Gi is in use by job resnet-3\.$"):
        check_job(spec(workers=2, memory="4Gi"), Limits(memory="10Gi"), running)
    with pytest.raises(QuotaExceeded) as info:
        check_job(spec(), Limits(running_jobs=1), running)
    assert info.value.message == ("Your quota allows 1 running job and 1 is running (resnet-3); "
                                  "wait for one to finish or cancel one.")
    # What fits, fits: exactly at the limit, or unlimited.
    check_job(spec(workers=2, gpus_per_worker=1), Limits(gpus=4, running_jobs=2), running)
    check_job(spec(workers=8, gpus_per_worker=8), Limits(), running)


def test_kubernetes_quota_gives_the_same_message_and_names_holders():
    quota = {"status": {"hard": {"requests.nvidia.com/gpu": "2"}, "used": {"requests.nvidia.com/gpu": "2"}}}
    running = [JobUsage.of("resnet-3", {"workers": 2, "gpus_per_worker": 1}),
               JobUsage.of("cpu-only", {"workers": 1, "gpus_per_worker": 0})]
    limits, in_use = resource_quota_terms(quota)
    with pytest.raises(QuotaExceeded) as info:
        check_job(spec(workers=4, gpus_per_worker=1), limits, running, in_use)
    assert info.value.message == "Needs 4 GPUs; your quota is 2 and 2 are in use by job resnet-3."


def test_the_api_servers_quota_rejection_reads_the_same():
    text = ('pods "x-0" is forbidden: exceeded quota: paddlecloud-quota, requested: requests.nvidia.com/gpu=2, '
            'used: requests.nvidia.com/gpu=1, limited: requests.nvidia.com/gpu=2')
    assert parse_quota_rejection(text) == "Needs 2 GPUs; your quota is 2 and 1 are in use."
    memory = ('exceeded quota: q, requested: requests.memory=4Gi, used: requests.memory=30Gi, '
              'limited: requests.memory=32Gi')
    assert parse_quota_rejection(memory) == "Needs 4Gi memory; your quota is 32Gi and 30Gi is in use."
    assert parse_quota_rejection("something else") == "something else"


def test_gpu_hours_windows_and_running_jobs():
    now = datetime.datetime(2026, 11, 30, 12, tzinfo=datetime.timezone.utc)
    hours = datetime.timedelta(hours=1)
    records = [
        JobRecord("done", 4, now - 10 * hours, now - 8 * hours),             # 8 GPU-hours
        JobRecord("running", 2, now - 3 * hours, None),                      # 6 so far
        JobRecord("old", 1, now - datetime.timedelta(days=20), now - datetime.timedelta(days=19)),  # 24, 30d only
        JobRecord("straddles", 1, now - datetime.timedelta(days=7, hours=2), now - datetime.timedelta(days=6, hours=22)),
        JobRecord("cpu", 0, now - 5 * hours, None),
    ]
    assert gpu_hours(records, now, 7) == 8 + 6 + 2
    assert gpu_hours(records, now, 30) == 8 + 6 + 24 + 4


def test_the_service_exposure_policy_is_valid_kubernetes():
    import kubernetes_validate

    from paddle_ext.policies import service_exposure_policy

    policy, binding = service_exposure_policy()
    for obj in (policy, binding):
        kubernetes_validate.validate(obj, "1.35.0", strict=True)
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]["key"] == "paddlecloud.io/user"


SITE = Limits(gpus=4, cpu="32", memory="256Gi", pods=40, running_jobs=4)


def test_the_site_default_applies_where_nothing_else_sets_a_field():
    config = QuotaConfig(default=Entry(Limits(gpus=2)), groups={"ml": Entry(Limits(cpu="64"))}, site_default=SITE)
    effective = resolve(config, "alice", ["ml"])
    assert effective.limits == Limits(gpus=2, cpu="64", memory="256Gi", pods=40, running_jobs=4)
    assert effective.sources == {"gpus": "default", "cpu": "group:ml", "memory": "site", "pods": "site",
                                 "running_jobs": "site"}


def test_saving_one_user_keeps_the_site_default_for_everyone_else():
    """The chart's default must survive an admin's first save (issue 28): it is never part of
    what is stored, and every update carries it on."""
    before = QuotaConfig(site_default=SITE)
    after = apply_update(before, "users", "alice", {"gpus": 1})
    assert resolve(after, "bob", []).limits == SITE
    assert resolve(after, "alice", []).limits == Limits(gpus=1, cpu="32", memory="256Gi", pods=40, running_jobs=4)
    assert "site_default" not in json.dumps(after.to_dict())
    assert QuotaConfig.from_dict(after.to_dict()).site_default == Limits()


def test_clearing_a_saved_default_falls_back_to_the_site_default():
    config = apply_update(QuotaConfig(site_default=SITE), "default", None, {"gpus": 8})
    assert resolve(config, "bob", []).limits.gpus == 8
    cleared = apply_update(config, "default", None, {"gpus": None})
    assert resolve(cleared, "bob", []).limits.gpus == 4
    assert resolve(cleared, "bob", []).sources["gpus"] == "site"
