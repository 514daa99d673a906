"""The JobBackend contract shared by the local and Kubernetes backends.

A backend turns JobSpecs into running jobs and reports on them. Methods are async so
the Jupyter server never blocks; `paddle_ext.client.JobClient` offers the same calls
synchronously. Backends raise only `paddle_ext.errors.PaddleCloudError` subclasses for
anything a user should see.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from typing import TYPE_CHECKING, Any, AsyncIterator

from traitlets import Dict, Integer, List, Unicode, default
from traitlets.config import Config, LoggingConfigurable

from .. import checkpoint
from ..constants import (BACKEND_CONFIG_ENV, CODE_MAX_BYTES, DATASETS_ENV, DEFAULT_MAX_RESTARTS, IMAGES_ENV,
                         SITE_MAX_RESTARTS)
from ..errors import InvalidRequest, NotFound, QuotaExceeded
from ..jobs import Job
from ..loglines import FrameworkFilter, chunk_lines, lines_chunk, prefix_chunk
from ..spec import MAX_RESTARTS, JobSpec
from .identity import current_user

if TYPE_CHECKING:
    from ..metrics import MetricsPage
    from ..options import JobOptions
    from ..quota.model import JobUsage, Limits, QuotaReport


class JobBackend(LoggingConfigurable):
    """Base class. Subclasses implement submit/list/get/cancel/worker_log_chunks/quota
    and say which limits a submit must fit (quota_checks). Make one with
    `paddle_ext.backends.registry.make_backend`."""

    name = "base"
    # Reading a whole merged log, how many workers after the one being printed are read at
    # the same time (their pieces wait in memory, a bounded amount each). Worth it where
    # each read waits on a server, as on Kubernetes; a local file is read at once.
    log_read_ahead = 0

    images = List(
        Dict(),
        help="""Images users may pick: [{"name": "registry/paddle:3.3.1-gpu", "description": "..."}].
        The first one is the default.""",
    ).tag(config=True)

    datasets = List(
        Dict(),
        help="""The shared dataset catalogue: [{"name": "imagenet", "description": "...",
        "mount_path": "/datasets/imagenet", ...backend-specific source}].""",
    ).tag(config=True)

    max_workers = Integer(8, help="Most workers one job may ask for.").tag(config=True)
    max_gpus_per_worker = Integer(8, help="Most GPUs one worker may ask for.").tag(config=True)
    max_cpu = Unicode("16", help="Most CPU one worker may ask for (a Kubernetes quantity).").tag(config=True)
    max_memory = Unicode("64Gi", help="Most memory one worker may ask for (a Kubernetes quantity).").tag(config=True)
    default_command = List(Unicode(), help="Command preselected in the launcher.").tag(config=True)
    max_restarts = Integer(SITE_MAX_RESTARTS, min=0, max=MAX_RESTARTS, help="""Most restarts one job may ask
        for: how many times all its workers may be started again after a worker is lost, killed or
        evicted (a worker whose own code exits with an error is never restarted).""").tag(config=True)
    default_max_restarts = Integer(DEFAULT_MAX_RESTARTS, min=0, max=MAX_RESTARTS, help="""Restarts a job gets
        when it names none (capped at max_restarts).""").tag(config=True)
    code_max_bytes = Integer(CODE_MAX_BYTES, help="""Most a job's code snapshot may weigh, compressed. On
        Kubernetes without a shared workspace the snapshot travels in a ConfigMap, which holds at most
        1 MiB; a bigger folder is refused, naming its largest files.""").tag(config=True)

    user = Unicode(help="Whose jobs and quota these are: recorded on Kubernetes job labels, shown with the "
                        "quota. Default: $JUPYTERHUB_USER, else the OS user.").tag(config=True)

    @classmethod
    def with_site_config(cls, **kwargs: Any) -> JobBackend:
        """This backend with the hub's settings for it ($PADDLECLOUD_BACKEND_CONFIG) under the
        caller's own config (`config`, else its `parent`'s), which wins."""
        parent = kwargs.get("parent")
        config = site_config(kwargs.get("config") or (parent.config if parent is not None else None))
        if config is not None:
            kwargs["config"] = config
        return cls(**kwargs)

    @default("user")
    def _default_user(self):
        return current_user()

    @default("images")
    def _default_images(self):
        return json_env(IMAGES_ENV, [])

    @default("datasets")
    def _default_datasets(self):
        return json_env(DATASETS_ENV, [])

    @default("default_command")
    def _default_command(self):
        return ["python", "train.py", "--epochs", "3"]

    def options(self) -> JobOptions:
        """What this deployment offers: the launcher's form and the submit check."""
        from ..options import JobOptions

        return JobOptions.build(
            self.name, self.images, self.datasets, max_workers=self.max_workers,
            max_gpus_per_worker=self.max_gpus_per_worker, max_cpu=self.max_cpu, max_memory=self.max_memory,
            max_restarts=self.max_restarts, default_max_restarts=self.default_max_restarts,
            default_command=tuple(self.default_command), outputs_note=self.outputs_note(),
            job_image=self.unnamed_image())

    def unnamed_image(self) -> str:
        """The image a job runs in when it names none and no list is offered ('': no image,
        jobs run in this Python environment)."""
        return ""

    def outputs_note(self) -> str:
        """What the launcher should say about keeping job outputs ('' when they are kept)."""
        return ""

    def validate(self, spec: JobSpec) -> JobSpec:
        """Check the spec against this deployment and give it a name."""
        options = self.options()
        options.check(spec)
        return options.complete(spec).with_name()

    async def submit(self, spec: JobSpec, workdir: str | None = None) -> Job:
        """Start the job in `workdir` (default: the backend's working folder) and record its code."""
        raise NotImplementedError

    async def list(self) -> list[Job]:
        raise NotImplementedError

    async def get(self, name: str) -> Job:
        raise NotImplementedError

    async def cancel(self, name: str) -> Job:
        raise NotImplementedError

    def worker_log_chunks(self, job: Job, index: int, tail: int | None, follow: bool) -> AsyncIterator[bytes]:
        """One worker's log as it is read: pieces of whole lines (UTF-8, each line ending
        in a newline; paddle_ext.loglines' chunk helpers); following ends when the job has."""
        raise NotImplementedError

    async def worker_log(self, job: Job, index: int, tail: int | None, follow: bool) -> AsyncIterator[str]:
        """One worker's log lines, without newlines; following ends when the job has."""
        async for chunk in self.worker_log_chunks(job, index, tail, follow):
            for line in chunk_lines(chunk):
                yield line

    async def log_chunks(self, name: str, worker: int | None = None, tail: int | None = None,
                         follow: bool = False, mine: bool = False) -> AsyncIterator[bytes]:
        """`logs` as bytes, in pieces of whole lines: what the CLI and the REST API pass on
        without touching single lines (prefixes are added per piece)."""
        job = await self.get(name)
        check_worker(job, worker)
        async for chunk in self.job_log_chunks(job, worker, tail, follow, mine):
            yield chunk

    async def job_log_chunks(self, job: Job, worker: int | None = None, tail: int | None = None,
                             follow: bool = False, mine: bool = False) -> AsyncIterator[bytes]:
        """`log_chunks` of a job already read (and its `worker` checked)."""
        indexes = [worker] if worker is not None else list(range(job.workers))
        prefixed = worker is None and job.workers > 1
        streams = {i: self.worker_log_chunks(job, i, tail, follow) for i in indexes}
        if mine:
            streams = {i: users_only(stream) for i, stream in streams.items()}
        async for index, chunk in merge_streams(streams, interleave=follow, read_ahead=self.log_read_ahead):
            yield prefix_chunk(index, chunk) if prefixed else chunk

    async def logs(self, name: str, worker: int | None = None, tail: int | None = None,
                   follow: bool = False, mine: bool = False) -> AsyncIterator[str]:
        """Log lines without newlines. Merged logs of several workers carry `[worker-I] `:
        one worker after another, or with `follow` interleaved as lines arrive. `mine`
        leaves out framework noise and metric records (paddle_ext.loglines), after `tail`
        picked the lines."""
        async for chunk in self.log_chunks(name, worker, tail, follow, mine):
            for line in chunk_lines(chunk):
                yield line

    async def code_archive(self, name: str) -> bytes:
        """The gzipped tar of the code the job ran (workspace.snapshot)."""
        raise NotImplementedError

    async def metrics(self, name: str, since: str | None = None) -> MetricsPage:
        """Metric points in the job's logs after the cursor `since` (none: from the start),
        and the cursor for the next call. Read from the stored logs each time."""
        from ..metrics import CursorError, MetricsPage, parse_cursor, read_metrics

        job = await self.get(name)
        try:
            cursor = parse_cursor(since, job.workers)
        except CursorError as exc:
            raise InvalidRequest(str(exc)) from exc
        logs: dict[int, list[str]] = {}
        for index in range(job.workers):
            logs[index] = [line async for line in self.worker_log(job, index, None, False)]
        points, after = read_metrics(logs, cursor, job.done)
        return MetricsPage(job.name, str(job.phase), job.done, tuple(points), after)

    async def quota(self) -> QuotaReport:
        """The current user's limits, usage and GPU-hours."""
        raise NotImplementedError

    async def quota_checks(self) -> list[tuple[Limits, dict | None]]:
        """The limits a new job must fit, each with what is in use against it (None: what the
        user's running jobs hold; else the backend's own count, e.g. a ResourceQuota's).
        None at all: no limits."""
        return []

    async def preflight(self, spec: JobSpec) -> None:
        """Refuse, with numbers, a job that does not fit the user's quota next to their running
        jobs (quota_checks). The running jobs are read only when a check needs them, or
        to name in the refusal the jobs that hold what is missing."""
        from ..quota.model import JobUsage, check_fits

        request = JobUsage.of_spec(spec)
        running = None
        for limits, in_use in await self.quota_checks():
            if running is None and (in_use is None or limits.running_jobs is not None):
                running = await self.running_usage()
            try:
                check_fits(request, limits, running or [], in_use)
            except QuotaExceeded:
                if running is None:
                    running = await self.running_usage()
                    check_fits(request, limits, running, in_use)
                raise

    async def running_usage(self) -> list[JobUsage]:
        """What each unfinished job holds, for quota checks and messages."""
        from ..quota.model import JobUsage

        return [JobUsage.of(job.name, job.spec) for job in await self.list() if job.holds_resources]

    async def close(self) -> None:
        """Release connections."""


