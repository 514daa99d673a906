"""JupyterHub config for the embedded default: PaddleCloud Hub on one machine.

    python -m paddle_ext.hub.demo --port 8000      (or `make demo`)
    jupyterhub -f hub_config/local_config.py       (the same hub, without the banner)

Everything listens on 127.0.0.1; state lives under $PADDLECLOUD_HOME (default
~/.paddlecloud; the layout is in paddle_ext/hub/local.py). Ports, from the environment:

    PADDLECLOUD_HUB_PORT        public port (proxy), else $PORT, else 8000
    PADDLECLOUD_HUB_API_PORT    hub API port, else a free one
    PADDLECLOUD_PROXY_API_PORT  proxy's REST API port, else a free one
    PADDLECLOUD_QUOTA_PORT      the quota service's port (/services/quota/), else a free one
    PADDLECLOUD_QUOTA_ADMINS    comma-separated users who may change quotas besides hub admins

Login: with PADDLECLOUD_AUTHENTICATOR_CLASS set (e.g. paddle_ext.hub.ldap.LDAPGroupsAuthenticator,
generic-oauth), users log in through it, configured as on Kubernetes (PADDLECLOUD_ALLOWED_GROUPS,
PADDLECLOUD_ADMIN_GROUPS, PADDLECLOUD_HUB_CONFIG_FILE: {Class: {trait: value}} YAML). Without
it, every user, `admin` included, logs in with the demo password ($PADDLECLOUD_DEMO_PASSWORD,
else generated once into hub/demo-password). This is a single-OS-user demo: users are
separated by folders, not by the OS.
"""

import os
import sys

import yaml
from traitlets.config import Config

from paddle_ext import environment as E
from paddle_ext.constants import HOME_ENV, QUOTA_FILE_ENV, QUOTA_STORE_ENV
from paddle_ext.hub import local
from paddle_ext.hub.login_config import configure_login
from paddle_ext.hub.quota_config import configure_quota_service
from paddle_ext.hub.settings import HubSettings, traitlets_passthrough

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)
state = local.home()
local.prepare(state)

# --- Authentication
settings = None
if os.environ.get(E.AUTHENTICATOR_CLASS_ENV):
    # A real login (LDAP, OpenID Connect) instead of the demo password, chosen exactly as on
    # Kubernetes: PADDLECLOUD_AUTHENTICATOR_CLASS, PADDLECLOUD_ALLOWED_USERS/_GROUPS or _ALLOW_ALL,
    # PADDLECLOUD_ADMIN_GROUPS, and the authenticator's own traits in PADDLECLOUD_HUB_CONFIG_FILE.
    try:
        settings = HubSettings.load()
        configure_login(c, settings, os.environ[E.AUTHENTICATOR_CLASS_ENV], admin_users={local.ADMIN_USER})
    except (OSError, ValueError) as exc:
        raise SystemExit(str(exc)) from None
else:
    c.JupyterHub.authenticator_class = "paddle_ext.hub.local.DemoPasswordAuthenticator"
    c.DemoPasswordAuthenticator.password = local.demo_password(state)
    c.Authenticator.admin_users = {local.ADMIN_USER}
    # Who may log in: anyone who knows the demo password, under any well-formed name. That is
    # the embedded default's documented behaviour (a one-machine demo, one OS user), chosen
    # here explicitly; the Kubernetes hub instead requires PADDLECLOUD_ALLOWED_USERS/_GROUPS.
    c.Authenticator.allow_all = True
    c.Authenticator.username_pattern = local.USERNAME_PATTERN

# --- Single-user servers: JupyterLab processes of this Python, one home per user
c.JupyterHub.spawner_class = "paddle_ext.hub.local.PaddleLocalSpawner"
c.PaddleLocalSpawner.home_dir_template = str(local.users_dir(state) / "{username}")
c.PaddleLocalSpawner.quota_file = str(local.quota_file(state))
c.Spawner.notebook_dir = str(local.users_dir(state) / "{username}")
c.Spawner.default_url = "/lab"
c.Spawner.cmd = [sys.executable, "-m", "jupyterhub.singleuser"]
# The demo runs offline: no news feed and no update checks from JupyterLab.
c.Spawner.args = ["--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
if os.geteuid() == 0:
    c.Spawner.args.append("--allow-root")  # containers and CI often run as root
c.Spawner.start_timeout = 180  # a first JupyterLab start on a busy machine can take a while
c.Spawner.http_timeout = 120

# --- Hub, proxy, state: all on 127.0.0.1; internal ports free by default, so a demo on
# 8000 does not collide with another JupyterHub's 8081/8001 on the same machine.
public_port = local.public_port()
ports = local.ports_from_env([E.HUB_API_PORT_ENV, E.PROXY_API_PORT_ENV, E.QUOTA_PORT_ENV], taken=[public_port])
c.JupyterHub.bind_url = f"http://127.0.0.1:{public_port}"
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{ports[E.HUB_API_PORT_ENV]}"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{ports[E.PROXY_API_PORT_ENV]}"
c.ConfigurableHTTPProxy.pid_file = str(local.hub_dir(state) / "jupyterhub-proxy.pid")
c.JupyterHub.db_url = f"sqlite:///{local.hub_dir(state) / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(local.hub_dir(state) / "jupyterhub_cookie_secret")
# Stopping the hub stops the proxy and every user's server (training jobs are detached
# on purpose and finish on their own).
c.JupyterHub.cleanup_servers = True
c.JupyterHub.cleanup_proxy = True

# --- The quota service at /services/quota/
configure_quota_service(
    c, port=ports[E.QUOTA_PORT_ENV],
    environment={HOME_ENV: str(state), QUOTA_FILE_ENV: str(local.quota_file(state)), QUOTA_STORE_ENV: "local"},
    # The hub's admin administers quotas through the quota admin role: its scope is what the
    # service checks on each token (an admin's browser session holds it through this role).
    admin_users=[local.ADMIN_USER, *(name for name in os.environ.get(E.QUOTA_ADMINS_ENV, "").split(",")
                                     if name)],
    admin_groups=settings.admin_groups if settings else (),
)

# --- The authenticator's own traits (server, client id, ...), as the chart's hub.config, applied last
if os.environ.get(E.HUB_CONFIG_FILE_ENV):
    try:
        c.merge(Config(traitlets_passthrough(os.environ[E.HUB_CONFIG_FILE_ENV])))
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise SystemExit(f"PaddleCloud Hub: {exc}") from None
