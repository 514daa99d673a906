"""Quotas on Kubernetes: each user's effective limits become the ResourceQuota
`paddlecloud-quota` in their namespace, so the API server enforces them for every pod.

Call `sync_user_quota(username, groups, namespace=...)` before a user's notebook starts
(KubeSpawner pre_spawn_hook, once the namespace exists); the quota service calls the
same code after every change. The running-jobs cap rides along as the annotation
`paddlecloud.io/running-jobs` on that ResourceQuota; KubernetesBackend.preflight reads it.
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Iterable

from .. import tenancy
from ..errors import BackendUnavailable
from .model import GPU_RESOURCE, QUOTA_NAME, Limits, QuotaConfig, quota_annotations, resolve, resource_quota_hard
from .store import CONFIGMAP_NAME, KubernetesQuotaStore

log = logging.getLogger(__name__)

DEFAULT_NAMESPACE_TEMPLATE = "paddlecloud-{username}"
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def namespace_for(username: str, template: str = DEFAULT_NAMESPACE_TEMPLATE) -> str:
    """The user's namespace from a template with {username}. Names that are not valid in a
    namespace name must be passed explicitly (KubeSpawner's escaped `spawner.namespace`)."""
    try:  # KubeSpawner's own escaping, so both agree on names like "Alice@example.org"
        from kubespawner.slugs import safe_slug
    except ImportError:
        safe_slug = str
    name = template.format(username=safe_slug(username))
    if len(name) > 63 or not _DNS_LABEL.match(name):
        raise ValueError(f"'{name}' (from template '{template}') is not a valid namespace name; "
                         "pass the namespace explicitly")
    return name


def user_resource_quota(namespace: str, limits: Limits, gpu_resource: str = GPU_RESOURCE) -> dict | None:
    """The ResourceQuota for these effective limits, or None when nothing is limited (pure)."""
    hard = resource_quota_hard(limits, gpu_resource)
    annotations = quota_annotations(limits)
    if not hard and not annotations:
        return None
    quota = tenancy.resource_quota(namespace, hard)
    if annotations:
        quota["metadata"]["annotations"] = annotations
    return quota


def hub_namespace_default() -> str:
    """The hub's own namespace: $POD_NAMESPACE, the service account's, else 'default'."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return "default"


async def make_api_client(kubeconfig: str | None = None, context: str | None = None):
    """A kubernetes_asyncio ApiClient: in-cluster credentials when running in a pod,
    else the kubeconfig ($KUBECONFIG or ~/.kube/config)."""
    from kubernetes_asyncio import client, config

    from ..backends.base import in_cluster

    configuration = client.Configuration()
    try:
        if in_cluster() and not kubeconfig:
            config.load_incluster_config(client_configuration=configuration)
        else:
            await config.load_kube_config(config_file=kubeconfig or os.environ.get("KUBECONFIG"),
                                          context=context, client_configuration=configuration)
    except Exception as exc:
        raise BackendUnavailable(f"Cannot load Kubernetes credentials: {exc}") from exc
    return client.ApiClient(configuration)


async def write_resource_quota(api_client, namespace: str, quota: dict | None, missing_ok: bool = False) -> dict | None:
    """Create, replace or (quota None) delete `paddlecloud-quota` in `namespace`.

    A missing namespace is an error unless `missing_ok` (then nothing is written:
    the quota is written when the namespace is created at the user's next start)."""
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.exceptions import ApiException

    core = client.CoreV1Api(api_client)
    try:
        try:
            current = await core.read_namespaced_resource_quota(QUOTA_NAME, namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            current = None
        if quota is None:
            if current is not None:
                await core.delete_namespaced_resource_quota(QUOTA_NAME, namespace)
            return None
        if current is None:
            await core.create_namespaced_resource_quota(namespace, quota)
        else:
            body = json.loads(json.dumps(quota))
            body["metadata"]["resourceVersion"] = current.metadata.resource_version
            await core.replace_namespaced_resource_quota(QUOTA_NAME, namespace, body)
        return quota
    except ApiException as exc:
        if exc.status == 404 and missing_ok:
            log.info("Namespace %s does not exist yet; its quota is written when it is created", namespace)
            return None
        try:
            message = json.loads(exc.body).get("message") or exc.reason
        except (TypeError, ValueError, AttributeError):
            message = exc.reason
        raise BackendUnavailable(
            f"Cannot write the ResourceQuota {namespace}/{QUOTA_NAME} (HTTP {exc.status}): {message}") from exc


class QuotaSync:
    """Writes users' ResourceQuotas from the settings in the ConfigMap store."""

    def __init__(self, api_client, store: KubernetesQuotaStore,
                 namespace_template: str = DEFAULT_NAMESPACE_TEMPLATE, gpu_resource: str = GPU_RESOURCE):
        self.api_client = api_client
        self.store = store
        self.namespace_template = namespace_template
        self.gpu_resource = gpu_resource

    async def sync_user(self, username: str, groups: Iterable[str], namespace: str | None = None,
                        config: QuotaConfig | None = None, missing_ok: bool = False) -> dict | None:
        """Write the user's ResourceQuota; returns it (None: nothing limited, none written)."""
        config = config if config is not None else await self.store.load()
        effective = resolve(config, username, groups)
        namespace = namespace or namespace_for(username, self.namespace_template)
        quota = user_resource_quota(namespace, effective.limits, self.gpu_resource)
        return await write_resource_quota(self.api_client, namespace, quota, missing_ok=missing_ok)


async def sync_user_quota(username: str, groups: Iterable[str], *, namespace: str | None = None,
                          hub_namespace: str | None = None, configmap_name: str = CONFIGMAP_NAME,
                          namespace_template: str = DEFAULT_NAMESPACE_TEMPLATE,
                          gpu_resource: str = GPU_RESOURCE, api_client=None,
                          kubeconfig: str | None = None) -> dict | None:
    """Write `username`'s ResourceQuota from the quota settings; for KubeSpawner's
    pre_spawn_hook:

        async def pre_spawn_hook(spawner):
            ...create the namespace objects (paddle_ext.tenancy)...
            await sync_user_quota(spawner.user.name, [g.name for g in spawner.user.groups],
                                  namespace=spawner.namespace)

    Settings come from ConfigMap `configmap_name` in `hub_namespace` (default: the hub's
    own namespace). Without `api_client`, one is made from in-cluster credentials or the
    kubeconfig and closed again. Returns the ResourceQuota written (None: no limits).
    """
    own_client = api_client is None
    if own_client:
        api_client = await make_api_client(kubeconfig)
    try:
        store = KubernetesQuotaStore(api_client, hub_namespace or hub_namespace_default(), configmap_name)
        sync = QuotaSync(api_client, store, namespace_template, gpu_resource)
        return await sync.sync_user(username, groups, namespace=namespace)
    finally:
        if own_client:
            await api_client.close()


def spawner_quota_sync(hub_namespace: str | None = None, configmap_name: str = CONFIGMAP_NAME,
                       gpu_resource: str = GPU_RESOURCE, initial_default: dict | None = None):
    """An async callable (spawner) -> None for PaddleCloudSpawner.quota_sync (paddle_ext.kubehub):
    writes the user's ResourceQuota into `spawner.namespace` with the spawner's own API client.

    `initial_default` ({"gpus": 1, "cpu": "4", ...}) is the default used while nobody has
    saved any quota yet (no ConfigMap); once an admin saves one, the ConfigMap rules.
    """
    from .model import Entry, Limits, parse_patch

    seed = Limits.from_dict(parse_patch(initial_default)) if initial_default else None

    async def quota_sync(spawner) -> None:
        api_client = spawner.api.api_client
        store = KubernetesQuotaStore(api_client, hub_namespace or hub_namespace_default(), configmap_name)
        config = await store.load()
        if seed is not None and config.version == 0:
            config = QuotaConfig(default=Entry(seed))
        groups = [group.name for group in spawner.user.groups]
        written = await QuotaSync(api_client, store, gpu_resource=gpu_resource).sync_user(
            spawner.user.name, groups, namespace=spawner.namespace, config=config)
        spawner.log.info("Quota of %s in %s: %s", spawner.user.name, spawner.namespace,
                         (written or {}).get("spec", {}).get("hard", "unlimited"))

    return quota_sync
