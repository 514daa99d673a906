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

from ..constants import (BACKEND_CONFIG_ENV, BACKEND_ENV, DATASETS_ENV, DEFAULT_JOB_KIND, GPU_RESOURCE, IMAGES_ENV,
                         MANAGED_BY, USER_NAMESPACE_TEMPLATE, WORKSPACE_CLAIM_ENV, WORKSPACE_MOUNT_ENV)
from ..environment import VALUES_ENV, setting_env_name
from ..jobkinds import JOB_KINDS
from ..errors import NoNamespace
from ..backends.registry import KUBERNETES, config_section
from ..manifests import catalogue_volumes
from ..policies import PodRules
from ..quantity import check_quantity, parse_quantity
from ..tenancy import EPHEMERAL_STORAGE_LIMIT, EPHEMERAL_STORAGE_REQUEST, LIMIT_RANGE_MAX, OBJECT_QUOTA
from ..quota.model import JobUsage, Limits, QuotaInputError
from ..quota.queues import LOCAL_QUEUE, QueuePolicy

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}

# The notebook choices until a site names its own (HubSettings.profiles).
DEFAULT_PROFILES = (
    {"slug": "paddle-gpu", "display_name": "PaddlePaddle GPU", "gpus": 1, "cpu": "8", "memory": "32G",
     "default": True},
    {"slug": "paddle-gpu-x4", "display_name": "PaddlePaddle GPU x4", "gpus": 4, "cpu": "32", "memory": "128G"},
    {"slug": "paddle-cpu", "display_name": "PaddlePaddle CPU only", "gpus": 0, "cpu": "2", "memory": "8G"},
)
_PROFILE_KEYS = {"slug", "display_name", "description", "gpus", "cpu", "memory", "image", "default"}
# What a site may set for jobs launched from notebooks (JobBackend traits, see paddle_ext.backends.base).
JOB_OPTION_KEYS = ("max_workers", "max_gpus_per_worker", "max_cpu", "max_memory", "default_command",
                   "ttl_seconds_after_finished", "max_restarts", "default_max_restarts")


