"""Quotas on Kubernetes: each user's effective limits become the ResourceQuota
`paddlecloud-quota` in their namespace, so the API server enforces them for every pod.

The spawner writes it before a user's notebook starts (once the namespace exists); the
quota service writes it again after every change that affects the user. The
running-jobs cap and where each limit comes from ride along as annotations; the
notebook's KubernetesBackend reads them (`paddlecloud quota`, its preflight).

With Kueue (`kueue`, a QueuePolicy: the hub's `kueue_enabled`), the same path writes the
queues of module `paddle_ext.quota.queues`, from the same settings: the ResourceFlavor, the
user's ClusterQueue, the LocalQueue `default` in the user's namespace, and the
ResourceQuota as the backstop (never below what Kueue may admit), annotated with the
user's queue for the notebook's preflight and status. Without Kueue nothing of Kueue is
written or read.
"""

from __future__ import annotations

import logging
import os
from typing import Iterable, Mapping

from ..constants import QUOTA_NAME, USER_NAMESPACE_TEMPLATE, GPU_RESOURCE, SERVICE_ACCOUNT_DIR
from ..errors import BackendUnavailable
from ..kubeapi import KubeApi, KubeApiError, KubeUnreachable, api_path
from ..constants import QUEUE_ANNOTATION
from ..quota import queue_admin, queues
from ..quota.model import Effective, QuotaConfig, resolve
from ..quota.store import KubernetesQuotaStore
from ..tenancy import local_queue, user_resource_quota
from .settings import namespace_for

log = logging.getLogger(__name__)


def hub_namespace_default() -> str:
    """The hub's own namespace: $POD_NAMESPACE, the service account's, else 'default'."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        with open(os.path.join(SERVICE_ACCOUNT_DIR, "namespace"), encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return "default"


def merge_patch(current: dict, wanted: dict) -> dict:
    """The JSON merge patch that turns the ResourceQuota `current` into `wanted` (its labels,
    annotations and spec.hard; a key `wanted` lacks is removed with null). A patch carries no
    resourceVersion, so it never loses a race with the quota controller's status writes."""
    def changes(have: dict | None, want: dict | None) -> dict:
        have, want = have or {}, want or {}
        return {**{key: None for key in have if key not in want}, **want}

    metadata, current_metadata = wanted.get("metadata") or {}, current.get("metadata") or {}
    return {"metadata": {"labels": changes(current_metadata.get("labels"), metadata.get("labels")),
                         "annotations": changes(current_metadata.get("annotations"), metadata.get("annotations"))},
            "spec": {**(wanted.get("spec") or {}),
                     "hard": changes((current.get("spec") or {}).get("hard"), (wanted.get("spec") or {}).get("hard"))}}


async def write_resource_quota(api: KubeApi, namespace: str, quota: dict | None,
                               missing_ok: bool = False, attempts: int = 3) -> dict | None:
    """Create, patch or (quota None) delete `paddlecloud-quota` in `namespace`.

    The quota controller (and quota admission, on every counted object made in the namespace)
    writes the object's status all the time, so it is changed with a merge patch, not a replace
    that would need its resourceVersion; a create that lost the race to another is retried.
    A missing namespace is an error unless `missing_ok` (then nothing is written: the
    quota is written when the namespace is created at the user's next start)."""
    path = api_path("v1", "resourcequotas", namespace, QUOTA_NAME)
    for attempt in range(attempts):
        try:
            return await _write_resource_quota_once(api, namespace, path, quota)
        except KubeApiError as exc:
            if exc.status == 409 and attempt + 1 < attempts:
                continue  # created by someone else since we read: patch it now
            if exc.status == 404 and missing_ok:
                log.info("Namespace %s does not exist yet; its quota is written when it is created", namespace)
                return None
            raise BackendUnavailable(exc.describe(f"write the ResourceQuota {namespace}/{QUOTA_NAME}")) from exc
        except KubeUnreachable as exc:
            raise BackendUnavailable(str(exc)) from exc
    raise AssertionError("unreachable: the last attempt returns or raises")


async def _write_resource_quota_once(api: KubeApi, namespace: str, path: str, quota: dict | None) -> dict | None:
    try:
        current = await api.get(path)
    except KubeApiError as exc:
        if exc.status != 404:
            raise
        current = None
    if quota is None:
        if current is not None:
            await api.delete(path)
        return None
    if current is None:
        await api.create(api_path("v1", "resourcequotas", namespace), quota)
    else:
        await api.patch(path, merge_patch(current, quota))
    return quota


