"""Worker logs of jobs on Kubernetes: read, or followed across dropped streams, replaced
pods and API server restarts, never repeating a line.

Kubernetes keeps the log of a pod only as long as the pod. Where the job's outputs are kept,
each worker also keeps a copy of each of its pods' output beside them
(paddle_ext.trainer_logs.OutputCopy, in manifests.log_copy_dir): the log of an attempt whose
pod was deleted (a Kueue preemption, a requeue, a deleted pod) is read from its copy, in its
place among the kept pods' (`attempts`), each line once.

`KubernetesBackend` hands `WorkerLogs` what it needs (its reads, already turning API
errors into the user's, and the raw log stream), so this module knows nothing else of
the backend.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import os
import re
import stat
import time
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator, Mapping

from ..constants import CONTAINER_NAME
from ..errors import BackendUnavailable
from ..jobs import Job
from ..kubeapi import KubeApiError, KubeUnreachable, api_path
from ..loglines import LineSplitter, split_chunk
from ..manifests import label_selector, log_copy_dir
from .kubernetes_status import REPLACED_MARKER, container_started, log_marker, worker_pods

COPY_READ_SIZE = 1 << 20
# trainer_logs.copy_file_name: '<UTC start, to the microsecond>-<pod uid, or name>.log'
_COPY_NAME = re.compile(r"(\d{8}T\d{6}\.\d{6}Z)-([a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?)\.log\Z")


@dataclasses.dataclass(frozen=True)
class LogCopy:
    """A copy of one pod's output, kept by its worker (its file name says all of this)."""

    file: str
    started: str  # '20261203T165118.123456Z': when the worker started, UTC
    pod: str  # the pod's uid (its name where the worker did not know its uid)


def parse_copy_name(name: str) -> LogCopy | None:
    """The copy a file name is (trainer_logs.copy_file_name), or None for anything else."""
    match = _COPY_NAME.match(name)
    return LogCopy(name, match.group(1), match.group(2)) if match else None


def _start_key(pod: dict) -> str:
    """A pod's creation time in the form of a copy's start ('2026-01-01T00:00:00Z' ->
    '20260101T000000.000000Z'): a pod is made before its worker starts, so the two sort together."""
    created = pod["metadata"].get("creationTimestamp") or ""
    return created.replace("-", "").replace(":", "").removesuffix("Z") + ".000000Z" if created else ""


def attempts(own_pods: list[dict], copies: list[LogCopy]) -> list[dict | LogCopy]:
    """A worker's attempts, oldest first: its pods that Kubernetes keeps (`own_pods`, as
    worker_pods gives them), and the copies of its pods that are gone. A kept pod is read from
    Kubernetes, never from its copy."""
    kept = {pod["metadata"].get("uid") for pod in own_pods} | {pod["metadata"].get("name") for pod in own_pods}
    gone: list[dict | LogCopy] = [copy for copy in copies if copy.pod not in kept]
    return sorted([*own_pods, *gone], key=lambda item: item.started if isinstance(item, LogCopy) else _start_key(item))


# ---------------------------------------------------------------- reading the copies (I/O)

