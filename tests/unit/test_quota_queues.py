"""The quota model as Kueue queues (paddle_ext.quota.queues): which queue a user is in, the
ClusterQueue objects, and the ResourceQuota backstop arithmetic."""

from __future__ import annotations

from decimal import Decimal

import pytest

from paddle_ext.constants import QUEUE_OWNER_ANNOTATION, USER_LABEL
from paddle_ext.quota import queues
from paddle_ext.quota.model import Entry, Limits, QuotaConfig, resolve
from paddle_ext.quota.queues import (Queue, QueuePolicy, backstop, can_ever_fit, ceiling, cluster_queue, dns_name,
                                     lending_limit, queue_annotation, queue_for, read_queue_annotation)

D = Decimal
CONFIG = QuotaConfig(
    default=Entry(Limits(gpus=1, cpu="8")),
    groups={"vision": Entry(Limits(gpus=16, memory="256Gi")), "audio": Entry(Limits(gpus=8, cpu="64")),
            "readers": Entry(Limits(running_jobs=9))},
    users={"carol": Entry(Limits(gpus=2)), "dave": Entry(Limits(pods=3))},
    site_default=Limits(gpus=4, cpu="32", memory="64Gi"))


def test_a_team_member_is_in_the_team_queue_with_the_team_quota_and_defaults_for_unset_fields():
    queue = queue_for(CONFIG, "alice", ["vision"])
    assert queue.name == "paddlecloud-team-vision" and queue.title == "team vision's queue"
    assert queue.nominal == {"gpus": D(16), "cpu": D(8), "memory": D(256 * 2 ** 30)}  # cpu: saved default


def test_several_teams_pick_the_one_with_most_gpus():
    assert queue_for(CONFIG, "alice", ["audio", "vision"]).name == "paddlecloud-team-vision"


def test_a_personal_override_of_a_queue_field_is_a_queue_of_its_own():
    queue = queue_for(CONFIG, "carol", ["vision"])
    assert queue.name == "paddlecloud-user-carol" and queue.owner == "user:carol"
    assert queue.nominal["gpus"] == D(2)
    # An override of pods only (not a queue field) keeps the team queue.
    assert queue_for(CONFIG, "dave", ["vision"]).name == "paddlecloud-team-vision"


def test_a_user_in_no_quota_group_gets_a_queue_of_their_effective_default():
    queue = queue_for(CONFIG, "erin", ["readers"])  # readers sets no queue field
    assert queue.name == "paddlecloud-user-erin"
    assert queue.nominal == {"gpus": D(1), "cpu": D(8), "memory": D(64 * 2 ** 30)}  # saved default, then site


