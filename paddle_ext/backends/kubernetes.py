"""Jobs on Kubernetes, in one namespace (the user's own).

Objects come from `paddle_ext.manifests` (pure), states from `kubernetes_status`
(pure); this module is the I/O between them and the API server (`paddle_ext.kubeapi`).
Worker logs are read and followed in `kubernetes_logs`.
API errors are neutral inside; `_call` turns them into errors users understand, and
the few that mean something specific (a job that is not there, a name that is taken)
are caught where they happen.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import os
from decimal import Decimal
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable

from traitlets import Bool, Dict, Enum, Float, Integer, List, Unicode, default

from ..constants import (CANCELLED_ANNOTATION, CODE_ANNOTATION, DEFAULT_JOB_KIND, FAILED_ANNOTATION,
                         GPU_RESOURCE, JOB_LABEL, KUEUE_JOB_UID_LABEL, MASTER_PORT, OUTPUTS_ANNOTATION, QUEUE_ANNOTATION, QUOTA_NAME,
                         SPEC_ANNOTATION, WORKSPACE_CLAIM_ENV,
                         WORKSPACE_MOUNT_ENV)
from ..errors import BackendUnavailable, Forbidden, InvalidRequest, JobExists, JobNotFound, PaddleCloudError, QuotaExceeded
from ..capacity import LIVE_PODS_SELECTOR, node_gpus, pods_in_use
from ..jobs import Job, Phase
from ..kubeapi import KubeApi, KubeApiError, KubeConfigError, KubeUnreachable, api_path
from ..jobkinds import JOB_KINDS, JobKind, queued_by_kueue
from ..manifests import (CODE_KEY, NO_OUTPUTS_NOTE, ManifestSettings, code_configmap, jobs_selector, label_selector,
                         outputs, runs_in_workspace)
from ..quota.model import (Effective, JobUsage, Limits, QuotaReport, quota_sources, report,
                           resource_quota_terms, running_jobs_cap, running_jobs_refusal)
from ..quota.queues import KUEUE_API_VERSION, never_fits, read_queue_annotation
from ..spec import JobSpec, is_job_name
from ..timestamps import now, now_iso
from .base import JobBackend, code_not_stored, with_resume
from .kubernetes_progress import related_events
from .kubernetes_queue import KueueView
from .kubernetes_status import (container_started, enforced_workers, job_from_objects, job_views, max_free_gpus,
                                open_jobs, pods_by_worker, refusals_needed)

# What only some commands need is imported where it is used, so that `paddlecloud list`
# does not pay for it at start: the quota model (quota, submit's preflight), the code
# snapshot (submit: tarfile, gzip) and the log reader (logs).
if TYPE_CHECKING:
    from ..quota.model import Effective, Limits, QuotaReport
    from ..workspace import CodeSnapshot

DEFAULT_WORKER_IMAGE = "docker.io/paddlecloud/paddle-worker:3.3.1-cpu"


def user_error(exc: KubeApiError, action: str, namespace: str, gpu_resource: str = GPU_RESOURCE) -> PaddleCloudError:
    """What an API error means for the user who asked to `action` (e.g. 'list jobs') in
    `namespace` (empty: in every namespace at once)."""
    if exc.status == 403 and "exceeded quota" in exc.message:
        from ..quota.model import parse_quota_rejection

        return QuotaExceeded(parse_quota_rejection(exc.message, gpu_resource))
    if exc.status in (401, 403):
        where = f"in namespace '{namespace}'" if namespace else "across all namespaces"
        return Forbidden(f"You are not allowed to {action} {where} (Kubernetes said: {exc.message}).")
    if exc.status in (400, 422):
        return InvalidRequest(f"Kubernetes rejected the request to {action}: {exc.message}")
    return BackendUnavailable(exc.describe(action))


async def call_api(api: Callable[[], KubeApi], action: str, method: str, path: str, *, namespace: str,
                   gpu_resource: str = GPU_RESOURCE, expect: tuple[int, ...] = (), **params: Any) -> Any:
    """One API request (`api` gives the client: credentials are read on first use) to `action`
    in `namespace` (empty: every namespace); errors become user errors, except statuses in
    `expect`, which the caller handles (raised as KubeApiError)."""
    try:
        return await getattr(api(), method)(path, **params)
    except KubeApiError as exc:
        if exc.status in expect:
            raise
        raise user_error(exc, action, namespace, gpu_resource) from exc
    except KubeUnreachable as exc:
        raise BackendUnavailable(f"{exc} (while trying to {action})") from exc
    except KubeConfigError as exc:
        raise BackendUnavailable(f"No Kubernetes credentials: {exc}") from exc


class KubernetesBackend(JobBackend):
    """Runs each job as a headless Service + Indexed Job (or a Kubeflow PaddleJob)."""

    name = "kubernetes"
    log_read_ahead = 4

    namespace = Unicode(help="Namespace for jobs. Default: the pod's own namespace in a cluster, "
                             "else the kubeconfig context's, else 'default'.").tag(config=True)
    kubeconfig = Unicode("", help="Kubeconfig file outside a cluster. Default: $KUBECONFIG or ~/.kube/config.").tag(config=True)
    context = Unicode("", help="Kubeconfig context; empty for the current one.").tag(config=True)
    job_kind = Enum(list(JOB_KINDS), DEFAULT_JOB_KIND, help="; ".join(
        f"'{kind.name}': {kind.description}" for kind in JOB_KINDS.values()) + ".").tag(config=True)
    image = Unicode(DEFAULT_WORKER_IMAGE, help="Image when the spec names none and no images are listed.").tag(config=True)
    helpers_in_image = Bool(True, help="""The site's worker images (`image` and the offered ones) carry
        paddle_ext's standard-library part, as those built from images/worker do, so a job runs its helper
        programs (the trainer log relay, the code unpacker) with `python -m` from the image. False: each job
        carries them in its command (any image with a Python runs them; about 4.7 KB more in every Job, pod
        and Kueue Workload). An image a user names that the site does not offer always gets them in the
        command. (Jobs that may restart run `python -m paddle_ext.worker` from the image either way.)""").tag(config=True)
    master_port = Integer(MASTER_PORT, help="Port of Paddle's master on worker 0.").tag(config=True)
    # In a notebook the hub sets these three from its own settings ($PADDLECLOUD_BACKEND_CONFIG).
    gpu_resource = Unicode(GPU_RESOURCE, help="Extended resource name of GPUs.").tag(config=True)
    gpu_node_selector = Dict(help="nodeSelector for pods that ask for GPUs.").tag(config=True)
    gpu_tolerations = List(Dict(), help="Tolerations for pods that ask for GPUs (e.g. of a GPU node taint).").tag(config=True)
    ttl_seconds_after_finished = Integer(7 * 24 * 3600, allow_none=True,
                                         help="Delete finished jobs after this many seconds (None keeps them).").tag(config=True)
    queue_name = Unicode("", help="Kueue LocalQueue to submit to; empty: no Kueue.").tag(config=True)
    run_as_user = Integer(ManifestSettings.run_as_user, help="UID the worker containers run as (non-root).").tag(config=True)
    service_account = Unicode("", help="Service account of worker pods; empty for the namespace default.").tag(config=True)
    pod_annotations = Dict(help="Extra annotations on every worker pod.").tag(config=True)
    workspace = Dict(help="""A shared (ReadWriteMany) volume that notebooks and jobs both mount, e.g. the users'
        home volumes on CephFS/NFS: {"volume": {"persistentVolumeClaim": {"claimName": "home-alice"}},
        "mount_path": "/home/jovyan"}. A job submitted from a folder on it runs there and keeps its outputs
        in paddlecloud-outputs/<job>/ beside its code; other jobs get a snapshot of their folder. Default:
        from $PADDLECLOUD_WORKSPACE_CLAIM and $PADDLECLOUD_WORKSPACE_MOUNT (set by the hub).""").tag(config=True)
    log_retry_seconds = Float(1.0, help="Wait between attempts to (re)attach to a worker's log.").tag(config=True)
    log_idle_check_seconds = Float(2.0, help="When a followed log is quiet this long, check whether its pod "
                                   "has stopped (some nodes keep the stream open).").tag(config=True)
    log_reconnect_seconds = Float(180.0, help="How long a followed log waits for an API server that cannot be "
                                  "reached (e.g. while it restarts) before giving up.").tag(config=True)

    @default("namespace")
    def _default_namespace(self):
        try:
            return self.api.namespace or "default"
        except KubeConfigError:
            return "default"

    @default("workspace")
    def _default_workspace(self):
        claim, mount = os.environ.get(WORKSPACE_CLAIM_ENV), os.environ.get(WORKSPACE_MOUNT_ENV)
        if not (claim and mount):
            return {}
        return {"volume": {"persistentVolumeClaim": {"claimName": claim}}, "mount_path": mount}

    def __init__(self, api: KubeApi | None = None, **kwargs):
        """`api`: an API client to share (the caller closes it); else one of its own."""
        self._api = api
        self._owns_api = api is None
        self._kueue_denied: set[tuple[str, str | None]] = set()  # Kueue lists this account may not read
        super().__init__(**kwargs)

    # ------------------------------------------------------------ connection

    @property
    def api(self) -> KubeApi:
        """The API client (credentials are read once, on first use)."""
        if self._api is None:
            self._api = KubeApi.connect(self.kubeconfig or None, self.context or None)
        return self._api

    @property
    def kind(self) -> JobKind:
        return JOB_KINDS[self.job_kind]

    async def close(self) -> None:
        if self._api is not None and self._owns_api:
            await self._api.close()

    async def _call(self, action: str, method: str, path: str, *, expect: tuple[int, ...] = (), **kwargs) -> Any:
        """One API request; errors become user errors, except statuses in `expect`, which
        the caller handles (raised as KubeApiError)."""
        return await call_api(lambda: self.api, action, method, path, namespace=self.namespace,
                              gpu_resource=self.gpu_resource, expect=expect, **kwargs)

    def _path(self, plural: str, name: str | None = None, api_version: str = "v1", subresource: str | None = None) -> str:
        return api_path(api_version, plural, self.namespace, name, subresource)

    def _job_path(self, name: str | None = None) -> str:
        return api_path(self.kind.api_version, self.kind.plural, self.namespace, name)

    def settings(self, spec: JobSpec | None = None, workdir: str = "", code_shipped: bool = False
                 ) -> ManifestSettings:
        options = self.options()
        site_image = options.default_image or self.unnamed_image()
        offered = {site_image, *(choice.name for choice in options.images)}
        return ManifestSettings(
            namespace=self.namespace,
            image=site_image,
            kind=self.job_kind,
            user=self.user,
            master_port=self.master_port,
            gpu_resource=self.gpu_resource,
            datasets=tuple(self.datasets),
            gpu_node_selector=tuple(sorted(self.gpu_node_selector.items())),
            gpu_tolerations=tuple(self.gpu_tolerations),
            ttl_seconds_after_finished=self.ttl_seconds_after_finished,
            queue_name=self.queue_name,
            run_as_user=self.run_as_user,
            service_account=self.service_account,
            pod_annotations=tuple(sorted(self.pod_annotations.items())),
            workdir=workdir,
            code_configmap=f"{spec.name}-code" if spec is not None and code_shipped else "",
            workspace=self.workspace.get("volume"),
            workspace_mount=self.workspace.get("mount_path", ""),
            helpers_in_image=self.helpers_in_image and (spec is None or spec.image in (None, *offered)),
        )

    # ------------------------------------------------------------ submit

    async def _resource_quotas(self) -> list[dict] | None:
        """The namespace's ResourceQuotas; None if this account may not read them."""
        try:
            return (await self._call("read resource quotas", "get", self._path("resourcequotas"))).get("items", [])
        except Forbidden:
            return None

    async def quota_checks(self) -> list[tuple[Limits, dict | None]]:
        """Each of the namespace's ResourceQuotas with the API server's own count, and the
        running-jobs cap (the quota service's annotation; not API-server enforced)."""
        from ..quota.model import Limits, resource_quota_terms, running_jobs_cap

        quotas = await self._resource_quotas()
        if quotas is None:
            return []  # cannot read quotas: the API server still enforces them
        checks: list[tuple[Limits, dict | None]] = [resource_quota_terms(quota, self.gpu_resource) for quota in quotas]
        cap = running_jobs_cap(quotas)
        if cap is not None:
            checks.append((Limits(running_jobs=cap), {}))
        return checks

    async def preflight(self, spec: JobSpec) -> None:
        """Without Kueue: the quota check of every backend (JobBackend.preflight). With Kueue
        (`queue_name`): refuse at once only a job that can never start (more than the user's
        queue can ever admit, more than the ResourceQuota allows at all, more GPUs per worker
        than any node has, or over the running-jobs cap); one that fits but not now is created
        and waits in the queue."""
        if not self.queue_name:
            return await super().preflight(spec)
        quotas = await self._resource_quotas() or []
        request = JobUsage.of_spec(spec)
        need = {field: getattr(request, field) for field in ("gpus", "cpu", "memory", "pods")}
        queue = next((read_queue_annotation(_annotations(quota).get(QUEUE_ANNOTATION)) for quota in quotas
                      if QUEUE_ANNOTATION in _annotations(quota)), None)
        largest, cluster = await self._node_gpus() if spec.gpus_per_worker else (None, None)
        for quota in quotas or [{}]:
            hard = resource_quota_terms(quota, self.gpu_resource)[0] if quota else Limits()
            message = never_fits(need, spec.gpus_per_worker, queue, hard, largest, cluster)
            if message:
                raise QuotaExceeded(message)
        cap = running_jobs_cap(quotas)
        if cap is not None:
            message = running_jobs_refusal(cap, await self.running_usage())
            if message:
                raise QuotaExceeded(message)

    async def _node_gpus(self) -> tuple[int | None, int | None]:
        """The most GPUs on one node and on all together, if this account may read nodes (often
        it may not: then (None, None))."""
        try:
            nodes = await self._call("list nodes", "get", api_path("v1", "nodes"))
        except (Forbidden, BackendUnavailable):
            return None, None
        return node_gpus(nodes.get("items", []), self.gpu_resource)

    def unnamed_image(self) -> str:
        return self.image

    def outputs_note(self) -> str:
        if not self.workspace:
            return NO_OUTPUTS_NOTE
        return (f"Outputs are kept for jobs submitted from a folder under {self.workspace.get('mount_path')}; "
                "jobs from anywhere else keep none.")

    def code_for(self, spec: JobSpec, workdir: str) -> CodeSnapshot:
        """The folder's snapshot: shipped with the job (refused over the cap), or, for a
        folder on the shared workspace, recorded and kept when small enough."""
        from ..workspace import record_in_place, snapshot

        if runs_in_workspace(self.settings(spec, workdir)):
            return record_in_place(workdir, self.code_max_bytes)
        return snapshot(workdir, self.code_max_bytes)

    async def submit(self, spec: JobSpec, workdir: str | None = None) -> Job:
        spec = self.validate(spec)
        workdir = os.path.abspath(workdir or os.getcwd())
        if not os.path.isdir(workdir):
            raise InvalidRequest(f"The folder {workdir} to run the job in does not exist.")
        await self.preflight(spec)
        code = await asyncio.to_thread(self.code_for, spec, workdir)
        settings = self.settings(spec, workdir, code_shipped=code.archive is not None)
        annotations = {SPEC_ANNOTATION: json.dumps(spec.to_dict()), CODE_ANNOTATION: json.dumps(code.record()),
                       OUTPUTS_ANNOTATION: json.dumps(outputs(spec, settings))}
        objects = self.kind.build(spec, settings, annotations)
        job_object = objects[-1]
        service = objects[0] if self.kind.with_service else None
        created: list[str] = []  # paths of what this submit made, removed again if it fails
        try:
            if service:
                await self._create_part(spec.name, self._path("services"), service, created)
            if settings.code_configmap:
                archive = base64.b64encode(code.archive).decode()
                await self._create_part(spec.name, self._path("configmaps"),
                                        code_configmap(spec, settings, archive), created)
            try:
                job = await self._call("create jobs", "create", self._job_path(), body=job_object, expect=(409,))
            except KubeApiError as exc:  # 409: the name is taken
                raise JobExists(spec.name) from exc
            parts, created = created, [*created, self._job_path(spec.name)]
            for path in parts:
                await self._adopt(path, job)
        except BaseException:  # an API error, a bug, or the caller gone: leave no half-made job behind
            for path in reversed(created):
                with contextlib.suppress(PaddleCloudError):  # best effort: the first error is the one to tell
                    await self._delete(path)
            raise
        self.log.info("Submitted job %s/%s with %d workers (code %s)", self.namespace, spec.name, spec.workers,
                      code.digest)
        return job_from_objects(job, [], [], kind=self.kind, gpu_resource=self.gpu_resource)

    async def code_archive(self, name: str) -> bytes:
        job = await self.get(name)
        try:
            configmap = await self._call("read configmaps", "get", self._path("configmaps", f"{name}-code"),
                                         expect=(404,))
        except KubeApiError:
            raise code_not_stored(job) from None
        return base64.b64decode((configmap.get("binaryData") or {})[CODE_KEY])

    async def _create_part(self, name: str, collection: str, body: dict, created: list[str]) -> None:
        """Create a part of job `name` (its Service, its code) and note its path in `created`.

        One of ours already there without its job is left from an earlier try that died
        half-way: it is replaced. One whose job exists, or that is not ours, means the
        name is taken."""
        path = f"{collection}/{body['metadata']['name']}"
        try:
            await self._call("create the job's parts", "create", collection, body=body, expect=(409,))
        except KubeApiError:
            existing = await self._call("read the job's parts", "get", path)
            ours = (existing["metadata"].get("labels") or {}).get(JOB_LABEL) == name
            if not ours or await self._job_exists(name):
                raise JobExists(name) from None
            await self._delete(path)
            await self._call("create the job's parts", "create", collection, body=body)
        created.append(path)

    async def _job_exists(self, name: str) -> bool:
        try:
            await self._call("read jobs", "get", self._job_path(name), expect=(404,))
            return True
        except KubeApiError:
            return False

    async def _adopt(self, path: str, job: dict) -> None:
        """Make the job own the object at `path`, so deleting the job deletes it too."""
        owner = {"apiVersion": job["apiVersion"], "kind": job["kind"], "name": job["metadata"]["name"],
                 "uid": job["metadata"]["uid"], "controller": False, "blockOwnerDeletion": False}
        await self._call("update objects of the job", "patch", path, body={"metadata": {"ownerReferences": [owner]}})

    async def _delete(self, path: str) -> None:
        """Delete the object at `path` (and what it owns); one already gone is fine."""
        try:
            await self._call("delete objects of the job", "delete", path, expect=(404,),
                             propagationPolicy="Background")
        except KubeApiError:
            pass

    # ------------------------------------------------------------ read

    async def _read_job(self, name: str) -> dict:
        try:
            return await self._call("read jobs", "get", self._job_path(name), expect=(404,))
        except KubeApiError as exc:
            raise JobNotFound(name) from exc

    async def _live_pods(self) -> list[dict]:
        """Every pod in the namespace not yet finished; none if this account may not list them."""
        try:
            return (await self._call("list pods", "list", self._path("pods"),
                                     fieldSelector=LIVE_PODS_SELECTOR)).get("items", [])
        except Forbidden:
            return []

    async def _pods(self, selector: str) -> list[dict]:
        return (await self._call("list pods", "list", self._path("pods"), labelSelector=selector)).get("items", [])

    async def _events(self, **params: Any) -> list[dict]:
        """The namespace's events (all, or those a field selector picks)."""
        try:
            data = await self._call("list events", "get", self._path("events"), **params)
        except Forbidden:
            return []
        return data.get("items", [])

    async def _job_events(self, name: str, job: dict, pods: list[dict]) -> list[dict]:
        """The events a job's state can depend on, read only when it can: none once the job
        has ended; the job's own (the quota's or an admission policy's refusal of its pods)
        while a worker has no pod; a pod's own (image pulls) while it is on a node but its
        container has not started. Listing every event of a busy namespace on each look was
        the slowest part of reading a job. A failed job: its own events and the kubelet's stops,
        which tell the worker that failed first from those stopped because of it."""
        annotations = _annotations(job)
        if CANCELLED_ANNOTATION in annotations or FAILED_ANNOTATION in annotations:
            return []
        if self.kind.has_finished(job):
            if not self.kind.has_failed(job):
                return []
            found = await asyncio.gather(self._events(fieldSelector=f"involvedObject.name={name}"),
                                         self._events(fieldSelector="reason=Killing"))
            return [event for events in found for event in events]
        workers = pods_by_worker(pods)
        wanted = []
        if len(workers) < _worker_count(self.kind, job) or self.kind.is_suspended(job):
            wanted.append(name)
        starting = [pod["metadata"]["name"] for pod in workers.values()
                    if (pod.get("spec") or {}).get("nodeName") and not container_started(pod)
                    and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        if len(starting) > 4:  # many pods starting at once: one list is cheaper than a request each
            return await self._events()
        wanted += starting
        found = await asyncio.gather(*(self._events(fieldSelector=f"involvedObject.name={object_name}")
                                       for object_name in wanted))
        return [event for events in found for event in events]

    async def _max_free_gpus(self, pod_spec: dict) -> int | None:
        """Free GPUs on the emptiest node a pod with `pod_spec` may use, if this account may
        read nodes (often it may not)."""
        try:
            nodes = await self._call("list nodes", "get", api_path("v1", "nodes"))
            pods = await self._call("list pods", "get", api_path("v1", "pods"),
                                    fieldSelector=LIVE_PODS_SELECTOR)
        except (Forbidden, BackendUnavailable):
            return None
        return max_free_gpus(nodes.get("items", []), pods.get("items", []), self.gpu_resource, pod_spec)

    async def get(self, name: str) -> Job:
        return self._with_resume((await self._get(name))[1])

    def _with_resume(self, job: Job) -> Job:
        """The job with the step it resumed from, read from its outputs only on the workspace:
        the outputs' path is an annotation of the job, which its user can write."""
        mount = self.workspace.get("mount_path")
        return with_resume(job, mount) if mount else job

    async def _get(self, name: str) -> tuple[dict, Job]:
        """The job's object and its view."""
        if not is_job_name(name):  # e.g. '..' or 'a/b' from a URL must never become an API path
            raise JobNotFound(name)
        job, pods = await asyncio.gather(self._read_job(name), self._pods(label_selector(name)))
        # Kueue's view of a queued job (every Workload: the longest read) needs only the job.
        events, kueue = await asyncio.gather(self._job_events(name, job, pods), self._kueue_view([job]))
        events = related_events(name, pods, events)
        kueue = kueue or await self._own_workloads(job)
        result = await self._settle(job, pods, events, kueue)
        waiting = next((pod for pod in pods if not (pod.get("spec") or {}).get("nodeName")), None)
        if result.reason == "Unschedulable" and waiting is not None:
            free = await self._max_free_gpus(waiting["spec"])
            if free is not None:
                result = job_from_objects(job, pods, events, kind=self.kind, max_free_gpus=free,
                                          gpu_resource=self.gpu_resource, kueue=kueue)
        return job, result

    async def _kueue_view(self, jobs: list[dict]) -> KueueView | None:
        """Kueue's objects for reading queued jobs (_kueue_objects), only with Kueue and a job
        suspended (queued)."""
        if not self.queue_name or not any(self.kind.is_suspended(job) for job in jobs):
            return None
        return await self._kueue_objects()

    async def _kueue_view_if_waiting(self) -> KueueView | None:
        """Kueue's view read without waiting for the jobs when the user's LocalQueue (one small
        read) says some of its Workloads wait, so a listing reads every Workload, its longest
        read, together with its jobs. Kueue keeps that count and it can lag: None (not read)
        says nothing, and list_views then reads the view once the jobs show one queued."""
        if not self.queue_name or ("localqueues", self.namespace) in self._kueue_denied:
            return None
        try:
            queue = await self._call("read the Kueue localqueue", "get",
                                     api_path(KUEUE_API_VERSION, "localqueues", self.namespace, self.queue_name))
        except Forbidden:
            self._kueue_denied.add(("localqueues", self.namespace))
            return None
        except PaddleCloudError:  # no such queue, no Kueue, the API server away: the jobs' read says
            return None
        pending = (queue.get("status") or {}).get("pendingWorkloads")
        return await self._kueue_objects() if isinstance(pending, int) and pending > 0 else None

    async def _kueue_objects(self) -> KueueView:
        """Every namespace's Workloads and LocalQueues where this account may list them
        (positions are then exact), else its own namespace's; the ClusterQueues where it may
        read them."""
        async def items(plural: str, namespaced_too: bool) -> tuple[list[dict], bool]:
            for namespace in ((None, self.namespace) if namespaced_too else (None,)):
                if (plural, namespace) in self._kueue_denied:
                    continue
                try:
                    data = await self._call(f"list Kueue {plural}", "list",
                                            api_path(KUEUE_API_VERSION, plural, namespace))
                    return data.get("items", []), namespace is None
                except Forbidden:  # this account may not: not asked again
                    self._kueue_denied.add((plural, namespace))
                except BackendUnavailable:  # no Kueue (404), or the API server is away: the status reads without it
                    continue
            return [], False

        (workloads, complete), (local_queues, _), (cluster_queues, _) = await asyncio.gather(
            items("workloads", True), items("localqueues", True), items("clusterqueues", False))
        return KueueView(tuple(workloads), tuple(local_queues), tuple(cluster_queues), now(), complete)

    async def _own_workloads(self, job: dict | None = None) -> KueueView | None:
        """With Kueue, a started job's own Workload (selected by the job's uid, the label Kueue
        gives it), or with no `job` every Workload in the namespace (a listing): how often Kueue
        requeued each job (its eviction count), where the queue view is not read (no job is
        queued). Also once a job has ended: Kueue keeps a finished job's Workload (with its count)
        as long as the job, and a job preempted and readmitted that then Succeeds must still say
        it was sent back (issue 24's "its user reads both events")."""
        if not self.queue_name or ("workloads", self.namespace) in self._kueue_denied:
            return None
        selector = {} if job is None else {
            "labelSelector": f"{KUEUE_JOB_UID_LABEL}={(job.get('metadata') or {}).get('uid', '')}"}
        try:
            data = await self._call("list Kueue workloads", "list",
                                    api_path(KUEUE_API_VERSION, "workloads", self.namespace), **selector)
        except Forbidden:
            self._kueue_denied.add(("workloads", self.namespace))
            return None
        except BackendUnavailable:
            return None
        return KueueView(tuple(data.get("items", [])), now=now())

    async def list(self) -> list[Job]:
        views = await self.list_views()
        for job, view in views:
            await self._stop_refused(job, view)
        return [self._with_resume(view) for _, view in views]

    async def list_views(self) -> list[tuple[dict, Job]]:
        """Every job's object and view, newest first, changing nothing (list() then stops the
        jobs Kubernetes refuses for good): the pods of the jobs not succeeded (open_jobs), and
        the FailedCreate events only when a job has no pods (one request)."""
        async def jobs_and_pods() -> tuple[list[dict], list[dict]]:
            found = await self._call("list jobs", "list", self._job_path(), labelSelector=label_selector())
            items = found.get("items", [])
            names = open_jobs(self.kind, items)
            return items, (await self._pods(jobs_selector(names)) if names else [])

        # Kueue's view, the longest read, goes on while the jobs and then their pods are read.
        (items, pods), early = await asyncio.gather(jobs_and_pods(), self._kueue_view_if_waiting())
        kueue = early if early is not None else await self._kueue_view(items)
        refusals = await self._failed_creations() if refusals_needed(self.kind, items, pods) else []
        kueue = kueue or (await self._own_workloads() if items else None)
        return job_views(items, pods, refusals, kind=self.kind, gpu_resource=self.gpu_resource, kueue=kueue)

    async def _failed_creations(self) -> list[dict]:
        try:
            data = await self._call("list events", "get", self._path("events"), fieldSelector="reason=FailedCreate")
        except Forbidden:
            return []
        return data.get("items", [])

    async def _settle(self, job: dict, pods: list[dict], events: list[dict], kueue: KueueView | None = None) -> Job:
        """The job's state; one whose pods Kubernetes refuses for good (a LimitRange, Pod Security,
        an admission policy) would be retried for ever: it is stopped here, and says why."""
        result = job_from_objects(job, pods, events, kind=self.kind, gpu_resource=self.gpu_resource, kueue=kueue)
        await self._stop_refused(job, result)
        return result

    async def _stop_refused(self, job: dict, view: Job) -> None:
        """Stop the job if its view says it failed though Kubernetes has not ended it (its pods
        are refused for good), with the view's message as the reason."""
        if view.phase == Phase.FAILED and not self.kind.has_finished(job) and FAILED_ANNOTATION not in _annotations(job):
            await self._stop(view.name, self.kind.fail_patch(view.message, queued_by_kueue(job)))
            self.log.info("Stopped job %s/%s: %s", self.namespace, view.name, view.message)

    # ------------------------------------------------------------ cancel

    async def cancel(self, name: str) -> Job:
        job, view = await self._get(name)
        if view.done:
            return view
        # Under Kueue the patch also sets a 1-second deadline: Kueue would resume a job that is
        # only suspended (JobKind.stop_patch).
        await self._stop(name, self.kind.suspend_patch(now_iso(), queued_by_kueue(job)))
        self.log.info("Cancelled job %s/%s", self.namespace, name)
        return await self.get(name)

    async def _stop(self, name: str, patch: dict) -> None:
        """Suspend the job with `patch` (which says why), delete its pods and its Service."""
        await self._call("cancel jobs", "patch", self._job_path(name), body=patch)
        await self._call("delete pods", "delete", self._path("pods"), labelSelector=label_selector(name),
                         gracePeriodSeconds=5, propagationPolicy="Background")
        if self.kind.with_service:
            await self._delete(self._path("services", name))

    # ------------------------------------------------------------ logs

    def worker_log_chunks(self, job: Job, index: int, tail: int | None, follow: bool) -> AsyncIterator[bytes]:
        """One worker's log (`WorkerLogs`)."""
        from .kubernetes_logs import WorkerLogs

        logs = WorkerLogs(namespace=self.namespace, pods=self._pods, job_state=self.get, call=self._call,
                          stream=lambda path, params: self.api.stream(path, params),  # credentials on first use
                          log=self.log, retry_seconds=self.log_retry_seconds,
                          idle_check_seconds=self.log_idle_check_seconds,
                          reconnect_seconds=self.log_reconnect_seconds)
        return logs.worker_log_chunks(job, index, tail, follow)

    # ------------------------------------------------------------ quota

    async def quota_in_namespace(self) -> tuple[Effective, dict[str, Decimal]]:
        """The limits the namespace's ResourceQuotas set (and where each comes from, as the
        quota service recorded it), and what is in use (notebook pods included): the API
        server's own count where a quota limits a field, else the live pods' requests (a
        quota counts only what it limits, so usage must not vanish with a limit)."""
        quotas, pods = await asyncio.gather(self._resource_quotas(), self._live_pods())
        return namespace_quota(quotas or [], pods, self.gpu_resource)

    async def quota(self) -> QuotaReport:

        effective, in_use = await self.quota_in_namespace()
        return report(self.user, effective, await self.list(), now(), in_use)


def namespace_quota(quotas: list[dict], pods: list[dict], gpu_resource: str = GPU_RESOURCE
                    ) -> tuple[Effective, dict[str, Decimal]]:
    """quota_in_namespace from one namespace's ResourceQuotas and live pods."""
    ours = [quota for quota in quotas if quota["metadata"]["name"] == QUOTA_NAME] or quotas
    limits, in_use = Limits(), pods_in_use(pods, gpu_resource)
    for quota in ours:
        quota_limits, quota_used = resource_quota_terms(quota, gpu_resource)
        limits = dataclasses.replace(limits, **quota_limits.set_fields())
        in_use.update(quota_used)
    cap = running_jobs_cap(quotas)
    if cap is not None:
        limits = dataclasses.replace(limits, running_jobs=cap)
    sources = {field: source for field, source in quota_sources(ours).items() if field in limits.set_fields()}
    return Effective(limits, sources), in_use


def _annotations(obj: dict) -> dict:
    return (obj.get("metadata") or {}).get("annotations") or {}


def _worker_count(kind: JobKind, job: dict) -> int:
    """How many workers the job object runs (never the user-writable spec annotation)."""
    return enforced_workers(kind, job)


def _json_object(text: str | None) -> dict:
    try:
        value = json.loads(text or "null")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}