@dataclasses.dataclass(frozen=True)
class HubSettings:
    """Everything site-specific about the Kubernetes hub (see the chart's values)."""

    hub_namespace: str = "paddlecloud"
    user_namespace_template: str = USER_NAMESPACE_TEMPLATE
    gpu_image: str = "docker.io/paddlecloud/notebook:3.3.1-gpu"
    cpu_image: str = "docker.io/paddlecloud/notebook:3.3.1-cpu"
    worker_images: tuple[dict, ...] = ()
    gpu_resource: str = GPU_RESOURCE
    gpu_node_selector: dict = dataclasses.field(default_factory=dict)
    gpu_tolerations: tuple[dict, ...] = ()
    # What pods in user namespaces may carry beyond what the product sets (the admission policy
    # paddle_ext.policies.user_pod_policies refuses the rest): tolerations besides gpu_tolerations
    # (e.g. the ones a Kueue ResourceFlavor adds when it admits a job), and priority classes
    # (include the cluster's globalDefault PriorityClass, if it has one: the API server writes
    # it into every pod that names none).
    allowed_tolerations: tuple[dict, ...] = ()
    allowed_priority_classes: tuple[str, ...] = ()
    datasets: tuple[dict, ...] = ()
    home_capacity: str = "10Gi"
    home_storage_class: str | None = None
    # The users' home volumes are ReadWriteMany storage (CephFS, NFS, ...): job pods mount
    # the user's home too, run in the folder they were submitted from and keep their
    # outputs beside it. Off: the home is ReadWriteOnce and each job gets a snapshot.
    jobs_share_home: bool = False
    # The site's default quota (fields as in the quota API: gpus, cpu, memory, pods,
    # running_jobs): what applies to every field that no user, group or saved default sets.
    # Never stored with the panel's settings, so saving any quota keeps it.
    default_quota: dict = dataclasses.field(default_factory=lambda: {
        "gpus": 4, "cpu": "32", "memory": "256Gi", "pods": 40, "running_jobs": 4})
    quota_service_port: int = 10101
    quota_service_host: str = "127.0.0.1"
    limit_range_cpu: str = "1"
    limit_range_memory: str = "2Gi"
    # Scratch disk a container gets when it names none (request, limit), and the most one
    # container may ask for ({"cpu", "memory", "ephemeral-storage"}; {}: no maximum).
    limit_range_ephemeral_storage_request: str = EPHEMERAL_STORAGE_REQUEST
    limit_range_ephemeral_storage: str = EPHEMERAL_STORAGE_LIMIT
    limit_range_max: dict = dataclasses.field(default_factory=lambda: dict(LIMIT_RANGE_MAX))
    # Object counts and scratch disk in every user's ResourceQuota (ResourceQuota resource
    # names: count/configmaps, count/jobs.batch, persistentvolumeclaims, requests.ephemeral-storage...).
    object_quota: dict = dataclasses.field(default_factory=lambda: dict(OBJECT_QUOTA))
    cull_idle_seconds: int = 3600
    hub_connect_url: str | None = None
    # The notebook choices: each {"slug", "display_name", "gpus", "cpu", "memory", and optional
    # "description", "image" (default: gpu_image with GPUs, else cpu_image), "default"}.
    profiles: tuple[dict, ...] = DEFAULT_PROFILES
    # Jobs launched from notebooks (handed to the notebook's Kubernetes backend): the kind
    # ("job": Indexed Job + headless Service; "paddlejob": Kubeflow training operator), a Kueue
    # LocalQueue to submit to ("" = no Kueue; with cluster_queue the spawner creates that
    # LocalQueue in each user namespace, pointing at this ClusterQueue), and bounds and defaults
    # (JOB_OPTION_KEYS: max_workers, max_gpus_per_worker, max_cpu, max_memory, default_command,
    # ttl_seconds_after_finished, max_restarts (the most a job may ask for), default_max_restarts).
    job_kind: str = DEFAULT_JOB_KIND  # a name in jobkinds.JOB_KINDS
    queue_name: str = ""
    cluster_queue: str = ""
    # Kueue runs next to the chart and the quota settings become its queues
    # (paddle_ext.quota.queues): a ClusterQueue per team (group quota) and per personal quota,
    # in one cohort, and a LocalQueue "default" in each user namespace; every job is created
    # suspended in it. queue_name/cluster_queue stay empty (the queues are made here).
    kueue_enabled: bool = False
    # How much of its guaranteed (nominal) quota a queue lends to the others in the cohort, and
    # how much it may borrow beyond it, per field (gpus, cpu, memory; {} or a missing field: no
    # limit), the same for every queue. A borrowing limit keeps a numeric ResourceQuota backstop.
    kueue_lending_limit: dict = dataclasses.field(default_factory=dict)
    kueue_borrowing_limit: dict = dataclasses.field(default_factory=dict)
    # Users of one team queue share it by Kueue's Admission Fair Sharing (the Kueue install
    # needs `admissionFairSharing` in its Configuration), each with a weight (username ->
    # number > 0; a user not listed: 1): over a run their GPU time follows their weights.
    # Off: first come, first served by priority (positions shown are exact).
    kueue_fair_sharing: bool = False
    kueue_user_weights: dict = dataclasses.field(default_factory=dict)
    job_options: dict = dataclasses.field(default_factory=dict)
    # The notebook's rules (tenancy.NOTEBOOK_RULES) as a ClusterRole the site installed (the Helm
    # chart does): bound in each user namespace by a RoleBinding, so the hub needs only `bind` on
    # that one ClusterRole. Empty: a Role of its own in each namespace (the hub must then hold
    # every rule it grants).
    notebook_cluster_role: str = ""
    # A NetworkPolicy set in each user namespace (tenancy.user_network_policies); empty: none.
    # {"hub_pod_labels": {...}, "proxy_pod_labels": {...}, "hub_api_port": <HUB_API_PORT>,
    #  "api_server": [{"cidr": "10.0.0.1/32", "port": 6443}], "egress": [<extra egress rules>],
    #  "dns": [<NetworkPolicyPeer of the cluster's DNS>] (default: kube-system's k8s-app=kube-dns pods)}
    user_network_policy: dict = dataclasses.field(default_factory=dict)
    # Who may log in, an explicit choice (the hub will not start without one): these users,
    # members of these groups (authenticators that know groups, e.g. OAuthenticator, LDAP),
    # or, with allow_all, everyone the authenticator accepts. Admins may always log in.
    allowed_users: tuple[str, ...] = ()
    allowed_groups: tuple[str, ...] = ()
    allow_all: bool = False
    # Members of these groups (from the login, as allowed_groups) are hub admins and quota
    # admins; a user taken out of the group loses both at the next login.
    admin_groups: tuple[str, ...] = ()

    @classmethod
    def load(cls, values_file: str | None = None, environ: dict | None = None) -> HubSettings:
        """Values file (YAML, keys as the field names) then PADDLECLOUD_<FIELD> variables
        (JSON for lists and dicts) override the defaults."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        path = values_file or environ.get(VALUES_ENV)
        if path:
            with open(path, encoding="utf-8") as f:
                values.update(yaml.safe_load(f) or {})
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(fields))
        if unknown:
            raise ValueError(f"unknown setting(s) in {path}: {', '.join(unknown)}")
        for name in fields:
            text = environ.get(setting_env_name(name))
            if text is not None:
                values[name] = _parse_env_value(name, text)
        for name in _TUPLE_FIELDS:
            if name in values:
                values[name] = tuple(values[name])
        return cls(**values)

    def __post_init__(self):
        if self.job_kind not in JOB_KINDS:
            raise ValueError(f"job_kind must be one of {', '.join(JOB_KINDS)} (got '{self.job_kind}')")
        unknown = sorted(set(self.job_options) - set(JOB_OPTION_KEYS))
        if unknown:
            raise ValueError(f"unknown job_options: {', '.join(unknown)} (known: {', '.join(JOB_OPTION_KEYS)})")
        for profile in self.profiles:
            missing = {"slug", "display_name", "gpus", "cpu", "memory"} - set(profile)
            extra = set(profile) - _PROFILE_KEYS
            if missing or extra:
                raise ValueError(f"profile {profile.get('slug', '?')}: "
                                 + "; ".join(filter(None, [missing and f"missing {', '.join(sorted(missing))}",
                                                           extra and f"unknown {', '.join(sorted(extra))}"])))
        try:
            self.site_default_quota()
        except QuotaInputError as exc:
            raise ValueError(f"default_quota: {exc.message}") from exc
        for name in ("limit_range_max", "object_quota"):
            for key, value in getattr(self, name).items():
                try:
                    check_quantity(str(value))
                except ValueError as exc:
                    raise ValueError(f"{name}.{key}: {exc}") from exc
        for entry in self.datasets:
            volume = entry.get("volume") if isinstance(entry, dict) else None
            if isinstance(volume, dict) and "emptyDir" in volume and not (volume["emptyDir"] or {}).get("sizeLimit"):
                raise ValueError(f"datasets: '{entry.get('name', '?')}' is an emptyDir without a sizeLimit, which "
                                 "user namespaces refuse (paddle_ext.policies): give it one, e.g. "
                                 "{emptyDir: {sizeLimit: 10Gi}}")
        for toleration in (*self.gpu_tolerations, *self.allowed_tolerations):
            if not isinstance(toleration, dict) or set(toleration) - _TOLERATION_KEYS:
                raise ValueError(f"a toleration is a mapping of {', '.join(sorted(_TOLERATION_KEYS))} (got {toleration!r})")
        for name in self.allowed_priority_classes:
            if not _DNS_SUBDOMAIN.match(name):
                raise ValueError(f"allowed_priority_classes: '{name}' is not a PriorityClass name")
        try:
            self._queue_policy()
        except (ValueError, QuotaInputError) as exc:
            raise ValueError(f"kueue limits: {getattr(exc, 'message', exc)}") from exc
        if self.kueue_enabled and (self.queue_name not in ("", LOCAL_QUEUE) or self.cluster_queue):
            raise ValueError("kueue_enabled makes each user's queue from the quota settings: leave queue_name "
                             f"and cluster_queue empty (jobs go to the LocalQueue '{LOCAL_QUEUE}')")
        if self.user_network_policy and not self.user_network_policy.get("hub_pod_labels"):
            raise ValueError("user_network_policy needs hub_pod_labels (and proxy_pod_labels): "
                             "the pods that may reach notebooks")

    def queue_policy(self) -> QueuePolicy | None:
        """The Kueue queues' lending and borrowing limits; None without Kueue."""
        if not self.kueue_enabled:
            return None
        return self._queue_policy()

    def _queue_policy(self) -> QueuePolicy:
        return QueuePolicy.from_settings(self.kueue_lending_limit, self.kueue_borrowing_limit,
                                         self.kueue_fair_sharing, self.kueue_user_weights)

    def job_queue_name(self) -> str:
        """The LocalQueue jobs are submitted to ("" = no Kueue)."""
        return LOCAL_QUEUE if self.kueue_enabled else self.queue_name

    def site_default_quota(self) -> Limits:
        """default_quota as the quota model's limits (validated like a quota PUT)."""
        return Limits.from_dict(self.default_quota)