def _open_copy_folder(outputs_path: str, index: int) -> int:
    """The folder of worker `index`'s copies, opened; its steps below the outputs folder are
    never a symbolic link (one would lead out of it). OSError where it is not there or not ours."""
    folder = log_copy_dir(outputs_path, str(index))
    fd = os.open(outputs_path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for step in os.path.relpath(folder, outputs_path).split(os.sep):
            inner = os.open(step, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = inner
    except OSError:
        os.close(fd)
        raise
    return fd


def list_copies(outputs_path: str, index: int) -> list[LogCopy]:
    """The copies worker `index` keeps in the job's outputs folder, oldest first; none where
    there is no such folder or this process may not read it. Anything else there, a symbolic
    link included, is left alone."""
    try:
        fd = _open_copy_folder(outputs_path, index)
    except OSError:
        return []
    try:
        copies = [copy for name in os.listdir(fd) if (copy := parse_copy_name(name)) and _regular(name, fd)]
    except OSError:
        return []
    finally:
        os.close(fd)
    return sorted(copies, key=lambda copy: copy.started)


def _regular(name: str, folder: int) -> bool:
    """A regular file (not a link to one, nor anything else)."""
    try:
        return stat.S_ISREG(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
    except OSError:
        return False


def open_copy(outputs_path: str, index: int, copy: LogCopy) -> int | None:
    """The copy, opened for reading: a regular file reached without a symbolic link; else None."""
    try:
        folder = _open_copy_folder(outputs_path, index)
    except OSError:
        return None
    try:
        fd = os.open(copy.file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
    except OSError:
        return None
    finally:
        os.close(folder)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def copy_tail(fd: int, count: int) -> bytes:
    """The last `count` whole lines of an open copy (read through once, keeping only those)."""
    last: collections.deque[bytes] = collections.deque(maxlen=count)
    for chunk in _file_chunks(fd):
        last.extend(chunk.splitlines(keepends=True))
    return b"".join(last) if count > 0 else b""


async def _file_chunks_async(fd: int) -> AsyncIterator[bytes]:
    chunks = _file_chunks(fd)
    while (chunk := await asyncio.to_thread(next, chunks, None)) is not None:
        yield chunk


def _file_chunks(fd: int) -> Iterator[bytes]:
    lines = LineSplitter()
    while data := os.read(fd, COPY_READ_SIZE):
        if whole := lines.feed(data):
            yield whole
    if last := lines.end():
        yield last


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
        """One worker's log: every attempt, oldest first (`attempts`: the kept pods', and the
        copies of those whose pod is gone), each after a marker line saying why it began
        (log_marker); with `tail`, the current attempt's last lines (the last copy's where no
        pod is left). Following re-attaches when the stream drops or the pod is replaced or
        deleted, never repeating a line, and ends once the job has finished."""
        name = job.name
        seen: dict[str, int] = {}  # pod uid -> lines of its log already yielded
        tailed: set[str] = set()  # pods first read with a tail: line counts are not offsets
        complete: set[str] = set()  # pods read to the end after they stopped (or their copies)
        marked: set[str] = set()  # pods whose marker line has been considered
        while True:
            pods = await self._patiently(lambda: self.pods(label_selector(name)))
            own = worker_pods(pods, index)
            newest = own[-1] if own else None
            # a tail is of the current attempt: a copy's only where no pod is left
            items = attempts(own, await self._copies(job, index) if tail is None or not own else [])
            if tail is not None and not own:
                items = items[-1:]
            for number, item in enumerate(items):
                if isinstance(item, LogCopy):
                    async for chunk in self._read_gone(job, index, item, tail, seen, tailed, complete, marked):
                        yield chunk
                    continue
                pod = item
                uid = pod["metadata"]["uid"]
                if uid in complete or not container_started(pod):
                    continue
                if tail is not None and uid not in seen and pod is not newest:
                    continue  # older than the attempt the tail is read from
                if uid not in marked:
                    marked.add(uid)
                    # a tail starts at its own lines; a pod after it gets its marker
                    after_gone = number > 0 and isinstance(items[number - 1], LogCopy)
                    if (tail is None or seen) and (marker := log_marker(job, pods, pod, shown_before=bool(seen),
                                                                        after_gone=after_gone)):
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
            job = await self._patiently(lambda: self.job_state(name))  # (its markers say the latest)
            if job.done and (started or newest is None):
                return
            await asyncio.sleep(self.retry_seconds)

    async def _copies(self, job: Job, index: int) -> list[LogCopy]:
        """The copies worker `index` keeps of its pods' output: none unless the job's outputs are kept."""
        outputs = job.outputs or {}
        if not (outputs.get("kept") and outputs.get("path")):
            return []
        return await asyncio.to_thread(list_copies, outputs["path"], index)

    async def _read_gone(self, job: Job, index: int, copy: LogCopy, tail: int | None, seen: dict[str, int],
                         tailed: set[str], complete: set[str], marked: set[str]) -> AsyncIterator[bytes]:
        """The log of an attempt whose pod is gone, from its copy: after its marker (unless shown
        already), what was not yielded from its pod's stream; read once, the copy being whole."""
        uid = copy.pod
        if uid in complete:
            return
        complete.add(uid)
        if uid in tailed:
            return  # its stream was read from a tail: its line counts are no offsets into the copy
        fd = await asyncio.to_thread(open_copy, job.outputs["path"], index, copy)
        if fd is None:
            return
        try:
            if uid not in marked:
                marked.add(uid)
                if seen:
                    yield (REPLACED_MARKER + "\n").encode()
            if tail is not None and not seen:
                seen[uid] = tail
                if last := await asyncio.to_thread(copy_tail, fd, tail):
                    yield last
                return
            async for chunk in self._unseen(uid, _file_chunks_async(fd), seen.get(uid, 0), seen):
                yield chunk
        finally:
            os.close(fd)

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
        async for chunk in self._unseen(uid, self._pod_log_chunks(pod["metadata"]["name"], follow, read_tail),
                                        skip, seen):
            yield chunk

    @staticmethod
    async def _unseen(uid: str, chunks: AsyncIterator[bytes], skip: int, seen: dict[str, int]) -> AsyncIterator[bytes]:
        """`chunks` (whole lines of one attempt's log) without their first `skip` lines, counting
        in `seen` what is yielded."""
        count = 0
        seen.setdefault(uid, 0)
        async for chunk in chunks:
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