async def _kube(what: str, call):
    """Run one API call; its failure as BackendUnavailable naming `what`."""
    try:
        return await call
    except KubeApiError as exc:
        raise BackendUnavailable(exc.describe(what)) from exc
    except KubeUnreachable as exc:
        raise BackendUnavailable(str(exc)) from exc


async def apply_cluster_object(api: KubeApi, obj: dict) -> None:
    """Create a cluster-scoped Kueue object, or merge-patch its labels, annotations and spec."""
    plural = {"ResourceFlavor": "resourceflavors", "ClusterQueue": "clusterqueues"}[obj["kind"]]
    name = obj["metadata"]["name"]
    what = f"write the {obj['kind']} {name}"
    try:
        await api.create(api_path(queues.KUEUE_API_VERSION, plural), obj)
    except KubeApiError as exc:
        if exc.status != 409:
            raise BackendUnavailable(exc.describe(what)) from exc
        patch = {"metadata": {key: obj["metadata"][key] for key in ("labels", "annotations") if key in obj["metadata"]},
                 "spec": obj.get("spec") or {}}
        await _kube(what, api.patch(api_path(queues.KUEUE_API_VERSION, plural, name=name), patch))
    except KubeUnreachable as exc:
        raise BackendUnavailable(str(exc)) from exc


async def write_local_queue(api: KubeApi, namespace: str, cluster_queue: str, missing_ok: bool = False,
                            weight: str | None = None) -> dict | None:
    """The LocalQueue `default` in `namespace`, pointing at `cluster_queue` (with the user's
    fair-sharing `weight`). Its clusterQueue is immutable in Kueue, so one that points elsewhere
    (the user changed teams) is replaced; jobs waiting in it keep their queue name and are
    queued again in the new one. A changed weight is patched in place."""
    path = api_path(queues.KUEUE_API_VERSION, "localqueues", namespace, queues.LOCAL_QUEUE)
    wanted = local_queue(namespace, queues.LOCAL_QUEUE, cluster_queue, weight)
    what = f"write the LocalQueue {namespace}/{queues.LOCAL_QUEUE}"
    try:
        current = await api.get(path)
    except KubeApiError as exc:
        if exc.status != 404:
            raise BackendUnavailable(exc.describe(what)) from exc
        current = None
    except KubeUnreachable as exc:
        raise BackendUnavailable(str(exc)) from exc
    if current is not None:
        spec = current.get("spec") or {}
        if spec.get("clusterQueue") == cluster_queue:
            if spec.get("fairSharing") == wanted["spec"].get("fairSharing"):
                return current
            return await _kube(what, api.patch(path, {"spec": {"fairSharing": wanted["spec"].get("fairSharing")}}))
        await _kube(what, api.delete(path))
    try:
        return await api.create(api_path(queues.KUEUE_API_VERSION, "localqueues", namespace), wanted)
    except KubeApiError as exc:
        if exc.status == 404 and missing_ok:
            return None
        if exc.status == 409:  # made meanwhile by another writer of the same settings
            return wanted
        raise BackendUnavailable(exc.describe(what)) from exc
    except KubeUnreachable as exc:
        raise BackendUnavailable(str(exc)) from exc


