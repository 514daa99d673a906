"""Writing a user's ResourceQuota while the quota controller writes its status."""

from __future__ import annotations

import pytest

from paddle_ext.errors import BackendUnavailable
from paddle_ext.hub.quota_sync import merge_patch, write_resource_quota
from paddle_ext.kubeapi import KubeApiError

QUOTA = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "paddlecloud-quota"},
         "spec": {"hard": {"pods": "10"}}}


class RacingApi:
    """A ResourceQuota that another writer creates between our read and our create, the
    first `conflicts` times; its status moves on all the time (the quota controller)."""

    def __init__(self, conflicts: int):
        self.conflicts = conflicts
        self.exists = False
        self.patches = []

    async def get(self, path):
        if not self.exists:
            raise KubeApiError(404, "not found")
        return {"metadata": {"name": "paddlecloud-quota", "resourceVersion": "7"},
                "spec": {"hard": {"pods": "5", "requests.cpu": "8"}}}

    async def create(self, path, body):
        if self.conflicts:
            self.conflicts -= 1
            self.exists = True
            raise KubeApiError(409, 'resourcequotas "paddlecloud-quota" already exists')
        self.exists = True

    async def patch(self, path, body):
        assert "resourceVersion" not in body["metadata"]
        self.patches.append(body)


async def test_a_create_that_lost_the_race_becomes_a_patch():
    api = RacingApi(conflicts=1)
    assert await write_resource_quota(api, "paddlecloud-alice", QUOTA) == QUOTA
    assert [body["spec"]["hard"] for body in api.patches] == [{"pods": "10", "requests.cpu": None}]


async def test_a_quota_that_keeps_conflicting_is_an_error_naming_it():
    class Refusing(RacingApi):
        async def patch(self, path, body):
            raise KubeApiError(409, "conflict")

    api = Refusing(conflicts=0)
    api.exists = True
    with pytest.raises(BackendUnavailable, match="ResourceQuota paddlecloud-alice/paddlecloud-quota .*409"):
        await write_resource_quota(api, "paddlecloud-alice", QUOTA)


def test_the_merge_patch_removes_what_is_no_longer_wanted_and_carries_no_version():
    current = {"metadata": {"name": "q", "resourceVersion": "9", "labels": {"a": "1", "old": "x"},
                            "annotations": {"paddlecloud.io/running-jobs": "4"}},
               "spec": {"hard": {"pods": "5", "requests.cpu": "8"}}, "status": {"used": {"pods": "1"}}}
    wanted = {"metadata": {"name": "q", "labels": {"a": "1"}, "annotations": {}},
              "spec": {"hard": {"pods": "10"}}}
    assert merge_patch(current, wanted) == {
        "metadata": {"labels": {"old": None, "a": "1"}, "annotations": {"paddlecloud.io/running-jobs": None}},
        "spec": {"hard": {"requests.cpu": None, "pods": "10"}}}
