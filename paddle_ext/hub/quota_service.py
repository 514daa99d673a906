"""The quota service: a JupyterHub-managed service at /services/quota/.

    python -m paddle_ext.quota.service        (JupyterHub starts it; see hubconfig.py)

Routes (under the service prefix):

    GET  /                          admin page (HTML; non-admins see their own quota)
    GET  api/quotas                 all settings, every hub user's effective limits and usage (admins)
    GET  api/quotas/users/{user}    that user's effective limits and usage (the user, or admins)
    PUT  api/quotas/users/{user}    {"gpus", "cpu", "memory", "pods", "running_jobs"} (admins)
    PUT  api/quotas/groups/{group}  same fields (admins)
    PUT  api/quotas/default         same fields (admins)

A field left out of a PUT keeps its value; `null` clears it. A PUT may carry
`"revision": N` (the entry's revision as read); if the entry changed since, the answer
is 409 and nothing is written. Errors: {"error": code, "message": one sentence,
"fields": {...}} with 400, 401, 403, 409.

Auth: the hub's OAuth cookie (browsers) or `Authorization: token <hub API token>`.
Writers: hub admins, or holders of the custom scope `custom:paddlecloud-quota:admin`.
The service asks the hub about users and groups with its own token (role with
list:users, read:users, list:groups, read:groups).

Storage: `local` = the JSON file shared with the local backend's preflight;
`kubernetes` = a ConfigMap, and every change is written at once into the affected
users' ResourceQuotas (users whose namespace does not exist yet get theirs at spawn).
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import os
import signal
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse

from jupyterhub.services.auth import HubOAuth, HubOAuthCallbackHandler, HubOAuthenticated
from jupyterhub.utils import url_path_join
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from traitlets import Enum, Integer, Unicode, default
from traitlets.config import Application

from ..errors import BackendUnavailable, Forbidden, PaddleCloudError
from .model import FIELDS, QuotaConfig, QuotaInputError, check_name, parse_patch, resolve, usage_report
from .store import CONFIGMAP_NAME, LocalQuotaStore, default_quota_file

ADMIN_SCOPE = "custom:paddlecloud-quota:admin"
STATIC = Path(__file__).resolve().parent / "static"
KINDS = {"users": "user", "groups": "group"}


class UnknownName(PaddleCloudError):
    code = "bad_quota"
    status = 400

    def __init__(self, kind: str, name: str):
        super().__init__(f"There is no hub {kind} named '{name}'.")
        self.problems = {kind: f"no hub {kind} named '{name}'"}

    def to_dict(self) -> dict:
        return {**super().to_dict(), "fields": self.problems}


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


# ------------------------------------------------------------------ usage

class LocalUsage:
    """Usage from each user's local job folder (hub_config/local_config.py layout)."""

    def __init__(self, home_template: str, home: str):
        self.home_template = home_template
        self.home = home

    async def usage(self, username: str) -> dict:
        from ..backends.local import LocalBackend

        backend = LocalBackend(home=self.home_template.format(home=self.home, username=username), user=username)
        jobs = await backend.list()
        return usage_report(jobs, datetime.datetime.now(datetime.timezone.utc))


class KubernetesUsage:
    """Usage from each user's namespace: their jobs, and the ResourceQuota's own count."""

    def __init__(self, sync, kubeconfig: str, gpu_resource: str):
        self.sync = sync
        self.kubeconfig = kubeconfig
        self.gpu_resource = gpu_resource

    async def usage(self, username: str) -> dict:
        from ..backends.kubernetes import KubernetesBackend
        from .kube import namespace_for

        namespace = namespace_for(username, self.sync.namespace_template)
        backend = KubernetesBackend(namespace=namespace, kubeconfig=self.kubeconfig, user=username,
                                    gpu_resource=self.gpu_resource)
        try:
            try:
                jobs = await backend.list()
            except PaddleCloudError:
                jobs = []
            report = usage_report(jobs, datetime.datetime.now(datetime.timezone.utc))
            try:
                quota = await backend.quota()  # the API server's own count, notebooks included
                report["used"].update({k: v for k, v in quota["used"].items() if k != "running_jobs"})
            except PaddleCloudError:
                pass
            return report
        finally:
            await backend.close()


