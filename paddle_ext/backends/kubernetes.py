"""Jobs on Kubernetes, in one namespace (the user's own).

Objects come from `paddle_ext.manifests` (pure), states from `kubernetes_status`
(pure); this module is the I/O between them and the API server, with every API
error turned into a PaddleCloudError in one place (`_api_call`).
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
from contextlib import asynccontextmanager
from typing import AsyncIterator

from traitlets import Dict, Enum, Float, Integer, List, Unicode, default

from ..errors import BackendUnavailable, Forbidden, InvalidRequest, JobExists, JobNotFound, PaddleCloudError, QuotaExceeded
from ..manifests import (CANCELLED_ANNOTATION, CONTAINER_NAME, JOB_LABEL, ManifestSettings, job_objects,
                         label_selector)
from ..quota.model import Limits, check_job
from ..quota.preflight import check_resource_quotas, parse_quota_rejection, running_jobs_cap
from ..spec import JobSpec
from .base import Job, JobBackend, in_cluster, prefix_line, service_account_dir
from .kubernetes_status import job_from_objects, max_free_gpus, pods_by_worker

PADDLEJOB_API = ("kubeflow.org", "v1", "paddlejobs")


def kubeconfig_namespace(path: str | None, context: str | None) -> str | None:
    """The namespace of the kubeconfig's current (or named) context, if it sets one."""
    from kubernetes_asyncio.config.kube_config import list_kube_config_contexts

    try:
        contexts, active = list_kube_config_contexts(config_file=path)
    except Exception:  # no kubeconfig, or an unreadable one: the caller falls back
        return None
    chosen = next((c for c in contexts if c["name"] == context), active) if context else active
    return ((chosen or {}).get("context") or {}).get("namespace")


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


