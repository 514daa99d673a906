"""JupyterHub on Kubernetes: site settings and PaddlePaddle profiles (pure).

`hub_config/jupyterhub_config.py` loads `HubSettings` (a values file and the
environment, so the Helm chart can drive it) and sets KubeSpawner's traits from it;
`paddle_ext.hub.spawner.PaddleCloudSpawner` prepares each user's namespace.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any

import yaml

from ..constants import (BACKEND_ENV, DATASETS_ENV, GPU_NODE_SELECTOR_ENV, GPU_RESOURCE, GPU_RESOURCE_ENV,
                         GPU_TOLERATIONS_ENV, IMAGES_ENV, MANAGED_BY, USER_NAMESPACE_TEMPLATE, WORKSPACE_CLAIM_ENV,
                         WORKSPACE_MOUNT_ENV)
from ..manifests import catalogue_volumes
from ..quantity import parse_quantity
from ..quota.model import JobUsage

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclasses.dataclass(frozen=True)
class HubSettings:
    """Everything site-specific about the Kubernetes hub (see the chart's values)."""

    hub_namespace: str = "paddlecloud"
    user_namespace_template: str = USER_NAMESPACE_TEMPLATE
    gpu_image: str = "docker.io/paddlecloud/notebook:3.3.1-gpu"
    cpu_image: str = "docker.io/paddlecloud/notebook:3.3.1-cpu"
    worker_images: tuple[dict, ...] = ()
    # What the CPU-only notebook profile asks for (requests = limits).
    cpu_profile: dict = dataclasses.field(default_factory=lambda: {"cpu": "2", "memory": "8G"})
    gpu_resource: str = GPU_RESOURCE
    gpu_node_selector: dict = dataclasses.field(default_factory=dict)
    gpu_tolerations: tuple[dict, ...] = ()
    datasets: tuple[dict, ...] = ()
    home_capacity: str = "10Gi"
    home_storage_class: str | None = None
    # The users' home volumes are ReadWriteMany storage (CephFS, NFS, ...): job pods mount
    # the user's home too, run in the folder they were submitted from and keep their
    # outputs beside it. Off: the home is ReadWriteOnce and each job gets a snapshot.
    jobs_share_home: bool = False
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
    # Who may log in, an explicit choice (the hub will not start without one): these users,
    # members of these groups (authenticators that know groups, e.g. OAuthenticator, LDAP),
    # or, with allow_all, everyone the authenticator accepts. Admins may always log in.
    allowed_users: tuple[str, ...] = ()
    allowed_groups: tuple[str, ...] = ()
    allow_all: bool = False

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
        for name in _TUPLE_FIELDS:
            if name in values:
                values[name] = tuple(values[name])
        return cls(**values)


HOME_MOUNT = "/home/jovyan"
HOME_CLAIM_TEMPLATE = "home-{username}"
_BOOL_FIELDS = ("jobs_share_home", "allow_all")
_NAME_LIST_FIELDS = ("allowed_users", "allowed_groups")  # comma-separated in the environment
_TUPLE_FIELDS = ("worker_images", "gpu_tolerations", "datasets", *_NAME_LIST_FIELDS)
_JSON_FIELDS = _TUPLE_FIELDS + ("gpu_node_selector", "default_quota", "cpu_profile")
_INT_FIELDS = ("cull_idle_seconds", "quota_service_port")
_OPTIONAL_FIELDS = ("home_storage_class", "hub_connect_url")


def _parse_env_value(name: str, text: str):
    if name in _NAME_LIST_FIELDS:
        return tuple(item.strip() for item in text.split(",") if item.strip())
    if name in _JSON_FIELDS:
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"PADDLECLOUD_{name.upper()} must be JSON: {exc}") from exc
    if name in _INT_FIELDS:
        return int(text)
    if name in _BOOL_FIELDS:
        if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise ValueError(f"PADDLECLOUD_{name.upper()} must be true or false (got '{text}')")
        return text.lower() in ("true", "1", "yes")
    return text or None if name in _OPTIONAL_FIELDS else text


NO_LOGIN_CHOICE = ("PaddleCloud Hub: choose who may log in: set PADDLECLOUD_ALLOWED_USERS and/or "
                   "PADDLECLOUD_ALLOWED_GROUPS (comma-separated names), or PADDLECLOUD_ALLOW_ALL=true for everyone "
                   "the authenticator accepts (values file: allowed_users, allowed_groups, allow_all).")