# ------------------------------------------------------------------ handlers

class BaseHandler(HubOAuthenticated, web.RequestHandler):
    @property
    def service(self) -> QuotaService:
        return self.settings["quota_service"]

    @property
    def hub_auth(self):
        return self.settings["hub_auth"]

    def is_writer(self, model: dict) -> bool:
        return bool(model.get("admin")) or ADMIN_SCOPE in set(model.get("scopes") or ())


class ApiHandler(BaseHandler):
    """JSON in and out. Cookie-authenticated writes must carry X-XSRFToken (HubOAuth
    checks it and otherwise ignores the cookie); token-authenticated ones need not."""

    def caller(self) -> dict:
        user = self.current_user
        if user is None:
            if getattr(self, "_cached_hub_user", None):
                raise Forbidden("You are not allowed to use the quota service.")
            raise NotLoggedIn("Log in to the hub, or send 'Authorization: token <hub API token>'.")
        return user

    def require_writer(self, user: dict) -> None:
        if not self.is_writer(user):
            raise Forbidden(f"Only hub admins (or holders of the scope {ADMIN_SCOPE}) may change quotas.")

    def body(self) -> Any:
        try:
            return json.loads(self.request.body or b"{}")
        except ValueError as exc:
            raise QuotaInputError({"body": "is not valid JSON"}) from exc

    def write_json(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(data))

    def write_error(self, status_code: int, **kwargs) -> None:
        exc = kwargs.get("exc_info", (None, None))[1]
        if isinstance(exc, web.HTTPError):
            message = exc.log_message % exc.args if exc.log_message and exc.args else (exc.log_message or exc.reason or self._reason)
            code = {403: "forbidden", 401: "unauthorized", 404: "not_found"}.get(status_code, "error")
            self.finish(json.dumps({"error": code, "message": message}))
        else:
            self.finish(json.dumps({"error": "internal", "message": "The quota service failed; see its log."}))

    async def _run(self, coro):
        try:
            return await coro
        except PaddleCloudError as exc:
            self.write_json(exc.to_dict(), exc.status)
            return None


class UserQuotaHandler(ApiHandler):
    async def get(self, name: str):
        await self._run(self._get(name))

    async def _get(self, name: str):
        user = self.caller()
        if name != user["name"] and not self.is_writer(user):
            raise Forbidden("You may only see your own quota.")
        check_name("user", name)
        self.write_json(await self.service.user_view(name))

    async def put(self, name: str):
        await self._run(self._put("users", name))

    async def _put(self, kind: str, name: str | None):
        self.require_writer(self.caller())
        if name is not None:
            check_name(KINDS[kind], name)
        patch = parse_patch(self.body(), allow_revision=True)
        self.write_json(await self.service.update(kind, name, patch))


class GroupQuotaHandler(UserQuotaHandler):
    async def get(self, name: str):
        await self._run(self._get_group(name))

    async def _get_group(self, name: str):
        self.require_writer(self.caller())
        check_name("group", name)
        self.write_json(await self.service.group_view(name))

    async def put(self, name: str):
        await self._run(self._put("groups", name))


class DefaultQuotaHandler(UserQuotaHandler):
    async def get(self):
        await self._run(self._get_default())

    async def _get_default(self):
        self.require_writer(self.caller())
        config = await self.service.store.load()
        self.write_json({"limits": config.default.limits.to_dict(), "revision": config.default.revision})

    async def put(self):
        await self._run(self._put("default", None))


class AllQuotasHandler(ApiHandler):
    async def get(self):
        await self._run(self._get())

    async def _get(self):
        self.require_writer(self.caller())
        self.write_json(await self.service.overview())


class CallbackHandler(HubOAuthCallbackHandler):
    """The OAuth callback, with the same HubOAuth (and so the same PKCE state) as the rest."""

    @property
    def hub_auth(self):
        return self.settings["hub_auth"]