class KubernetesBackend(JobBackend):
    """Runs each job as a headless Service + Indexed Job (or a Kubeflow PaddleJob)."""

    name = "kubernetes"

    namespace = Unicode(help="Namespace for jobs. Default: the pod's own namespace in a cluster, "
                             "else the kubeconfig context's, else 'default'.").tag(config=True)
    kubeconfig = Unicode(help="Kubeconfig file outside a cluster. Default: $KUBECONFIG or ~/.kube/config.").tag(config=True)
    context = Unicode("", help="Kubeconfig context; empty for the current one.").tag(config=True)
    job_kind = Enum(["job", "paddlejob"], "job", help="'job': an Indexed batch/v1 Job + headless Service "
                    "(any cluster); 'paddlejob': a Kubeflow training-operator PaddleJob.").tag(config=True)
    image = Unicode("paddlecloud/paddle-worker:latest", help="Image when the spec names none and no images are listed.").tag(config=True)
    master_port = Integer(36789, help="Port of Paddle's master on worker 0.").tag(config=True)
    gpu_resource = Unicode("nvidia.com/gpu", help="Extended resource name of GPUs.").tag(config=True)
    gpu_node_selector = Dict(help="nodeSelector for pods that ask for GPUs.").tag(config=True)
    gpu_tolerations = List(Dict(), help="Tolerations for pods that ask for GPUs.").tag(config=True)
    ttl_seconds_after_finished = Integer(7 * 24 * 3600, allow_none=True,
                                         help="Delete finished jobs after this many seconds (None keeps them).").tag(config=True)
    queue_name = Unicode("", help="Kueue LocalQueue to submit to; empty: no Kueue.").tag(config=True)
    run_as_user = Integer(1000, help="UID the worker containers run as (non-root).").tag(config=True)
    service_account = Unicode("", help="Service account of worker pods; empty for the namespace default.").tag(config=True)
    pod_annotations = Dict(help="Extra annotations on every worker pod.").tag(config=True)
    user = Unicode(help="User name recorded on job labels. Default: $JUPYTERHUB_USER.").tag(config=True)
    log_retry_seconds = Float(1.0, help="Wait between attempts to (re)attach to a worker's log.").tag(config=True)
    log_idle_check_seconds = Float(2.0, help="When a followed log is quiet this long, check whether its pod "
                                   "has stopped (some nodes keep the stream open).").tag(config=True)

    @default("namespace")
    def _default_namespace(self):
        namespace_file = os.path.join(service_account_dir(), "namespace")
        if in_cluster() and os.path.exists(namespace_file):
            with open(namespace_file, encoding="utf-8") as f:
                return f.read().strip()
        return kubeconfig_namespace(self.kubeconfig or None, self.context or None) or "default"

    @default("kubeconfig")
    def _default_kubeconfig(self):
        return os.environ.get("KUBECONFIG", os.path.expanduser("~/.kube/config"))

    @default("user")
    def _default_user(self):
        return os.environ.get("JUPYTERHUB_USER", "")

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._api_client = None
        self._api_lock = asyncio.Lock()

    # ------------------------------------------------------------ connection

    async def api_client(self):
        from kubernetes_asyncio import client, config

        async with self._api_lock:
            if self._api_client is None:
                configuration = client.Configuration()
                try:
                    if in_cluster():
                        sa_dir = service_account_dir()
                        config.load_incluster_config(
                            client_configuration=configuration,
                            token_filename=os.path.join(sa_dir, "token"),
                            cert_filename=os.path.join(sa_dir, "ca.crt"))
                    else:
                        await config.load_kube_config(config_file=self.kubeconfig, context=self.context or None,
                                                      client_configuration=configuration)
                except Exception as exc:
                    raise BackendUnavailable(
                        f"Cannot load Kubernetes credentials ({self.kubeconfig}): {exc}") from exc
                self._api_client = client.ApiClient(configuration)
            return self._api_client

    async def close(self) -> None:
        if self._api_client is not None:
            await self._api_client.close()
            self._api_client = None

    async def _core(self):
        from kubernetes_asyncio import client

        return client.CoreV1Api(await self.api_client())

    async def _batch(self):
        from kubernetes_asyncio import client

        return client.BatchV1Api(await self.api_client())

    async def _custom(self):
        from kubernetes_asyncio import client

        return client.CustomObjectsApi(await self.api_client())

    @asynccontextmanager
    async def _api_call(self, action: str, name: str | None = None):
        """Turn API errors into errors users understand. `action` completes
        'not allowed to ...', e.g. 'list jobs'."""
        from aiohttp import ClientError
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            yield
        except ApiException as exc:
            message = _api_message(exc)
            if exc.status == 404 and name:
                raise JobNotFound(name) from exc
            if exc.status == 409 and name:
                raise JobExists(name) from exc
            if exc.status == 403 and "exceeded quota" in message:
                raise QuotaExceeded(parse_quota_rejection(message)) from exc
            if exc.status in (401, 403):
                raise Forbidden(f"You are not allowed to {action} in namespace '{self.namespace}' "
                                f"(Kubernetes said: {message}).") from exc
            if exc.status in (400, 422):
                raise InvalidRequest(f"Kubernetes rejected the request to {action}: {message}") from exc
            raise BackendUnavailable(f"Kubernetes could not {action} (HTTP {exc.status}): {message}") from exc
        except (ClientError, OSError, asyncio.TimeoutError) as exc:
            raise BackendUnavailable(f"Cannot reach the Kubernetes API server to {action}: {exc}") from exc

    async def _raw(self, coroutine) -> dict:
        """Await an API call made with _preload_content=False; its JSON as dicts.
        (Without preloading the client does not check the status: we do.)"""
        response = await coroutine
        try:
            await _raise_for_status(response)
            return json.loads(await response.read())
        finally:
            response.release()

    def settings(self, spec: JobSpec | None = None) -> ManifestSettings:
        return ManifestSettings(
            namespace=self.namespace,
            image=self.images[0]["name"] if self.images else self.image,
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
        )

    # ------------------------------------------------------------ submit

    async def preflight(self, spec: JobSpec) -> None:
        """Refuse, with numbers, a job the namespace's ResourceQuotas cannot fit."""
        core = await self._core()
        try:
            async with self._api_call("read resource quotas"):
                quotas = await self._raw(core.list_namespaced_resource_quota(self.namespace, _preload_content=False))
        except Forbidden:
            return  # cannot read quotas: the API server still enforces them
        items = quotas.get("items", [])
        running = None
        cap = running_jobs_cap(items)  # the quota service's annotation; not API-server enforced
        if cap is not None:
            running = await self.running_usage()
            check_job(spec, Limits(running_jobs=cap), running)
        try:
            check_resource_quotas(spec, items, self.gpu_resource)
        except QuotaExceeded:
            # Say which jobs hold what is missing.
            check_resource_quotas(spec, items, self.gpu_resource,
                                  running=running if running is not None else await self.running_usage())
            raise

    async def submit(self, spec: JobSpec) -> Job:
        spec = self.validate(spec)
        await self.preflight(spec)
        objects = job_objects(spec, self.settings(), json.dumps(spec.to_dict()))
        if self.job_kind == "paddlejob":
            custom = await self._custom()
            async with self._api_call("create jobs", spec.name):
                created = await custom.create_namespaced_custom_object(*PADDLEJOB_API[:2], self.namespace,
                                                                       PADDLEJOB_API[2], objects[0])
            return job_from_objects(created, [], [], max_free_gpus=None, gpu_resource=self.gpu_resource)
        service, job = objects
        created_service = await self._ensure_service(spec.name, service)
        batch = await self._batch()
        try:
            async with self._api_call("create jobs", spec.name):
                created = await self._raw(batch.create_namespaced_job(self.namespace, job, _preload_content=False))
        except JobExists:
            raise
        except PaddleCloudError:
            if created_service:
                await self._delete_service(spec.name)  # leave no half-created job behind
            raise
        await self._adopt_service(spec.name, created["metadata"])
        self.log.info("Submitted job %s/%s with %d workers", self.namespace, spec.name, spec.workers)
        return job_from_objects(created, [], [], gpu_resource=self.gpu_resource)

    async def _ensure_service(self, name: str, service: dict) -> bool:
        """Create the headless Service; True if this call created it.

        An existing Service of ours without its Job is left from an earlier try
        (safe to retry); one whose Job exists means the name is taken."""
        core, batch = await self._core(), await self._batch()
        try:
            async with self._api_call("create services", name):
                await core.create_namespaced_service(self.namespace, service)
            return True
        except JobExists:
            async with self._api_call("read services"):
                existing = await self._raw(core.read_namespaced_service(name, self.namespace, _preload_content=False))
            ours = (existing["metadata"].get("labels") or {}).get(JOB_LABEL) == name
            try:
                async with self._api_call("read jobs", name):
                    await batch.read_namespaced_job(name, self.namespace)
                raise JobExists(name)
            except JobNotFound:
                if not ours:
                    raise JobExists(name) from None
            return False

    async def _adopt_service(self, name: str, job_metadata: dict) -> None:
        """Make the Job own its Service, so deleting the Job deletes the Service too."""
        core = await self._core()
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": job_metadata["uid"],
                 "controller": False, "blockOwnerDeletion": False}
        async with self._api_call("update services"):
            await core.patch_namespaced_service(name, self.namespace, {"metadata": {"ownerReferences": [owner]}})

    async def _delete_service(self, name: str) -> None:
        core = await self._core()
        try:
            async with self._api_call("delete services", name):
                await core.delete_namespaced_service(name, self.namespace)
        except JobNotFound:
            pass

    # ------------------------------------------------------------ read

    async def _read_job(self, name: str) -> dict:
        if self.job_kind == "paddlejob":
            custom = await self._custom()
            async with self._api_call("read jobs", name):
                return await custom.get_namespaced_custom_object(*PADDLEJOB_API[:2], self.namespace,
                                                                 PADDLEJOB_API[2], name)
        batch = await self._batch()
        async with self._api_call("read jobs", name):
            return await self._raw(batch.read_namespaced_job(name, self.namespace, _preload_content=False))

    async def _pods(self, selector: str) -> list[dict]:
        core = await self._core()
        async with self._api_call("list pods"):
            data = await self._raw(core.list_namespaced_pod(self.namespace, label_selector=selector,
                                                            _preload_content=False))
        return data.get("items", [])

    async def _events(self, name: str) -> list[dict]:
        core = await self._core()
        try:
            async with self._api_call("list events"):
                data = await self._raw(core.list_namespaced_event(
                    self.namespace, field_selector=f"involvedObject.name={name}", _preload_content=False))
        except Forbidden:
            return []
        return data.get("items", [])

    async def _max_free_gpus(self) -> int | None:
        """Free GPUs on the emptiest node, if this account may read nodes (often it may not)."""
        core = await self._core()
        try:
            async with self._api_call("list nodes"):
                nodes = await self._raw(core.list_node(_preload_content=False))
                pods = await self._raw(core.list_pod_for_all_namespaces(
                    field_selector="status.phase!=Succeeded,status.phase!=Failed", _preload_content=False))
        except (Forbidden, BackendUnavailable):
            return None
        return max_free_gpus(nodes.get("items", []), pods.get("items", []), self.gpu_resource)

    async def get(self, name: str) -> Job:
        job = await self._read_job(name)
        pods = await self._pods(label_selector(name))
        events = await self._events(name)
        result = job_from_objects(job, pods, events, gpu_resource=self.gpu_resource)
        if result.reason == "Unschedulable":
            free = await self._max_free_gpus()
            if free is not None:
                result = job_from_objects(job, pods, events, max_free_gpus=free, gpu_resource=self.gpu_resource)
        return result

    async def list(self) -> list[Job]:
        selector = label_selector()
        if self.job_kind == "paddlejob":
            custom = await self._custom()
            async with self._api_call("list jobs"):
                jobs = (await custom.list_namespaced_custom_object(
                    *PADDLEJOB_API[:2], self.namespace, PADDLEJOB_API[2], label_selector=selector))["items"]
        else:
            batch = await self._batch()
            async with self._api_call("list jobs"):
                jobs = (await self._raw(batch.list_namespaced_job(self.namespace, label_selector=selector,
                                                                  _preload_content=False)))["items"]
        pods = await self._pods(selector)
        by_job: dict[str, list[dict]] = {}
        for pod in pods:
            by_job.setdefault((pod["metadata"].get("labels") or {}).get(JOB_LABEL, ""), []).append(pod)
        result = [job_from_objects(job, by_job.get(job["metadata"]["name"], []), [], gpu_resource=self.gpu_resource)
                  for job in jobs]
        return sorted(result, key=lambda job: job.created or "", reverse=True)

    # ------------------------------------------------------------ cancel

    async def cancel(self, name: str) -> Job:
        job = await self.get(name)
        if job.done:
            return job
        patch = {"metadata": {"annotations": {CANCELLED_ANNOTATION: now_iso()}}, "spec": {"suspend": True}}
        if self.job_kind == "paddlejob":
            custom = await self._custom()
            async with self._api_call("cancel jobs", name):
                await custom.patch_namespaced_custom_object(
                    *PADDLEJOB_API[:2], self.namespace, PADDLEJOB_API[2], name,
                    {"metadata": patch["metadata"], "spec": {"runPolicy": {"suspend": True}}})
        else:
            batch = await self._batch()
            async with self._api_call("cancel jobs", name):
                await batch.patch_namespaced_job(name, self.namespace, patch)
        core = await self._core()
        async with self._api_call("delete pods"):
            await core.delete_collection_namespaced_pod(self.namespace, label_selector=label_selector(name),
                                                        propagation_policy="Background", grace_period_seconds=5)
        if self.job_kind == "job":
            await self._delete_service(name)
        self.log.info("Cancelled job %s/%s", self.namespace, name)
        return await self.get(name)

    # ------------------------------------------------------------ logs

    async def logs(self, name: str, worker: int | None = None, tail: int | None = None,
                   follow: bool = False) -> AsyncIterator[str]:
        job = await self.get(name)
        if worker is not None and not 0 <= worker < job.workers:
            raise InvalidRequest(f"Job '{name}' has workers 0 to {job.workers - 1}; there is no worker {worker}.")
        indexes = [worker] if worker is not None else list(range(job.workers))
        prefix = worker is None and job.workers > 1
        if len(indexes) == 1:
            async for line in self._worker_log(name, indexes[0], tail, follow):
                yield prefix_line(indexes[0], line, job.workers) if prefix else line
            return
        queue: asyncio.Queue = asyncio.Queue(maxsize=10000)
        done = object()

        async def pump(index: int):
            try:
                async for line in self._worker_log(name, index, tail, follow):
                    await queue.put(prefix_line(index, line, job.workers))
            except PaddleCloudError as exc:
                await queue.put(exc)
            finally:
                await queue.put(done)

        tasks = [asyncio.ensure_future(pump(i)) for i in indexes]
        try:
            remaining = len(tasks)
            while remaining:
                item = await queue.get()
                if item is done:
                    remaining -= 1
                elif isinstance(item, PaddleCloudError):
                    raise item
                else:
                    yield item
        finally:
            for task in tasks:
                task.cancel()

    async def _worker_log(self, name: str, index: int, tail: int | None, follow: bool) -> AsyncIterator[str]:
        """One worker's log. Following re-attaches when the stream drops or the pod is
        replaced, never repeating a line, and ends once the job has finished."""
        seen: dict[str, int] = {}  # pod uid -> lines of its log already yielded
        tailed: set[str] = set()  # pods first read with a tail: line counts are not offsets
        complete: set[str] = set()  # pods read to the end after they stopped
        while True:
            pod = pods_by_worker(await self._pods(label_selector(name))).get(index)
            started = pod is not None and _container_started(pod)
            if started and pod["metadata"]["uid"] not in complete:
                stopped = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
                uid = pod["metadata"]["uid"]
                if uid not in seen:
                    read_tail = tail
                    if tail is not None:
                        tailed.add(uid)
                else:
                    read_tail = 0 if uid in tailed else None  # re-attach: only what is new
                skip = 0 if uid in tailed else seen.get(uid, 0)
                count = 0
                seen.setdefault(uid, 0)
                try:
                    async for line in self._pod_log_lines(name, pod["metadata"]["name"], follow, read_tail):
                        count += 1
                        if count > skip:
                            seen[uid] = count
                            yield line
                    if stopped:
                        complete.add(uid)
                except JobNotFound:
                    pass  # the pod went away between listing and reading: look again
                except InvalidRequest as exc:
                    # 400: the container is not ready to serve logs yet (just replaced or starting)
                    self.log.debug("Logs of %s worker %d not available yet: %s", name, index, exc.message)
            if not follow:
                return
            job = await self.get(name)
            if job.done and (started or pod is None):
                return
            await asyncio.sleep(self.log_retry_seconds)

    async def _pod_log_lines(self, name: str, pod_name: str, follow: bool, tail: int | None) -> AsyncIterator[str]:
        """Lines of one pod's log. A follow ends at end of stream, or when the pod has
        stopped and no line came for a while (not every node closes the stream)."""
        core = await self._core()
        options = {"container": CONTAINER_NAME, "follow": follow, "_preload_content": False}
        if tail is not None:
            options["tail_lines"] = tail
        async with self._api_call("read logs", name):
            response = await core.read_namespaced_pod_log(pod_name, self.namespace, **options)
            try:
                await _raise_for_status(response)
            except BaseException:
                response.release()
                raise
        lines: asyncio.Queue = asyncio.Queue(maxsize=10000)
        end = object()

        async def read():
            try:
                while True:
                    raw = await response.content.readline()
                    if not raw:
                        break
                    await lines.put(raw.decode("utf-8", errors="replace").rstrip("\r\n"))
            except Exception as exc:  # connection dropped: the caller re-attaches
                self.log.debug("Log stream of %s ended: %s", pod_name, exc)
            finally:
                await lines.put(end)

        reader = asyncio.ensure_future(read())
        try:
            while True:
                try:
                    item = await asyncio.wait_for(lines.get(), timeout=self.log_idle_check_seconds)
                except asyncio.TimeoutError:
                    if await self._pod_stopped(pod_name):
                        return
                    continue
                if item is end:
                    return
                yield item
        finally:
            reader.cancel()
            response.release()

    async def _pod_stopped(self, pod_name: str) -> bool:
        core = await self._core()
        try:
            async with self._api_call("read pods", pod_name):
                pod = await self._raw(core.read_namespaced_pod(pod_name, self.namespace, _preload_content=False))
        except JobNotFound:
            return True
        return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed") or \
            bool(pod["metadata"].get("deletionTimestamp"))

    async def quota(self) -> dict:
        core = await self._core()
        try:
            async with self._api_call("read resource quotas"):
                quotas = (await self._raw(core.list_namespaced_resource_quota(
                    self.namespace, _preload_content=False))).get("items", [])
        except Forbidden:
            quotas = []
        limits, used = {}, {}
        keys = {f"requests.{self.gpu_resource}": "gpus", "requests.cpu": "cpu", "requests.memory": "memory",
                "pods": "pods"}
        for quota in quotas:
            status = quota.get("status") or {}
            for resource, key in keys.items():
                if resource in (status.get("hard") or {}):
                    limits[key] = status["hard"][resource]
                    used[key] = (status.get("used") or {}).get(resource, "0")
        cap = running_jobs_cap(quotas)
        if cap is not None:
            limits["running_jobs"] = cap
        running = [job for job in await self.list() if not job.done]
        used["running_jobs"] = len(running)
        return {"limits": limits, "used": used, "running": [job.name for job in running]}


def _container_started(pod: dict) -> bool:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    if not statuses:
        return False
    state = statuses[0].get("state") or {}
    return "running" in state or "terminated" in state


async def _raise_for_status(response) -> None:
    from kubernetes_asyncio.client.exceptions import ApiException

    if response.status >= 400:
        error = ApiException(status=response.status, reason=response.reason)
        error.body = await response.text()
        raise error


def _api_message(exc) -> str:
    try:
        return json.loads(exc.body).get("message") or exc.reason
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason or exc)
