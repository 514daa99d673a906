"""JupyterHub config for PaddleCloud Hub on Kubernetes.

Settings come from a values file ($PADDLECLOUD_VALUES, YAML) and PADDLECLOUD_<SETTING>
environment variables (see paddle_ext.hub.settings.HubSettings), so the Helm chart drives
this file without editing it. Each user gets:

- a namespace of their own (template `user_namespace_template`), labelled for Pod
  Security `restricted`, with a ServiceAccount whose Role may manage jobs, pods,
  pods/log, services and events there and nowhere else, a LimitRange and a
  ResourceQuota;
- a notebook pod from one of the PaddlePaddle profiles (GPU, GPU x4, CPU), refused at
  once when the quota cannot fit it;
- a home PersistentVolumeClaim kept across restarts (the quickstart notebook and
  train.py copied in on its first start), and the team's datasets mounted
  read-only at the same paths training jobs see.

Hub-level environment:
    PADDLECLOUD_HUB_IP / PADDLECLOUD_HUB_PORT   where the proxy listens (0.0.0.0:8000)
    PADDLECLOUD_HUB_API_IP / ..._API_PORT       the hub's own API (0.0.0.0:HUB_API_PORT)
    PADDLECLOUD_HUB_CONNECT_URL                 how notebooks reach the hub API
    PADDLECLOUD_ADMIN_USERS                     comma-separated admin names (admin)
    PADDLECLOUD_AUTHENTICATOR_CLASS             required: e.g. generic-oauth; dummy only for trials
    PADDLECLOUD_ALLOWED_USERS / _ALLOWED_GROUPS required (or PADDLECLOUD_ALLOW_ALL=true): who may log in
    PADDLECLOUD_ADMIN_GROUPS                    groups (from the login) whose members are admins
    PADDLECLOUD_HUB_STATE_DIR                   sqlite db and cookie secret (/srv/jupyterhub)
    PADDLECLOUD_QUOTA_LISTEN_IP                 the quota service's listen address (in a pod: 0.0.0.0)
    PADDLECLOUD_PROXY_API_URL                   a proxy running on its own (the Helm chart's proxy pod):
                                                its REST API; the hub then starts no proxy (the auth
                                                token comes from CONFIGPROXY_AUTH_TOKEN)
    PADDLECLOUD_HUB_CONFIG_FILE                 traitlets config in YAML, {Class: {trait: value}} (the
                                                chart's hub.config, e.g. GitHubOAuthenticator's
                                                client_id/client_secret), applied last
"""

import json
import os
import signal
import sys

import yaml

from traitlets.config import Config

from paddle_ext import environment as E, homeseed, tenancy
from paddle_ext.constants import (HUB_API_PORT, NAMESPACE_TEMPLATE_ENV, NOTEBOOK_SERVICE_ACCOUNT,
                                  KUEUE_ENV, OBJECT_QUOTA_ENV, QUOTA_STORE_ENV, SITE_DEFAULT_QUOTA_ENV)
from paddle_ext.hub.login_config import configure_login
from paddle_ext.hub.quota_config import configure_quota_service
from paddle_ext.hub.spawner import TEMPLATES as SPAWN_PAGE_TEMPLATES
from paddle_ext.hub.settings import (HOME_CLAIM_TEMPLATE, HOME_MOUNT, HubSettings, notebook_datasets,
                                     notebook_environment, profile_list, traitlets_passthrough)
from paddle_ext.manifests import container_security_context, pod_security_context

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)
try:
    settings = HubSettings.load()
except (OSError, ValueError) as exc:  # one line, not a traceback: the admin has a setting to fix
    raise SystemExit(f"PaddleCloud Hub: {exc}") from None
env = os.environ.get

