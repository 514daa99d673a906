"""Worker logs of jobs on Kubernetes: read, or followed across dropped streams, replaced
pods and API server restarts, never repeating a line.

`KubernetesBackend` hands `WorkerLogs` what it needs (its reads, already turning API
errors into the user's, and the raw log stream), so this module knows nothing else of
the backend.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any, AsyncIterator, Awaitable, Callable, Mapping

from ..constants import CONTAINER_NAME
from ..errors import BackendUnavailable
from ..jobs import Job
from ..kubeapi import KubeApiError, KubeUnreachable, api_path
from ..loglines import LineSplitter, split_chunk
from ..manifests import label_selector
from .kubernetes_status import container_started, log_marker, worker_pods


@dataclasses.dataclass
class WorkerLogs:
    """The logs of the workers of jobs in one namespace."""

    namespace: str
    pods: Callable[[str], Awaitable[list[dict]]]  # the pods a label selector picks
    job_state: Callable[[str], Awaitable[Job]]  # a job's state now, by name
    call: Callable[..., Awaitable[Any]]  # one API request, its errors the user's (the backend's `_call`)
    # a response body as it comes (a pod's log); its errors stay KubeApiError / KubeUnreachable
    stream: Callable[[str, Mapping[str, Any]], AsyncIterator[bytes]]
    log: logging.Logger
    retry_seconds: float  # between attempts to (re)attach
    idle_check_seconds: float  # a followed log quiet this long: has its pod stopped?
    reconnect_seconds: float  # how long to wait for an API server that cannot be reached

    def _pod_path(self, pod_name: str, subresource: str | None = None) -> str:
        return api_path("v1", "pods", self.namespace, pod_name, subresource)

    async def worker_log_chunks(self, job: Job, index: int, tail: int | None, follow: bool) -> AsyncIterator[bytes]:
        """One worker's log: every attempt whose pod Kubernetes keeps, oldest first, each after
        a marker line saying why it began (log_marker); with `tail`, the current attempt's last
        lines. Following re-attaches when the stream drops or the pod is replaced, never
        repeating a line, and ends once the job has finished."""
        name = job.name
        seen: dict[str, int] = {}  # pod uid -> lines of its log already yielded
        tailed: set[str] = set()  # pods first read with a tail: line counts are not offsets
        complete: set[str] = set()  # pods read to the end after they stopped
        marked: set[str] = set()  # pods whose marker line has been considered
        while True:
            pods = await self._patiently(lambda: self.pods(label_selector(name)))
            own = worker_pods(pods, index)
            newest = own[-1] if own else None
            for pod in own:
                uid = pod["metadata"]["uid"]
                if uid in complete or not container_started(pod):
                    continue
                if tail is not None and uid not in seen and pod is not newest:
                    continue  # older than the attempt the tail is read from
                if uid not in marked:
                    marked.add(uid)
                    # a tail starts at its own lines; a pod after it gets its marker
                    if (tail is None or seen) and (marker := log_marker(job, pods, pod, shown_before=bool(seen))):
                        yield (marker + "\n").encode()
                try:
                    # a tail is of the first pod read; a later one is read whole
                    async for chunk in self._read_pod(pod, follow and pod is newest, None if seen else tail, seen, tailed):
                        yield chunk
                except KubeApiError as exc:
                    # 404: the pod went away between listing and reading; 400: its container
                    # is not ready to serve logs yet (just replaced or starting). Look again.
                    self.log.debug("Logs of %s worker %d not available yet: %s", name, index, exc.message)
                    continue
                if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    complete.add(uid)
            if not follow:
                return
            started = newest is not None and container_started(newest)
            current = await self._patiently(lambda: self.job_state(name))
            if current.done and (started or newest is None):
                return
            await asyncio.sleep(self.retry_seconds)

    async def _read_pod(self, pod: dict, follow: bool, tail: int | None, seen: dict[str, int],
                        tailed: set[str]) -> AsyncIterator[bytes]:
        """What is new in one pod's log since `seen` said (lines already yielded per uid; a pod
        first read with a tail in `tailed`). Its API errors are the caller's."""
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
        async for chunk in self._pod_log_chunks(pod["metadata"]["name"], follow, read_tail):
            lines = chunk.count(b"\n")
            if count + lines > skip:
                chunk = split_chunk(chunk, skip - count)
                seen[uid] = count + lines
                count += lines
                yield chunk
            else:
                count += lines

    async def _patiently(self, call):
        """`call()`, tried again while the API server cannot be reached (e.g. it restarts),
        for up to reconnect_seconds: a follower outlives a restart, losing nothing."""
        deadline = time.monotonic() + self.reconnect_seconds
        while True:
            try:
                return await call()
            except BackendUnavailable as exc:
                if time.monotonic() > deadline:
                    raise
                self.log.debug("API server unavailable while following logs (%s); trying again", exc.message)
                await asyncio.sleep(self.retry_seconds)

    async def _pod_log_chunks(self, pod_name: str, follow: bool, tail: int | None) -> AsyncIterator[bytes]:
        """One pod's log in pieces of whole lines. A follow ends at end of stream, or when
        the pod has stopped and nothing came for a while (not every node closes the stream)."""
        params = {"container": CONTAINER_NAME, "follow": follow, "tailLines": tail}
        path = self._pod_path(pod_name, "log")
        if not follow:
            lines = LineSplitter()
            try:
                async for data in self.stream(path, params):
                    if whole := lines.feed(data):
                        yield whole
            except KubeUnreachable as exc:  # a log cut short must not look complete
                raise BackendUnavailable(f"{exc} (while reading the log of pod {pod_name})") from exc
            if last := lines.end():
                yield last
            return
        pieces: asyncio.Queue = asyncio.Queue(maxsize=256)
        end = object()
        loop = asyncio.get_running_loop()
        last_data = loop.time()

        async def read():
            nonlocal last_data
            lines = LineSplitter()
            try:
                async for data in self.stream(path, params):
                    last_data = loop.time()
                    if whole := lines.feed(data):
                        await pieces.put(whole)
                if last := lines.end():
                    await pieces.put(last)
            except (KubeApiError, KubeUnreachable) as exc:
                await pieces.put(exc)
            finally:
                await pieces.put(end)

        async def watch():
            idle = self.idle_check_seconds
            while True:
                await asyncio.sleep(max(idle - (loop.time() - last_data), 0.05))
                if loop.time() - last_data >= idle and await self._pod_stopped(pod_name):
                    await pieces.put(end)
                    return

        reader, watcher = asyncio.ensure_future(read()), asyncio.ensure_future(watch())
        try:
            while True:
                item = await pieces.get()
                if item is end:
                    return
                if isinstance(item, KubeApiError):
                    raise item
                if isinstance(item, KubeUnreachable):
                    self.log.debug("Log stream of %s ended: %s", pod_name, item)  # the caller re-attaches
                    return
                yield item
        finally:
            reader.cancel()
            watcher.cancel()

    async def _pod_stopped(self, pod_name: str) -> bool:
        try:
            pod = await self.call("read pods", "get", self._pod_path(pod_name), expect=(404,))
        except KubeApiError:
            return True
        return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed") or \
            bool(pod["metadata"].get("deletionTimestamp"))
