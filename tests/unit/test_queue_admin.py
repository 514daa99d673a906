"""The admin's view of the Kueue queues (paddle_ext.quota.queue_admin): a row per ClusterQueue of
ours from its spec and status, and which of ours the quota model no longer wants (deleted only
when empty; never a queue that is not ours)."""

from __future__ import annotations

import copy
import datetime

from paddle_ext.constants import MANAGED_BY_LABEL, QUEUE_OWNER_ANNOTATION
from paddle_ext.hub.overview import overview
from paddle_ext.quota import queues
from paddle_ext.quota.model import Entry, Limits, QuotaConfig
from paddle_ext.quota.queue_admin import (QueueOwner, QueueRow, owner_of, queue_rows, queues_to_prune,
                                          wanted_queues)

GPU = "nvidia.com/gpu"
CONFIG = QuotaConfig(groups={"vision": Entry(Limits(gpus=8, cpu="64", memory="256Gi")),
                             "audio": Entry(Limits(gpus=4)),
                             "pods-only": Entry(Limits(pods=10))},
                     users={"carol": Entry(Limits(gpus=2)), "dave": Entry(Limits(running_jobs=1))},
                     site_default=Limits(gpus=1, cpu="8", memory="32Gi"))


def status(total=0, borrowed=0, admitted=0, pending=0, reserving=None):
    resources = [{"name": "cpu", "total": "3", "borrowed": "0"}, {"name": GPU, "total": str(total)}]
    if borrowed:
        resources[1]["borrowed"] = str(borrowed)
    return {"flavorsUsage": [{"name": queues.FLAVOR, "resources": resources}],
            "admittedWorkloads": admitted, "pendingWorkloads": pending,
            "reservingWorkloads": admitted if reserving is None else reserving}


def cq(queue: queues.Queue, **state) -> dict:
    obj = queues.cluster_queue(queue)
    obj["metadata"]["resourceVersion"] = "17"
    obj["status"] = status(**state)
    return obj


def team(group):
    return cq(queues.team_queue(CONFIG, group))


def personal(user, groups=()):
    return cq(queues.personal_queue(CONFIG, user, groups))


def test_ours_is_our_label_an_owner_annotation_and_the_name_made_from_that_owner():
    assert owner_of(team("vision")) == QueueOwner("team", "vision")
    assert owner_of(personal("carol")) == QueueOwner("user", "carol")

    unlabelled = team("vision")
    del unlabelled["metadata"]["labels"][MANAGED_BY_LABEL]
    no_owner = team("vision")
    del no_owner["metadata"]["annotations"][QUEUE_OWNER_ANNOTATION]
    renamed = team("vision")  # someone else's queue whose annotations were copied
    renamed["metadata"]["name"] = "research"
    odd_owner = team("vision")
    odd_owner["metadata"]["annotations"][QUEUE_OWNER_ANNOTATION] = "project:vision"
    lookalike = {"metadata": {"name": "paddlecloud-team-vision"}, "spec": {}}  # our name, not ours
    for obj in (unlabelled, no_owner, renamed, odd_owner, lookalike):
        assert owner_of(obj) is None, obj["metadata"]


def test_a_row_has_the_guarantee_the_gpus_in_use_borrowed_idle_and_the_workload_counts():
    borrowing = cq(queues.team_queue(CONFIG, "vision"), total=12, borrowed=4, admitted=2, pending=3)
    (row,) = queue_rows([borrowing], GPU)
    assert row == QueueRow(name="paddlecloud-team-vision", kind="team", owner="vision",
                           title="team vision's queue", guaranteed_gpus=8, used_gpus=12, borrowed_gpus=4,
                           idle_gpus=0, admitted=2, pending=3)
    lending = cq(queues.team_queue(CONFIG, "audio"), total=1, admitted=1)
    (row,) = queue_rows([lending], GPU)
    assert (row.guaranteed_gpus, row.used_gpus, row.borrowed_gpus, row.idle_gpus) == (4, 1, 0, 3)
    assert row.to_dict()["idle_gpus"] == 3 and set(row.to_dict()) == {
        "name", "kind", "owner", "title", "guaranteed_gpus", "used_gpus", "borrowed_gpus", "idle_gpus",
        "admitted", "pending"}


