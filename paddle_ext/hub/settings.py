"""JupyterHub on Kubernetes: settings, PaddlePaddle profiles and the spawner.

`hub_config/jupyterhub_config.py` loads `HubSettings` (a values file and the
environment, so the Helm chart can drive it) and configures `PaddleCloudSpawner`,
a KubeSpawner that prepares each user's namespace before the notebook starts:
ServiceAccount, Role + RoleBinding, LimitRange, ResourceQuota, dataset claims and
Pod Security `restricted`, and that refuses at once a profile the quota cannot fit.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import os
from typing import Any, Callable

import yaml

from . import tenancy
from .manifests import catalogue_volumes
from .quota.preflight import RESOURCE_WORDS, first_overflow, format_amount
from .spec import parse_quantity

GPU_RESOURCE = "nvidia.com/gpu"


@dataclasses.dataclass(frozen=True)
class HubSettings:
    """Everything site-specific about the Kubernetes hub (see the chart's values)."""

    hub_namespace: str = "paddlecloud"
    user_namespace_template: str = "paddlecloud-{username}"
    gpu_image: str = "paddlecloud/notebook:3.3.1-gpu"
    cpu_image: str = "paddlecloud/notebook:3.3.1-cpu"
    worker_images: tuple[dict, ...] = ()
    gpu_node_selector: dict = dataclasses.field(default_factory=dict)
    gpu_tolerations: tuple[dict, ...] = ()
    datasets: tuple[dict, ...] = ()
    home_capacity: str = "10Gi"
    home_storage_class: str | None = None
    # The quota model's default until an admin saves quotas in the panel (fields as in
    # the quota API: gpus, cpu, memory, pods, running_jobs).
    default_quota: dict = dataclasses.field(default_factory=lambda: {
        "gpus": 4, "cpu": "32", "memory": "256Gi", "pods": 40, "running_jobs": 4})
    quota_service_port: int = 10101
    quota_service_host: str = "127.0.0.1"
    limit_range_cpu: str = "1"
    limit_range_memory: str = "2Gi"
    cull_idle_seconds: int = 3600
    hub_connect_url: str | None = None

    @classmethod
    def load(cls, values_file: str | None = None, environ: dict | None = None) -> HubSettings:
        """Values file (YAML, keys as the field names) then PADDLECLOUD_<FIELD> variables
        (JSON for lists and dicts) override the defaults."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        path = values_file or environ.get("PADDLECLOUD_VALUES")
        if path:
            with open(path, encoding="utf-8") as f:
                values.update(yaml.safe_load(f) or {})
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(fields))
        if unknown:
            raise ValueError(f"unknown setting(s) in {path}: {', '.join(unknown)}")
        for name in fields:
            text = environ.get(f"PADDLECLOUD_{name.upper()}")
            if text is not None:
                values[name] = _parse_env_value(name, text)
        for name in ("worker_images", "gpu_tolerations", "datasets"):
            if name in values:
                values[name] = tuple(values[name])
        return cls(**values)


def _parse_env_value(name: str, text: str):
    if name in ("worker_images", "gpu_tolerations", "datasets", "gpu_node_selector", "default_quota"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"PADDLECLOUD_{name.upper()} must be JSON: {exc}") from exc
    if name in ("cull_idle_seconds", "quota_service_port"):
        return int(text)
    return text or None if name in ("home_storage_class", "hub_connect_url") else text


def profile_list(settings: HubSettings) -> list[dict]:
    """The notebook choices: PaddlePaddle GPU (1 GPU), GPU x4, CPU only."""
    def gpu_profile(slug: str, gpus: int, cpu: str, memory: str, default: bool = False) -> dict:
        override = {
            "image": settings.gpu_image,
            "extra_resource_limits": {GPU_RESOURCE: str(gpus)},
            "extra_resource_guarantees": {GPU_RESOURCE: str(gpus)},
            "cpu_guarantee": float(parse_quantity(cpu)), "cpu_limit": float(parse_quantity(cpu)),
            "mem_guarantee": memory, "mem_limit": memory,
        }
        if settings.gpu_node_selector:
            override["node_selector"] = dict(settings.gpu_node_selector)
        if settings.gpu_tolerations:
            override["tolerations"] = [dict(t) for t in settings.gpu_tolerations]
        return {"display_name": f"PaddlePaddle GPU x{gpus}" if gpus > 1 else "PaddlePaddle GPU",
                "slug": slug, "description": f"{gpus} GPU, {cpu} CPU, {memory} memory", "default": default,
                "kubespawner_override": override}

    return [
        gpu_profile("paddle-gpu", 1, "8", "32G", default=True),
        gpu_profile("paddle-gpu-x4", 4, "32", "128G"),
        {"display_name": "PaddlePaddle CPU only", "slug": "paddle-cpu", "description": "2 CPU, 8G memory",
         "kubespawner_override": {"image": settings.cpu_image, "cpu_guarantee": 2.0, "cpu_limit": 2.0,
                                  "mem_guarantee": "8G", "mem_limit": "8G"}},
    ]


def notebook_datasets(settings: HubSettings) -> tuple[list[dict], list[dict]]:
    """Every catalogue dataset, read-only, at the same paths job pods use."""
    return catalogue_volumes([d["name"] for d in settings.datasets], settings.datasets)


def dataset_claims(settings: HubSettings, namespace: str) -> list[dict]:
    """PersistentVolumeClaims the catalogue asks for in each user namespace (entries with "claim")."""
    claims = []
    for entry in settings.datasets:
        claim_spec = entry.get("claim")
        if claim_spec:
            name = entry["volume"]["persistentVolumeClaim"]["claimName"]
            claims.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                           "metadata": {"name": name, "namespace": namespace, "labels": dict(tenancy.MANAGED_BY)},
                           "spec": claim_spec})
    return claims


def notebook_environment(settings: HubSettings) -> dict[str, str]:
    """What the notebook's paddle_ext extension and CLI need to know.

    Braces are doubled: KubeSpawner expands {username}-style templates in env values."""
    env = {
        "PADDLECLOUD_BACKEND": "kubernetes",
        "PADDLECLOUD_DATASETS": json.dumps(list(settings.datasets)),
        "PADDLECLOUD_IMAGES": json.dumps(list(settings.worker_images)),
    }
    return {key: value.replace("{", "{{").replace("}", "}}") for key, value in env.items()}


def profile_request(cpu: float | None, memory: str | int | None, gpus: int) -> dict[str, Any]:
    """What a notebook pod adds to its namespace, in ResourceQuota terms (pure)."""
    request = {"pods": parse_quantity("1")}
    if gpus:
        request[f"requests.{GPU_RESOURCE}"] = parse_quantity(str(gpus))
    if cpu:
        request["requests.cpu"] = parse_quantity(str(cpu))
    if memory:
        request["requests.memory"] = parse_quantity(str(memory))
    return request


def quota_refusal(request: dict, quota: dict) -> str | None:
    """Why a notebook with `request` cannot start under ResourceQuota `quota`, or None."""
    overflow = first_overflow(request, quota)
    if overflow is None:
        return None
    resource, amount, limit, in_use = overflow
    return (f"This server needs {format_amount(resource, amount)} {RESOURCE_WORDS.get(resource, resource)}, "
            f"but your quota ({quota['metadata']['name']}: {resource}) is {format_amount(resource, limit)} "
            f"and {format_amount(resource, in_use)} are in use. Pick a smaller profile or ask an admin.")


@functools.cache
def _spawner_class():
    from kubernetes_asyncio.client import RbacAuthorizationV1Api
    from kubernetes_asyncio.client.rest import ApiException
    from kubespawner import KubeSpawner
    from tornado import web
    from traitlets import Any as AnyTrait

    class PaddleCloudSpawner(KubeSpawner):
        """KubeSpawner that prepares the user's namespace and checks the quota first."""

        paddlecloud_settings = AnyTrait(help="HubSettings for this hub.").tag(config=True)
        quota_sync = AnyTrait(None, allow_none=True, help="""Optional async callable (spawner) -> None that
            writes the user's ResourceQuota from the quota model before the namespace is checked.""").tag(config=True)

        async def _create_ignoring_conflict(self, create: Callable, *args) -> None:
            try:
                await asyncio.wait_for(create(*args), self.k8s_api_request_timeout)
            except ApiException as exc:
                if exc.status != 409:
                    raise

        async def _ensure_namespace(self):
            await super()._ensure_namespace()
            settings: HubSettings = self.paddlecloud_settings
            ns = self.namespace
            rbac = RbacAuthorizationV1Api(self.api.api_client)
            await self._create_ignoring_conflict(self.api.create_namespaced_service_account, ns,
                                                 tenancy.service_account(ns))
            await self._create_ignoring_conflict(rbac.create_namespaced_role, ns, tenancy.role(ns))
            await self._create_ignoring_conflict(rbac.create_namespaced_role_binding, ns, tenancy.role_binding(ns))
            await self._create_ignoring_conflict(self.api.create_namespaced_limit_range, ns, tenancy.limit_range(
                ns, settings.limit_range_cpu, settings.limit_range_memory))
            for claim in dataset_claims(settings, ns):
                await self._create_ignoring_conflict(self.api.create_namespaced_persistent_volume_claim, ns, claim)
            if self.quota_sync is not None:
                await self.quota_sync(self)
            await self._check_quota_fits()

        async def _check_quota_fits(self):
            gpus = int(self.extra_resource_guarantees.get(GPU_RESOURCE, 0) or
                       self.extra_resource_limits.get(GPU_RESOURCE, 0) or 0)
            request = profile_request(self.cpu_guarantee, self.mem_guarantee, gpus)
            quotas = await self.api.list_namespaced_resource_quota(self.namespace)
            for quota in quotas.items:
                as_dict = self.api.api_client.sanitize_for_serialization(quota)
                reason = quota_refusal(request, as_dict)
                if reason:
                    self.log.info("Refusing %s's server: %s", self.user.name, reason)
                    raise web.HTTPError(403, reason)

    return PaddleCloudSpawner


def __getattr__(name: str):
    if name == "PaddleCloudSpawner":  # imported lazily: kubespawner is a hub-only dependency
        return _spawner_class()
    raise AttributeError(name)