class QuotaSync:
    """Writes users' ResourceQuotas from the settings in the ConfigMap store (whose
    site default is the chart's settings.default_quota: see `site_default_quota`), and
    with `kueue` (a QueuePolicy) their queues."""

    def __init__(self, api: KubeApi, store: KubernetesQuotaStore,
                 namespace_template: str = USER_NAMESPACE_TEMPLATE, gpu_resource: str = GPU_RESOURCE,
                 objects: dict | None = None, kueue: queues.QueuePolicy | None = None):
        self.api = api
        self.kueue = kueue
        self.objects = objects  # object counts and scratch disk (tenancy.OBJECT_QUOTA when None)
        self.store = store
        self.namespace_template = namespace_template
        self.gpu_resource = gpu_resource

    async def config(self) -> QuotaConfig:
        return await self.store.load()

    async def sync_user(self, username: str, groups: Iterable[str], namespace: str | None = None,
                        config: QuotaConfig | None = None, missing_ok: bool = False) -> dict | None:
        """Write the user's ResourceQuota (there is always one: it bars NodePort and LoadBalancer
        Services); returns it, or None when the namespace does not exist yet and `missing_ok`."""
        config = config if config is not None else await self.config()
        namespace = namespace or namespace_for(username, self.namespace_template)
        effective = resolve(config, username, groups)
        annotations = {}
        if self.kueue is not None:
            queue = queues.queue_for(config, username, groups)
            # The LocalQueue first: without a namespace nothing is written (no queue for a user who
            # never started a server); all of it is written at the user's next start.
            weight = queues.weight_quantity(self.kueue.weight(username))
            if await write_local_queue(self.api, namespace, queue.name, missing_ok=missing_ok, weight=weight) is None:
                return None
            await self.sync_queue(queue)
            effective = Effective(queues.backstop(effective.limits, queue, self.kueue), effective.sources)
            annotations[QUEUE_ANNOTATION] = queues.queue_annotation(queue, self.kueue)
        quota = user_resource_quota(namespace, effective, self.gpu_resource, self.objects, annotations)
        return await write_resource_quota(self.api, namespace, quota, missing_ok=missing_ok)

    async def sync_queue(self, queue: queues.Queue) -> None:
        """The flavor and one ClusterQueue (Kueue only)."""
        await apply_cluster_object(self.api, queues.resource_flavor())
        await apply_cluster_object(self.api, queues.cluster_queue(queue, self.kueue, self.gpu_resource))

    async def sync_teams(self, config: QuotaConfig | None = None) -> list[str]:
        """Every team's ClusterQueue, members or not (Kueue only; nothing without it).
        Returns the queues written."""
        if self.kueue is None:
            return []
        config = config if config is not None else await self.config()
        written = []
        for queue in queues.team_queues(config):
            await self.sync_queue(queue)
            written.append(queue.name)
        return written

    async def cluster_queues(self) -> list[dict]:
        """Every ClusterQueue in the cluster (Kueue only: [] without it); `queue_admin` picks ours.
        BackendUnavailable names what could not be read."""
        if self.kueue is None:
            return []
        listed = await _kube("read the Kueue ClusterQueues",
                             self.api.list(api_path(queues.KUEUE_API_VERSION, "clusterqueues")))
        return listed.get("items") or []

    async def queue_rows(self) -> list[queue_admin.QueueRow]:
        """What each of our ClusterQueues holds now (the overview's `queues`)."""
        return queue_admin.queue_rows(await self.cluster_queues(), self.gpu_resource)

    async def prune_queues(self, config: QuotaConfig, users: Mapping[str, Iterable[str]]) -> queue_admin.Prune:
        """Delete our ClusterQueues the model no longer wants (`users`: every hub user -> their
        groups, all of them: a user left out loses their personal queue) once they hold no
        workload; a busy one is kept for the next sync (queue_admin's docstring). The delete is
        conditional on the resourceVersion read, so a queue that took a job since is kept too.
        Returns what was deleted and what was kept, and why."""
        if self.kueue is None:
            return queue_admin.Prune({}, {})
        plan = queue_admin.queues_to_prune(await self.cluster_queues(), queue_admin.wanted_queues(config, users))
        deleted, keep = {}, dict(plan.keep)
        for name, version in plan.delete.items():
            path = api_path(queues.KUEUE_API_VERSION, "clusterqueues", name=name)
            body = {"preconditions": {"resourceVersion": version}} if version else None
            try:
                await self.api.request("DELETE", path, body=body)
                deleted[name] = version
                log.info("Deleted the ClusterQueue %s: no quota of the model wants it and it holds no job", name)
            except KubeApiError as exc:
                if exc.status == 404:
                    continue
                if exc.status == 409:  # changed since it was read (a job came): the next sync looks again
                    keep[name] = "changed while it was being deleted"
                    continue
                raise BackendUnavailable(exc.describe(f"delete the ClusterQueue {name}")) from exc
            except KubeUnreachable as exc:
                raise BackendUnavailable(str(exc)) from exc
        for name, why in keep.items():
            log.info("Keeping the ClusterQueue %s for now (no quota wants it): %s", name, why)
        return queue_admin.Prune(deleted, keep)