HOME_MOUNT = "/home/jovyan"
HOME_CLAIM_TEMPLATE = "home-{username}"
_BOOL_FIELDS = ("jobs_share_home", "allow_all", "kueue_enabled", "kueue_fair_sharing")
_NAME_LIST_FIELDS = ("allowed_users", "allowed_groups", "admin_groups", "allowed_priority_classes")  # comma-separated in the environment
_TUPLE_FIELDS = ("worker_images", "gpu_tolerations", "allowed_tolerations", "datasets", "profiles", *_NAME_LIST_FIELDS)
_JSON_FIELDS = _TUPLE_FIELDS + ("gpu_node_selector", "default_quota", "job_options", "user_network_policy",
                                "limit_range_max", "object_quota", "kueue_lending_limit", "kueue_borrowing_limit",
                                "kueue_user_weights")
_INT_FIELDS = ("cull_idle_seconds", "quota_service_port")
_OPTIONAL_FIELDS = ("home_storage_class", "hub_connect_url")


def _parse_env_value(name: str, text: str):
    if name in _NAME_LIST_FIELDS:
        return tuple(item.strip() for item in text.split(",") if item.strip())
    if name in _JSON_FIELDS:
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{setting_env_name(name)} must be JSON: {exc}") from exc
    if name in _INT_FIELDS:
        return int(text)
    if name in _BOOL_FIELDS:
        if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise ValueError(f"{setting_env_name(name)} must be true or false (got '{text}')")
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
        return {"allow_all": True} | group_traits(settings, authenticator)
    if not settings.allowed_users and not settings.allowed_groups:
        raise ValueError(NO_LOGIN_CHOICE)
    known = authenticator.class_traits()
    if settings.allowed_groups and "allowed_groups" not in known:
        raise ValueError(f"PaddleCloud Hub: {authenticator.__name__} does not know groups, so "
                         "PADDLECLOUD_ALLOWED_GROUPS cannot work with it; use PADDLECLOUD_ALLOWED_USERS.")
    # The lists are the whole truth: a user added in the admin panel is not thereby let in.
    traits: dict[str, Any] = {"allow_all": False, "allow_existing_users": False}
    if settings.allowed_users:
        traits["allowed_users"] = set(settings.allowed_users)
    if settings.allowed_groups:
        traits["allowed_groups"] = set(settings.allowed_groups)
    return traits | group_traits(settings, authenticator)


