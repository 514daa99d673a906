"""Quotas on Kubernetes: each user's effective limits become the ResourceQuota
`paddlecloud-quota` in their namespace, so the API server enforces them for every pod.

The spawner writes it before a user's notebook starts (once the namespace exists); the
quota service writes it again after every change that affects the user. The
running-jobs cap and where each limit comes from ride along as annotations; the
notebook's KubernetesBackend reads them (`paddlecloud quota`, its preflight).
"""

from __future__ import annotations

import logging
import os
from typing import Iterable

from ..constants import QUOTA_NAME, USER_NAMESPACE_TEMPLATE, GPU_RESOURCE, SERVICE_ACCOUNT_DIR
from ..errors import BackendUnavailable
from ..kubeapi import KubeApi, KubeApiError, KubeUnreachable, api_path
from ..quota.model import QuotaConfig, resolve
from ..quota.store import KubernetesQuotaStore
from ..tenancy import user_resource_quota
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


class QuotaSync:
    """Writes users' ResourceQuotas from the settings in the ConfigMap store (whose
    site default is the chart's settings.default_quota: see `site_default_quota`)."""

    def __init__(self, api: KubeApi, store: KubernetesQuotaStore,
                 namespace_template: str = USER_NAMESPACE_TEMPLATE, gpu_resource: str = GPU_RESOURCE,
                 objects: dict | None = None):
        self.api = api
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
        quota = user_resource_quota(namespace, resolve(config, username, groups), self.gpu_resource,
                                    self.objects)
        return await write_resource_quota(self.api, namespace, quota, missing_ok=missing_ok)