def login_access(settings: HubSettings, authenticator: type) -> dict[str, Any]:
    """The Authenticator traits for who may log in, from the admin's explicit choice; ValueError
    (one sentence) when there is none, or when it cannot work with `authenticator`."""
    if settings.allow_all:
        if settings.allowed_users or settings.allowed_groups:
            raise ValueError("PaddleCloud Hub: PADDLECLOUD_ALLOW_ALL=true lets everyone in; it cannot be combined "
                             "with PADDLECLOUD_ALLOWED_USERS or PADDLECLOUD_ALLOWED_GROUPS.")
        return {"allow_all": True}
    if not settings.allowed_users and not settings.allowed_groups:
        raise ValueError(NO_LOGIN_CHOICE)
    if settings.allowed_groups and "allowed_groups" not in authenticator.class_traits():
        raise ValueError(f"PaddleCloud Hub: {authenticator.__name__} does not know groups, so "
                         "PADDLECLOUD_ALLOWED_GROUPS cannot work with it; use PADDLECLOUD_ALLOWED_USERS.")
    # The lists are the whole truth: a user added in the admin panel is not thereby let in.
    traits: dict[str, Any] = {"allow_all": False, "allow_existing_users": False}
    if settings.allowed_users:
        traits["allowed_users"] = set(settings.allowed_users)
    if settings.allowed_groups:
        traits["allowed_groups"] = set(settings.allowed_groups)
    return traits


def namespace_for(username: str, template: str = USER_NAMESPACE_TEMPLATE) -> str:
    """The user's namespace from a template with {username}, escaped as KubeSpawner does."""
    try:  # KubeSpawner's own escaping, so both agree on names like "Alice@example.org"
        from kubespawner.slugs import safe_slug
    except ImportError:
        safe_slug = str
    name = template.format(username=safe_slug(username))
    if len(name) > 63 or not _DNS_LABEL.match(name):
        raise ValueError(f"'{name}' (from template '{template}') is not a valid namespace name; "
                         "pass the namespace explicitly")
    return name


def profile_list(settings: HubSettings) -> list[dict]:
    """The notebook choices: PaddlePaddle GPU (1 GPU), GPU x4, CPU only."""
    def gpu_profile(slug: str, gpus: int, cpu: str, memory: str, default: bool = False) -> dict:
        override = {
            "image": settings.gpu_image,
            "extra_resource_limits": {settings.gpu_resource: str(gpus)},
            "extra_resource_guarantees": {settings.gpu_resource: str(gpus)},
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

    cpu, memory = settings.cpu_profile["cpu"], settings.cpu_profile["memory"]
    return [
        gpu_profile("paddle-gpu", 1, "8", "32G", default=True),
        gpu_profile("paddle-gpu-x4", 4, "32", "128G"),
        {"display_name": "PaddlePaddle CPU only", "slug": "paddle-cpu", "description": f"{cpu} CPU, {memory} memory",
         "kubespawner_override": {"image": settings.cpu_image, "cpu_guarantee": float(parse_quantity(cpu)),
                                  "cpu_limit": float(parse_quantity(cpu)), "mem_guarantee": memory,
                                  "mem_limit": memory}},
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
                           "metadata": {"name": name, "namespace": namespace, "labels": dict(MANAGED_BY)},
                           "spec": claim_spec})
    return claims


def notebook_environment(settings: HubSettings) -> dict[str, str]:
    """What the notebook's paddle_ext extension and CLI need to know.

    Braces are doubled: KubeSpawner expands {username}-style templates in env values."""
    env = {
        BACKEND_ENV: "kubernetes",
        DATASETS_ENV: json.dumps(list(settings.datasets)),
        IMAGES_ENV: json.dumps(list(settings.worker_images)),
        # GPU jobs land where GPU notebooks do
        GPU_RESOURCE_ENV: settings.gpu_resource,
        GPU_NODE_SELECTOR_ENV: json.dumps(dict(settings.gpu_node_selector)),
        GPU_TOLERATIONS_ENV: json.dumps(list(settings.gpu_tolerations)),
    }
    env = {key: value.replace("{", "{{").replace("}", "}}") for key, value in env.items()}
    if settings.jobs_share_home:  # expanded per user by KubeSpawner, as the home claim's own name is
        env.update({WORKSPACE_CLAIM_ENV: HOME_CLAIM_TEMPLATE, WORKSPACE_MOUNT_ENV: HOME_MOUNT})
    return env


def notebook_request(cpu: float | None, memory: str | int | None, gpus: int) -> JobUsage:
    """What a notebook pod adds to its namespace, for the quota check."""
    return JobUsage("this server", gpus=parse_quantity(str(gpus)), cpu=parse_quantity(str(cpu or 0)),
                    memory=parse_quantity(str(memory or 0)), pods=parse_quantity("1"))