def group_traits(settings: HubSettings, authenticator: type) -> dict[str, Any]:
    """The Authenticator traits that make the login's groups the hub's groups. An authenticator
    that reads groups from the login (OAuthenticator's auth_state_groups_key, LDAPGroupsAuthenticator)
    then sets each user's hub groups at every login (manage_groups), so the quota groups follow
    the directory; admin_groups make admins. ValueError where the authenticator cannot."""
    known = authenticator.class_traits()
    if settings.admin_groups and "admin_groups" not in known:
        raise ValueError(f"PaddleCloud Hub: {authenticator.__name__} cannot make admins from groups, so "
                         "PADDLECLOUD_ADMIN_GROUPS cannot work with it; use PADDLECLOUD_ADMIN_USERS.")
    traits: dict[str, Any] = {}
    if settings.admin_groups:
        traits["admin_groups"] = set(settings.admin_groups)
    # OAuthenticator's group options require manage_groups; other group-aware ones (the
    # system's LocalAuthenticator) read groups elsewhere and return none to manage.
    if (settings.allowed_groups or settings.admin_groups) and "auth_state_groups_key" in known:
        traits["manage_groups"] = True
    if settings.allowed_groups and "custom_403_message" in known:  # OAuthenticator's refusal page
        traits["custom_403_message"] = not_allowed_message(settings.allowed_groups)
    return traits


