"""The embedded default: jobs as local multi-process PaddlePaddle runs.

Each worker is `python -m paddle.distributed.launch --master 127.0.0.1:<port> ...`
under a detached supervisor (`local_supervisor`), so jobs outlive the Jupyter server
that started them. The job folder (see `local_files`) is the only state: any process
that can read it (a restarted server, the CLI, a notebook kernel) sees the same jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import AsyncIterator, Iterator, Mapping

from traitlets import Float, Integer, Unicode, default

from ..constants import (JOB_NAME_ENV, LAUNCHER_PORT_RANGE_ENV, OUTPUT_DIR_ENV, OUTPUTS_FOLDER, QUOTA_FILE_ENV,
                         SERVER_SECRET_ENV, dataset_env_name, paddlecloud_home)
from ..errors import BackendUnavailable, InvalidRequest, JobExists, JobNotFound, PaddleCloudError, QuotaExceeded
from ..jobs import Job, Phase, QueueState, Reason, Step, WorkerProgress, WorkerState, outputs_record
from ..launch import launch_argv
from ..loglines import LineSplitter, chunk_lines, last_lines
from ..progress import LOCAL_STEPS, local_progress, queue_detail, queue_line
from ..quota.model import Effective, JobUsage, Limits, QuotaReport, report, resolve
from ..quota.store import LocalQuotaStore, lock_file
from ..spec import JobSpec, is_job_name
from ..timestamps import now, now_iso
from ..trainer_logs import DirectoryWatch
from ..workspace import ARCHIVE_NAME, record_in_place
from . import local_files as files
from . import local_queue
from .base import JobBackend, code_not_stored, with_resume
from ..ports import free_port, listen_ports
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


def worker_environment(environ: Mapping[str, str], launcher_ports: tuple[int, int] | None) -> dict[str, str]:
    """What a local job's workers start with: this server's environment without its credentials,
    and Paddle's launcher kept to the ports no outgoing connection takes (LAUNCHER_PORT_RANGE_ENV)."""
    environment = {key: value for key, value in environ.items() if key not in SERVER_SECRET_ENV}
    if launcher_ports:
        environment[LAUNCHER_PORT_RANGE_ENV] = f"{launcher_ports[0]}:{launcher_ports[1]}"
    return environment


@dataclasses.dataclass(frozen=True)
class _Seen:
    """A job read from its folder, and what it holds for the queue (None: nothing)."""

    job: Job
    holder: local_queue.Holder | None = None
    stalled: bool = False  # left the queue, but its starter stopped before any worker came up


def queued_job(name: str, spec: dict, meta: dict, backend: str) -> Job:
    """A job waiting in this machine's queue (pure): nothing of it runs yet."""
    workers = spec["workers"]
    return Job(
        name=name, phase=Phase.QUEUED, workers=workers, spec=spec, reason=Reason.QUEUED,
        message=f"Waiting in {local_queue.QUEUE_NAME}.", created=meta.get("created"),
        worker_states=tuple(WorkerState(i, Phase.QUEUED) for i in range(workers)), backend=backend,
        code=meta.get("code"), outputs=meta.get("outputs"),
        progress=tuple(WorkerProgress(i, Step.QUEUED, "waiting in line", steps=LOCAL_STEPS) for i in range(workers)),
    )


