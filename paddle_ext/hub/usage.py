"""What each user's jobs use, for the quota service: from their local job folder (the
embedded default) or their namespace (Kubernetes); and what the whole cluster has, for
the admin overview.

The pages about every user read them all at once (`jobs_and_capacity`, `reports`): on
Kubernetes with a few cluster-wide lists, whatever the number of users, the live pods read
once per page for what they say about both the jobs and the nodes or quotas; elsewhere, or
where the service may not list across namespaces, user by user, `concurrency` at a time."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from decimal import Decimal
from typing import TYPE_CHECKING, AsyncIterator, Awaitable, Callable, Iterable, Mapping, TypeVar

from ..backends.kubernetes_status import by_namespace, open_job_pods, open_jobs, refusals_needed, views_by_namespace
from ..backends.registry import KUBERNETES, LOCAL, backend_class
from ..capacity import FINISHED_PODS_SELECTOR, LIVE_PODS_SELECTOR, NodeUsage, Resources, node_usage, total
from ..constants import DEFAULT_JOB_KIND
from ..errors import Forbidden, PaddleCloudError
from ..jobkinds import JOB_KINDS, JobKind
from ..jobs import Job
from ..kubeapi import KubeApi, api_path
from ..manifests import MAX_NAMES_IN_SELECTOR, jobs_selector, label_selector
from ..quota.model import Effective, JobUsage, QuotaReport, report
from ..timestamps import now
from .settings import namespace_for
from .watched import WatchedCopy, WatchedList

if TYPE_CHECKING:
    from ..backends.base import JobBackend
    from ..backends.kubernetes import KubernetesBackend

log = logging.getLogger(__name__)

T = TypeVar("T")


async def per_user(usernames: Iterable[str], read: Callable[[str], Awaitable[T]], concurrency: int
                   ) -> dict[str, T | PaddleCloudError]:
    """read(user) for each user, `concurrency` at a time; a user's error is their answer."""
    limit = asyncio.Semaphore(concurrency)

    async def one(username: str) -> tuple[str, T | PaddleCloudError]:
        async with limit:
            try:
                return username, await read(username)
            except PaddleCloudError as exc:  # NoNamespace among them
                return username, exc

    return dict(await asyncio.gather(*(one(username) for username in usernames)))


def capacity_error(source: str, message: str) -> dict:
    """The overview's capacity section when the cluster's nodes and pods cannot be read."""
    log.warning("Cannot read the cluster's nodes and pods: %s", message)
    return {"source": source, "nodes": [], "total": None, "error": f"Cannot read the cluster's nodes and pods: {message}"}


def latest_of_each(reads: Iterable[list[dict]]) -> list[dict]:
    """The objects of several lists, each once (by uid): as the last list that has it says."""
    found: dict[str, dict] = {}
    for items in reads:
        for obj in items:
            metadata = obj.get("metadata") or {}
            found[metadata.get("uid") or f"{metadata.get('namespace')}/{metadata.get('name')}"] = obj
    return list(found.values())