def test_a_new_queue_without_status_and_an_unlimited_one_read_as_zero_used_and_no_limit():
    fresh = queues.cluster_queue(queues.team_queue(CONFIG, "audio"))
    (row,) = queue_rows([fresh], GPU)
    assert (row.used_gpus, row.borrowed_gpus, row.idle_gpus, row.admitted, row.pending) == (0, 0, 4, 0, 0)
    unlimited = queues.Queue("paddlecloud-user-erin", "erin's queue", "user:erin",
                             {"gpus": None, "cpu": None, "memory": None})
    (row,) = queue_rows([cq(unlimited, total=2)], GPU)
    assert (row.guaranteed_gpus, row.idle_gpus, row.used_gpus) == (None, None, 2)


def test_rows_list_teams_then_users_by_name_and_leave_out_queues_not_ours():
    stranger = {"metadata": {"name": "research", "labels": {}}, "spec": {}, "status": status(total=8)}
    rows = queue_rows([personal("carol"), stranger, team("vision"), team("audio")], GPU)
    assert [(r.kind, r.owner) for r in rows] == [("team", "audio"), ("team", "vision"), ("user", "carol")]


def test_the_model_wants_every_team_queue_and_the_personal_queues_of_users_whose_queue_is_their_own():
    users = {"ann": ["vision"], "carol": ["vision"], "dave": [], "erin": ["pods-only"]}
    assert wanted_queues(CONFIG, users) == {
        "paddlecloud-team-vision", "paddlecloud-team-audio",  # audio has no member: still wanted
        "paddlecloud-user-carol",  # a personal GPU override: a queue of her own
        "paddlecloud-user-dave",  # no team queue (his override sets no queue field)
        "paddlecloud-user-erin"}  # her group sets pods only: no team queue
    # ann is in vision: no personal queue; nobody else is listed, so nobody else's is wanted
    assert "paddlecloud-user-ann" not in wanted_queues(CONFIG, users)


def test_a_deleted_groups_queue_and_a_removed_override_are_pruned_only_when_empty():
    after = QuotaConfig(groups={"vision": CONFIG.groups["vision"]}, users={}, site_default=CONFIG.site_default)
    users = {"ann": ["vision"], "carol": ["vision"], "dave": []}
    existing = [team("vision"), team("audio"), personal("carol"), personal("dave")]
    plan = queues_to_prune(existing, wanted_queues(after, users))
    # audio lost its quota; carol lost her override and is in vision's queue now; dave keeps his
    assert plan.delete == {"paddlecloud-team-audio": "17", "paddlecloud-user-carol": "17"} and plan.keep == {}

    busy = [cq(queues.team_queue(CONFIG, "audio"), total=4, admitted=1),
            cq(queues.personal_queue(CONFIG, "carol", ()), pending=2, admitted=0),
            cq(queues.team_queue(CONFIG, "vision"), total=8, admitted=1)]
    plan = queues_to_prune(busy, wanted_queues(after, users))
    assert plan.delete == {}
    assert plan.keep == {"paddlecloud-team-audio": "1 admitted and 0 pending workloads",
                         "paddlecloud-user-carol": "0 admitted and 2 pending workloads"}
    reserving = cq(queues.team_queue(CONFIG, "audio"), admitted=0, reserving=1)  # quota reserved, not yet admitted
    assert queues_to_prune([reserving], set()).keep == {"paddlecloud-team-audio": "1 admitted and 0 pending workloads"}


def test_queues_not_ours_and_queues_already_going_are_never_named_for_deletion():
    stranger = {"metadata": {"name": "paddlecloud-team-gone", "labels": {}, "resourceVersion": "3"}, "spec": {}}
    copied = copy.deepcopy(team("audio"))
    copied["metadata"]["name"] = "someone-elses"
    going = team("audio")
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    plan = queues_to_prune([stranger, copied, going], set())
    assert plan.delete == {} and plan.keep == {}


def test_the_overview_has_a_queues_section_only_with_kueue():
    now = datetime.datetime(2026, 1, 2, tzinfo=datetime.timezone.utc)
    capacity = {"source": "kubernetes", "nodes": [], "total": None}
    assert "queues" not in overview(capacity, {}, now)
    rows = [row.to_dict() for row in queue_rows([cq(queues.team_queue(CONFIG, "vision"), total=12, borrowed=4,
                                                     admitted=1)], GPU)]
    document = overview(capacity, {}, now, queues={"rows": rows})
    assert document["queues"]["rows"][0]["borrowed_gpus"] == 4
    failed = overview(capacity, {}, now, queues={"rows": [], "error": "Kubernetes could not read ..."})
    assert failed["queues"] == {"rows": [], "error": "Kubernetes could not read ..."}
