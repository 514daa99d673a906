"""Every environment variable the product reads, in one table (pure, no I/O).

Each `EnvVar` says who reads it, what it means and its default in words. The names of the
ones both sides share stay defined once in `paddle_ext.constants` (this table refers to
them); the hub's own are named here. `docs/reference/environment.md` is rendered from
`VARIABLES` (tools/docs/reference.py), and tests/unit/test_docs.py checks that every
PADDLECLOUD_* name in paddle_ext/, hub_config/, images/ and tools/ is in it.
"""

from __future__ import annotations

import dataclasses

from .constants import (BACKEND_CONFIG_ENV, BACKEND_ENV, DATASET_ENV_PREFIX, DATASETS_ENV, HOME_ENV, IMAGES_ENV,
                        JOB_NAME_ENV, KUEUE_ENV, LOG_COPY_DIR_ENV, NAMESPACE_TEMPLATE_ENV, OBJECT_QUOTA_ENV, OUTPUT_DIR_ENV,
                        QUOTA_FILE_ENV, QUOTA_STORE_ENV, RESTART_ENV, SERVER_BASE_URL_ENV, SERVER_ROOT_ENV,
                        SITE_DEFAULT_QUOTA_ENV, USER_GROUPS_ENV, WORKSPACE_CLAIM_ENV, WORKSPACE_MOUNT_ENV)
from .constants import POD_UID_ENV, WORKER_INDEX_ENV

# Who reads a variable (the `read_by` of each row).
CLI_AND_API = "notebook side (CLI, Python API, server extension)"
JOBS = "training jobs (your script)"
KUBE_HUB = "hub on Kubernetes (hub_config/jupyterhub_config.py)"
LOCAL_HUB = "local hub (hub_config/local_config.py, make demo)"
BOTH_HUBS = "hub (Kubernetes and local)"
QUOTA_SERVICE = "quota service (paddle_ext.hub.quota_service)"
TESTS = "test suite and tools/k8s (development)"


@dataclasses.dataclass(frozen=True)
class EnvVar:
    """One environment variable: its name (a `<...>` part stands for a family), who reads
    it, what it means, and its default in words ("" = none, unset means off)."""

    name: str
    read_by: str
    meaning: str
    default: str = ""


# The hub's own variables (hub_config/*.py, the local hub), named once here.
VALUES_ENV = "PADDLECLOUD_VALUES"
HUB_IP_ENV = "PADDLECLOUD_HUB_IP"
HUB_PORT_ENV = "PADDLECLOUD_HUB_PORT"
HUB_API_IP_ENV = "PADDLECLOUD_HUB_API_IP"
HUB_API_PORT_ENV = "PADDLECLOUD_HUB_API_PORT"
HUB_CONNECT_URL_ENV = "PADDLECLOUD_HUB_CONNECT_URL"
HUB_STATE_DIR_ENV = "PADDLECLOUD_HUB_STATE_DIR"
HUB_CONFIG_FILE_ENV = "PADDLECLOUD_HUB_CONFIG_FILE"
PROXY_API_URL_ENV = "PADDLECLOUD_PROXY_API_URL"
PROXY_API_PORT_ENV = "PADDLECLOUD_PROXY_API_PORT"
AUTHENTICATOR_CLASS_ENV = "PADDLECLOUD_AUTHENTICATOR_CLASS"
ADMIN_USERS_ENV = "PADDLECLOUD_ADMIN_USERS"
QUOTA_LISTEN_IP_ENV = "PADDLECLOUD_QUOTA_LISTEN_IP"
QUOTA_PORT_ENV = "PADDLECLOUD_QUOTA_PORT"
QUOTA_ADMINS_ENV = "PADDLECLOUD_QUOTA_ADMINS"
DEMO_PASSWORD_ENV = "PADDLECLOUD_DEMO_PASSWORD"
# Any field of paddle_ext.hub.settings.HubSettings, upper-cased (HubSettings.load).
SETTING_ENV_TEMPLATE = "PADDLECLOUD_{field}"


def setting_env_name(field: str) -> str:
    """The variable that sets HubSettings field `field` (e.g. allowed_users)."""
    return SETTING_ENV_TEMPLATE.format(field=field.upper())


def _setting(field: str, meaning: str) -> EnvVar:
    return EnvVar(setting_env_name(field), KUBE_HUB, meaning + f" (HubSettings.{field}; the chart's settings.{field})",
                  "the values file's, else HubSettings' default")


