"""How users log in, shared by hub_config/jupyterhub_config.py and hub_config/local_config.py:

    from paddle_ext.hub.login_config import configure_login
    configure_login(c, settings, "ldapauthenticator", admin_users={"admin"})

Sets the authenticator class (an entry-point name such as generic-oauth, or a class path),
the admins, and who may log in from the site's settings (settings.login_access: allowed
users or groups, or everyone; the groups from the login as hub groups, admin groups).
ValueError, one sentence for the admin, when the choice is missing or cannot work.
"""

from __future__ import annotations

from typing import Iterable

from jupyterhub.app import JupyterHub
from traitlets import TraitError

from .settings import HubSettings, login_access


def configure_login(c, settings: HubSettings, authenticator_class: str, admin_users: Iterable[str]) -> type:
    """Apply the login choice to the config `c`; returns the authenticator class."""
    try:
        authenticator = JupyterHub.authenticator_class.validate(None, authenticator_class)
    except TraitError:
        raise ValueError(f"PaddleCloud Hub: PADDLECLOUD_AUTHENTICATOR_CLASS={authenticator_class!r} "
                         "names no installed authenticator.") from None
    c.JupyterHub.authenticator_class = authenticator_class
    c.Authenticator.admin_users = set(admin_users)
    for trait, value in login_access(settings, authenticator).items():
        setattr(c.Authenticator, trait, value)
    return authenticator
