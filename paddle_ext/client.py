"""JobClient: the synchronous Python API used by the widgets, the CLI and users.

    from paddle_ext import JobClient, JobSpec
    client = JobClient()                      # backend chosen as for the CLI
    job = client.submit(JobSpec(command=["python", "train.py"], workers=2))
    for line in client.logs(job.name, follow=True):
        print(line)

The backends are async; the client runs them on a private event loop in a
background thread, so it also works inside Jupyter kernels whose loop is running.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from typing import TYPE_CHECKING, Any, BinaryIO, Iterator, Mapping

from .backends.base import JobBackend
from .backends.registry import make_backend
from .jobs import Job
from .loglines import chunk_lines
from .spec import JobSpec

if TYPE_CHECKING:  # the modules behind these load on first use: a command needs few of them
    from .metrics import MetricsPage
    from .options import JobOptions
    from .quota.model import QuotaReport


class _LoopThread:
    """One event loop on a daemon thread, shared by every client in the process."""

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def loop(cls) -> asyncio.AbstractEventLoop:
        with cls._lock:
            if cls._loop is None:
                cls._loop = asyncio.new_event_loop()
                threading.Thread(target=cls._loop.run_forever, name="paddlecloud-client", daemon=True).start()
            return cls._loop


class JobClient:
    """Submit, inspect, follow and cancel jobs. Errors are `paddle_ext.errors.PaddleCloudError`."""

    def __init__(self, backend: str | JobBackend | None = None, **backend_options: Any):
        if isinstance(backend, JobBackend):
            self.backend = backend
        else:
            self.backend = make_backend(backend, **backend_options)

    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, _LoopThread.loop()).result()

    def submit(self, spec: JobSpec | Mapping[str, Any], workdir: str | None = None) -> Job:
        """Start a job that runs in `workdir` (default: the current folder, e.g. the
        notebook's); its code is recorded, and on Kubernetes shipped with the job."""
        if not isinstance(spec, JobSpec):
            spec = JobSpec.from_dict(spec)
        return self._run(self.backend.submit(spec, workdir))

    def code(self, name: str, output: str) -> list[str]:
        """Write the code job `name` ran into the folder `output`; the files written."""
        from .workspace import unpack

        return unpack(self._run(self.backend.code_archive(name)), output)

    def list(self) -> list[Job]:
        return self._run(self.backend.list())

    def get(self, name: str) -> Job:
        return self._run(self.backend.get(name))

    def cancel(self, name: str) -> Job:
        return self._run(self.backend.cancel(name))

    def options(self) -> JobOptions:
        return self.backend.options()

    def quota(self) -> QuotaReport:
        return self._run(self.backend.quota())

    def close(self) -> None:
        """Release the backend's connections (the client can still be used afterwards)."""
        self._run(self.backend.close())

    def metrics(self, name: str, since: str | None = None) -> MetricsPage:
        """Metric points of the job after cursor `since` (paddle_ext.metrics); `.cursor` of the
        answer, formatted with paddle_ext.metrics.format_cursor, asks for what is new."""
        return self._run(self.backend.metrics(name, since))

    def logs(self, name: str, worker: int | None = None, tail: int | None = None,
             follow: bool = False, mine: bool = False) -> Iterator[str]:
        """Log lines; with `follow`, new lines as they come until the job ends; with `mine`,
        without the framework's noise."""
        pieces: queue.SimpleQueue = queue.SimpleQueue()
        end = object()

        async def pump():
            # One task reads the stream and hands over each piece's lines at once through a
            # plain queue: a cross-thread step per line made long logs several times slower.
            stream = self.backend.log_chunks(name, worker=worker, tail=tail, follow=follow, mine=mine)
            try:
                async for chunk in stream:
                    pieces.put(chunk_lines(chunk))
            except BaseException as exc:  # re-raised in the caller's thread
                pieces.put(exc)
            finally:
                await stream.aclose()
                pieces.put(end)

        future = asyncio.run_coroutine_threadsafe(pump(), _LoopThread.loop())
        try:
            while (item := pieces.get()) is not end:
                if isinstance(item, BaseException):
                    if isinstance(item, asyncio.CancelledError):
                        return
                    raise item
                yield from item
        finally:
            future.cancel()

    def write_logs(self, name: str, out: BinaryIO, worker: int | None = None, tail: int | None = None,
                   follow: bool = False, mine: bool = False) -> None:
        """Write the log (as `logs` gives it, each line ending in a newline) to the binary
        file `out`, flushing as pieces arrive: how the CLI prints a log without handling
        single lines in Python."""

        async def copy():
            stream = self.backend.log_chunks(name, worker=worker, tail=tail, follow=follow, mine=mine)
            try:
                async for chunk in stream:
                    out.write(chunk)
                    out.flush()
            finally:
                await stream.aclose()

        self._run(copy())

    def wait(self, name: str, timeout: float | None = None, poll: float = 1.0) -> Job:
        """Block until the job has finished (or `timeout` seconds pass); return its state."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.get(name)
            if job.done or (deadline is not None and time.monotonic() >= deadline):
                return job
            time.sleep(poll)
