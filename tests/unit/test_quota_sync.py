"""Writing a user's ResourceQuota while the quota controller writes its status."""

from __future__ import annotations

import pytest

from paddle_ext.errors import BackendUnavailable
from paddle_ext.hub.quota_sync import write_resource_quota
from paddle_ext.kubeapi import KubeApiError

QUOTA = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "paddlecloud-quota"},
         "spec": {"hard": {"pods": "10"}}}


class RacingApi:
    """A ResourceQuota whose resourceVersion moves on (as the quota controller's status
    writes do) between our read and the first `conflicts` replaces."""

    def __init__(self, conflicts: int):
        self.conflicts = conflicts
        self.version = 1
        self.replaced = []

    async def get(self, path):
        return {"metadata": {"name": "paddlecloud-quota", "resourceVersion": str(self.version)}}

    async def replace(self, path, body):
        if self.conflicts:
            self.conflicts -= 1
            self.version += 1
            raise KubeApiError(409, 'Operation cannot be fulfilled on resourcequotas "paddlecloud-quota"')
        assert body["metadata"]["resourceVersion"] == str(self.version)
        self.replaced.append(body)


async def test_a_replace_that_lost_the_race_is_read_and_written_again():
    api = RacingApi(conflicts=2)
    assert await write_resource_quota(api, "paddlecloud-alice", QUOTA) == QUOTA
    assert [body["spec"] for body in api.replaced] == [QUOTA["spec"]]


async def test_a_quota_that_keeps_changing_is_an_error_naming_it():
    with pytest.raises(BackendUnavailable, match="ResourceQuota paddlecloud-alice/paddlecloud-quota .*409"):
        await write_resource_quota(RacingApi(conflicts=10), "paddlecloud-alice", QUOTA, attempts=3)
