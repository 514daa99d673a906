"""The quota service's HTTP side: its routes, and handlers that check who may call and
turn requests into calls of the service's views (`QuotaViews`; `quota_service` has
the routes' contract and the application).

Scopes are declared per handler method (`@require_scope`) as in JupyterHub's
custom-scopes example. A caller administers quotas when its token holds the admin scope
(or `admin:users`); hub admins get the scope through the quota admin role
(quota_config.quota_roles), so their browser sessions hold it too.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Protocol

import yaml
from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated, UserNotAllowed
from jupyterhub.utils import url_path_join
from tornado import web

from ..errors import Forbidden, NotFound, PaddleCloudError
from ..json_errors import JsonErrorsMixin
from ..quota.model import FIELDS, QuotaInputError, check_name, parse_patch
from ..quota.store import KubernetesQuotaStore, LocalQuotaStore

ADMIN_SCOPE = "custom:paddlecloud-quota:admin"
# A token that may administer every user (unfiltered) may administer their quotas too.
ADMIN_EQUIVALENT_SCOPE = "admin:users"
STATIC = Path(__file__).resolve().parent / "static"
KINDS = {"users": "user", "groups": "group"}
OPENAPI_DOCUMENT = Path(__file__).with_name("quota_openapi.yaml")


@functools.cache
def openapi_document() -> dict:
    """This service's OpenAPI document (paddle_ext/hub/quota_openapi.yaml)."""
    return yaml.safe_load(OPENAPI_DOCUMENT.read_text(encoding="utf-8"))


class NotLoggedIn(PaddleCloudError):
    code = "unauthorized"
    status = 401


class QuotaViews(Protocol):
    """What the handlers ask of the service (`quota_service.QuotaService`)."""

    prefix: str
    store: LocalQuotaStore | KubernetesQuotaStore

    async def user_view(self, name: str) -> dict: ...

    async def group_view(self, name: str) -> dict: ...

    async def overview(self) -> dict: ...

    async def cluster_overview(self) -> dict: ...

    async def cancel_job(self, admin: str, user: str, job: str) -> dict: ...

    async def update(self, kind: str, name: str | None, patch: dict) -> dict: ...


def require_scope(scope: str):
    """Only callers whose token holds `scope` (ADMIN_SCOPE: or admin:users) may call the method;
    others get 403, callers who are not logged in 401, both as JSON."""
    def wrap(method):
        @functools.wraps(method)
        async def wrapped(self: QuotaHandler, *args, **kwargs):
            self.required_scope = scope
            self.caller()
            return await method(self, *args, **kwargs)
        return wrapped
    return wrap


class QuotaHandler(JsonErrorsMixin, HubOAuthenticated, web.RequestHandler):
    """Every caller must at least be allowed to use the service (access:services!service=quota);
    `@require_scope` raises the bar per method. Cookie-authenticated writes must carry
    X-XSRFToken (HubOAuth checks it and otherwise ignores the cookie)."""

    required_scope: str | None = None
    hub_answer: dict | None = None  # the hub's model of the caller (prepare), allowed or not

    @property
    def hub_scopes(self):
        if self.required_scope:
            return {self.required_scope}
        return self.hub_auth.access_scopes or None

    @property
    def service(self) -> QuotaViews:
        return self.settings["quota_service"]

    @property
    def hub_auth(self):
        return self.settings["hub_auth"]

    async def prepare(self):
        """Ask the hub who the caller is without blocking the service: HubAuthenticated's own
        get_current_user waits on a thread of HubAuth's whose event loop is never closed (each
        request blocked the service meanwhile, and the loop left a traceback at exit)."""
        self.hub_answer = await self.hub_auth.get_user(self, sync=False)

    def get_current_user(self):
        """HubAuthenticated.get_current_user on prepare()'s answer: the caller's model when it may
        call (checked when first asked, once @require_scope has set the scope), else None, and
        then @web.authenticated answers 403 rather than redirecting to a login in a loop."""
        model = self.hub_answer
        if not model:
            return None
        try:
            user = self.check_hub_user(model)
        except UserNotAllowed:
            def forbid_instead_of_redirect(*args, **kwargs):
                raise web.HTTPError(403, "{kind} {name} is not allowed.".format(**model))

            self.redirect = forbid_instead_of_redirect  # type: ignore[method-assign]
            return None
        self.hub_auth._persist_url_token_if_set(self)
        return user

    def check_hub_user(self, model):
        """The caller's rights are its token's (or OAuth session's) own scopes, as the hub
        resolved them for that token: ADMIN_SCOPE, or `admin:users` (a hub admin's full
        token), never the owner's admin flag (an admin's token made for reading users only
        administers nothing)."""
        if ADMIN_EQUIVALENT_SCOPE in set(model.get("scopes") or ()):
            model = {**model, "scopes": [*model.get("scopes", []), ADMIN_SCOPE]}
        return super().check_hub_user(model)

    def caller(self) -> dict:
        user = self.current_user
        if user is not None:
            return user
        if self.hub_answer:
            if self.required_scope == ADMIN_SCOPE:
                raise Forbidden(f"Only hub admins (or holders of the scope {ADMIN_SCOPE}) may do this.")
            raise Forbidden("You are not allowed to use the quota service.")
        raise NotLoggedIn("Log in to the hub, or send 'Authorization: token <hub API token>'.")

    def may_administer(self) -> bool:
        return ADMIN_SCOPE in set(self.caller().get("scopes") or ())

    def body(self) -> Any:
        if not self.request.body:
            raise QuotaInputError({"body": "is empty; send a JSON object such as {\"gpus\": 2}"})
        try:
            return json.loads(self.request.body)
        except ValueError as exc:
            raise QuotaInputError({"body": "is not valid JSON"}) from exc

    async def put_entry(self, kind: str, name: str | None) -> None:
        if name is not None:
            check_name(KINDS[kind], name)
        patch = parse_patch(self.body(), allow_revision=True)
        self.write_json(await self.service.update(kind, name, patch))


