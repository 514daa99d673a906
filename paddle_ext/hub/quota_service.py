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
everyone's quotas need the custom scope `custom:paddlecloud-quota:admin` (or
`admin:users`) held by the calling token itself: the configured hub admins get it through
the quota admin role; an admin's token made with fewer scopes does not administer.
The service asks the hub about users and groups with its own token (role with
list:users, read:users, list:groups, read:groups).

Storage: `local` = the JSON file shared with the local backend's preflight;
`kubernetes` = a ConfigMap, and every change is written at once into the affected
users' ResourceQuotas (users whose namespace does not exist yet get theirs at spawn).

This module is the application: its settings, its parts and the views the handlers
answer with. The handlers and routes are in `quota_handlers`, the hub client in
`hub_directory`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
from urllib.parse import urlparse

from jupyterhub.services.auth import HubOAuth
from tornado import web
from traitlets import Bool, Dict, Enum, Float, Integer, Unicode, default
from traitlets.config import Application

from ..backends.registry import KUBERNETES, LOCAL
from ..constants import (DEFAULT_JOB_KIND, GPU_RESOURCE, HUB_API_PORT, KUEUE_ENV, NAMESPACE_TEMPLATE_ENV, QUOTA_CONFIGMAP,
                         OBJECT_QUOTA_ENV, QUOTA_STORE_ENV, SITE_DEFAULT_QUOTA_ENV, USER_NAMESPACE_TEMPLATE, paddlecloud_home)
from ..errors import PaddleCloudError
from ..jobkinds import JOB_KINDS
from ..kubeapi import KubeApi
from ..quota.model import FIELDS, Limits, QuotaConfig, QuotaInputError, QuotaReport, resolve
from ..quota.queues import QueuePolicy, team_queues
from ..quota.store import KubernetesQuotaStore, LocalQuotaStore, default_quota_file
from ..timestamps import now
from .hub_directory import HubDirectory
from .overview import overview
from .quota_handlers import routes
from .quota_sync import QuotaSync, hub_namespace_default
from .usage import KubernetesUsage, LocalUsage


class UnknownName(QuotaInputError):
    def __init__(self, kind: str, name: str):
        super().__init__({kind: f"no hub {kind} named '{name}'"})
        self.message = f"There is no hub {kind} named '{name}'."


# ------------------------------------------------------------------ the application

def _env_default(name: str, fallback: str = "") -> str:
    return os.environ.get(name) or fallback


