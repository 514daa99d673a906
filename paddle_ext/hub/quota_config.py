"""JupyterHub config for the quota service, shared by hub_config/local_config.py and
hub_config/jupyterhub_config.py:

    from paddle_ext.hub.quota_config import configure_quota_service
    configure_quota_service(c, port=10101)                          # local: 127.0.0.1
    configure_quota_service(c, port=10101, host="hub", listen_ip="0.0.0.0",  # Kubernetes
                            environment={"PADDLECLOUD_QUOTA_STORE": "kubernetes"})

It adds to the hub's config (keeping what is there):
- the managed service `quota` at /services/quota/ (`python -m paddle_ext.hub.quota_service`),
  OAuth without a consent page, listed in the hub's Services menu;
- the custom scope `custom:paddlecloud-quota:admin` (may change quotas without being
  a hub admin) and a role granting it to `admin_users` / `admin_groups`;
- a role for the service's own token: list/read users and groups;
- `access:services!service=quota` for every user (the `user` role), so users can read
  their own quota; the service itself decides who may write.
"""

from __future__ import annotations

import os
import sys
from typing import Iterable, Mapping

from .quota_handlers import ADMIN_SCOPE

SERVICE_NAME = "quota"
SERVICE_ROLE = "paddlecloud-quota-service"
ADMIN_ROLE = "paddlecloud-quota-admin"
SERVICE_SCOPES = ("list:users", "read:users", "list:groups", "read:groups")
PASSTHROUGH_ENV = ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "POD_NAMESPACE", "KUBECONFIG")


def quota_service(port: int, name: str = SERVICE_NAME, host: str = "127.0.0.1",
                  environment: Mapping[str, str] | None = None, args: Iterable[str] = (),
                  python: str | None = None, listen_ip: str = "") -> dict:
    """The entry for c.JupyterHub.services. `host` is where the proxy reaches the service
    (on Kubernetes: the hub's Service name, with `listen_ip="0.0.0.0"`)."""
    listen = [f"--ip={listen_ip}"] if listen_ip else []
    # JupyterHub gives a service only a few of its own variables; these tell the service
    # it runs in a pod (in-cluster credentials) and in which namespace.
    env = {key: os.environ[key] for key in PASSTHROUGH_ENV if os.environ.get(key)}
    env.update(environment or {})
    return {
        "name": name,
        "url": f"http://{host}:{port}",
        "command": [python or sys.executable, "-m", "paddle_ext.hub.quota_service", *listen, *args],
        "environment": env,
        "oauth_no_confirm": True,
        "oauth_client_allowed_scopes": [ADMIN_SCOPE],
        "display": True,
        "info": {"description": "GPU, CPU, memory and job quotas"},
    }


def quota_roles(name: str = SERVICE_NAME, admin_users: Iterable[str] = (),
                admin_groups: Iterable[str] = ()) -> list[dict]:
    """The roles for c.JupyterHub.load_roles (besides the `user` role change)."""
    return [
        {"name": SERVICE_ROLE, "description": "The quota service reads users and groups",
         "scopes": list(SERVICE_SCOPES), "services": [name]},
        {"name": ADMIN_ROLE, "description": "Change PaddleCloud quotas",
         "scopes": [ADMIN_SCOPE, f"access:services!service={name}"],
         "users": sorted(admin_users), "groups": sorted(admin_groups)},
    ]


def custom_scopes() -> dict:
    return {ADMIN_SCOPE: {"description": "Change PaddleCloud quotas (GPUs, CPU, memory, pods, running jobs) "
                                         "of any user or group"}}


def _existing(section, key: str, empty):
    return section[key] if key in section else empty


def configure_quota_service(c, port: int, name: str = SERVICE_NAME, host: str = "127.0.0.1",
                            environment: Mapping[str, str] | None = None, args: Iterable[str] = (),
                            admin_users: Iterable[str] = (), admin_groups: Iterable[str] = (),
                            listen_ip: str = "") -> dict:
    """Add the quota service, its scope and roles to a JupyterHub config `c`; returns the
    service entry. Call it after any load_roles of your own (a `user` role there is kept
    and extended)."""
    hub = c.JupyterHub
    service = quota_service(port, name, host, environment, args, listen_ip=listen_ip)
    hub.services = [s for s in _existing(hub, "services", []) if s.get("name") != name] + [service]
    hub.custom_scopes = {**_existing(hub, "custom_scopes", {}), **custom_scopes()}
    roles = [r for r in _existing(hub, "load_roles", []) if r.get("name") not in (SERVICE_ROLE, ADMIN_ROLE)]
    access = f"access:services!service={name}"
    user_role = next((r for r in roles if r.get("name") == "user"), None)
    if user_role is None:
        roles.append({"name": "user", "scopes": ["self", access]})
    elif access not in user_role.get("scopes", []):
        user_role["scopes"] = [*user_role.get("scopes", ["self"]), access]
    hub.load_roles = roles + quota_roles(name, admin_users, admin_groups)
    return service
