"""The embedded default: jobs as local multi-process PaddlePaddle runs.

Each worker is `python -m paddle.distributed.launch --master 127.0.0.1:<port> ...`
under a detached supervisor (`local_supervisor`), so jobs outlive the Jupyter server
that started them. The job folder (see `local_files`) is the only state: any process
that can read it (a restarted server, the CLI, a notebook kernel) sees the same jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import AsyncIterator, Iterator

from traitlets import Float, Unicode, default

from ..constants import (JOB_NAME_ENV, OUTPUT_DIR_ENV, OUTPUTS_FOLDER, QUOTA_FILE_ENV, SERVER_SECRET_ENV,
                         dataset_env_name, paddlecloud_home)
from ..errors import BackendUnavailable, InvalidRequest, JobExists, JobNotFound
from ..jobs import Job, Phase, Reason, WorkerState, outputs_record
from ..launch import launch_argv
from ..loglines import LineSplitter, chunk_lines, last_lines
from ..progress import local_progress
from ..quota.model import Effective, Limits, QuotaReport, report, resolve
from ..quota.store import LocalQuotaStore, lock_file
from ..spec import JobSpec, is_job_name
from ..timestamps import now, now_iso
from ..trainer_logs import DirectoryWatch
from ..workspace import ARCHIVE_NAME, record_in_place
from . import local_files as files
from .base import JobBackend, code_not_stored
from ..ports import free_port
from .identity import current_groups
from .local_supervisor import STOP_GRACE_SECONDS, stop_group


def worker_state(index: int, exit_info: dict | None, alive: bool, started: bool, job_marks: dict) -> WorkerState:
    """One worker's state from what its files say (pure). A worker whose processes are
    still alive is Running, even once its exit code is written: it is still stopping."""
    if alive:
        return WorkerState(index, Phase.RUNNING)
    failed = job_marks.get("failed")
    if exit_info is not None:
        code = exit_info["exit_code"]
        if code == 0:
            return WorkerState(index, Phase.SUCCEEDED, 0)
        if job_marks.get("cancelled"):
            return WorkerState(index, Phase.CANCELLED, code, "cancelled")
        if failed and failed["worker"] != index:
            return WorkerState(index, Phase.CANCELLED, code, f"stopped because worker {failed['worker']} failed")
        return WorkerState(index, Phase.FAILED, code, f"exited with code {code}")
    if failed and failed["worker"] == index and failed.get("exit_code") is None:
        return WorkerState(index, Phase.FAILED, None, "did not start")
    if not started:
        if job_marks.get("cancelled") or failed:
            return WorkerState(index, Phase.CANCELLED, None, "never started")
        return WorkerState(index, Phase.PENDING)
    if job_marks.get("cancelled"):
        return WorkerState(index, Phase.CANCELLED, None, "cancelled")
    if failed:  # came up as the job failed, and stayed out
        return WorkerState(index, Phase.CANCELLED, None, f"stopped because worker {failed['worker']} failed")
    return WorkerState(index, Phase.FAILED, None, "stopped unexpectedly without an exit code")


def job_phase(workers: list[WorkerState], marks: dict, max_runtime: int | None) -> tuple[Phase, Reason, str]:
    """(phase, reason, message) of a job from its workers and markers (pure)."""
    active = any(w.phase in (Phase.RUNNING, Phase.PENDING) for w in workers)
    if marks.get("cancelled"):
        return (Phase.RUNNING if active else Phase.CANCELLED), Reason.CANCELLED, "The job was cancelled."
    if marks.get("deadline"):
        return (Phase.RUNNING if active else Phase.FAILED), Reason.DEADLINE_EXCEEDED, (
            f"The job ran longer than its limit of {max_runtime} seconds and was stopped.")
    failed = marks.get("failed")
    if failed:
        message = failed.get("message") or f"Worker {failed['worker']} exited with code {failed['exit_code']}."
        if any(w.phase == Phase.CANCELLED for w in workers):
            message += " The other workers were stopped."
        return (Phase.RUNNING if active else Phase.FAILED), Reason.WORKER_FAILED, message
    lost = [w for w in workers if w.phase == Phase.FAILED and w.exit_code is None]
    if lost:
        return Phase.FAILED, Reason.WORKER_LOST, f"Worker {lost[0].index} stopped unexpectedly without an exit code."
    if all(w.phase == Phase.SUCCEEDED for w in workers):
        return Phase.SUCCEEDED, Reason.COMPLETED, f"All {len(workers)} workers finished successfully."
    if any(w.phase == Phase.RUNNING for w in workers):
        return Phase.RUNNING, Reason.NONE, ""
    return Phase.PENDING, Reason.STARTING, "The workers are starting."


class LocalBackend(JobBackend):
    """Runs jobs as local processes. State lives under `home`/jobs."""

    name = "local"

    home = Unicode(help="State folder (jobs, logs). Default: $PADDLECLOUD_HOME or ~/.paddlecloud.").tag(config=True)
    working_dir = Unicode("", help="Folder jobs run in when the submit names none (relative paths in commands "
                              "resolve there). Default: the current folder at submit time.").tag(config=True)
    python = Unicode(help="Python interpreter that runs paddle.distributed.launch. Default: this one.").tag(config=True)
    stop_grace_seconds = Float(STOP_GRACE_SECONDS, help="Seconds a cancelled worker gets to exit before SIGKILL.").tag(config=True)
    poll_interval = Float(0.05, help="Seconds between checks for new log lines when following, where the "
                          "system cannot tell when a file is written (no inotify).").tag(config=True)
    done_check_seconds = Float(0.2, help="When a followed log is quiet, seconds between checks whether the job "
                               "has ended.").tag(config=True)
    start_timeout_seconds = Float(30.0, help="Seconds each worker's supervisor gets to come up; a worker that "
                                  "does not fails the job, naming it.").tag(config=True)
    quota_file = Unicode(help="Quota settings (written by the hub's quota service). Default: "
                              "$PADDLECLOUD_QUOTA_FILE, else quotas.json in the state folder.").tag(config=True)

    _submit_lock: asyncio.Lock | None = None

    @default("quota_file")
    def _default_quota_file(self):
        return os.environ.get(QUOTA_FILE_ENV) or os.path.join(self.home, "quotas.json")

    @default("home")
    def _default_home(self):
        return paddlecloud_home()

    @default("python")
    def _default_python(self):
        return sys.executable

    @default("max_gpus_per_worker")
    def _default_max_gpus(self):
        return 0  # a local run is CPU-only unless the admin says otherwise

    @property
    def jobs_dir(self) -> str:
        return os.path.join(self.home, "jobs")

    def _job_dir(self, name: str) -> str:
        if not is_job_name(name):
            raise JobNotFound(name)
        return os.path.join(self.jobs_dir, name)

    def _job_env(self, spec: JobSpec, outputs: str) -> dict:
        bin_dir = os.path.dirname(self.python)
        env = {
            "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
            "PYTHONUNBUFFERED": "1",
            JOB_NAME_ENV: spec.name,
            OUTPUT_DIR_ENV: outputs,
        }
        for dataset in self.datasets:
            if dataset["name"] in spec.datasets and dataset.get("path"):
                env[dataset_env_name(dataset["name"])] = dataset["path"]
        env.update(spec.env)
        return env

    async def submit(self, spec: JobSpec, workdir: str | None = None) -> Job:
        spec = self.validate(spec)
        workdir = os.path.abspath(workdir or self.working_dir or os.getcwd())
        if not os.path.isdir(workdir):
            raise InvalidRequest(f"The folder {workdir} to run the job in does not exist.")
        job_dir = self._job_dir(spec.name)
        try:
            os.makedirs(self.jobs_dir, exist_ok=True)
        except OSError as exc:
            raise BackendUnavailable(f"Cannot write the job folder under {self.jobs_dir}: {exc.strerror}.") from exc
        # The quota check and the job's creation happen under one lock, so two
        # submits at once cannot both fit into the last free slot.
        async with self._submit_guard():
            await self.preflight(spec)
            # The job runs in the folder itself; the snapshot records what was there.
            code = await asyncio.to_thread(record_in_place, workdir, self.code_max_bytes)
            outputs = os.path.join(workdir, OUTPUTS_FOLDER, spec.name)
            deadline = time.time() + spec.max_runtime_seconds if spec.max_runtime_seconds else None
            staging = None
            try:
                staging = tempfile.mkdtemp(dir=self.jobs_dir, prefix=".new-")
                if code.archive is not None:
                    with open(os.path.join(staging, ARCHIVE_NAME), "wb") as f:
                        f.write(code.archive)
                files.write_json(files.job_file(staging), {
                    "spec": spec.to_dict(), "created": now_iso(), "workdir": workdir,
                    "env": self._job_env(spec, outputs), "deadline": deadline, "code": code.record(),
                    "outputs": outputs_record(outputs, kept=True),
                })
            except OSError as exc:
                if staging:
                    shutil.rmtree(staging, ignore_errors=True)
                raise BackendUnavailable(f"Cannot write the job folder under {self.jobs_dir}: {exc.strerror}.") from exc
            try:
                os.rename(staging, job_dir)  # atomic; fails if the name is taken
            except OSError as exc:
                shutil.rmtree(staging, ignore_errors=True)
                if os.path.exists(job_dir):
                    raise JobExists(spec.name) from exc
                raise BackendUnavailable(f"Cannot create the job folder {job_dir}: {exc.strerror}.") from exc
        try:
            os.makedirs(outputs, exist_ok=True)
        except OSError as exc:
            shutil.rmtree(job_dir, ignore_errors=True)
            raise InvalidRequest(f"Cannot create the job's output folder {outputs}: {exc.strerror}.") from exc
        try:
            await self._start_workers(spec, job_dir)
        except BaseException:  # a server fault, or the caller gone: leave no half-made job behind
            await self._abandon(job_dir)
            raise
        self.log.info("Started local job %s with %d workers", spec.name, spec.workers)
        return await self.get(spec.name)

    async def _start_workers(self, spec: JobSpec, job_dir: str) -> None:
        """A detached supervisor per worker. One that cannot be launched is a fault of this
        server (BackendUnavailable); one that never comes up fails the job, naming it."""
        master = f"127.0.0.1:{free_port()}"
        environment = {key: value for key, value in os.environ.items() if key not in SERVER_SECRET_ENV}
        for index in range(spec.workers):
            argv = launch_argv(spec, master, str(index), python=self.python,
                               log_dir=files.launch_dir(job_dir, index), host="127.0.0.1")
            try:
                await asyncio.to_thread(
                    subprocess.run,
                    [self.python, "-m", "paddle_ext.backends.local_supervisor", job_dir, str(index), "--", *argv],
                    check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                    env=environment)
            except subprocess.CalledProcessError as exc:
                said = exc.stderr.decode(errors="replace").strip().splitlines()
                detail = said[-1] if said else f"exit code {exc.returncode}"
                raise BackendUnavailable(f"Cannot start worker {index} of job {spec.name}: {detail}.") from exc
            except OSError as exc:
                raise BackendUnavailable(f"Cannot start worker {index} of job {spec.name}: {exc}.") from exc
        missing = await self._wait_started(job_dir, spec.workers, self.start_timeout_seconds)
        if missing:
            index = missing[0]
            files.mark_failed(job_dir, index, None,
                              f"Worker {index} did not start within {self.start_timeout_seconds:g} seconds.")
            await self._stop_workers(job_dir)
            self.log.warning("Local job %s: worker %d did not start", spec.name, index)

    async def _stop_workers(self, job_dir: str) -> None:
        pgids = list(files.worker_pids(job_dir).values())
        await asyncio.gather(*(asyncio.to_thread(stop_group, pgid, self.stop_grace_seconds) for pgid in pgids))

    async def _abandon(self, job_dir: str) -> None:
        """Undo a submit that failed half-way: stop what started, remove the job."""
        files.mark_cancelled(job_dir)  # a supervisor still coming up sees it and stays out
        await self._stop_workers(job_dir)
        shutil.rmtree(job_dir, ignore_errors=True)

    @contextlib.asynccontextmanager
    async def _submit_guard(self):
        """One submit at a time per state folder: in this process (an asyncio lock, so a
        waiting coroutine never blocks the loop) and across processes (an fcntl lock,
        taken in a thread)."""
        if self._submit_lock is None:
            self._submit_lock = asyncio.Lock()
        async with self._submit_lock:
            fd = await asyncio.to_thread(lock_file, os.path.join(self.jobs_dir, ".submit.lock"))
            try:
                yield
            finally:
                os.close(fd)

    async def _wait_started(self, job_dir: str, workers: int, timeout: float) -> list[int]:
        """Wait until every worker's supervisor has recorded its pid; the ones that did not."""
        deadline = time.monotonic() + timeout
        while True:
            missing = [i for i in range(workers) if i not in files.worker_pids(job_dir)]
            if not missing or time.monotonic() >= deadline:
                return missing
            await asyncio.sleep(0.05)

    async def quota_checks(self) -> list[tuple[Limits, dict | None]]:
        """The user's limits (settings: `quota_file`, shared with the hub's quota service)
        against what their running jobs hold."""
        limits = (await self._effective_quota()).limits
        return [] if limits.empty else [(limits, None)]

    async def _effective_quota(self) -> Effective:
        config = await LocalQuotaStore(self.quota_file).load()
        # Groups matter only when some group has limits; asking the hub costs a request.
        groups = await asyncio.to_thread(current_groups) if config.groups else []
        return resolve(config, self.user, groups)

    def _read(self, name: str) -> Job:
        job_dir = self._job_dir(name)
        meta = files.read_json(files.job_file(job_dir))
        if meta is None:
            raise JobNotFound(name)
        spec = meta["spec"]
        pids = files.worker_pids(job_dir)
        # Liveness before exit codes and marks: a worker's supervisor writes its exit code (and
        # any failure mark) and then ends, so one seen gone has them on disk. Read the other way
        # round, a worker ending between the reads would look lost ("stopped unexpectedly
        # without an exit code").
        alive = [i in pids and files.group_alive(pids[i]) for i in range(spec["workers"])]
        marks = {
            "cancelled": files.read_json(files.cancel_file(job_dir)),
            "failed": files.read_json(files.failed_file(job_dir)),
            "deadline": files.read_json(files.deadline_file(job_dir)),
        }
        exits = [files.read_json(files.exit_file(job_dir, i)) for i in range(spec["workers"])]
        workers = [worker_state(i, exits[i], alive[i], i in pids, marks) for i in range(spec["workers"])]
        phase, reason, message = job_phase(workers, marks, spec.get("max_runtime_seconds"))
        finished = None
        if phase.finished:
            times = [e["finished"] for e in exits if e] + [m["at"] for m in marks.values() if m]
            finished = max(times) if times else None
        return Job(
            name=name, phase=phase, workers=spec["workers"], spec=spec, reason=reason,
            message=message, created=meta.get("created"), finished=finished,
            worker_states=tuple(workers), backend=self.name, code=meta.get("code"), outputs=meta.get("outputs"),
            progress=tuple(local_progress(worker) for worker in workers),
        )

    async def get(self, name: str) -> Job:
        return self._read(name)

    async def list(self) -> list[Job]:
        if not os.path.isdir(self.jobs_dir):
            return []
        jobs = []
        for entry in sorted(os.listdir(self.jobs_dir)):
            if entry.startswith("."):
                continue
            try:
                jobs.append(self._read(entry))
            except JobNotFound:
                continue
        return sorted(jobs, key=lambda job: job.created or "", reverse=True)

    async def cancel(self, name: str) -> Job:
        job = self._read(name)
        if job.done:
            return job
        job_dir = self._job_dir(name)
        files.mark_cancelled(job_dir)
        await self._wait_started(job_dir, job.workers, timeout=2.0)
        await self._stop_workers(job_dir)
        self.log.info("Cancelled local job %s", name)
        return self._read(name)

    async def worker_log_chunks(self, job: Job, index: int, tail: int | None, follow: bool) -> AsyncIterator[bytes]:
        reader = LogReader(files.log_path(self._job_dir(job.name), index))
        if tail is not None:
            if chunk := reader.initial_chunk(tail, final=not follow):
                yield chunk
        else:
            for chunk in reader.chunks(final=not follow):
                yield chunk
        if not follow:
            return
        # Following: look at the file as soon as something in the job's folder is written
        # (inotify; where there is none, every `poll_interval`), and whether the job ended
        # at most every `done_check_seconds` while it is quiet.
        watch = DirectoryWatch(self._job_dir(job.name))
        try:
            looked = time.monotonic()
            while True:
                got = False
                for chunk in reader.chunks(final=False):
                    got = True
                    yield chunk
                if got:
                    continue
                if time.monotonic() - looked >= self.done_check_seconds:
                    if self._read(job.name).done:  # every process has exited: what is in the file is all
                        for chunk in reader.chunks(final=True):
                            yield chunk
                        return
                    looked = time.monotonic()
                await written(watch, self.poll_interval if watch.fd is None else self.done_check_seconds)
        finally:
            watch.close()

    async def code_archive(self, name: str) -> bytes:
        job = self._read(name)
        try:
            with open(os.path.join(self._job_dir(name), ARCHIVE_NAME), "rb") as f:
                return f.read()
        except FileNotFoundError:
            raise code_not_stored(job) from None

    async def quota(self) -> QuotaReport:
        """The user's effective limits (unset = unlimited), where each comes from, what their
        running jobs use, and GPU-hours of the last 7 and 30 days."""
        return report(self.user, await self._effective_quota(), await self.list(), now())