def code_not_stored(job: Job) -> NotFound:
    record = job.code or {}
    why = (f"its folder {record['workdir']} was too big to keep" if record.get("workdir")
           else "it was submitted before jobs recorded their code")
    return NotFound(f"The code of job '{job.name}' was not kept: {why}.")


def with_resume(job: Job, within: str | None = None) -> Job:
    """The job with the step its current attempt resumed from (`resumed_from_step`), read from
    the resume record a restarted job's rank 0 leaves in its kept outputs (paddle_ext.checkpoint).
    `within`: the folder kept outputs must be under (the user's own storage), or None where the
    backend itself chose the folder."""
    outputs = job.outputs or {}
    path = outputs.get("path")
    if job.attempt == 1 or not outputs.get("kept") or not isinstance(path, str) or not path:
        return job
    folder = os.path.realpath(os.path.join(path, checkpoint.FOLDER))
    if within is not None and not folder.startswith(os.path.realpath(within).rstrip("/") + "/"):
        return job
    step = checkpoint.resumed_step(checkpoint.read_resume_record(folder), job.name, job.attempt)
    return job if step is None else dataclasses.replace(job, resumed_from_step=step)


def check_worker(job: Job, worker: int | None) -> None:
    """Refuse a worker index the job does not have."""
    if worker is not None and not 0 <= worker < job.workers:
        raise InvalidRequest(f"Job '{job.name}' has workers 0 to {job.workers - 1}; there is no worker {worker}.")