def _env_json_object(name: str, what: str) -> dict | None:
    """The JSON object in environment variable `name`: None when it is unset, empty or JSON
    null (the setting is off); ValueError naming the variable for anything but an object."""
    text = _env_default(name)
    try:
        value = json.loads(text) if text else None
    except ValueError as exc:
        raise ValueError(f"${name} is not JSON: {exc}") from exc
    if value is not None and not isinstance(value, dict):
        raise ValueError(f"${name} must be a JSON object {what}")
    return value


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
    site_default_quota = Dict(help="""The site's default quota (quota API fields: gpus, cpu, memory, pods,
        running_jobs): what applies to every field no user, group or saved default sets; never stored with
        the saved settings. On Kubernetes the hub passes the chart's settings.default_quota. Default:
        $PADDLECLOUD_DEFAULT_QUOTA (JSON), else none.""").tag(config=True)
    object_quota = Dict(allow_none=True, help="""Kubernetes store: the object counts and scratch disk of
        every user's ResourceQuota (tenancy.OBJECT_QUOTA when None), the hub's settings.object_quota. Default:
        $PADDLECLOUD_OBJECT_QUOTA (JSON), else None.""").tag(config=True)
    namespace_template = Unicode(help="Kubernetes store: each user's namespace, with {username}. Default: "
                                      "$PADDLECLOUD_NAMESPACE_TEMPLATE, else paddlecloud-{username}.").tag(config=True)
    gpu_resource = Unicode(GPU_RESOURCE, help="Extended resource name of GPUs.").tag(config=True)
    job_kind = Enum(list(JOB_KINDS), DEFAULT_JOB_KIND, help="Kubernetes store: the kind of the users' jobs (the "
                    "hub's settings.job_kind), read for usage and suspended by an admin's cancel.").tag(config=True)
    kubeconfig = Unicode("", help="Kubeconfig outside a cluster; empty for in-cluster credentials "
                                  "or $KUBECONFIG.").tag(config=True)
    url = Unicode(help="Where to listen. Default: $JUPYTERHUB_SERVICE_URL.").tag(config=True)
    ip = Unicode("", help="Address to listen on; empty for the host of `url`. On Kubernetes, where the "
                          "proxy reaches the service through the hub's Service, use 0.0.0.0.").tag(config=True)
    prefix = Unicode(help="URL prefix. Default: $JUPYTERHUB_SERVICE_PREFIX, else /services/quota/.").tag(config=True)
    usage_concurrency = Integer(8, help="Users whose usage is read at once for the overview, where it is read "
                                "user by user (the local store; on Kubernetes where the service may not list "
                                "across namespaces).").tag(config=True)
    kueue_enabled = Bool(help="""Kubernetes store: Kueue runs next to the hub and the quota settings are also
        written as its queues (paddle_ext.quota.queues): a ClusterQueue per team (group quota = the team's
        guaranteed, nominal quota) and per personal quota, all in one cohort, and a LocalQueue 'default' in
        each user namespace; the ResourceQuota stays as the backstop. Default: whether $PADDLECLOUD_KUEUE
        (JSON, set by the hub from settings.kueue_enabled) is set.""").tag(config=True)
    kueue_lending_limit = Dict(help="""With Kueue: how much of its nominal quota each queue lends to the others
        in the cohort, per field ({"gpus": 4, "cpu": "16", "memory": "64Gi"}; a missing field: all of it).
        Default: $PADDLECLOUD_KUEUE's lending_limit.""").tag(config=True)
    kueue_borrowing_limit = Dict(help="""With Kueue: how much each queue may borrow beyond its nominal quota
        from idle quota of the others, per field (a missing field: no limit, and no ResourceQuota bound on it).
        Default: $PADDLECLOUD_KUEUE's borrowing_limit.""").tag(config=True)
    kueue_fair_sharing = Bool(help="""With Kueue: the members of a team queue share it by Kueue's Admission Fair
        Sharing (the team's ClusterQueue gets admissionScope UsageBasedAdmissionFairSharing; Kueue's
        Configuration must set admissionFairSharing), weighted by kueue_user_weights; off: first come, first
        served by priority. Default: $PADDLECLOUD_KUEUE's fair_sharing, else off.""").tag(config=True)
    kueue_user_weights = Dict(help="""With Kueue: each user's weight in their team queue's fair sharing
        ({"alice": 2}; a number above 0, written to the user's LocalQueue spec.fairSharing.weight); a user not
        listed has weight 1. Default: $PADDLECLOUD_KUEUE's user_weights.""").tag(config=True)

    kueue_resync_seconds = Float(300, help="""With Kueue: every so many seconds the quota service writes the
        teams' queues again and deletes the queues no quota wants that have emptied since (a queue still
        holding jobs is kept until then). 0: only at its start and on every save.""").tag(config=True)

    aliases = {"store": "QuotaService.store_kind", "url": "QuotaService.url", "ip": "QuotaService.ip",
               "quota-file": "QuotaService.quota_file", "namespace-template": "QuotaService.namespace_template",
               "hub-namespace": "QuotaService.hub_namespace", "kubeconfig": "QuotaService.kubeconfig"}

    @default("store_kind")
    def _default_store_kind(self):
        return _env_default(QUOTA_STORE_ENV, LOCAL)

    @default("site_default_quota")
    def _default_site_default_quota(self):
        return _env_json_object(SITE_DEFAULT_QUOTA_ENV, "of quota fields") or {}

    @default("object_quota")
    def _default_object_quota(self):
        return _env_json_object(OBJECT_QUOTA_ENV, "of ResourceQuota resources")

    def _kueue_env(self) -> dict | None:
        return _env_json_object(KUEUE_ENV, "(lending_limit, borrowing_limit, fair_sharing, user_weights)")

    @default("kueue_enabled")
    def _default_kueue_enabled(self):
        return self._kueue_env() is not None

    @default("kueue_lending_limit")
    def _default_kueue_lending_limit(self):
        return (self._kueue_env() or {}).get("lending_limit") or {}

    @default("kueue_borrowing_limit")
    def _default_kueue_borrowing_limit(self):
        return (self._kueue_env() or {}).get("borrowing_limit") or {}

    @default("kueue_fair_sharing")
    def _default_kueue_fair_sharing(self):
        return bool((self._kueue_env() or {}).get("fair_sharing"))

    @default("kueue_user_weights")
    def _default_kueue_user_weights(self):
        return (self._kueue_env() or {}).get("user_weights") or {}

    def queue_policy(self) -> QueuePolicy | None:
        """Kueue's lending and borrowing limits and fair sharing; None without Kueue."""
        if not self.kueue_enabled:
            return None
        return QueuePolicy.from_settings(self.kueue_lending_limit, self.kueue_borrowing_limit,
                                         self.kueue_fair_sharing, self.kueue_user_weights)

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
        self.directory = HubDirectory(os.environ.get("JUPYTERHUB_API_URL", f"http://127.0.0.1:{HUB_API_PORT}/hub/api"),
                                      os.environ.get("JUPYTERHUB_API_TOKEN", ""))
        site_default = Limits.from_dict(self.site_default_quota)  # QuotaInputError names a bad field
        if self.store_kind == LOCAL:
            self.store = LocalQuotaStore(self.quota_file, site_default=site_default)
            self.usage_source = LocalUsage(self.user_home_template, self.paddlecloud_home)
        else:
            api = KubeApi.connect(self.kubeconfig or None)
            self.store = KubernetesQuotaStore(api, self.hub_namespace, self.configmap_name, site_default=site_default)
            self.sync = QuotaSync(api, self.store, self.namespace_template, self.gpu_resource, self.object_quota,
                                  kueue=self.queue_policy())
            if self.sync.kueue is not None:
                try:  # the teams' queues exist before anyone spawns or an admin saves
                    await self.resync_queues()
                except PaddleCloudError as exc:
                    self.log.warning("Cannot write the teams' Kueue queues yet: %s", exc.message)
            self.usage_source = KubernetesUsage(api, self.namespace_template, self.gpu_resource, self.job_kind)

    # ---- views

    def _user_view(self, config: QuotaConfig, name: str, groups: list[str], usage: QuotaReport | PaddleCloudError
                   ) -> dict:
        """The user's effective limits with where each comes from, their own override, and
        their usage (the same QuotaReport fields as `paddlecloud quota`), or why it cannot be read."""
        effective = resolve(config, name, groups)
        entry = config.users.get(name)
        view = {
            "user": name, "groups": sorted(groups),
            "limits": effective.limits.set_fields(), "sources": dict(effective.sources),
            "override": entry.limits.to_dict() if entry else {field: None for field in FIELDS},
            "revision": entry.revision if entry else 0,
            "used": {}, "running": [], "gpu_hours": {},
        }
        if isinstance(usage, PaddleCloudError):  # NoNamespace among them
            self.log.warning("Cannot read %s's usage: %s", name, usage.message)
            view["usage_error"] = usage.message
        else:
            view.update(usage.to_dict())
        return view

    async def user_view(self, name: str, config: QuotaConfig | None = None) -> dict:
        hub_user = await self.directory.user(name)
        if hub_user is None:
            raise UnknownName("user", name)
        config = config or await self.store.load()
        groups = hub_user.get("groups") or []
        try:
            usage: QuotaReport | PaddleCloudError = await self.usage_source.report(name, resolve(config, name, groups))
        except PaddleCloudError as exc:
            usage = exc
        return self._user_view(config, name, groups, usage)

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
        users = sorted(users, key=lambda u: u["name"])
        usage, team_gpus = await asyncio.gather(
            self.usage_source.reports(
                {user["name"]: resolve(config, user["name"], user.get("groups") or []) for user in users},
                self.usage_concurrency),
            self._team_gpus(config))
        hub_groups = {group["name"]: group for group in groups}
        return {
            "version": config.version,
            "fields": list(FIELDS),
            "default": {"limits": config.default.limits.to_dict(), "revision": config.default.revision},
            "site_default": config.site_default.to_dict(),
            "groups": [{"group": name, "members": sorted((hub_groups.get(name) or {}).get("users") or []),
                        "in_hub": name in hub_groups,
                        "limits": config.entry("groups", name).limits.to_dict(),
                        "revision": config.entry("groups", name).revision,
                        **team_gpus.get(name, {})}
                       for name in sorted(set(hub_groups) | set(config.groups))],
            "users": [{**self._user_view(config, user["name"], user.get("groups") or [], usage[user["name"]]),
                       "admin": bool(user.get("admin"))} for user in users],
        }

    async def _team_gpus(self, config: QuotaConfig) -> dict[str, dict]:
        """With Kueue, per group with a team queue: {"guaranteed_gpus": its queue's nominal GPUs
        (None: no limit), "borrowed_gpus": borrowed beyond it now (None: its queue's status could
        not be read)}; {} without Kueue."""
        if self.sync is None or self.sync.kueue is None:
            return {}
        try:
            rows = {row.name: row for row in await self.sync.queue_rows()}
        except PaddleCloudError as exc:
            self.log.warning("Cannot read the Kueue ClusterQueues: %s", exc.message)
            rows = {}
        teams = {}
        for queue in team_queues(config):
            row = rows.get(queue.name)
            gpus = queue.nominal.get("gpus")
            teams[queue.owner.partition(":")[2]] = {
                "guaranteed_gpus": None if gpus is None else int(gpus),
                "borrowed_gpus": row.borrowed_gpus if row is not None else None}
        return teams

    async def queue_section(self) -> dict | None:
        """The overview's `queues` with Kueue (None without): a row per ClusterQueue of ours, or
        the reason they could not be read."""
        if self.sync is None or self.sync.kueue is None:
            return None
        try:
            return {"rows": [row.to_dict() for row in await self.sync.queue_rows()]}
        except PaddleCloudError as exc:
            self.log.warning("Cannot read the Kueue ClusterQueues: %s", exc.message)
            return {"rows": [], "error": exc.message}

    async def prune_queues(self, config: QuotaConfig) -> None:
        """Delete our ClusterQueues no quota wants any more, once empty (QuotaSync.prune_queues);
        every hub user's groups come from the hub, so a user the hub cannot list is not pruned."""
        users = {user["name"]: user.get("groups") or [] for user in await self.directory.users()}
        await self.sync.prune_queues(config, users)

    async def resync_queues(self) -> None:
        """Kueue: every team's ClusterQueue written, and ours no quota wants deleted once empty."""
        config = await self.store.load()
        await self.sync.sync_teams(config)
        await self.prune_queues(config)

    async def keep_queues_in_sync(self) -> None:
        """resync_queues every `kueue_resync_seconds` until cancelled (the service's stop)."""
        while True:
            await asyncio.sleep(self.kueue_resync_seconds)
            try:
                await self.resync_queues()
            except PaddleCloudError as exc:
                self.log.warning("Cannot bring the Kueue queues in line with the quotas: %s", exc.message)

    async def cluster_overview(self) -> dict:
        """Capacity and usage, every user's running jobs, GPU-hours per user and group."""
        (user_jobs, errors, capacity), queues = await asyncio.gather(self._jobs_and_capacity(), self.queue_section())
        return overview(capacity, user_jobs, now(), errors, queues=queues)

    async def _jobs_and_capacity(self) -> tuple[dict[str, tuple[list[str], list]], dict[str, str], dict]:
        """Each user's (groups, jobs), why a user's jobs could not be read, and the capacity
        (the usage source reads both as suits it: jobs_and_capacity)."""
        users = await self.directory.users()
        found, capacity = await self.usage_source.jobs_and_capacity([user["name"] for user in users],
                                                                    self.usage_concurrency)
        user_jobs, errors = {}, {}
        for user in users:
            jobs = found[user["name"]]
            if isinstance(jobs, PaddleCloudError):  # NoNamespace among them
                errors[user["name"]] = jobs.message
                jobs = []
            user_jobs[user["name"]] = (user.get("groups") or [], jobs)
        return user_jobs, errors, capacity

    async def cancel_job(self, admin: str, user: str, job: str) -> dict:
        """Cancel `user`'s job `job` on behalf of `admin`, and say so in the log."""
        if await self.directory.user(user) is None:
            raise UnknownName("user", user)
        cancelled = await self.usage_source.cancel(user, job)
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
            try:  # with Kueue: a team's queue follows its quota, members or not (nothing without Kueue)
                await self.sync.sync_teams(config)
            except PaddleCloudError as exc:
                sync_errors.append(f"queues: {exc.message}")
            if kind != "users":
                members = [(u["name"], u.get("groups") or []) for u in await self.directory.users()]
                if kind == "groups":
                    members = [(u, g) for u, g in members if name in g]
            for username, groups in members:
                try:
                    await self.sync.sync_user(username, groups, config=config, missing_ok=True)
                except PaddleCloudError as exc:  # NoNamespace among them
                    sync_errors.append(f"{username}: {exc.message}")
            if self.sync.kueue is not None:
                try:  # a queue no quota wants any more goes once its jobs have (kept until then)
                    await self.prune_queues(config)
                except PaddleCloudError as exc:
                    sync_errors.append(f"queues: {exc.message}")
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
        return web.Application(routes(prefix), hub_auth=hub_auth, quota_service=self, cookie_secret=os.urandom(32),
                               login_url=hub_auth.login_url)

    async def serve(self) -> None:
        await self.setup()
        where = urlparse(self.url)
        server = self.make_app().listen(where.port or 80, self.ip or where.hostname or "127.0.0.1")
        self.log.info("Quota service (%s store) at %s%s", self.store_kind, self.url, self.prefix)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):  # the hub stops services with SIGINT
            loop.add_signal_handler(signum, stop.set)
        resync = None
        if self.sync is not None and self.sync.kueue is not None and self.kueue_resync_seconds > 0:
            resync = asyncio.create_task(self.keep_queues_in_sync())
        if isinstance(self.usage_source, KubernetesUsage):
            self.usage_source.start_watching()
        await stop.wait()
        server.stop()
        if resync is not None:
            resync.cancel()
        if isinstance(self.usage_source, KubernetesUsage):
            await self.usage_source.stop_watching()
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
