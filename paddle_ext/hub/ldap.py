"""LDAP login whose directory groups become the user's hub groups at every login.

    c.JupyterHub.authenticator_class = "paddle_ext.hub.ldap.LDAPGroupsAuthenticator"
    c.LDAPGroupsAuthenticator.server_address = "ldap.example.org"
    c.LDAPGroupsAuthenticator.bind_dn_template = ["uid={username},ou=people,dc=example,dc=org"]
    c.LDAPGroupsAuthenticator.group_search_base = "ou=groups,dc=example,dc=org"
    c.LDAPGroupsAuthenticator.allowed_groups = {"vision", "audio"}   # group names
    c.LDAPGroupsAuthenticator.admin_groups = {"hub-admins"}

ldapauthenticator 2 checks a password by binding as the user, and checks membership only of
the group DNs in its own `allowed_groups`; it hands JupyterHub no groups, so `manage_groups`
cannot work with it. This subclass keeps its bind (bind_dn_template or lookup_dn, TLS
options, search_filter) and, still bound as the user, searches `group_search_base` with
`group_search_filter` (member, uniqueMember or memberUid): the names found (`cn`) are the
user's hub groups (`manage_groups`, on), which the quota service reads. `allowed_groups`
and `admin_groups` are group names, as for OAuthenticator; someone who may not log in gets
a page that says why, not "Invalid username or password".
"""

from __future__ import annotations

import os
import re

import ldap3
from jupyterhub.auth import Authenticator
from ldap3.utils.conv import escape_filter_chars
from ldap3.utils.dn import escape_rdn
from ldapauthenticator import LDAPAuthenticator
from tornado import web
from traitlets import Bool, Set, Unicode, default

from .settings import not_allowed_message

BIND_PASSWORD_ENV = "LDAP_BIND_PASSWORD"  # lookup_dn_search_password, when lookup_dn searches as a service account


class LDAPGroupsAuthenticator(LDAPAuthenticator):
    group_search_base = Unicode(
        config=True, help="Where the groups are, e.g. ou=groups,dc=example,dc=org (searched with its subtree).")
    group_name_attribute = Unicode("cn", config=True, help="The attribute of a group entry that is its hub group name.")
    allowed_groups = Set(Unicode(), config=True, help="Names of the groups whose members may log in.")
    admin_groups = Set(Unicode(), config=True, help=(
        "Names of the groups whose members are hub admins; someone no longer in one is no longer an admin at "
        "the next login (unless listed in admin_users)."))
    manage_groups = Bool(True, config=True, help="The directory's groups are the user's hub groups at every login.")

    @default("lookup_dn_search_password")
    def _lookup_dn_search_password_default(self):
        # kept out of config files: the chart sets it from an existing Secret
        return os.environ.get(BIND_PASSWORD_ENV) or None

    @default("group_search_filter")
    def _group_search_filter_default(self):
        return "(|(member={userdn})(uniqueMember={userdn})(memberUid={uid}))"

    async def authenticate(self, handler, data):
        username, password = data.get("username", ""), data.get("password", "")
        if not self._valid_input(username, password):
            return None
        resolved = username
        templates = self.bind_dn_template
        if self.lookup_dn:
            resolved, dn = self.resolve_username(username)
            if not dn:
                self.log.warning("LDAP: no entry found for %r", username)
                return None
            templates = templates or [dn]
        conn = userdn = None
        for template in templates:
            userdn = template.format(username=escape_rdn(resolved))
            conn = self.get_connection(userdn, password)
            if conn:
                break
        if not conn:
            self.log.warning("LDAP: bind as %r refused (wrong password or no such user)", username)
            return None
        try:
            if self.search_filter and not self._matches_search_filter(conn, resolved):
                return None
            groups = self._groups_of(conn, userdn, resolved)
            attributes = self.get_user_attributes(conn, userdn)
        finally:
            conn.unbind()
        name = resolved if self.use_lookup_dn_username else username
        model = {"name": name, "groups": groups,
                 "auth_state": {"ldap_groups": groups, "user_attributes": attributes}}
        if self.admin_groups and name not in self.admin_users:
            model["admin"] = bool(set(groups) & self.admin_groups)
        return model

    def _valid_input(self, username: str, password: str) -> bool:
        if not re.match(self.valid_username_regex, username):
            self.log.warning("LDAP: refused a user name that does not match %s", self.valid_username_regex)
            return False
        return bool(password and password.strip())

    def _matches_search_filter(self, conn, resolved: str) -> bool:
        conn.search(search_base=self.user_search_base, search_scope=ldap3.SUBTREE,
                    search_filter=self.search_filter.format(userattr=self.user_attribute,
                                                            username=escape_filter_chars(resolved)),
                    attributes=self.attributes)
        return len(conn.entries) == 1

    def _groups_of(self, conn, userdn: str, uid: str) -> list[str]:
        if not self.group_search_base:
            raise web.HTTPError(500, "LDAPGroupsAuthenticator.group_search_base is not set: "
                                     "the hub cannot read anyone's groups.")
        conn.search(search_base=self.group_search_base, search_scope=ldap3.SUBTREE,
                    search_filter=self.group_search_filter.format(userdn=escape_filter_chars(userdn),
                                                                  uid=escape_filter_chars(uid)),
                    attributes=[self.group_name_attribute])
        return sorted({str(value) for entry in conn.entries
                       for value in entry[self.group_name_attribute].values})

    async def check_allowed(self, username, auth_model):
        if (Authenticator.check_allowed(self, username, auth_model) or username in self.admin_users
                or (auth_model or {}).get("admin")):
            return True  # allowed users, everyone (allow_all), admins by name or by group
        if self.allowed_groups and set((auth_model or {}).get("groups") or ()) & self.allowed_groups:
            return True
        raise web.HTTPError(403, not_allowed_message(self.allowed_groups))  # the page says why, not "wrong password"
