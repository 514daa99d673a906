"""PaddleCloudSpawner: KubeSpawner that makes the user's namespace theirs and checks the
quota before the notebook pod is created.

    c.JupyterHub.spawner_class = "paddle_ext.hub.spawner.PaddleCloudSpawner"

Before each start, in the user's namespace (KubeSpawner `enable_user_namespaces`): the
notebook's ServiceAccount, Role and RoleBinding, a LimitRange, the dataset claims
(paddle_ext.tenancy, paddle_ext.hub.settings), the user's ResourceQuota from the quota
settings (paddle_ext.hub.quota_sync); then a profile the quota cannot fit is refused at
once with the quota message, instead of a pod that never starts. Once per hub process,
the cluster-wide admission policies that keep users' Services inside the cluster and fence
the pods and Jobs of user namespaces (paddle_ext.policies).

Each of these steps, and the home volume, is reported as it happens through
KubeSpawner's progress events (`progress()`), so the hub's spawn page shows them before
the pod's own events; its template (templates/spawn_pending.html, TEMPLATES) lists them
above the progress bar.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Awaitable, Callable, TypeVar

from kubernetes_asyncio.client import (AdmissionregistrationV1Api, CustomObjectsApi, NetworkingV1Api,
                                      RbacAuthorizationV1Api)
from kubernetes_asyncio.client.rest import ApiException
from jupyterhub.utils import exponential_backoff
from kubespawner import KubeSpawner
from tornado import web
from traitlets import Bool, Instance, default

from .. import policies, tenancy
from ..capacity import LIVE_PODS_SELECTOR
from ..constants import HUB_API_PORT
from ..errors import QuotaExceeded
from ..jobkinds import JOB_KINDS
from ..kubeapi import KubeApi
from ..quota.model import check_fits, resource_quota_terms
from ..quota.store import KubernetesQuotaStore
from ..timestamps import now
from .notebook_gpus import gpu_room, notebook_gpus
from .quota_sync import QuotaSync
from .settings import HubSettings, dataset_claims, notebook_request, pod_rules

_KUBE_API: KubeApi | None = None
# JupyterHub.template_paths: the spawn page that lists the steps below in view.
TEMPLATES = str(Path(__file__).with_name("templates"))
REPLACE_ATTEMPTS = 5  # a cluster-wide object replaced while the API server updates its status
T = TypeVar("T")


def hub_kube_api() -> KubeApi:
    """One API client for the hub process (in-cluster credentials, else $KUBECONFIG)."""
    global _KUBE_API
    if _KUBE_API is None:
        _KUBE_API = KubeApi.connect()
    return _KUBE_API


async def run_all(*steps: Awaitable) -> None:
    """Run the steps at once; raise the first one's error once every step has ended (none
    is left running behind it)."""
    failed = [result for result in await asyncio.gather(*steps, return_exceptions=True)
              if isinstance(result, BaseException)]
    if failed:
        raise failed[0]


async def retry_timeouts(call: Callable[[], Awaitable[T]], what: str, timeout: float, log=None) -> T:
    """`call()`, tried again with JupyterHub's exponential backoff while it times out (its
    request got no answer within KubeSpawner's `k8s_api_request_timeout`), for up to `timeout`
    seconds in all, as KubeSpawner retries its own pod and PVC creates. A busy hub (a hundred
    spawns arriving at once) can leave a request unanswered for seconds; failing the spawn for
    it would leave the user to try again by hand. Only for calls that are safe to repeat: a
    read, a create that takes 409 as done, a replace."""
    results: list[T] = []

    async def attempt() -> bool:
        try:
            results.append(await call())
            return True
        except asyncio.TimeoutError:
            if log:
                log.warning("%s: no answer from the Kubernetes API in time; trying again", what)
            return False

    await exponential_backoff(attempt, f"{what}: the Kubernetes API did not answer within {timeout:g} s",
                              timeout=timeout)
    return results[0]


async def claim_namespace(api, name: str, expected_labels: dict, timeout: float, log=None) -> None:
    """Make sure the user's namespace `name` is ours (tenancy.namespace_owner_problem: else a
    403 spawn error that says why) and carries its Pod Security labels (patched in if
    missing or changed). `api`: KubeSpawner's CoreV1Api."""
    namespace = await asyncio.wait_for(api.read_namespace(name), timeout)
    present = dict(namespace.metadata.labels or {})
    problem = tenancy.namespace_owner_problem(name, present, expected_labels)
    if problem:
        if log:
            log.warning("Refusing to spawn in %s: %s", name, problem)
        raise web.HTTPError(403, problem)
    patch = tenancy.pod_security_patch(present, expected_labels)
    if patch:
        await asyncio.wait_for(api.patch_namespace(name, {"metadata": {"labels": patch}}), timeout)
        if log:
            log.info("Set Pod Security labels on %s: %s", name, patch)