# JupyterHub stops each of its services (the idle culler, the quota service) with SIGINT and
# waits its interrupt_timeout (10 s) before a SIGTERM. A hub started with SIGINT ignored (a
# shell's background command: `jupyterhub ... &` in a script, a CI job) passed the ignore on to
# the services it starts before it sets its own SIGINT handler, and the idle culler then sat out
# those seconds at every stop (measured: 30 s a stop instead of 1). The hub handles SIGINT anyway.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# --- Hub, proxy, state --------------------------------------------------------------
state_dir = env(E.HUB_STATE_DIR_ENV, "/srv/jupyterhub")
os.makedirs(state_dir, exist_ok=True)
c.JupyterHub.bind_url = f"http://{env(E.HUB_IP_ENV, '0.0.0.0')}:{env(E.HUB_PORT_ENV, '8000')}"
c.JupyterHub.hub_bind_url = (f"http://{env(E.HUB_API_IP_ENV, '0.0.0.0')}"
                             f":{env(E.HUB_API_PORT_ENV, str(HUB_API_PORT))}")
if env(E.PROXY_API_URL_ENV):  # a proxy pod of its own (the Helm chart): do not start one
    c.ConfigurableHTTPProxy.should_start = False
    c.ConfigurableHTTPProxy.api_url = env(E.PROXY_API_URL_ENV)
elif env(E.PROXY_API_PORT_ENV):
    c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{env(E.PROXY_API_PORT_ENV)}"
if settings.hub_connect_url or env(E.HUB_CONNECT_URL_ENV):
    c.JupyterHub.hub_connect_url = env(E.HUB_CONNECT_URL_ENV) or settings.hub_connect_url
