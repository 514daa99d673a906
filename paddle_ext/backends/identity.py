"""Who is submitting, and in which hub groups: for the local backend's quota check.

The user is $JUPYTERHUB_USER (set by the hub for the user's server, its kernels and
terminals), else the OS user. Groups come from the hub's API with the server's own
token ($JUPYTERHUB_API_URL/user answers any token with its owner's name and groups);
without a hub, from $PADDLECLOUD_USER_GROUPS (comma-separated), else none.
"""

from __future__ import annotations

import getpass
import json
import logging
import os

from ..constants import USER_GROUPS_ENV

log = logging.getLogger(__name__)


def current_user() -> str:
    return os.environ.get("JUPYTERHUB_USER") or getpass.getuser()


def current_groups(timeout: float = 5.0) -> list[str]:
    api_url, token = os.environ.get("JUPYTERHUB_API_URL"), os.environ.get("JUPYTERHUB_API_TOKEN")
    if api_url and token:
        import urllib.error  # only here: http.client and email cost every command ~10 ms otherwise
        import urllib.request

        request = urllib.request.Request(api_url.rstrip("/") + "/user",
                                         headers={"Authorization": f"token {token}"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return sorted(json.load(response).get("groups") or [])
        except (urllib.error.URLError, OSError, ValueError) as exc:
            log.warning("Cannot ask the hub for this user's groups (%s); using $%s", exc, USER_GROUPS_ENV)
    return sorted(g.strip() for g in os.environ.get(USER_GROUPS_ENV, "").split(",") if g.strip())