def not_allowed_message(groups) -> str:
    """What someone sees who signed in but is in none of the groups allowed (OAuthenticator's
    custom_403_message; LDAPGroupsAuthenticator's refusal)."""
    return (f"You signed in, but are in none of the groups that may use this hub ({', '.join(sorted(groups))}). "
            "Ask your administrator to add you to one of them.")


def namespace_for(username: str, template: str = USER_NAMESPACE_TEMPLATE) -> str:
    """The user's namespace from a template with {username}, escaped as KubeSpawner does;
    NoNamespace if that is no valid name."""
    try:  # KubeSpawner's own escaping, so both agree on names like "Alice@example.org"
        from kubespawner.slugs import safe_slug
    except ImportError:
        safe_slug = str
    name = template.format(username=safe_slug(username))
    if len(name) > 63 or not _DNS_LABEL.match(name):
        raise NoNamespace(username, name, template)
    return name


def profile_list(settings: HubSettings) -> list[dict]:
    """The notebook choices (settings.profiles; default: PaddlePaddle GPU, GPU x4, CPU only)."""
    def profile(entry: dict) -> dict:
        gpus, cpu, memory = int(entry["gpus"]), str(entry["cpu"]), str(entry["memory"])
        memory_bytes = int(parse_quantity(memory))  # JupyterHub reads "1Gi" as no size at all; bytes are exact
        override = {
            "image": entry.get("image") or (settings.gpu_image if gpus else settings.cpu_image),
            "cpu_guarantee": float(parse_quantity(cpu)), "cpu_limit": float(parse_quantity(cpu)),
            "mem_guarantee": memory_bytes, "mem_limit": memory_bytes,
        }
        if gpus:
            override["extra_resource_limits"] = {settings.gpu_resource: str(gpus)}
            override["extra_resource_guarantees"] = {settings.gpu_resource: str(gpus)}
            if settings.gpu_node_selector:
                override["node_selector"] = dict(settings.gpu_node_selector)
            if settings.gpu_tolerations:
                override["tolerations"] = [dict(t) for t in settings.gpu_tolerations]
        description = entry.get("description") or (f"{gpus} GPU, {cpu} CPU, {memory} memory" if gpus
                                                    else f"{cpu} CPU, {memory} memory")
        return {"display_name": entry["display_name"], "slug": entry["slug"], "description": description,
                "default": bool(entry.get("default", False)), "kubespawner_override": override}

    return [profile(entry) for entry in settings.profiles]


