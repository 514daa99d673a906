"""The quota service: a JupyterHub-managed service at /services/quota/.

    python -m paddle_ext.hub.quota_service    (JupyterHub starts it; see quota_config.py)

Routes (under the service prefix):

    GET  /                          admin page (HTML; non-admins see their own quota)
    GET  api/quotas                 all settings, every hub user's effective limits and usage (admins)
    GET  api/quotas/users/{user}    that user's effective limits and usage (the user, or admins)
    PUT  api/quotas/users/{user}    {"gpus", "cpu", "memory", "pods", "running_jobs"} (admins)
    PUT  api/quotas/groups/{group}  same fields (admins)
    PUT  api/quotas/default         same fields (admins)
    GET  api/overview               the cluster's capacity and usage, every running job, GPU-hours
                                    per user and group (admins)
    DELETE api/jobs/{user}/{job}    cancel any user's job, audited in the log with the admin's name
                                    (admins; POST does the same for clients without DELETE)

A field left out of a PUT keeps its value; `null` clears it. A PUT may carry
`"revision": N` (the entry's revision as read); if the entry changed since, the answer
is 409 and nothing is written. Errors: {"error": code, "message": one sentence,
"fields": {...}} with 400, 401, 403, 409.

Auth: the hub's OAuth cookie (browsers) or `Authorization: token <hub API token>`.
Scopes, declared per handler method (`@require_scope`) as in JupyterHub's custom-scopes
example: everyone with access to the service reads their own quota; writes and
everyone's quotas need the custom scope `custom:paddlecloud-quota:admin`, which hub
admins hold implicitly.
The service asks the hub about users and groups with its own token (role with
list:users, read:users, list:groups, read:groups).

Storage: `local` = the JSON file shared with the local backend's preflight;
`kubernetes` = a ConfigMap, and every change is written at once into the affected
users' ResourceQuotas (users whose namespace does not exist yet get theirs at spawn).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import signal
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse

import yaml
from jupyterhub.services.auth import HubOAuth, HubOAuthCallbackHandler, HubOAuthenticated
from jupyterhub.utils import url_path_join
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from traitlets import Enum, Integer, Unicode, default
from traitlets.config import Application

from ..backends.registry import KUBERNETES, LOCAL
from ..constants import (GPU_RESOURCE, NAMESPACE_TEMPLATE_ENV, QUOTA_CONFIGMAP, QUOTA_STORE_ENV,
                         USER_NAMESPACE_TEMPLATE, paddlecloud_home)
from ..errors import BackendUnavailable, Forbidden, NotFound, PaddleCloudError
from ..json_errors import JsonErrorsMixin
from ..kubeapi import KubeApi, KubeApiError, KubeUnreachable
from ..quota.model import FIELDS, JobUsage, QuotaConfig, QuotaInputError, check_name, parse_patch, resolve
from ..quota.store import KubernetesQuotaStore, LocalQuotaStore, default_quota_file
from ..timestamps import now
from .overview import overview
from .quota_sync import QuotaSync, hub_namespace_default
from .usage import KubernetesUsage, LocalUsage

ADMIN_SCOPE = "custom:paddlecloud-quota:admin"
STATIC = Path(__file__).resolve().parent / "static"
KINDS = {"users": "user", "groups": "group"}
OPENAPI_DOCUMENT = Path(__file__).with_name("quota_openapi.yaml")


@functools.cache
def openapi_document() -> dict:
    """This service's OpenAPI document (paddle_ext/hub/quota_openapi.yaml)."""
    return yaml.safe_load(OPENAPI_DOCUMENT.read_text(encoding="utf-8"))


class UnknownName(QuotaInputError):
    def __init__(self, kind: str, name: str):
        super().__init__({kind: f"no hub {kind} named '{name}'"})
        self.message = f"There is no hub {kind} named '{name}'."


class NotLoggedIn(PaddleCloudError):
    code = "unauthorized"
    status = 401


# ------------------------------------------------------------------ the hub's users and groups