class UserQuotaHandler(QuotaHandler):
    async def get(self, name: str):
        if name != self.caller()["name"] and not self.may_administer():
            raise Forbidden("You may only see your own quota.")
        check_name("user", name)
        self.write_json(await self.service.user_view(name))

    @require_scope(ADMIN_SCOPE)
    async def put(self, name: str):
        await self.put_entry("users", name)


class GroupQuotaHandler(QuotaHandler):
    @require_scope(ADMIN_SCOPE)
    async def get(self, name: str):
        check_name("group", name)
        self.write_json(await self.service.group_view(name))

    @require_scope(ADMIN_SCOPE)
    async def put(self, name: str):
        await self.put_entry("groups", name)


class DefaultQuotaHandler(QuotaHandler):
    @require_scope(ADMIN_SCOPE)
    async def get(self):
        config = await self.service.store.load()
        self.write_json({"limits": config.default.limits.to_dict(), "revision": config.default.revision})

    @require_scope(ADMIN_SCOPE)
    async def put(self):
        await self.put_entry("default", None)


class AllQuotasHandler(QuotaHandler):
    @require_scope(ADMIN_SCOPE)
    async def get(self):
        self.write_json(await self.service.overview())


class OverviewHandler(QuotaHandler):
    @require_scope(ADMIN_SCOPE)
    async def get(self):
        self.write_json(await self.service.cluster_overview())


class AdminJobHandler(QuotaHandler):
    """Cancel any user's job (admins); the log records who did it."""

    @require_scope(ADMIN_SCOPE)
    async def delete(self, user: str, job: str):
        check_name("user", user)
        cancelled = await self.service.cancel_job(self.caller()["name"], user, job)
        self.write_json(cancelled, status=202)

    post = delete


class OpenAPIHandler(QuotaHandler):
    """This API's OpenAPI document, with `servers` pointing at where it runs."""

    async def get(self):
        self.caller()
        servers = [{"url": url_path_join(self.service.prefix, "api")}]
        self.write_json({**openapi_document(), "servers": servers})


class UnknownPathHandler(QuotaHandler):
    """Anything else under api/: a JSON 404 (for callers allowed to use the service)."""

    async def get(self, path: str):
        self.caller()
        raise NotFound(f"There is no api/{path} in the quota service; see api/openapi.json.")

    post = put = patch = delete = get


class CallbackHandler(HubOAuthCallbackHandler):
    """The OAuth callback, with the same HubOAuth (and so the same PKCE state) as the rest."""

    @property
    def hub_auth(self):
        return self.settings["hub_auth"]


class PageHandler(QuotaHandler):
    @web.authenticated
    def get(self):
        user = self.current_user
        page = (STATIC / "admin.html").read_text(encoding="utf-8")
        boot = {"user": user["name"], "writer": self.may_administer(), "xsrf": self.xsrf_token.decode(),
                "api": url_path_join(self.service.prefix, "api/quotas"), "fields": list(FIELDS),
                "overview": url_path_join(self.service.prefix, "api/overview"),
                "jobs": url_path_join(self.service.prefix, "api/jobs/"),
                "hub": self.hub_auth.hub_prefix, "static": url_path_join(self.service.prefix, "static/")}
        self.set_header("Cache-Control", "no-store")
        self.finish(page.replace("__BOOT__", json.dumps(boot).replace("<", "\\u003c"))
                    .replace("__STATIC__", boot["static"]))


def routes(prefix: str) -> list[tuple]:
    """The service's URL rules under `prefix` (ending in '/')."""
    return [
        (prefix, PageHandler),
        (url_path_join(prefix, "oauth_callback"), CallbackHandler),
        (url_path_join(prefix, "static/(.*)"), web.StaticFileHandler, {"path": str(STATIC)}),
        (url_path_join(prefix, "api/quotas"), AllQuotasHandler),
        (url_path_join(prefix, "api/quotas/default"), DefaultQuotaHandler),
        (url_path_join(prefix, "api/quotas/users/([^/]+)"), UserQuotaHandler),
        (url_path_join(prefix, "api/quotas/groups/([^/]+)"), GroupQuotaHandler),
        (url_path_join(prefix, "api/overview"), OverviewHandler),
        (url_path_join(prefix, "api/jobs/([^/]+)/([^/]+)"), AdminJobHandler),
        (url_path_join(prefix, "api/openapi.json"), OpenAPIHandler),
        (url_path_join(prefix, "api/(.*)"), UnknownPathHandler),  # keep last
    ]