VARIABLES: tuple[EnvVar, ...] = (
    # ------------------------------------------------ notebook side: CLI, Python API, server extension
    EnvVar(BACKEND_ENV, CLI_AND_API, "Where jobs run: `local` or `kubernetes` (`--backend` overrides it).",
           "kubernetes inside a cluster, else local"),
    EnvVar(BACKEND_CONFIG_ENV, CLI_AND_API, "The site's settings for the job backend, traitlets config as JSON "
           '(`{"KubernetesBackend": {...}, "JobBackend": {...}}`); set by the hub in each notebook.'),
    EnvVar(HOME_ENV, f"{CLI_AND_API}; {LOCAL_HUB}", "The embedded default's state folder: local jobs, the local "
           "hub's database, users' homes and quotas.", "~/.paddlecloud"),
    EnvVar(IMAGES_ENV, CLI_AND_API, "The worker images users may choose, JSON (the chart's settings.worker_images); "
           "set by the hub.", "[]"),
    EnvVar(DATASETS_ENV, CLI_AND_API, "The shared datasets jobs may mount, JSON (the chart's settings.datasets); "
           "set by the hub.", "[]"),
    EnvVar(USER_GROUPS_ENV, CLI_AND_API, "The user's groups (comma-separated), used when the hub cannot be asked.",
           "no groups"),
    EnvVar(WORKSPACE_CLAIM_ENV, CLI_AND_API, "The user's shared (ReadWriteMany) home volume claim, which job "
           "pods mount too; set by the hub when settings.jobs_share_home is on."),
    EnvVar(WORKSPACE_MOUNT_ENV, CLI_AND_API, "Where that shared home is mounted in notebook and job pods."),
    EnvVar(SERVER_ROOT_ENV, "kernels started by the server extension", "The Jupyter server's root folder, so "
           "widgets can link a job's outputs into the file browser; set by the server extension."),
    EnvVar(SERVER_BASE_URL_ENV, "kernels started by the server extension", "The Jupyter server's base URL; set by "
           "the server extension."),
    # ------------------------------------------------ inside training jobs
    EnvVar(JOB_NAME_ENV, JOBS, "The job's name; set in every worker."),
    EnvVar(OUTPUT_DIR_ENV, JOBS, "The folder a job keeps its outputs and checkpoints in; set in every worker."),
    EnvVar(RESTART_ENV, JOBS, "Which attempt of the job a worker runs: 0 first, 1 after the first restart, ...; "
           "set in every worker.", "0"),
    EnvVar(WORKER_INDEX_ENV, JOBS, "The worker's index (0 first) on Kubernetes, either job kind; set where the "
           "job's outputs are kept."),
    EnvVar(POD_UID_ENV, JOBS, "The worker's pod (its uid) on Kubernetes; names the copy of its log. Set where the "
           "job's outputs are kept."),
    EnvVar(LOG_COPY_DIR_ENV, JOBS, "Where the worker keeps a copy of each of its pods' output "
           "(<outputs>/logs/worker-<I>/<start>-<pod uid>.log), so that the log of a deleted or preempted pod can "
           "still be read; set on Kubernetes where the job's outputs are kept, and taken out of the environment "
           "your script sees."),
    EnvVar(DATASET_ENV_PREFIX + "<NAME>", JOBS, "Where a local job finds dataset <NAME> (upper-cased, '-' as "
           "'_'); set by the local backend for each dataset the job mounts."),
    # ------------------------------------------------ the hub
    EnvVar(VALUES_ENV, KUBE_HUB, "The site settings, a YAML values file with HubSettings' fields (the chart "
           "mounts its `settings`)."),
    EnvVar(SETTING_ENV_TEMPLATE.format(field="<SETTING>"), KUBE_HUB, "Any HubSettings field, upper-cased, e.g. "
           "PADDLECLOUD_CULL_IDLE_SECONDS; JSON for lists and maps, comma-separated for name lists; wins over "
           "the values file.", "the values file's, else HubSettings' default"),
    _setting("allowed_users", "Users who may log in, comma-separated."),
    _setting("allowed_groups", "Groups whose members may log in, comma-separated."),
    _setting("allow_all", "`true`: everyone the authenticator accepts may log in."),
    _setting("admin_groups", "Groups whose members are hub and quota admins, comma-separated."),
    EnvVar(AUTHENTICATOR_CLASS_ENV, BOTH_HUBS, "How users log in: an installed JupyterHub authenticator "
           "(generic-oauth, ldapauthenticator, a class path, ...). Required on Kubernetes; locally, unset means "
           "the demo password."),
    EnvVar(ADMIN_USERS_ENV, KUBE_HUB, "Hub admins, comma-separated.", "admin"),
    EnvVar(HUB_CONFIG_FILE_ENV, BOTH_HUBS, "Traitlets config for JupyterHub in YAML, {Class: {trait: value}}, "
           "applied last (the chart's hub.config)."),
    EnvVar(HUB_IP_ENV, KUBE_HUB, "Where the proxy listens (address).", "0.0.0.0"),
    EnvVar(HUB_PORT_ENV, f"{KUBE_HUB}; {LOCAL_HUB}", "Where the proxy listens (port); users open this port.",
           "8000 (locally: $PORT, else 8000)"),
    EnvVar(HUB_API_IP_ENV, KUBE_HUB, "The hub's own API address.", "0.0.0.0"),
    EnvVar(HUB_API_PORT_ENV, BOTH_HUBS, "The hub's own API port.", "8081 on Kubernetes; locally a free port"),
    EnvVar(HUB_CONNECT_URL_ENV, KUBE_HUB, "How notebooks reach the hub API.", "settings.hub_connect_url"),
    EnvVar(HUB_STATE_DIR_ENV, KUBE_HUB, "Where the hub keeps its SQLite database and cookie secret.",
           "/srv/jupyterhub"),
    EnvVar(PROXY_API_URL_ENV, KUBE_HUB, "The REST API of a proxy running on its own (the chart's proxy pod); "
           "set: the hub starts no proxy."),
    EnvVar(PROXY_API_PORT_ENV, BOTH_HUBS, "The port of the proxy's REST API on 127.0.0.1, when the hub "
           "starts the proxy.", "a free port"),
    EnvVar(QUOTA_LISTEN_IP_ENV, KUBE_HUB, "The quota service's listen address (in a pod: 0.0.0.0).",
           "the service's host"),
    EnvVar(QUOTA_PORT_ENV, LOCAL_HUB, "The quota service's port (/services/quota/).", "a free port"),
    EnvVar(QUOTA_ADMINS_ENV, LOCAL_HUB, "Users who may change quotas besides hub admins, comma-separated."),
    EnvVar(DEMO_PASSWORD_ENV, LOCAL_HUB, "The demo password every local user logs in with.",
           "generated once, kept in $PADDLECLOUD_HOME/hub/demo-password"),
    # ------------------------------------------------ the quota service (set by the hub)
    EnvVar(QUOTA_STORE_ENV, QUOTA_SERVICE, "Where quotas are kept: `local` (a JSON file) or `kubernetes` "
           "(a ConfigMap).", "local"),
    EnvVar(QUOTA_FILE_ENV, f"{QUOTA_SERVICE}; local backend", "The local store's JSON file.",
           "$PADDLECLOUD_HOME/quotas.json"),
    EnvVar(SITE_DEFAULT_QUOTA_ENV, f"{QUOTA_SERVICE}; {KUBE_HUB}", "The site's default quota, JSON with the "
           "quota API's fields (settings.default_quota).", "none"),
    EnvVar(OBJECT_QUOTA_ENV, f"{QUOTA_SERVICE}; {KUBE_HUB}", "Object counts and scratch disk in every user's "
           "ResourceQuota, JSON (settings.object_quota)."),
    EnvVar(KUEUE_ENV, QUOTA_SERVICE, 'Kueue settings, JSON (`{"lending_limit": {...}, "borrowing_limit": '
           '{...}}`); absent or empty: no Kueue.'),
    EnvVar(NAMESPACE_TEMPLATE_ENV, QUOTA_SERVICE, "The users' namespaces, a template with {username}.",
           "paddlecloud-{username}"),
    # ------------------------------------------------ development
    EnvVar("PADDLECLOUD_CACHE", TESTS, "Where downloaded and built test-cluster binaries and images are "
           "cached.", "~/.cache/paddlecloud"),
    EnvVar("PADDLECLOUD_DOCS_SCREENSHOTS", TESTS, "`1`: the browser tests that take the README's screenshots "
           "also write them into docs/_static/screenshots/ (`make screenshots`)."),
    EnvVar("PADDLECLOUD_CLUSTER_PART", TESTS, "Which part of the cluster tier a pytest session runs: `real-node` "
           "(the tests that need the real node) or `kwok` (the rest, on a KWOK-only cluster); `make test-cluster` "
           "runs both side by side.", "every test"),
    EnvVar("PADDLECLOUD_K8S_BIN_DIR", TESTS, "The test cluster's binaries (a folder without kubelet: KWOK "
           "nodes only).", "the cached build"),
    EnvVar("PADDLECLOUD_NODE_LOCK_TIMEOUT", TESTS, "Seconds to wait for another run's real node.", "600"),
    EnvVar("PADDLECLOUD_REQUIRE_REAL_NODE", TESTS, "`1`: tests that need the real node fail instead of "
           "skipping (`make test` sets it)."),
    EnvVar("PADDLECLOUD_SKIP_CLUSTER", TESTS, "`1`: missing cluster binaries skip the cluster and helm tiers."),
)


def by_name() -> dict[str, EnvVar]:
    """The table keyed by variable name."""
    return {variable.name: variable for variable in VARIABLES}