class HubDirectory:
    """Users and groups from the hub's REST API, asked with the service's own token."""

    def __init__(self, api_url: str, token: str):
        self.api_url = api_url.rstrip("/")
        self.token = token
        self.http = AsyncHTTPClient()

    async def _get(self, path: str) -> Any:
        request = HTTPRequest(self.api_url + path, headers={
            "Authorization": f"token {self.token}", "Accept": "application/jupyterhub-pagination+json"},
            request_timeout=30)
        try:
            response = await self.http.fetch(request)
        except HTTPClientError as exc:
            if exc.code == 404:
                return None
            raise BackendUnavailable(f"The hub refused to list users and groups (HTTP {exc.code}); "
                                     "check the quota service's role.") from exc
        except OSError as exc:
            raise BackendUnavailable(f"Cannot reach the hub API at {self.api_url}: {exc}.") from exc
        return json.loads(response.body)

    async def _list(self, path: str) -> list[dict]:
        items, offset = [], 0
        while True:
            page = await self._get(f"{path}?offset={offset}&limit=200")
            if isinstance(page, list):  # a hub without pagination
                return page
            items.extend(page["items"])
            following = (page.get("_pagination") or {}).get("next")
            if not following:
                return items
            offset = following["offset"]

    async def user(self, name: str) -> dict | None:
        return await self._get(f"/users/{quote(name, safe='')}")

    async def group(self, name: str) -> dict | None:
        return await self._get(f"/groups/{quote(name, safe='')}")

    async def users(self) -> list[dict]:
        return await self._list("/users")

    async def groups(self) -> list[dict]:
        return await self._list("/groups")


# ------------------------------------------------------------------ handlers