class PaddleCloudSpawner(KubeSpawner):
    """KubeSpawner that prepares the user's namespace and checks the quota first."""

    paddlecloud_settings = Instance(HubSettings, help="The site's settings (HubSettings.load()).").tag(config=True)
    service_exposure_policy = Bool(True, help="""Make sure the ValidatingAdmissionPolicy that keeps users'
        Services inside the cluster (no NodePort, LoadBalancer or externalIPs; paddle_ext.tenancy) exists,
        once per hub process. Needs the hub to be allowed to create ValidatingAdmissionPolicies and their
        bindings; turn it off only where the cluster's admins install that policy themselves.""").tag(config=True)
    user_pod_policy = Bool(True, help="""Make sure the ValidatingAdmissionPolicies that fence pods and Jobs in
        user namespaces (no nodeName, only the site's tolerations and priority classes, no GPU-runtime
        variables without a GPU, dataset claims read-only, the Kueue queue label; paddle_ext.policies) exist
        and match the settings, once per hub process. Needs the hub to be allowed to create and update
        ValidatingAdmissionPolicies and their bindings; off where the cluster's admins (or the Helm chart)
        install them.""").tag(config=True)
    sync_quota = Bool(True, help="""Write the user's ResourceQuota from the quota settings (the ConfigMap
        in the hub's namespace, or HubSettings.default_quota until an admin saves one) before each
        start.""").tag(config=True)

    refuse_gpu_spawn_when_full = Bool(True, help="""Refuse a GPU notebook at once when no schedulable node
        its pod may be placed on (node selector, tolerations) has the GPUs it asks for free now, with a
        message that gives the numbers and when GPUs are expected back (the earliest time limit of the
        running jobs that hold them; paddle_ext.hub.notebook_gpus). A notebook is interactive and Kueue
        does not queue notebook pods: without this its spawn page waits for a pod that stays Pending
        until the spawn times out. Needs the hub to list nodes, pods and jobs cluster-wide (the chart
        grants it); where it may not list nodes the spawn goes ahead unchecked.""").tag(config=True)

    @default("paddlecloud_settings")
    def _default_settings(self):
        return HubSettings.load()

    @default("user_namespace_labels")
    def _default_user_namespace_labels(self):
        # Ours (the label that lets a later spawn know the namespace is ours), the user's, Pod Security.
        return tenancy.user_namespace_labels()

    # ------------------------------------------------------------ progress of our own steps

    _setup_events: list[dict] | None = None
    _setup_done: bool = True

    def _step(self, message: str) -> None:
        """Record one of our spawn steps for the spawn page (progress() sends them)."""
        events = self._setup_events if self._setup_events is not None else []
        events.append({"progress": min(5 + 3 * len(events), 25), "message": message})
        self._setup_events = events
        self.log.info("Spawn of %s: %s", self.user.name, message)

    async def start(self):
        self._gpu_room_checked = False
        self._setup_events = []
        self._setup_done = not self.enable_user_namespaces
        return await super().start()

    async def progress(self):
        """Our own steps (namespace, RBAC, limits, datasets, quota, volume) as they happen,
        then KubeSpawner's pod events."""
        sent = 0
        while True:
            events = self._setup_events or []
            while sent < len(events):
                yield events[sent]
                sent += 1
            future = self._start_future
            if self._setup_done or (future is not None and future.done()):
                break
            await asyncio.sleep(0.2)
        async for event in super().progress():
            yield event

    @property
    def events(self):
        """KubeSpawner's `events` (this pod's events since the start's marker, oldest first), with
        the pod's events picked out before they are sorted instead of after: with user namespaces
        the event reflector holds every user's events, and each spawn page in progress sorted all
        of them once a second (a fifth of the hub's CPU with 100 spawns arriving at once)."""
        if not self.event_reflector:
            return []
        mine = sorted((event for event in self.event_reflector.resources.values()
                       if event["involvedObject"].get("name") == self.pod_name
                       and event["involvedObject"].get("namespace", self.namespace) == self.namespace),
                      key=lambda event: event["lastTimestamp"] or event["eventTime"])
        events: list[dict] = []
        for event in mine:
            if self._last_event and event["metadata"]["uid"] == self._last_event:
                events = []  # only what came after the marker
            else:
                events.append(event)
        return events

    async def _make_create_pod_request(self, pod, request_timeout):
        if self.refuse_gpu_spawn_when_full and not self._gpu_room_checked:
            self._gpu_room_checked = True  # once per start: KubeSpawner retries this request on a conflict
            await self._check_gpu_room(self.api.api_client.sanitize_for_serialization(pod).get("spec") or {})
        # Our steps (the home volume last) are all recorded once the pod is asked for:
        # progress() may now hand over to the pod's events without missing one.
        self._setup_done = True
        return await super()._make_create_pod_request(pod, request_timeout)

    _gpu_room_checked = True
    _nodes_forbidden_logged = False  # class-wide: logged once per hub process
    _no_api_server_logged = False  # class-wide: logged once per hub process

    async def _check_gpu_room(self, pod_spec: dict) -> None:
        """Refuse a GPU notebook (403 with GpuRoom.message) that no node it may use has room for now."""
        settings = self.paddlecloud_settings
        if notebook_gpus(pod_spec, settings.gpu_resource) <= 0:
            return
        serialize = self.api.api_client.sanitize_for_serialization
        try:
            nodes = await self._request("list nodes", self.api.list_node)
            pods = await self._request("list pods", lambda: self.api.list_pod_for_all_namespaces(
                field_selector=LIVE_PODS_SELECTOR))
        except ApiException as exc:
            if exc.status not in (401, 403):
                raise
            if not PaddleCloudSpawner._nodes_forbidden_logged:
                PaddleCloudSpawner._nodes_forbidden_logged = True
                self.log.warning("The hub may not list nodes or pods cluster-wide (%s): GPU notebooks are spawned "
                                 "without checking that a node has room", exc.reason)
            return
        kind = JOB_KINDS[settings.job_kind]
        custom = CustomObjectsApi(self.api.api_client)
        group, _, version = kind.api_version.rpartition("/")
        try:
            jobs = (await self._request(f"list {kind.plural}", lambda: custom.list_cluster_custom_object(
                group, version, kind.plural))).get("items") or []
        except ApiException as exc:
            self.log.warning("Could not list %s for the GPU check (%s): no time limits known", kind.plural, exc.reason)
            jobs = []
        # This user's notebook pod of before, if still there, goes when this one is made (KubeSpawner
        # deletes it on the create's conflict): its GPUs are this notebook's.
        others = [pod for pod in map(serialize, pods.items)
                  if (pod["metadata"].get("namespace"), pod["metadata"]["name"]) != (self.namespace, self.pod_name)]
        room = gpu_room([serialize(n) for n in nodes.items], others, jobs, pod_spec, now(), settings.gpu_resource,
                        kind)
        if room is None or room.fits:
            return
        self.log.info("Refusing %s's GPU server: %s", self.user.name, room.message)
        self._step(f"No GPUs free: {room.message}")
        raise web.HTTPError(403, room.message)

    async def _make_create_pvc_request(self, pvc, request_timeout):
        created = await super()._make_create_pvc_request(pvc, request_timeout)
        if created:
            self._step(f"Home volume {pvc.metadata.name} ready")
        return created

    def _request(self, what: str, make: Callable[[], Awaitable[T]]) -> Awaitable[T]:
        """One API request of our spawn steps: `k8s_api_request_timeout` per try, tried again while
        it times out for up to `k8s_api_request_retry_timeout` (retry_timeouts). `make` makes the
        request anew for each try; every request made here is safe to repeat."""
        return retry_timeouts(lambda: asyncio.wait_for(make(), self.k8s_api_request_timeout),
                              f"{what} ({self.user.name}'s spawn)", self.k8s_api_request_retry_timeout, self.log)

    async def _create_ignoring_conflict(self, create: Callable, *args) -> None:
        # A create whose answer timed out may have been made all the same: its retry's 409 says so.
        try:
            await self._request(create.__name__.replace("_", " "), lambda: create(*args))
        except ApiException as exc:
            if exc.status != 409:
                raise

    _policy_ensured = False  # class-wide: once per hub process

    async def _create_or_replace(self, create: Callable, replace: Callable, ns: str, body: dict) -> None:
        """Create the object, or replace the one there: a changed site setting reaches
        namespaces made before it."""
        try:
            await self._request(create.__name__.replace("_", " "), lambda: create(ns, body))
        except ApiException as exc:
            if exc.status != 409:
                raise
            await self._request(replace.__name__.replace("_", " "),
                                lambda: replace(body["metadata"]["name"], ns, body))

    async def _ensure_service_policy(self) -> None:
        if PaddleCloudSpawner._policy_ensured or not self.service_exposure_policy:
            return
        admission = AdmissionregistrationV1Api(self.api.api_client)
        policy, binding = policies.service_exposure_policy()
        await self._create_ignoring_conflict(admission.create_validating_admission_policy, policy)
        await self._create_ignoring_conflict(admission.create_validating_admission_policy_binding, binding)
        PaddleCloudSpawner._policy_ensured = True

    _pod_policy_ensured = False  # class-wide: once per hub process

    _pod_policy_lock: asyncio.Lock | None = None  # concurrent first spawns write them once

    async def _ensure_pod_policy(self) -> None:
        if PaddleCloudSpawner._pod_policy_ensured or not self.user_pod_policy:
            return
        if PaddleCloudSpawner._pod_policy_lock is None:
            PaddleCloudSpawner._pod_policy_lock = asyncio.Lock()
        async with PaddleCloudSpawner._pod_policy_lock:
            if not PaddleCloudSpawner._pod_policy_ensured:
                await self._write_pod_policies()

    async def _write_pod_policies(self) -> None:
        admission = AdmissionregistrationV1Api(self.api.api_client)
        kinds = {"ValidatingAdmissionPolicy": (admission.create_validating_admission_policy,
                                               admission.read_validating_admission_policy,
                                               admission.replace_validating_admission_policy),
                 "ValidatingAdmissionPolicyBinding": (admission.create_validating_admission_policy_binding,
                                                      admission.read_validating_admission_policy_binding,
                                                      admission.replace_validating_admission_policy_binding)}
        # In order: a binding is made after its policy. Replaced when there: the rules follow the settings.
        for body in policies.user_pod_policies(pod_rules(self.paddlecloud_settings)):
            create, read, replace = kinds[body["kind"]]
            await self._create_or_replace_cluster_object(create, read, replace, body)
        PaddleCloudSpawner._pod_policy_ensured = True

    async def _create_or_replace_cluster_object(self, create: Callable, read: Callable, replace: Callable,
                                                body: dict) -> None:
        name = body["metadata"]["name"]
        try:
            await self._request(f"create {body['kind']} {name}", lambda: create(body))
            return
        except ApiException as exc:
            if exc.status != 409:
                raise
        # The API server writes a new policy's status (its type check) right after it is made,
        # so a replace may lose that race (409): read again and retry.
        for attempt in range(REPLACE_ATTEMPTS):
            current = await self._request(f"read {body['kind']} {name}", lambda: read(name))
            newer = {**body, "metadata": {**body["metadata"], "resourceVersion": current.metadata.resource_version}}
            try:
                await self._request(f"replace {body['kind']} {name}", lambda newer=newer: replace(name, newer))
                return
            except ApiException as exc:
                if exc.status != 409 or attempt == REPLACE_ATTEMPTS - 1:
                    raise

    async def _ensure_namespace(self):
        # KubeSpawner's namespace create gives up when its request times out: tried again here.
        create_namespace = retry_timeouts(super()._ensure_namespace, f"create namespace {self.namespace}",
                                          self.k8s_api_request_retry_timeout, self.log)
        await run_all(create_namespace, self._ensure_service_policy(), self._ensure_pod_policy())
        # KubeSpawner takes a namespace that exists already (409) as it is: nothing is bound or
        # replaced in it unless it is ours, and its Pod Security labels are made sure each time.
        await retry_timeouts(lambda: claim_namespace(self.api, self.namespace,
                                                     self._expand_all(self.user_namespace_labels),
                                                     self.k8s_api_request_timeout, self.log),
                             f"read namespace {self.namespace}", self.k8s_api_request_retry_timeout, self.log)
        self._step(f"Namespace {self.namespace} ready")
        # What follows needs the namespace and nothing of each other: made at once, each step
        # reported as it finishes, so a spawn waits for the slowest call and not for their sum.
        steps = [self._make_rbac(), self._make_network_policies(), self._make_queue(), self._make_limit_range(),
                 self._make_dataset_claims()]
        if self.sync_quota:
            steps.append(self._sync_quota())
        await run_all(*steps)
        await self._check_quota_fits()

    async def _make_rbac(self) -> None:
        settings, ns = self.paddlecloud_settings, self.namespace
        rbac = RbacAuthorizationV1Api(self.api.api_client)

        async def role_then_binding():
            # The Role first: binding a Role that does not exist yet is refused to a hub
            # that may only bind what it holds itself.
            if not settings.notebook_cluster_role:  # else the site's ClusterRole is bound, no Role made here
                await self._create_ignoring_conflict(rbac.create_namespaced_role, ns, tenancy.role(ns))
            await self._create_ignoring_conflict(rbac.create_namespaced_role_binding, ns, tenancy.role_binding(
                ns, cluster_role=settings.notebook_cluster_role))

        await run_all(
            self._create_ignoring_conflict(self.api.create_namespaced_service_account, ns, tenancy.service_account(ns)),
            role_then_binding())
        self._step("Service account and role for training jobs ready")

    async def _make_network_policies(self) -> None:
        policy, ns = self.paddlecloud_settings.user_network_policy, self.namespace
        if not policy:
            return
        if not policy.get("api_server") and not PaddleCloudSpawner._no_api_server_logged:
            PaddleCloudSpawner._no_api_server_logged = True
            self.log.warning("user_network_policy names no api_server (the chart could not read the API server's "
                             "address; set networkPolicy.apiServer): users' pods cannot reach the Kubernetes API, "
                             "so notebooks cannot launch jobs")
        networking = NetworkingV1Api(self.api.api_client)
        bodies = tenancy.user_network_policies(
            ns, self.paddlecloud_settings.hub_namespace, policy["hub_pod_labels"], policy.get("proxy_pod_labels"),
            policy.get("api_server", ()), policy.get("hub_api_port", HUB_API_PORT), policy.get("egress", ()),
            policy.get("dns", ()))
        await run_all(*(self._create_or_replace(networking.create_namespaced_network_policy,
                                                networking.replace_namespaced_network_policy, ns, body)
                        for body in bodies))
        self._step("Network policies ready")

    async def _make_queue(self) -> None:
        settings = self.paddlecloud_settings
        if not (settings.queue_name and settings.cluster_queue):
            return
        custom = CustomObjectsApi(self.api.api_client)
        await self._create_ignoring_conflict(
            lambda namespace, body: custom.create_namespaced_custom_object(
                "kueue.x-k8s.io", "v1beta2", namespace, "localqueues", body),
            self.namespace, tenancy.local_queue(self.namespace, settings.queue_name, settings.cluster_queue))
        self._step(f"Job queue {settings.queue_name} ready")

    async def _make_limit_range(self) -> None:
        settings = self.paddlecloud_settings
        # Replaced when there: a changed maximum or default reaches namespaces made before it.
        await self._create_or_replace(
            self.api.create_namespaced_limit_range, self.api.replace_namespaced_limit_range, self.namespace,
            tenancy.limit_range(self.namespace, settings.limit_range_cpu, settings.limit_range_memory,
                                settings.limit_range_max, settings.limit_range_ephemeral_storage_request,
                                settings.limit_range_ephemeral_storage))

    async def _make_dataset_claims(self) -> None:
        claims = dataset_claims(self.paddlecloud_settings, self.namespace)
        await run_all(*(self._create_ignoring_conflict(
            self.api.create_namespaced_persistent_volume_claim, self.namespace, claim) for claim in claims))
        if claims:
            self._step("Dataset volumes ready: " + ", ".join(claim["metadata"]["name"] for claim in claims))

    async def _sync_quota(self) -> None:
        settings = self.paddlecloud_settings
        api = hub_kube_api()
        store = KubernetesQuotaStore(api, settings.hub_namespace, site_default=settings.site_default_quota())
        sync = QuotaSync(api, store, settings.user_namespace_template, settings.gpu_resource, settings.object_quota,
                         kueue=settings.queue_policy())
        written = await sync.sync_user(self.user.name, [group.name for group in self.user.groups],
                                       namespace=self.namespace)
        hard = (written or {}).get("spec", {}).get("hard") or {}
        self.log.info("Quota of %s in %s: %s", self.user.name, self.namespace, hard or "unlimited")
        # The user's own limits; the site's object counts (the same for everyone) are not news on each spawn.
        shown = {k: v for k, v in hard.items() if k not in (settings.object_quota or {})}
        self._step("Quota applied: " + (", ".join(f"{k}={v}" for k, v in sorted(shown.items())) or "unlimited"))

    async def _check_quota_fits(self) -> None:
        gpu = self.paddlecloud_settings.gpu_resource
        gpus = int(self.extra_resource_guarantees.get(gpu, 0) or self.extra_resource_limits.get(gpu, 0) or 0)
        request = notebook_request(self.cpu_guarantee, self.mem_guarantee, gpus)
        quotas = await self._request("list resource quotas",
                                     lambda: self.api.list_namespaced_resource_quota(self.namespace))
        for quota in quotas.items:
            limits, in_use = resource_quota_terms(self.api.api_client.sanitize_for_serialization(quota), gpu)
            try:
                check_fits(request, limits, [], in_use, subject="This server")
            except QuotaExceeded as exc:
                reason = f"{exc.message} Pick a smaller profile or ask an admin."
                self.log.info("Refusing %s's server: %s", self.user.name, reason)
                self._step(f"Quota check failed: {exc.message}")
                raise web.HTTPError(403, reason) from exc
        self._step("Quota check passed: the server fits")