class LocalUsage:
    """Usage from each user's job folder (the local hub's layout: `home_template`)."""

    def __init__(self, home_template: str, home: str):
        self.home_template = home_template
        self.home = home

    def backend(self, username: str) -> JobBackend:
        return backend_class(LOCAL)(home=self.home_template.format(home=self.home, username=username), user=username)

    async def jobs(self, username: str) -> list[Job]:
        return await self.backend(username).list()

    async def jobs_of(self, usernames: Iterable[str], concurrency: int) -> dict[str, list[Job] | PaddleCloudError]:
        return await per_user(usernames, self.jobs, concurrency)

    async def cancel(self, username: str, job: str) -> Job:
        return await self.backend(username).cancel(job)

    async def report(self, username: str, effective: Effective) -> QuotaReport:
        return report(username, effective, await self.jobs(username), now())

    async def reports(self, effective: Mapping[str, Effective], concurrency: int
                      ) -> dict[str, QuotaReport | PaddleCloudError]:
        return await per_user(effective, lambda username: self.report(username, effective[username]), concurrency)

    async def jobs_and_capacity(self, usernames: Iterable[str], concurrency: int
                                ) -> tuple[dict[str, list[Job] | PaddleCloudError], dict]:
        """Each user's jobs (jobs_of) and this machine's capacity, whose use is what their
        running jobs ask for."""
        found = await self.jobs_of(usernames, concurrency)
        running = [JobUsage.of(job.name, job.spec) for jobs in found.values() if isinstance(jobs, list)
                   for job in jobs if job.holds_resources]
        return found, await self.capacity(running)

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
    the job as its kind says. Reading usage changes nothing in the cluster: a job whose
    workers Kubernetes refuses for good reads as failed here, and is stopped when its
    user's own listing reads it (KubernetesBackend.list)."""

    def __init__(self, api: KubeApi, namespace_template: str, gpu_resource: str, job_kind: str = DEFAULT_JOB_KIND):
        self.api = api
        self.namespace_template = namespace_template
        self.gpu_resource = gpu_resource
        self.job_kind = job_kind
        self._told_per_user = False  # why every user's namespace is read on its own, logged once
        self._live_pods_copy = WatchedCopy(api, WatchedList(api_path("v1", "pods"), LIVE_PODS_SELECTOR, "live pods"))
        self._nodes_copy = WatchedCopy(api, WatchedList(api_path("v1", "nodes"), what="nodes"))
        self._quotas_copy = WatchedCopy(api, WatchedList(api_path("v1", "resourcequotas"), what="resource quotas"))
        self._copies = (self._live_pods_copy, self._nodes_copy, self._quotas_copy)

    def start_watching(self) -> None:
        """Keep watched copies of the live pods, the nodes and the ResourceQuotas for the pages
        (a long-lived service); until then, and whenever a copy may be behind, the pages list them."""
        for copy in self._copies:
            copy.start()

    async def stop_watching(self) -> None:
        for copy in self._copies:
            await copy.stop()

    @property
    def kind(self) -> JobKind:
        return JOB_KINDS[self.job_kind]

    def backend(self, username: str) -> KubernetesBackend:
        """Raises NoNamespace when no namespace name can be derived for the user."""
        return backend_class(KUBERNETES)(api=self.api, namespace=namespace_for(username, self.namespace_template),
                                         user=username, gpu_resource=self.gpu_resource, job_kind=self.job_kind)

    async def jobs(self, username: str) -> list[Job]:
        return [view for _, view in await self.backend(username).list_views()]

    async def cancel(self, username: str, job: str) -> Job:
        return await self.backend(username).cancel(job)

    async def report(self, username: str, effective: Effective) -> QuotaReport:
        """Raises NoNamespace when no namespace name can be derived for the user."""
        backend = self.backend(username)
        try:
            jobs = [view for _, view in await backend.list_views()]
        except PaddleCloudError:
            jobs = []
        try:
            in_use = (await backend.quota_in_namespace())[1]  # the API server's own count, notebooks included
        except PaddleCloudError:
            in_use = {}
        return report(username, effective, jobs, now(), in_use)

    # ---- every user at once

    def _namespaces(self, usernames: Iterable[str]) -> tuple[dict[str, list[str]], dict[str, PaddleCloudError]]:
        """Each user namespace's users (one each, unless the template shares a namespace), and
        the NoNamespace error of each user whose namespace has no valid name."""
        users: dict[str, list[str]] = {}
        errors: dict[str, PaddleCloudError] = {}
        for username in usernames:
            try:
                users.setdefault(namespace_for(username, self.namespace_template), []).append(username)
            except PaddleCloudError as exc:
                errors[username] = exc
        return users, errors

    def _read_per_user(self, denied: Forbidden) -> None:
        if not self._told_per_user:
            self._told_per_user = True
            log.warning("The quota pages read each user's namespace on its own, a few requests per user: %s "
                        "To read every user's jobs in a few requests, let this account list jobs, pods, events "
                        "and resourcequotas cluster-wide (the chart's ClusterRole does).", denied.message)

    async def _list(self, action: str, path: str, method: str = "list", **params: str) -> list[dict]:
        """The items of one cluster-wide list (`method` "get" for objects without a spec, which
        KubeApi.list does not trim)."""
        from ..backends.kubernetes import call_api

        data = await call_api(lambda: self.api, action, method, path, namespace="", gpu_resource=self.gpu_resource,
                              **params)
        return data.get("items", [])

    @contextlib.asynccontextmanager
    async def _live_pods(self) -> AsyncIterator[asyncio.Future[list[dict]]]:
        """One read of every live pod in the cluster (they hold their requests), for the parts of
        a page that await it: the jobs' running workers and what the nodes or quotas count.
        Stopped at the end if still running (a part failed before it awaited). From the watched
        copy where it is in step."""
        live = asyncio.ensure_future(self._read(self._live_pods_copy, "list pods"))
        try:
            yield live
        finally:
            live.cancel()
            if live.done() and not live.cancelled():
                live.exception()  # seen: an error no part awaited is not worth a log line of its own

    async def _views(self, namespaces: Iterable[str], live_pods: Awaitable[list[dict]]) -> dict[str, list[Job]]:
        """The job views of every one of `namespaces`, as each namespace's own listing reads them
        (KubernetesBackend.list_views, without Kueue's view: the service sets no queue), from
        one list of our jobs, the cluster's `live_pods` and the finished pods of the jobs not
        succeeded (a list per MAX_NAMES_IN_SELECTOR names; most of those jobs' pods are live, so
        these are short) and, only when a job waits without pods, one list of FailedCreate events."""
        namespaces = list(namespaces)
        kind = self.kind
        jobs = by_namespace(await self._list("list jobs", api_path(kind.api_version, kind.plural),
                                             labelSelector=label_selector()), namespaces)
        names = sorted({name for namespace_jobs in jobs.values() for name in open_jobs(kind, namespace_jobs)})
        live = await live_pods  # before the finished ones: a pod that ends in between is in both, not in neither
        finished = await asyncio.gather(*(
            self._list("list pods", api_path("v1", "pods"), labelSelector=jobs_selector(names[at:at + MAX_NAMES_IN_SELECTOR]),
                       fieldSelector=FINISHED_PODS_SELECTOR)
            for at in range(0, len(names), MAX_NAMES_IN_SELECTOR)))
        pods = by_namespace(latest_of_each([live, *finished]), namespaces)
        refusals: list[dict] = []
        if any(refusals_needed(kind, jobs[namespace], open_job_pods(kind, jobs[namespace], pods[namespace]))
               for namespace in jobs):
            refusals = await self._list("list events", api_path("v1", "events"), "get", fieldSelector="reason=FailedCreate")
        return views_by_namespace(jobs, pods, by_namespace(refusals, namespaces), kind=kind, gpu_resource=self.gpu_resource)

    async def _in_use(self, namespaces: Iterable[str], live_pods: Awaitable[list[dict]]) -> dict[str, dict[str, Decimal]]:
        """What each of `namespaces` has in use (KubernetesBackend.quota_in_namespace), from one
        list of ResourceQuotas and the cluster's `live_pods`."""
        from ..backends.kubernetes import namespace_quota

        quotas, pods = await asyncio.gather(self._read(self._quotas_copy, "read resource quotas"), live_pods)
        quotas_in, pods_in = by_namespace(quotas, namespaces), by_namespace(pods, namespaces)
        return {namespace: namespace_quota(quotas_in[namespace], pods_in[namespace], self.gpu_resource)[1]
                for namespace in quotas_in}

    async def jobs_of(self, usernames: Iterable[str], concurrency: int) -> dict[str, list[Job] | PaddleCloudError]:
        """Each user's jobs, or why they cannot be read (NoNamespace: no valid namespace name).
        Objects outside the users' namespaces are ignored."""
        async with self._live_pods() as live:
            return await self._jobs_of(usernames, concurrency, live)

    async def _jobs_of(self, usernames: Iterable[str], concurrency: int, live_pods: Awaitable[list[dict]]
                       ) -> dict[str, list[Job] | PaddleCloudError]:
        usernames = list(usernames)
        namespaces, answers = self._namespaces(usernames)
        try:
            views = await self._views(namespaces, live_pods)
        except Forbidden as exc:
            self._read_per_user(exc)
            return await per_user(usernames, self.jobs, concurrency)
        except PaddleCloudError as exc:  # the API server is away: so it is for everyone
            return {**{username: exc for users in namespaces.values() for username in users}, **answers}
        for namespace, users in namespaces.items():
            answers.update((username, views[namespace]) for username in users)
        return answers

    async def jobs_and_capacity(self, usernames: Iterable[str], concurrency: int
                                ) -> tuple[dict[str, list[Job] | PaddleCloudError], dict]:
        """Each user's jobs (jobs_of) and the cluster's capacity, from one read of the live pods."""
        async with self._live_pods() as live:
            return await asyncio.gather(self._jobs_of(usernames, concurrency, live), self._capacity(live))

    async def reports(self, effective: Mapping[str, Effective], concurrency: int
                      ) -> dict[str, QuotaReport | PaddleCloudError]:
        """Each user's QuotaReport under their `effective` limits, as report() reads it, or why
        it cannot be read (NoNamespace)."""
        namespaces, answers = self._namespaces(effective)
        async with self._live_pods() as live:
            views, in_use = await asyncio.gather(self._views(namespaces, live), self._in_use(namespaces, live),
                                                 return_exceptions=True)
        denied = next((found for found in (views, in_use) if isinstance(found, Forbidden)), None)
        if denied is not None:
            self._read_per_user(denied)
            return await per_user(effective, lambda username: self.report(username, effective[username]), concurrency)
        for found in (views, in_use):
            if isinstance(found, BaseException) and not isinstance(found, PaddleCloudError):
                raise found
        at = now()
        for namespace, users in namespaces.items():
            jobs = views.get(namespace, []) if isinstance(views, dict) else []  # unreadable: none, as report() reads it
            used = in_use.get(namespace, {}) if isinstance(in_use, dict) else {}
            answers.update((username, report(username, effective[username], jobs, at, used)) for username in users)
        return answers

    async def _read(self, copy: WatchedCopy, action: str) -> list[dict]:
        """The watched copy's objects where it is in step, else a list of what it watches."""
        items = copy.items()
        if items is not None:
            return items
        return await self._list(action, copy.watched.path, **copy.watched.params())

    async def _capacity(self, live_pods: Awaitable[list[dict]]) -> dict:
        """Every node's allocatable resources and its live pods' requests (notebooks included)."""
        try:
            nodes, pods = await asyncio.gather(self._read(self._nodes_copy, "list nodes"), live_pods)
        except PaddleCloudError as exc:
            return capacity_error(KUBERNETES, exc.message)
        usage = node_usage(nodes, pods, self.gpu_resource)
        return {"source": KUBERNETES, "nodes": [node.to_dict() for node in usage], "total": total(usage)}