def require_scope(scope: str):
    """Only callers holding `scope` (hub admins hold every quota scope) may call the method;
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
    hub_user_model: dict | None = None  # who the hub says the caller is, allowed or not

    @property
    def hub_scopes(self):
        if self.required_scope:
            return {self.required_scope}
        return self.hub_auth.access_scopes or None

    @property
    def service(self) -> QuotaService:
        return self.settings["quota_service"]

    @property
    def hub_auth(self):
        return self.settings["hub_auth"]

    def check_hub_user(self, model):
        self.hub_user_model = model
        if model.get("admin"):
            model = {**model, "scopes": [*model.get("scopes", []), ADMIN_SCOPE]}
        return super().check_hub_user(model)

    def caller(self) -> dict:
        user = self.current_user
        if user is not None:
            return user
        if self.hub_user_model is not None:
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


# ------------------------------------------------------------------ the application

def _env_default(name: str, fallback: str = "") -> str:
    return os.environ.get(name) or fallback


class QuotaService(Application):
    """The quota service's settings (command line: --QuotaService.store=kubernetes, ...)."""

    name = "paddlecloud-quota"
    description = "PaddleCloud quota service (a JupyterHub service)"

    store_kind = Enum([LOCAL, KUBERNETES], help="Where settings live: 'local' (a JSON file, the embedded "
                      "default) or 'kubernetes' (a ConfigMap, plus users' ResourceQuotas). "
                      "Default: $PADDLECLOUD_QUOTA_STORE, else local.").tag(config=True)
    quota_file = Unicode(help="The local store's JSON file. Default: $PADDLECLOUD_QUOTA_FILE, "
                              "else $PADDLECLOUD_HOME/quotas.json.").tag(config=True)
    paddlecloud_home = Unicode(help="The embedded default's state folder. Default: $PADDLECLOUD_HOME "
                                    "or ~/.paddlecloud.").tag(config=True)
    user_home_template = Unicode("{home}/users/{username}/.paddlecloud",
                                 help="Local store: each user's job state folder ({home}, {username}), "
                                      "where their usage is read.").tag(config=True)
    hub_namespace = Unicode(help="Kubernetes store: namespace of the ConfigMap. Default: the hub's own "
                                 "($POD_NAMESPACE, else the service account's).").tag(config=True)
    configmap_name = Unicode(QUOTA_CONFIGMAP, help="Kubernetes store: the ConfigMap's name.").tag(config=True)
    namespace_template = Unicode(help="Kubernetes store: each user's namespace, with {username}. Default: "
                                      "$PADDLECLOUD_NAMESPACE_TEMPLATE, else paddlecloud-{username}.").tag(config=True)
    gpu_resource = Unicode(GPU_RESOURCE, help="Extended resource name of GPUs.").tag(config=True)
    kubeconfig = Unicode("", help="Kubeconfig outside a cluster; empty for in-cluster credentials "
                                  "or $KUBECONFIG.").tag(config=True)
    url = Unicode(help="Where to listen. Default: $JUPYTERHUB_SERVICE_URL.").tag(config=True)
    ip = Unicode("", help="Address to listen on; empty for the host of `url`. On Kubernetes, where the "
                          "proxy reaches the service through the hub's Service, use 0.0.0.0.").tag(config=True)
    prefix = Unicode(help="URL prefix. Default: $JUPYTERHUB_SERVICE_PREFIX, else /services/quota/.").tag(config=True)
    usage_concurrency = Integer(8, help="Users whose usage is read at once for the overview.").tag(config=True)

    aliases = {"store": "QuotaService.store_kind", "url": "QuotaService.url", "ip": "QuotaService.ip",
               "quota-file": "QuotaService.quota_file", "namespace-template": "QuotaService.namespace_template",
               "hub-namespace": "QuotaService.hub_namespace", "kubeconfig": "QuotaService.kubeconfig"}

    @default("store_kind")
    def _default_store_kind(self):
        return _env_default(QUOTA_STORE_ENV, LOCAL)

    @default("quota_file")
    def _default_quota_file(self):
        return default_quota_file()

    @default("paddlecloud_home")
    def _default_home(self):
        return paddlecloud_home()

    @default("hub_namespace")
    def _default_hub_namespace(self):
        return hub_namespace_default()

    @default("namespace_template")
    def _default_namespace_template(self):
        return _env_default(NAMESPACE_TEMPLATE_ENV, USER_NAMESPACE_TEMPLATE)

    @default("url")
    def _default_url(self):
        return _env_default("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10101")

    @default("prefix")
    def _default_prefix(self):
        return _env_default("JUPYTERHUB_SERVICE_PREFIX", "/services/quota/")

    # ---- parts, built in setup()

    store = None
    sync = None
    usage_source = None
    directory: HubDirectory | None = None

    async def setup(self) -> None:
        self.directory = HubDirectory(os.environ.get("JUPYTERHUB_API_URL", "http://127.0.0.1:8081/hub/api"),
                                      os.environ.get("JUPYTERHUB_API_TOKEN", ""))
        if self.store_kind == LOCAL:
            self.store = LocalQuotaStore(self.quota_file)
            self.usage_source = LocalUsage(self.user_home_template, self.paddlecloud_home)
        else:
            api = KubeApi.connect(self.kubeconfig or None)
            self.store = KubernetesQuotaStore(api, self.hub_namespace, self.configmap_name)
            self.sync = QuotaSync(api, self.store, self.namespace_template, self.gpu_resource)
            self.usage_source = KubernetesUsage(api, self.namespace_template, self.gpu_resource)

    # ---- views

    async def _user_view(self, config: QuotaConfig, name: str, groups: list[str]) -> dict:
        """The user's effective limits with where each comes from, their own override, and
        their usage (the same QuotaReport fields as `paddlecloud quota`)."""
        effective = resolve(config, name, groups)
        entry = config.users.get(name)
        view = {
            "user": name, "groups": sorted(groups),
            "limits": effective.limits.set_fields(), "sources": dict(effective.sources),
            "override": entry.limits.to_dict() if entry else {field: None for field in FIELDS},
            "revision": entry.revision if entry else 0,
            "used": {}, "running": [], "gpu_hours": {},
        }
        try:
            view.update((await self.usage_source.report(name, effective)).to_dict())
        except (PaddleCloudError, ValueError) as exc:  # ValueError: no namespace name for this user
            message = getattr(exc, "message", str(exc))
            self.log.warning("Cannot read %s's usage: %s", name, message)
            view["usage_error"] = message
        return view

    async def user_view(self, name: str, config: QuotaConfig | None = None) -> dict:
        hub_user = await self.directory.user(name)
        if hub_user is None:
            raise UnknownName("user", name)
        config = config or await self.store.load()
        return await self._user_view(config, name, hub_user.get("groups") or [])

    async def group_view(self, name: str, config: QuotaConfig | None = None) -> dict:
        group = await self.directory.group(name)
        if group is None:
            raise UnknownName("group", name)
        config = config or await self.store.load()
        entry = config.groups.get(name)
        return {"group": name, "members": sorted(group.get("users") or []),
                "limits": entry.limits.to_dict() if entry else {field: None for field in FIELDS},
                "revision": entry.revision if entry else 0}

    async def overview(self) -> dict:
        config = await self.store.load()
        users, groups = await asyncio.gather(self.directory.users(), self.directory.groups())
        limit = asyncio.Semaphore(self.usage_concurrency)

        async def one(user: dict) -> dict:
            async with limit:
                view = await self._user_view(config, user["name"], user.get("groups") or [])
            return {**view, "admin": bool(user.get("admin"))}

        hub_groups = {group["name"]: group for group in groups}
        return {
            "version": config.version,
            "fields": list(FIELDS),
            "default": {"limits": config.default.limits.to_dict(), "revision": config.default.revision},
            "groups": [{"group": name, "members": sorted((hub_groups.get(name) or {}).get("users") or []),
                        "in_hub": name in hub_groups,
                        "limits": config.entry("groups", name).limits.to_dict(),
                        "revision": config.entry("groups", name).revision}
                       for name in sorted(set(hub_groups) | set(config.groups))],
            "users": await asyncio.gather(*(one(user) for user in sorted(users, key=lambda u: u["name"]))),
        }

    async def cluster_overview(self) -> dict:
        """Capacity and usage, every user's running jobs, GPU-hours per user and group."""
        users = await self.directory.users()
        limit = asyncio.Semaphore(self.usage_concurrency)
        user_jobs, errors = {}, {}

        async def one(user: dict) -> None:
            async with limit:
                try:
                    jobs = await self.usage_source.jobs(user["name"])
                except (PaddleCloudError, ValueError) as exc:  # ValueError: no namespace name for this user
                    errors[user["name"]] = getattr(exc, "message", str(exc))
                    jobs = []
            user_jobs[user["name"]] = (user.get("groups") or [], jobs)

        await asyncio.gather(*(one(user) for user in users))
        running = [JobUsage.of(job.name, job.spec) for _, jobs in user_jobs.values() for job in jobs if not job.done]
        try:
            capacity = await self.usage_source.capacity(running)
        except (KubeApiError, KubeUnreachable) as exc:
            self.log.warning("Cannot read the cluster's nodes and pods: %s", exc)
            capacity = {"source": self.store_kind, "nodes": [], "total": None,
                        "error": f"Cannot read the cluster's nodes and pods: {exc}"}
        return overview(capacity, user_jobs, now(), errors)

    async def cancel_job(self, admin: str, user: str, job: str) -> dict:
        """Cancel `user`'s job `job` on behalf of `admin`, and say so in the log."""
        if await self.directory.user(user) is None:
            raise UnknownName("user", user)
        try:
            cancelled = await self.usage_source.cancel(user, job)
        except ValueError as exc:  # no namespace name can be derived for this user
            raise BackendUnavailable(f"Cannot find {user}'s jobs: {exc}") from exc
        self.log.info("AUDIT: admin %s cancelled job %s of user %s (now %s)", admin, job, user, cancelled.phase)
        return {"user": user, **cancelled.to_dict()}

    # ---- changes

    async def update(self, kind: str, name: str | None, patch: dict) -> dict:
        """Check the name against the hub, store the change, apply it (Kubernetes), and
        answer with the new view of the entry."""
        members: list[tuple[str, list[str]]] = []
        if kind == "users":
            hub_user = await self.directory.user(name)
            if hub_user is None:
                raise UnknownName("user", name)
            members = [(name, hub_user.get("groups") or [])]
        elif kind == "groups":
            group = await self.directory.group(name)
            if group is None:
                raise UnknownName("group", name)
        config = await self.store.update(kind, name, patch)
        self.log.info("Quota of %s %s set to %s (version %d)", kind, name or "", patch, config.version)
        sync_errors = []
        if self.sync is not None:
            if kind != "users":
                members = [(u["name"], u.get("groups") or []) for u in await self.directory.users()]
                if kind == "groups":
                    members = [(u, g) for u, g in members if name in g]
            for username, groups in members:
                try:
                    await self.sync.sync_user(username, groups, config=config, missing_ok=True)
                except (PaddleCloudError, ValueError) as exc:
                    sync_errors.append(f"{username}: {getattr(exc, 'message', exc)}")
        if kind == "users":
            view = await self.user_view(name, config)
        elif kind == "groups":
            view = await self.group_view(name, config)
        else:
            view = {"limits": config.default.limits.to_dict(), "revision": config.default.revision}
        if sync_errors:
            view["sync_errors"] = sync_errors
        return view

    # ---- serving

    def make_app(self) -> web.Application:
        hub_auth = HubOAuth(api_token=os.environ.get("JUPYTERHUB_API_TOKEN", ""), cache_max_age=60)
        prefix = self.prefix if self.prefix.endswith("/") else self.prefix + "/"
        return web.Application([
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
        ], hub_auth=hub_auth, quota_service=self, cookie_secret=os.urandom(32), login_url=hub_auth.login_url)

    async def serve(self) -> None:
        await self.setup()
        where = urlparse(self.url)
        server = self.make_app().listen(where.port or 80, self.ip or where.hostname or "127.0.0.1")
        self.log.info("Quota service (%s store) at %s%s", self.store_kind, self.url, self.prefix)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):  # the hub stops services with SIGINT
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
        server.stop()
        if self.sync is not None:
            await self.sync.api.close()
        self.log.info("Quota service stopped")

    def start(self) -> None:
        logging.basicConfig(level=logging.INFO, format="[%(levelname).1s %(asctime)s %(name)s] %(message)s")
        self.log_level = logging.INFO
        asyncio.run(self.serve())


def main(argv=None) -> None:
    service = QuotaService()
    service.initialize(argv)
    service.start()


if __name__ == "__main__":
    main()