async def users_only(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """One worker's log without the framework's noise and metric records."""
    noise = FrameworkFilter()
    async for chunk in chunks:
        kept = lines_chunk([line for line in chunk_lines(chunk) if not noise.hides(line)])
        if kept:
            yield kept


async def merge_streams(streams: dict[int, AsyncIterator], interleave: bool, read_ahead: int = 0
                        ) -> AsyncIterator[tuple[int, Any]]:
    """(worker, item) from several workers' streams: in worker order, or interleaved as
    items arrive (each worker's own order kept). In worker order, `read_ahead` later
    streams are read at the same time, a bounded number of items each. A stream's error,
    of any kind, ends the merge (in worker order: when that worker's turn comes): a worker
    whose stream broke must never look like one whose log ended."""
    if len(streams) == 1 or (not interleave and read_ahead <= 0):
        for index, stream in streams.items():
            async for item in stream:
                yield index, item
        return
    if not interleave:
        async for pair in _in_order_reading_ahead(streams, read_ahead):
            yield pair
        return
    queue: asyncio.Queue = asyncio.Queue(maxsize=1000)
    done = object()

    async def pump(index: int, stream: AsyncIterator):
        try:
            async for item in stream:
                await queue.put((index, item))
        except Exception as exc:  # (not a cancellation: that is the merge ending)
            await queue.put(exc)
        finally:
            await queue.put(done)

    tasks = [asyncio.ensure_future(pump(index, stream)) for index, stream in streams.items()]
    try:
        remaining = len(tasks)
        while remaining:
            item = await queue.get()
            if item is done:
                remaining -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()


async def _in_order_reading_ahead(streams: dict[int, AsyncIterator], ahead: int,
                                  buffered: int = 64) -> AsyncIterator[tuple[int, Any]]:
    indexes = list(streams)
    queues: dict[int, asyncio.Queue] = {}
    tasks: list[asyncio.Future] = []
    done = object()

    def start(index: int) -> None:
        queue: asyncio.Queue = asyncio.Queue(maxsize=buffered)
        queues[index] = queue

        async def pump():
            try:
                async for item in streams[index]:
                    await queue.put(item)
            except Exception as exc:
                await queue.put(exc)
            finally:
                await queue.put(done)

        tasks.append(asyncio.ensure_future(pump()))

    try:
        for position, index in enumerate(indexes):
            for later in indexes[position:position + ahead + 1]:
                if later not in queues:
                    start(later)
            queue = queues[index]
            while (item := await queue.get()) is not done:
                if isinstance(item, Exception):
                    raise item
                yield index, item
    finally:
        for task in tasks:
            task.cancel()


def json_env(name: str, fallback):
    """Configuration handed to notebook pods by the hub as JSON in an environment variable."""
    text = os.environ.get(name)
    if not text:
        return fallback
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"${name} is not valid JSON: {exc}") from exc


def site_config(own: Config | None = None) -> Config | None:
    """The hub's settings for this backend ($PADDLECLOUD_BACKEND_CONFIG, traitlets config as
    JSON) under `own` config (a server's own config wins); None when the hub set none."""
    site = json_env(BACKEND_CONFIG_ENV, {})
    if not site:
        return None
    if not isinstance(site, dict):
        raise ValueError(f"${BACKEND_CONFIG_ENV} must be a JSON object of {{Class: {{trait: value}}}}")
    config = Config(site)
    if own is not None:
        config.merge(own)
    return config
