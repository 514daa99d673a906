"""Where quota settings live: a JSON file (embedded default) or a ConfigMap (Kubernetes).

Both stores hold one `QuotaConfig` document and change it only through
`model.apply_update`, atomically:

- LocalQuotaStore: `$PADDLECLOUD_HOME/quotas.json`, read-modify-write under an
  exclusive fcntl lock on `quotas.json.lock`, written to a temporary file and renamed
  into place, so readers never see half a file and two writers never interleave.
- KubernetesQuotaStore: ConfigMap `paddlecloud-quotas` (key `quotas.json`) in the
  hub's namespace, replaced with its resourceVersion; when another writer got there
  first the API server answers 409 and the update is re-applied to the new document.

Lost updates: an update without an expected `revision` merges its fields into
whatever is current (fields it leaves out keep their value); one with a `revision`
(what the admin page sends) fails with QuotaConflict (409) if the entry has changed
since the editor read it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import json
import os
import tempfile
from typing import Any, Mapping

from ..constants import MANAGED_BY, QUOTA_CONFIGMAP, QUOTA_FILE_ENV, paddlecloud_home
from ..errors import BackendUnavailable
from ..kubeapi import KubeApi, KubeApiError, KubeUnreachable, api_path
from .model import Limits, QuotaConfig, QuotaInputError, apply_update

CONFIGMAP_KEY = "quotas.json"


def default_quota_file() -> str:
    """$PADDLECLOUD_QUOTA_FILE, else quotas.json in $PADDLECLOUD_HOME (default ~/.paddlecloud)."""
    return os.environ.get(QUOTA_FILE_ENV) or os.path.join(paddlecloud_home(), "quotas.json")


def _parse_document(text: str, where: str) -> QuotaConfig:
    try:
        return QuotaConfig.from_dict(json.loads(text))
    except (ValueError, TypeError, AttributeError, QuotaInputError) as exc:
        raise BackendUnavailable(f"The quota settings in {where} are not valid; fix or remove them ({exc}).") from exc


def lock_file(path: str) -> int:
    """Open `path` (created if needed) and take an exclusive fcntl lock on it; returns the
    file descriptor, whose closing releases the lock. Blocks while another holds it."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise BackendUnavailable(f"Cannot open the lock file {path}: {exc.strerror}.") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def file_lock(path: str):
    """An exclusive fcntl lock on `path`, held for the block (blocking; not for event loops)."""
    fd = lock_file(path)
    try:
        yield
    finally:
        os.close(fd)


class LocalQuotaStore:
    """Quota settings in a JSON file; safe for several processes at once.

    `site_default` is the deployment's own default (model rule 4): every config this store
    returns carries it, and it is never written to the file."""

    def __init__(self, path: str | None = None, site_default: Limits = Limits()):
        self.path = os.path.abspath(path or default_quota_file())
        self.site_default = site_default

    def read(self) -> QuotaConfig:
        """The current settings (empty ones when the file does not exist yet)."""
        try:
            with open(self.path, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            return QuotaConfig(site_default=self.site_default)
        except OSError as exc:
            raise BackendUnavailable(f"Cannot read the quota file {self.path}: {exc.strerror}.") from exc
        return dataclasses.replace(_parse_document(text, self.path), site_default=self.site_default)

    def _write(self, config: QuotaConfig) -> None:
        directory = os.path.dirname(self.path)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".quotas-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(config.to_dict(), f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise BackendUnavailable(f"Cannot write the quota file {self.path}: {exc.strerror}.") from exc

    def update_sync(self, kind: str, name: str | None, patch: Mapping[str, Any]) -> QuotaConfig:
        with file_lock(self.path + ".lock"):
            config = apply_update(self.read(), kind, name, patch)
            self._write(config)
            return config

    async def load(self) -> QuotaConfig:
        return await asyncio.to_thread(self.read)

    async def update(self, kind: str, name: str | None, patch: Mapping[str, Any]) -> QuotaConfig:
        """Apply a validated patch (model.parse_patch) to one entry; the new settings."""
        return await asyncio.to_thread(self.update_sync, kind, name, patch)


class KubernetesQuotaStore:
    """Quota settings in a ConfigMap, updated with optimistic concurrency.

    `site_default`: as for LocalQuotaStore (the chart's settings.default_quota)."""

    def __init__(self, api: KubeApi, namespace: str, name: str = QUOTA_CONFIGMAP, retries: int = 8,
                 site_default: Limits = Limits()):
        self.api = api
        self.namespace = namespace
        self.name = name
        self.retries = retries
        self.site_default = site_default

    @property
    def where(self) -> str:
        return f"ConfigMap {self.namespace}/{self.name}"

    async def _read(self) -> tuple[QuotaConfig, dict | None]:
        try:
            configmap = await self.api.get(api_path("v1", "configmaps", self.namespace, self.name))
        except KubeApiError as exc:
            if exc.status == 404:
                return QuotaConfig(site_default=self.site_default), None
            raise BackendUnavailable(exc.describe(f"read {self.where}")) from exc
        except KubeUnreachable as exc:
            raise BackendUnavailable(str(exc)) from exc
        text = (configmap.get("data") or {}).get(CONFIGMAP_KEY) or "{}"
        return dataclasses.replace(_parse_document(text, self.where), site_default=self.site_default), configmap

    async def load(self) -> QuotaConfig:
        return (await self._read())[0]

    async def update(self, kind: str, name: str | None, patch: Mapping[str, Any]) -> QuotaConfig:
        for _attempt in range(self.retries):
            current, configmap = await self._read()
            config = apply_update(current, kind, name, patch)  # QuotaConflict for a stale revision
            metadata = {"name": self.name, "namespace": self.namespace, "labels": dict(MANAGED_BY)}
            if configmap is not None:
                metadata["resourceVersion"] = configmap["metadata"]["resourceVersion"]
            body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata,
                    "data": {CONFIGMAP_KEY: json.dumps(config.to_dict(), indent=1, sort_keys=True)}}
            try:
                if configmap is None:
                    await self.api.create(api_path("v1", "configmaps", self.namespace), body)
                else:
                    await self.api.replace(api_path("v1", "configmaps", self.namespace, self.name), body)
                return config
            except KubeApiError as exc:
                if exc.status == 409:
                    continue  # someone else wrote first: re-read and re-apply
                raise BackendUnavailable(exc.describe(f"write {self.where}")) from exc
            except KubeUnreachable as exc:
                raise BackendUnavailable(str(exc)) from exc
        raise BackendUnavailable(
            f"Could not save the quota after {self.retries} tries: {self.where} keeps changing; try again.")