def notebook_datasets(settings: HubSettings) -> tuple[list[dict], list[dict]]:
    """Every catalogue dataset, read-only, at the same paths job pods use."""
    return catalogue_volumes([d["name"] for d in settings.datasets], settings.datasets)


def pod_rules(settings: HubSettings) -> PodRules:
    """What the admission policy lets pods and Jobs in user namespaces carry on this site: the
    GPU tolerations the product adds and the site's others, its priority classes, the catalogue's
    claims (read-only only) and, with Kueue, the queue label (paddle_ext.policies)."""
    claims = sorted({entry["volume"]["persistentVolumeClaim"]["claimName"] for entry in settings.datasets
                     if "persistentVolumeClaim" in entry.get("volume", {})})
    return PodRules(gpu_resource=settings.gpu_resource,
                    tolerations=tuple(dict(t) for t in (*settings.gpu_tolerations, *settings.allowed_tolerations)),
                    priority_classes=tuple(settings.allowed_priority_classes), dataset_claims=tuple(claims),
                    queue_required=bool(settings.queue_name or settings.kueue_enabled))


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
        BACKEND_ENV: KUBERNETES,
        DATASETS_ENV: json.dumps(list(settings.datasets)),
        IMAGES_ENV: json.dumps(list(settings.worker_images)),
        BACKEND_CONFIG_ENV: json.dumps(notebook_backend_config(settings), sort_keys=True),
    }
    env = {key: value.replace("{", "{{").replace("}", "}}") for key, value in env.items()}
    if settings.jobs_share_home:  # expanded per user by KubeSpawner, as the home claim's own name is
        env.update({WORKSPACE_CLAIM_ENV: HOME_CLAIM_TEMPLATE, WORKSPACE_MOUNT_ENV: HOME_MOUNT})
    return env


def notebook_backend_config(settings: HubSettings) -> dict:
    """Traitlets config for the notebook's job backend ({Class: {trait: value}}): how its jobs
    are made on this site (kind, Kueue queue, GPUs) and the bounds of the launcher's form."""
    kubernetes = {"job_kind": settings.job_kind, "gpu_resource": settings.gpu_resource}
    if settings.job_queue_name():
        kubernetes["queue_name"] = settings.job_queue_name()
    if settings.gpu_node_selector:
        kubernetes["gpu_node_selector"] = dict(settings.gpu_node_selector)
    if settings.gpu_tolerations:
        kubernetes["gpu_tolerations"] = [dict(t) for t in settings.gpu_tolerations]
    options = dict(settings.job_options)
    if "ttl_seconds_after_finished" in options:
        kubernetes["ttl_seconds_after_finished"] = options.pop("ttl_seconds_after_finished")
    config = {config_section(KUBERNETES): kubernetes}
    if options:
        config["JobBackend"] = options
    return config


def traitlets_passthrough(path: str) -> dict:
    """Traitlets config from a YAML file: {Class: {trait: value}} (the Helm chart's hub.config).
    ValueError (one sentence) for anything else."""
    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path} must map class names to {{trait: value}} mappings")
    for section, traits in data.items():
        if not (isinstance(section, str) and section.isidentifier() and section[0].isupper()):
            raise ValueError(f"{path}: '{section}' is not a class name (hub.config is {{Class: {{trait: value}}}})")
        if not isinstance(traits, dict):
            raise ValueError(f"{path}: {section} must be a mapping of trait names to values")
    return data


def notebook_request(cpu: float | None, memory: str | int | None, gpus: int) -> JobUsage:
    """What a notebook pod adds to its namespace, for the quota check."""
    return JobUsage("this server", gpus=parse_quantity(str(gpus)), cpu=parse_quantity(str(cpu or 0)),
                    memory=parse_quantity(str(memory or 0)), pods=parse_quantity("1"))