class PageHandler(BaseHandler):
    @web.authenticated
    def get(self):
        user = self.current_user
        page = (STATIC / "admin.html").read_text(encoding="utf-8")
        boot = {"user": user["name"], "writer": self.is_writer(user), "xsrf": self.xsrf_token.decode(),
                "api": url_path_join(self.service.prefix, "api/quotas"), "fields": list(FIELDS),
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

    store_kind = Enum(["local", "kubernetes"], help="Where settings live: 'local' (a JSON file, the embedded "
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
    configmap_name = Unicode(CONFIGMAP_NAME, help="Kubernetes store: the ConfigMap's name.").tag(config=True)
    namespace_template = Unicode(help="Kubernetes store: each user's namespace, with {username}. Default: "
                                      "$PADDLECLOUD_NAMESPACE_TEMPLATE, else paddlecloud-{username}.").tag(config=True)
    gpu_resource = Unicode("nvidia.com/gpu", help="Extended resource name of GPUs.").tag(config=True)
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
        return _env_default("PADDLECLOUD_QUOTA_STORE", "local")

    @default("quota_file")
    def _default_quota_file(self):
        return default_quota_file()

    @default("paddlecloud_home")
    def _default_home(self):
        return _env_default("PADDLECLOUD_HOME", os.path.join(os.path.expanduser("~"), ".paddlecloud"))

    @default("hub_namespace")
    def _default_hub_namespace(self):
        from .kube import hub_namespace_default

        return hub_namespace_default()

    @default("namespace_template")
    def _default_namespace_template(self):
        from .kube import DEFAULT_NAMESPACE_TEMPLATE

        return _env_default("PADDLECLOUD_NAMESPACE_TEMPLATE", DEFAULT_NAMESPACE_TEMPLATE)

    @default("url")
    def _default_url(self):
        return _env_default("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10101")

    @default("prefix")
    def _default_prefix(self):
        return _env_default("JUPYTERHUB_SERVICE_PREFIX", "/services/quota/")

    # ---- parts, built in start()

    store = None
    sync = None
    usage_source = None
    directory: HubDirectory | None = None

    async def setup(self) -> None:
        self.directory = HubDirectory(os.environ.get("JUPYTERHUB_API_URL", "http://127.0.0.1:8081/hub/api"),
                                      os.environ.get("JUPYTERHUB_API_TOKEN", ""))
        if self.store_kind == "local":
            self.store = LocalQuotaStore(self.quota_file)
            self.usage_source = LocalUsage(self.user_home_template, self.paddlecloud_home)
        else:
            from .kube import QuotaSync, make_api_client
            from .store import KubernetesQuotaStore

            api_client = await make_api_client(self.kubeconfig or None)
            self.store = KubernetesQuotaStore(api_client, self.hub_namespace, self.configmap_name)
            self.sync = QuotaSync(api_client, self.store, self.namespace_template, self.gpu_resource)
            self.usage_source = KubernetesUsage(self.sync, self.kubeconfig, self.gpu_resource)

    # ---- views

    async def _usage(self, name: str) -> dict:
        try:
            return await self.usage_source.usage(name)
        except (PaddleCloudError, ValueError) as exc:  # ValueError: no namespace name for this user
            message = getattr(exc, "message", str(exc))
            self.log.warning("Cannot read %s's usage: %s", name, message)
            return {"used": {}, "running": [], "gpu_hours": {}, "usage_error": message}

    def _user_entry(self, config: QuotaConfig, name: str, groups: list[str]) -> dict:
        effective = resolve(config, name, groups)
        entry = config.users.get(name)
        return {
            "user": name, "groups": sorted(groups),
            "limits": effective.limits.set_fields(), "sources": dict(effective.sources),
            "override": entry.limits.to_dict() if entry else {field: None for field in FIELDS},
            "revision": entry.revision if entry else 0,
        }

    async def user_view(self, name: str, config: QuotaConfig | None = None) -> dict:
        hub_user = await self.directory.user(name)
        if hub_user is None:
            raise UnknownName("user", name)
        config = config or await self.store.load()
        return {**self._user_entry(config, name, hub_user.get("groups") or []), **await self._usage(name)}

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
                usage = await self._usage(user["name"])
            return {**self._user_entry(config, user["name"], user.get("groups") or []),
                    "admin": bool(user.get("admin")), **usage}

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