def test_unset_everywhere_is_unlimited_and_the_cluster_queue_gets_a_huge_number():
    queue = queue_for(QuotaConfig(), "frank", [])
    assert queue.nominal == {"gpus": None, "cpu": None, "memory": None}
    resources = cluster_queue(queue)["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert {r["name"]: r["nominalQuota"] for r in resources}["nvidia.com/gpu"] == "1000000"


@pytest.mark.parametrize("name, expected", [
    ("vision", "paddlecloud-team-vision"),
    ("ml-research", "paddlecloud-team-ml-research"),
])
def test_dns_names_keep_valid_names(name, expected):
    assert dns_name(queues.TEAM_PREFIX, name) == expected


def test_dns_names_of_odd_names_are_valid_and_distinct():
    a, b = dns_name(queues.USER_PREFIX, "Alice@example.org"), dns_name(queues.USER_PREFIX, "alice-example-org")
    assert a != b and a.startswith("paddlecloud-user-alice-example-org-")
    long = dns_name(queues.TEAM_PREFIX, "x" * 200)
    assert len(long) <= 63 and long == long.lower()


def test_the_cluster_queue_is_in_the_cohort_fifo_reclaims_and_carries_the_limits():
    policy = QueuePolicy.from_settings({"gpus": 32, "cpu": "4"}, {"gpus": 8})
    obj = cluster_queue(queue_for(CONFIG, "alice", ["vision"]), policy, "example.com/gpu")
    spec = obj["spec"]
    assert obj["apiVersion"] == "kueue.x-k8s.io/v1beta2" and obj["kind"] == "ClusterQueue"
    assert obj["metadata"]["annotations"][QUEUE_OWNER_ANNOTATION] == "group:vision"
    assert spec["cohortName"] == "paddlecloud" and spec["queueingStrategy"] == "BestEffortFIFO"
    assert spec["preemption"] == {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    assert spec["namespaceSelector"] == {"matchExpressions": [{"key": USER_LABEL, "operator": "Exists"}]}
    group = spec["resourceGroups"][0]
    # scratch disk is covered (every container asks for some, from the LimitRange) but not counted
    assert group["coveredResources"] == ["cpu", "memory", "example.com/gpu", "ephemeral-storage"]
    assert group["flavors"][0]["name"] == "paddlecloud"
    assert group["flavors"][0]["resources"] == [
        {"name": "cpu", "nominalQuota": "8", "lendingLimit": "4"},
        {"name": "memory", "nominalQuota": "256Gi"},
        # lending limit 32 > nominal 16: lends all of it; Kueue refuses lendingLimit > nominal
        {"name": "example.com/gpu", "nominalQuota": "16", "lendingLimit": "16", "borrowingLimit": "8"},
        {"name": "ephemeral-storage", "nominalQuota": "1Pi"},
    ]


def test_fair_sharing_puts_team_queues_in_admission_fair_sharing_and_weighs_each_user():
    policy = QueuePolicy.from_settings(None, None, fair_sharing=True, weights={"alice": 2, "bob": "0.5"})
    team = cluster_queue(queue_for(CONFIG, "alice", ["vision"]), policy)["spec"]
    assert team["admissionScope"] == {"admissionMode": "UsageBasedAdmissionFairSharing"}
    assert team["queueingStrategy"] == "BestEffortFIFO"  # the order among equal usage
    # a personal queue has one member: nothing to share
    assert "admissionScope" not in cluster_queue(queue_for(CONFIG, "carol", ["vision"]), policy)["spec"]
    assert "admissionScope" not in cluster_queue(queue_for(CONFIG, "alice", ["vision"]), QueuePolicy())["spec"]
    assert [queues.weight_quantity(policy.weight(u)) for u in ("alice", "bob", "erin")] == ["2", "0.5", "1"]
    assert QueuePolicy().weight("alice") == D(1)


@pytest.mark.parametrize("weight", [0, -1, "x", "nan", True])
def test_policy_refuses_a_weight_that_is_not_a_number_above_zero(weight):
    with pytest.raises(ValueError, match="alice's weight must be a number above 0"):
        QueuePolicy.from_settings(None, None, True, {"alice": weight})


def test_policy_refuses_fields_kueue_does_not_admit_by():
    with pytest.raises(ValueError, match="only gpus, cpu, memory"):
        QueuePolicy.from_settings({"pods": 3}, None)


# ------------------------------------------------------------------ arithmetic

def test_lending_limit_is_at_most_the_nominal_quota():
    assert lending_limit(D(8), D(4)) == D(4)
    assert lending_limit(D(8), D(20)) == D(8)
    assert lending_limit(D(8), None) is None


def test_ceiling_is_nominal_plus_borrowing_and_unbounded_when_either_is():
    assert ceiling(D(8), D(4)) == D(12)
    assert ceiling(D(8), D(0)) == D(8)
    assert ceiling(D(8), None) is None
    assert ceiling(None, D(4)) is None


def test_backstop_never_lower_than_what_kueue_may_admit():
    policy = QueuePolicy(borrowing=Limits(gpus=4, cpu="2", memory="1Gi"))
    queue = queue_for(CONFIG, "alice", ["vision"])  # 16 GPUs, 8 CPU, 256Gi
    effective = resolve(CONFIG, "alice", ["vision"]).limits
    limits = backstop(effective, queue, policy)
    assert (limits.gpus, limits.cpu, limits.memory) == (20, "10", "257Gi")
    assert limits.pods == effective.pods and limits.running_jobs == effective.running_jobs


def test_backstop_keeps_a_higher_own_limit_and_is_unbounded_without_a_borrowing_limit():
    queue = Queue("q", "q", "user:x", {"gpus": D(2), "cpu": D(1), "memory": None})
    limits = backstop(Limits(gpus=6, cpu="1", memory="1Gi", pods=5), queue, QueuePolicy(borrowing=Limits(gpus=1)))
    assert limits == Limits(gpus=6, cpu=None, memory=None, pods=5)


def test_the_backstop_covers_every_admission_kueue_may_make():
    """Any job within nominal + borrowing limit (what Kueue admits at most) fits the backstop."""
    policy = QueuePolicy(borrowing=Limits(gpus=3))
    for gpus in range(0, 10):
        queue = Queue("q", "q", "group:g", {"gpus": D(gpus), "cpu": None, "memory": None})
        for own in (None, 0, gpus, gpus + 5):
            limits = backstop(Limits(gpus=own), queue, policy)
            assert limits.gpus >= gpus + 3


def test_can_ever_fit_names_the_field_need_and_most():
    nominal = {"gpus": D(8), "cpu": D(32), "memory": None}
    assert can_ever_fit({"gpus": D(12)}, nominal, {"gpus": D(4)}, {"gpus": None}) is None
    assert can_ever_fit({"gpus": D(13)}, nominal, {"gpus": D(4)}, {"gpus": None}) == ("gpus", D(13), D(12))
    # the others lend less than the borrowing limit allows
    assert can_ever_fit({"gpus": D(13)}, nominal, {"gpus": None}, {"gpus": D(2)}) == ("gpus", D(13), D(10))
    # nothing bounds borrowing: it may fit some day
    assert can_ever_fit({"gpus": D(1000)}, nominal, {}, {}) is None
    assert can_ever_fit({"cpu": D(33)}, nominal, {"cpu": D(0)}, {}) == ("cpu", D(33), D(32))


def test_the_queue_annotation_reads_back_and_hostile_text_reads_as_none():
    queue = queue_for(CONFIG, "alice", ["vision"])
    text = queue_annotation(queue, QueuePolicy(borrowing=Limits(gpus=4)))
    data = read_queue_annotation(text)
    assert data["cluster_queue"] == "paddlecloud-team-vision" and data["title"] == "team vision's queue"
    assert data["nominal"]["gpus"] == D(16) and data["borrowing_limit"] == {"gpus": D(4), "cpu": None, "memory": None}
    for bad in (None, "", "[1]", "{", '{"title": "x"}', '{"cluster_queue": "q", "nominal": {"gpus": "lots"}}'):
        assert read_queue_annotation(bad) is None


# ------------------------------------------------------------------ the preflight with Kueue

QUEUE = read_queue_annotation(queue_annotation(Queue("paddlecloud-team-vision", "team vision's queue", "group:vision",
                                                     {"gpus": D(8), "cpu": D(64), "memory": None}),
                                               QueuePolicy(borrowing=Limits(gpus=4))))


def need(gpus=0, cpu=0, pods=1):
    return {"gpus": D(gpus), "cpu": D(cpu), "memory": D(0), "pods": D(pods)}


def test_a_job_over_what_the_queue_can_ever_admit_is_refused_with_the_numbers():
    assert queues.never_fits(need(gpus=16, pods=2), 8, QUEUE, Limits(), 8) == (
        "Needs 16 GPUs; team vision's queue can admit at most 12 (8 guaranteed + 4 it may borrow), so this job "
        "could never start. Use fewer workers or GPUs, or ask an admin.")


def test_a_job_that_fits_the_queue_but_not_now_is_not_refused():
    # 12 GPUs: 8 guaranteed + 4 borrowable, even if every GPU is in use now
    assert queues.never_fits(need(gpus=12, pods=3), 4, QUEUE, Limits(gpus=12), 8) is None


def test_more_gpus_per_worker_than_any_node_has_is_refused():
    assert queues.never_fits(need(gpus=12, pods=1), 12, QUEUE, Limits(), 8) == (
        "Needs 12 GPUs per worker; the largest node has 8, so this job could never start. "
        "Use more workers with fewer GPUs each.")
    assert queues.never_fits(need(gpus=12, pods=1), 12, QUEUE, Limits(), None) is None  # nodes unreadable


def test_more_gpus_than_the_whole_cluster_has_is_refused():
    assert queues.never_fits(need(gpus=24, pods=3), 8, None, Limits(), 8, cluster_gpus=16) == (
        "Needs 24 GPUs; the whole cluster has 16, so this job could never start. Use fewer workers or GPUs.")
    assert queues.never_fits(need(gpus=16, pods=2), 8, None, Limits(), 8, cluster_gpus=16) is None


def test_the_resource_quota_still_refuses_what_it_never_allows():
    assert queues.never_fits(need(pods=50), 0, None, Limits(pods=40), None) == (
        "Needs 50 pods; your quota is 40, so this job could never start. Use fewer workers or ask an admin.")
