"""What each user's jobs use, for the quota service: from their local job folder (the
embedded default) or their namespace (Kubernetes)."""

from __future__ import annotations

from ..backends.kubernetes import KubernetesBackend
from ..backends.local import LocalBackend
from ..errors import PaddleCloudError
from ..kubeapi import KubeApi
from ..quota.model import Effective, QuotaReport, report
from ..timestamps import now
from .settings import namespace_for


class LocalUsage:
    """Usage from each user's job folder (the local hub's layout: `home_template`)."""

    def __init__(self, home_template: str, home: str):
        self.home_template = home_template
        self.home = home

    async def report(self, username: str, effective: Effective) -> QuotaReport:
        backend = LocalBackend(home=self.home_template.format(home=self.home, username=username), user=username)
        return report(username, effective, await backend.list(), now())


class KubernetesUsage:
    """Usage from each user's namespace: their jobs, and the ResourceQuota's own count."""

    def __init__(self, api: KubeApi, namespace_template: str, gpu_resource: str):
        self.api = api
        self.namespace_template = namespace_template
        self.gpu_resource = gpu_resource

    async def report(self, username: str, effective: Effective) -> QuotaReport:
        """Raises ValueError when no namespace name can be derived for the user."""
        backend = KubernetesBackend(api=self.api, namespace=namespace_for(username, self.namespace_template),
                                    user=username, gpu_resource=self.gpu_resource)
        try:
            jobs = await backend.list()
        except PaddleCloudError:
            jobs = []
        try:
            in_use = (await backend.quota_in_namespace())[1]  # the API server's own count, notebooks included
        except PaddleCloudError:
            in_use = {}
        return report(username, effective, jobs, now(), in_use)
