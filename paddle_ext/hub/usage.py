"""What each user's jobs use, for the quota service: from their local job folder (the
embedded default) or their namespace (Kubernetes); and what the whole cluster has, for
the admin overview."""

from __future__ import annotations

import os
import socket
from decimal import Decimal

from typing import TYPE_CHECKING

from ..backends.registry import KUBERNETES, LOCAL, backend_class
from ..capacity import LIVE_PODS_SELECTOR, NodeUsage, Resources, node_usage, total
from ..constants import DEFAULT_JOB_KIND
from ..errors import PaddleCloudError
from ..jobs import Job
from ..kubeapi import KubeApi, api_path
from ..quota.model import Effective, JobUsage, QuotaReport, report
from ..timestamps import now
from .settings import namespace_for

if TYPE_CHECKING:
    from ..backends.base import JobBackend
    from ..backends.kubernetes import KubernetesBackend


class LocalUsage:
    """Usage from each user's job folder (the local hub's layout: `home_template`)."""

    def __init__(self, home_template: str, home: str):
        self.home_template = home_template
        self.home = home

    def backend(self, username: str) -> JobBackend:
        return backend_class(LOCAL)(home=self.home_template.format(home=self.home, username=username), user=username)

    async def jobs(self, username: str) -> list[Job]:
        return await self.backend(username).list()

    async def cancel(self, username: str, job: str) -> Job:
        return await self.backend(username).cancel(job)

    async def report(self, username: str, effective: Effective) -> QuotaReport:
        return report(username, effective, await self.jobs(username), now())

    async def capacity(self, running: list[JobUsage]) -> dict:
        """This machine: its CPUs and memory, no GPUs; used = what the running jobs ask for."""
        memory = Decimal(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        used = Resources(sum(int(j.gpus) for j in running), sum((j.cpu for j in running), Decimal(0)),
                         sum((j.memory for j in running), Decimal(0)))
        node = NodeUsage(socket.gethostname(), Resources(0, Decimal(os.cpu_count() or 1), memory), used)
        return {"source": LOCAL, "nodes": [node.to_dict()], "total": total([node])}


class KubernetesUsage:
    """Usage from each user's namespace: their jobs (of the site's kind, a name in
    jobkinds.JOB_KINDS), and the ResourceQuota's own count. An admin's cancel suspends
    the job as its kind says."""

    def __init__(self, api: KubeApi, namespace_template: str, gpu_resource: str, job_kind: str = DEFAULT_JOB_KIND):
        self.api = api
        self.namespace_template = namespace_template
        self.gpu_resource = gpu_resource
        self.job_kind = job_kind

    def backend(self, username: str) -> KubernetesBackend:
        """Raises NoNamespace when no namespace name can be derived for the user."""
        return backend_class(KUBERNETES)(api=self.api, namespace=namespace_for(username, self.namespace_template),
                                         user=username, gpu_resource=self.gpu_resource, job_kind=self.job_kind)

    async def jobs(self, username: str) -> list[Job]:
        return await self.backend(username).list()

    async def cancel(self, username: str, job: str) -> Job:
        return await self.backend(username).cancel(job)

    async def report(self, username: str, effective: Effective) -> QuotaReport:
        """Raises NoNamespace when no namespace name can be derived for the user."""
        backend = self.backend(username)
        try:
            jobs = await backend.list()
        except PaddleCloudError:
            jobs = []
        try:
            in_use = (await backend.quota_in_namespace())[1]  # the API server's own count, notebooks included
        except PaddleCloudError:
            in_use = {}
        return report(username, effective, jobs, now(), in_use)

    async def capacity(self, running: list[JobUsage]) -> dict:
        """Every node's allocatable resources and its live pods' requests (notebooks included)."""
        nodes = (await self.api.get(api_path("v1", "nodes"))).get("items", [])
        pods = (await self.api.get(api_path("v1", "pods"),
                                   fieldSelector=LIVE_PODS_SELECTOR)).get("items", [])
        usage = node_usage(nodes, pods, self.gpu_resource)
        return {"source": KUBERNETES, "nodes": [node.to_dict() for node in usage], "total": total(usage)}