c.JupyterHub.db_url = f"sqlite:///{os.path.join(state_dir, 'jupyterhub.sqlite')}"
c.JupyterHub.cookie_secret_file = os.path.join(state_dir, "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.pid_file = os.path.join(state_dir, "proxy.pid")
c.JupyterHub.cleanup_servers = False  # notebooks outlive a hub restart
# After a restart the hub checks every running server (their pods) before it answers; with
# hundreds running that takes longer than its 10 s default wait, so it answers after at most a
# second and the checks finish in the background (a server not yet checked shows as pending).
c.JupyterHub.init_spawners_timeout = 1

# --- Authentication -----------------------------------------------------------------
# No default on purpose: a shared GPU cluster must not start with an open door.
# Tests and trials may say "dummy" (any password); production names a real one.
if not env(E.AUTHENTICATOR_CLASS_ENV):
    raise SystemExit("PaddleCloud Hub: set PADDLECLOUD_AUTHENTICATOR_CLASS (e.g. generic-oauth, ldapauthenticator; "
                     "'dummy' accepts any password and is for trials only).")
# Who may log in is the admin's explicit choice too: with an OAuth provider, "anyone with an
# account there" would mean anyone gets a GPU notebook (JupyterHub 5 no longer defaults to it).
# Groups from the login (OIDC claims, LDAP groups) become hub groups: the quota groups.
try:
    configure_login(c, settings, env(E.AUTHENTICATOR_CLASS_ENV),
                    admin_users={name.strip() for name in env(E.ADMIN_USERS_ENV, "admin").split(",")
                                 if name.strip()})
except ValueError as exc:
    raise SystemExit(str(exc)) from None

# --- Spawner: per-user namespaces, profiles, storage --------------------------------
c.JupyterHub.spawner_class = "paddle_ext.hub.spawner.PaddleCloudSpawner"
c.JupyterHub.template_paths = [SPAWN_PAGE_TEMPLATES]  # the spawn page lists the spawner's steps in view
c.PaddleCloudSpawner.paddlecloud_settings = settings
# Each spawn writes the user's ResourceQuota from the quota settings (ConfigMap in the hub namespace).
c.PaddleCloudSpawner.sync_quota = True
c.KubeSpawner.namespace = settings.hub_namespace
c.KubeSpawner.enable_user_namespaces = True
c.KubeSpawner.user_namespace_template = settings.user_namespace_template
c.KubeSpawner.user_namespace_labels = tenancy.user_namespace_labels()
c.KubeSpawner.service_account = NOTEBOOK_SERVICE_ACCOUNT
c.KubeSpawner.automount_service_account_token = True
c.KubeSpawner.profile_list = profile_list(settings)
c.KubeSpawner.image = settings.cpu_image
c.KubeSpawner.cmd = ["jupyterhub-singleuser"]
c.KubeSpawner.default_url = "/lab"
c.KubeSpawner.environment = notebook_environment(settings)
c.KubeSpawner.start_timeout = 600  # first pulls of a GPU image are slow
c.KubeSpawner.http_timeout = 120

# Pod Security `restricted`, the user and group of every pod we run (jobs' too).
c.KubeSpawner.pod_security_context = pod_security_context()
c.KubeSpawner.container_security_context = container_security_context()

# Home: one PVC per user, kept when the server stops.
c.KubeSpawner.storage_pvc_ensure = True
c.KubeSpawner.pvc_name_template = HOME_CLAIM_TEMPLATE
c.KubeSpawner.storage_capacity = settings.home_capacity
# A home that jobs share must be mountable by several pods on several nodes at once.
c.KubeSpawner.storage_access_modes = ["ReadWriteMany" if settings.jobs_share_home else "ReadWriteOnce"]
if settings.home_storage_class:
    c.KubeSpawner.storage_class = settings.home_storage_class
dataset_volumes, dataset_mounts = notebook_datasets(settings)
c.KubeSpawner.volumes = [{"name": "home", "persistentVolumeClaim": {"claimName": "{pvc_name}"}},
                         {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}] + dataset_volumes
c.KubeSpawner.volume_mounts = [{"name": "home", "mountPath": HOME_MOUNT},
                               {"name": "dshm", "mountPath": "/dev/shm"}] + dataset_mounts
# A new home gets the quickstart notebook and train.py from the image, as the embedded
# default's does: copied on the first start, nothing the user has is overwritten.
c.KubeSpawner.lifecycle_hooks = homeseed.post_start_hook(HOME_MOUNT)

# --- Services ------------------------------------------------------------------------
c.JupyterHub.services = [
    {"name": "idle-culler",
     "command": [sys.executable, "-m", "jupyterhub_idle_culler", f"--timeout={settings.cull_idle_seconds}"]},
]
c.JupyterHub.load_roles = [
    {"name": "idle-culler", "services": ["idle-culler"],
     "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"]},
]
# The quota admin panel and API at /services/quota/. In a pod, the proxy reaches it
# through the hub's Service (quota_service_host), so it listens on every interface.
configure_quota_service(
    c, port=settings.quota_service_port, host=settings.quota_service_host,
    listen_ip=env(E.QUOTA_LISTEN_IP_ENV, ""),
    environment={QUOTA_STORE_ENV: "kubernetes", "POD_NAMESPACE": settings.hub_namespace,
                 NAMESPACE_TEMPLATE_ENV: settings.user_namespace_template,
                 SITE_DEFAULT_QUOTA_ENV: json.dumps(settings.default_quota),
                 OBJECT_QUOTA_ENV: json.dumps(settings.object_quota),
                 **({KUEUE_ENV: json.dumps({"lending_limit": settings.kueue_lending_limit,
                                            "borrowing_limit": settings.kueue_borrowing_limit,
                                            "fair_sharing": settings.kueue_fair_sharing,
                                            "user_weights": settings.kueue_user_weights})}
                    if settings.kueue_enabled else {})},
    args=[f"--QuotaService.gpu_resource={settings.gpu_resource}", f"--QuotaService.job_kind={settings.job_kind}"],
    admin_users=c.Authenticator.admin_users, admin_groups=settings.admin_groups)

# --- Passthrough: the admin's own traitlets config (the chart's hub.config), applied last -----------
if env(E.HUB_CONFIG_FILE_ENV):
    try:
        c.merge(Config(traitlets_passthrough(env(E.HUB_CONFIG_FILE_ENV))))
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise SystemExit(f"PaddleCloud Hub: {exc}") from None