def with_queue_state(job: Job, state: QueueState) -> Job:
    """A queued job with where it stands in line, in its message and progress too (pure)."""
    detail = queue_detail(state)
    return dataclasses.replace(
        job, queue=state, message=f"Waiting in line: {detail}.",
        progress=tuple(dataclasses.replace(p, detail=queue_line(state)) for p in job.progress))


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

    machine_gpus = Integer(None, allow_none=True, help="""GPUs this machine has for jobs, all jobs together: a job
        needing more is refused at once, one needing more than are free waits in this machine's queue. Default:
        the NVIDIA GPUs under /dev (nvidia0, nvidia1, ...); none found: GPUs are not counted.""").tag(config=True)

    _submit_lock: asyncio.Lock | None = None
    _groups: list[str] | None = None  # the user's groups when known already (a supervisor starting the queue)

    @default("machine_gpus")
    def _default_machine_gpus(self):
        return files.nvidia_gpus() or None

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
        """Start the job, or put it in this machine's queue when it fits the user's quota and
        this machine but not next to what runs now (or others wait before it). One that could
        never start is refused at once, with the numbers."""
        spec = self.validate(spec)
        workdir = os.path.abspath(workdir or self.working_dir or os.getcwd())
        if not os.path.isdir(workdir):
            raise InvalidRequest(f"The folder {workdir} to run the job in does not exist.")
        job_dir = self._job_dir(spec.name)
        try:
            os.makedirs(self.jobs_dir, exist_ok=True)
        except OSError as exc:
            raise BackendUnavailable(f"Cannot write the job folder under {self.jobs_dir}: {exc.strerror}.") from exc
        # The admission decision and the job's creation happen under one lock, so two
        # submits at once cannot both take the last free slot, nor overtake a queued job.
        async with self._submit_guard():
            room, groups = await self._room()
            request = JobUsage.of_spec(spec)
            if refused := local_queue.never_fits(request, room):
                raise QuotaExceeded(refused)
            entries = files.queue_entries(self.jobs_dir)
            holders = [seen.holder for seen in self._seen_all(entries) if seen.holder]
            waits = bool(entries) or local_queue.shortage(request, room, [h.usage for h in holders]) is not None
            # The job runs in the folder itself; the snapshot records what was there.
            code = await asyncio.to_thread(record_in_place, workdir, self.code_max_bytes)
            outputs = os.path.join(workdir, OUTPUTS_FOLDER, spec.name)
            deadline = time.time() + spec.max_runtime_seconds if spec.max_runtime_seconds and not waits else None
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
            if waits:
                try:
                    self._enqueue(spec.name, max(entries.values(), default=0) + 1, groups)
                except OSError as exc:
                    shutil.rmtree(job_dir, ignore_errors=True)
                    raise BackendUnavailable(f"Cannot write this machine's queue under {self.jobs_dir}: "
                                             f"{exc.strerror}.") from exc
        if waits:
            self.log.info("Queued local job %s", spec.name)
            return await self.get(spec.name)
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

    # ------------------------------------------------------------------ this machine's queue
    #
    # The queue is the folder jobs/.queue/: one file per waiting job, holding the order it
    # joined in (local_files). There is no queue service: whoever may have made room starts
    # the jobs that now fit (`promote`), under the same file lock as submit, so exactly one
    # process decides at a time and every decision sees every job:
    #   - each worker's supervisor, once its worker has ended and its exit code is written
    #     (with the settings the queueing backend left in jobs/.queue-settings.json), so a
    #     queued job starts by itself when a running one ends, with no server running;
    #   - every submit, cancel, status and list call (a quota raised, a job cancelled).
    # The decision itself is local_queue.admit (pure, strict FIFO). A job leaves the queue
    # under the lock before its workers are started outside it: from then on it reads as
    # Pending and counts as running for the next decision.

    def _enqueue(self, name: str, seq: int, groups: list[str]) -> None:
        os.makedirs(files.queue_dir(self.jobs_dir), exist_ok=True)
        files.write_json(files.queue_settings_file(self.jobs_dir), {
            "python": self.python, "quota_file": self.quota_file, "user": self.user, "groups": groups,
            "machine_gpus": self.machine_gpus, "start_timeout_seconds": self.start_timeout_seconds,
            "stop_grace_seconds": self.stop_grace_seconds,
        })
        files.write_json(files.queue_entry(self.jobs_dir, name), {"seq": seq, "at": now_iso()})

    async def promote(self) -> list[str]:
        """Start the queued jobs that fit now, first in line first; their names."""
        if not files.queued_names(self.jobs_dir):
            return []
        async with self._submit_guard():
            entries = files.queue_entries(self.jobs_dir)
            if not entries:
                return []
            room, _groups = await self._room()
            seen = self._seen_all(entries)
            for item in seen:
                if item.stalled:  # it would hold its slot, and block the line, for ever
                    files.mark_failed(self._job_dir(item.job.name), 0, None, (
                        "The job left the queue, but what was starting it stopped before its workers came up. "
                        "Submit it again."))
            seen = [dataclasses.replace(item, holder=None) if item.stalled else item for item in seen]
            specs = {item.job.name: item.job.spec for item in seen if item.job.phase == Phase.QUEUED}
            for name in entries:
                if name not in specs:  # its folder is gone, or it was cancelled: out of the line
                    files.leave_queue(self.jobs_dir, name)
            queued = [JobUsage.of(name, specs[name]) for name in local_queue.queue_order(entries) if name in specs]
            starting = local_queue.admit(queued, [item.holder.usage for item in seen if item.holder], room)
            for name in starting:
                files.leave_queue(self.jobs_dir, name)
        for name in starting:
            await self._start_queued(name, specs[name])
        return starting

    async def _promote_quietly(self) -> None:
        """`promote` where a caller only reads: a fault is logged, not raised."""
        try:
            await self.promote()
        except (PaddleCloudError, OSError) as exc:
            self.log.warning("Cannot start queued local jobs: %s", exc)

    async def _start_queued(self, name: str, spec_data: dict) -> None:
        """Start a job that has left the queue. No caller waits for it, so what goes wrong
        fails the job, saying why."""
        job_dir = self._job_dir(name)
        try:
            spec = JobSpec.from_dict(spec_data)
        except PaddleCloudError as exc:  # a job folder edited by hand
            files.mark_failed(job_dir, 0, None, f"The job's recorded spec is not valid: {exc.message}")
            return
        try:
            meta = files.read_json(files.job_file(job_dir)) or {}
            started = time.time()  # its time limit counts from now, not from its submit
            files.write_json(files.job_file(job_dir), {
                **meta, "admitted": started,
                "deadline": started + spec.max_runtime_seconds if spec.max_runtime_seconds else None})
            outputs = (meta.get("env") or {}).get(OUTPUT_DIR_ENV)
            if outputs:
                os.makedirs(outputs, exist_ok=True)
        except OSError as exc:
            files.mark_failed(job_dir, 0, None, f"The job could not leave the queue: {exc}.")
            return
        try:
            await self._start_workers(spec, job_dir)
        except BackendUnavailable as exc:
            files.mark_failed(job_dir, 0, None, exc.message)
            await self._stop_workers(job_dir)
            return
        except BaseException:
            files.mark_failed(job_dir, 0, None, "Starting the job from the queue was interrupted.")
            await self._stop_workers(job_dir)
            raise
        self.log.info("Started queued local job %s with %d workers", name, spec.workers)

    async def _start_workers(self, spec: JobSpec, job_dir: str) -> None:
        """A detached supervisor per worker. One that cannot be launched is a fault of this
        server (BackendUnavailable); one that never comes up fails the job, naming it."""
        master = f"127.0.0.1:{free_port()}"
        environment = worker_environment(os.environ, listen_ports())
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
        return (await self._quota_and_groups())[0]

    async def _quota_and_groups(self) -> tuple[Effective, list[str]]:
        config = await LocalQuotaStore(self.quota_file).load()
        # Groups matter only when some group has limits; asking the hub costs a request.
        # A supervisor starting queued jobs has them from the queue's settings.
        groups = self._groups
        if groups is None:
            groups = await asyncio.to_thread(current_groups) if config.groups else []
        return resolve(config, self.user, groups), groups

    async def _room(self) -> tuple[local_queue.Room, list[str]]:
        """What jobs may hold together here (the user's quota, this machine's GPUs), and the
        user's groups it was resolved with."""
        effective, groups = await self._quota_and_groups()
        return local_queue.Room(effective.limits, self.machine_gpus), groups

    def _read(self, name: str, queued: bool | None = None) -> Job:
        return self._see(name, queued).job

    def _see(self, name: str, queued: bool | None = None) -> _Seen:
        """A job as its files say, whether it is in the queue (None: look), and what it holds
        for the queue's decisions."""
        job_dir = self._job_dir(name)
        meta = files.read_json(files.job_file(job_dir))
        if meta is None:
            raise JobNotFound(name)
        spec = meta["spec"]
        if queued is None:
            queued = files.exists(files.queue_entry(self.jobs_dir, name))
        if queued and not files.exists(files.cancel_file(job_dir)):
            return _Seen(queued_job(name, spec, meta, self.name))
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
        restarts = files.restarts(job_dir)
        job = Job(
            name=name, phase=phase, workers=spec["workers"], spec=spec, reason=reason,
            message=message, created=meta.get("created"), finished=finished,
            worker_states=tuple(workers), backend=self.name, code=meta.get("code"), outputs=meta.get("outputs"),
            progress=tuple(local_progress(worker) for worker in workers),
            restarts=len(restarts), last_restart_reason=restarts[-1]["reason"] if restarts else "",
            last_restart_at=restarts[-1].get("at") if restarts else None,
        )
        job = with_resume(job)
        # For the queue, a worker whose exit code is written holds nothing any more: its
        # processes are gone, only its supervisor may still be finishing (and starting the
        # queue: it must not count itself).
        holding = [worker_state(i, exits[i], alive[i] and exits[i] is None, i in pids, marks)
                   for i in range(spec["workers"])]
        holds = not job_phase(holding, marks, spec.get("max_runtime_seconds"))[0].finished
        admitted = meta.get("admitted")
        stalled = bool(admitted and not pids and not any(marks.values())
                       and time.time() - admitted > 2 * self.start_timeout_seconds)
        return _Seen(job, local_queue.Holder(JobUsage.of(name, spec), meta.get("deadline")) if holds else None,
                     stalled)

    def _job_names(self) -> list[str]:
        if not os.path.isdir(self.jobs_dir):
            return []
        return [entry for entry in sorted(os.listdir(self.jobs_dir)) if not entry.startswith(".")]

    def _seen_all(self, entries: dict[str, int]) -> list[_Seen]:
        seen = []
        for name in self._job_names():
            try:
                seen.append(self._see(name, name in entries))
            except JobNotFound:
                continue
        return seen

    async def _jobs(self) -> list[Job]:
        """Every job, the queued ones with where they stand in line."""
        entries = files.queue_entries(self.jobs_dir)
        seen = self._seen_all(entries)
        jobs = [item.job for item in seen]
        queued = {job.name: job for job in jobs if job.phase == Phase.QUEUED}
        if not queued:
            return jobs
        try:
            room = (await self._room())[0]
        except PaddleCloudError as exc:
            self.log.warning("Cannot read the quota for this machine's queue: %s", exc)
            room = local_queue.Room(machine_gpus=self.machine_gpus)
        waiting = [local_queue.Waiting(JobUsage.of(name, queued[name].spec), queued[name].spec.get("max_runtime_seconds"))
                   for name in local_queue.queue_order(entries) if name in queued]
        states = local_queue.queue_states(waiting, [item.holder for item in seen if item.holder], room, time.time())
        return [with_queue_state(job, states[job.name]) if job.name in states else job for job in jobs]

    async def get(self, name: str) -> Job:
        await self._promote_quietly()
        job = self._read(name)
        if job.phase == Phase.QUEUED:
            job = next((other for other in await self._jobs() if other.name == name), job)
        return job

    async def list(self) -> list[Job]:
        await self._promote_quietly()
        return sorted(await self._jobs(), key=lambda job: job.created or "", reverse=True)

    async def cancel(self, name: str) -> Job:
        job_dir = self._job_dir(name)
        if files.exists(files.queue_entry(self.jobs_dir, name)):
            async with self._submit_guard():  # not started by a promote meanwhile
                left = files.exists(job_dir) and files.leave_queue(self.jobs_dir, name)
                if left:
                    files.mark_cancelled(job_dir)
            if left:  # it never started: nothing ran, nothing to stop; the jobs behind it move up
                self.log.info("Cancelled queued local job %s", name)
                await self._promote_quietly()
                return self._read(name)
        job = self._read(name)
        if job.done:
            return job
        files.mark_cancelled(job_dir)
        await self._wait_started(job_dir, job.workers, timeout=2.0)
        await self._stop_workers(job_dir)
        self.log.info("Cancelled local job %s", name)
        await self._promote_quietly()
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


def promote_from_settings(jobs_dir: str) -> list[str]:
    """Start the queued jobs that fit now, with the settings the queueing backend left
    (what a worker's supervisor calls once its worker has ended)."""
    settings = files.read_json(files.queue_settings_file(jobs_dir))
    if settings is None or not files.queued_names(jobs_dir):
        return []
    backend = LocalBackend(
        home=os.path.dirname(os.path.abspath(jobs_dir)), python=settings["python"],
        quota_file=settings["quota_file"], user=settings["user"], machine_gpus=settings.get("machine_gpus"),
        start_timeout_seconds=settings["start_timeout_seconds"], stop_grace_seconds=settings["stop_grace_seconds"])
    backend._groups = list(settings.get("groups") or [])
    return asyncio.run(backend.promote())