async def written(watch: DirectoryWatch, timeout: float) -> bool:
    """Return once something in the watched folder is written (True), or after `timeout`
    seconds (False); the events so far are forgotten: the caller reads the files next."""
    if watch.fd is None:
        await asyncio.sleep(timeout)
        return False
    loop = asyncio.get_running_loop()
    woken = loop.create_future()
    loop.add_reader(watch.fd, lambda: woken.done() or woken.set_result(None))
    try:
        await asyncio.wait_for(woken, timeout)
        return True
    except asyncio.TimeoutError:
        return False
    finally:
        loop.remove_reader(watch.fd)
        watch.drain()


class LogReader:
    """Reads a growing log file, keeping a partial last line until it ends."""

    READ_SIZE = 1 << 20  # a long log is passed on a piece at a time, not read whole

    def __init__(self, path: str):
        self.path = path
        self.offset = 0
        self.lines = LineSplitter()

    def _read_new(self, limit: int = -1) -> bytes:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read(limit)
        except FileNotFoundError:
            return b""
        self.offset += len(data)
        return data

    def chunks(self, final: bool) -> Iterator[bytes]:
        """The whole lines written since the last read, a piece at a time, and with `final`
        a last line without a newline too."""
        while True:
            data = self._read_new(self.READ_SIZE)
            if whole := self.lines.feed(data):
                yield whole
            if len(data) < self.READ_SIZE:  # at the end, for now
                break
        if final and (rest := self.lines.end()):
            yield rest

    def new_chunk(self, final: bool) -> bytes:
        return b"".join(self.chunks(final))

    def initial_chunk(self, tail: int | None, final: bool) -> bytes:
        chunk = self.new_chunk(final=final)
        return chunk if tail is None else last_lines(chunk, tail)

    def initial_lines(self, tail: int | None, final: bool) -> list[str]:
        return chunk_lines(self.initial_chunk(tail, final))

    def new_lines(self, final: bool) -> list[str]:
        return chunk_lines(self.new_chunk(final))
