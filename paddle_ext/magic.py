"""`%%paddle_train`: a notebook cell as the training script of a distributed job.

    %load_ext paddle_ext

    %%paddle_train --workers 2 --var job
    import paddle, paddle_ext
    ...
    paddle_ext.report(step=step, loss=float(loss))

The cell's code is written to `paddlecloud_cells/<job>.py` in the notebook's current
folder and submitted as `python paddlecloud_cells/<job>.py`, so it travels with the
folder exactly as a submitted script does. The job's folder comes first on its PYTHONPATH,
so the cell imports the notebook folder's own modules as it would in the notebook (a
script's own folder, paddlecloud_cells/, is what Python would put first). The options are `paddlecloud submit`'s own
(one definition, `paddle_ext.cli.add_job_options`), plus `--no-follow` (no monitor) and
`--var NAME` (also bind the handle to NAME). The cell's value is a `TrainingJob`
handle: `.status()`, `.logs()`, `.metrics()`, `.cancel()`, `.wait()`, `.monitor()`.
Bad options print one line, the CLI's message, and submit nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import sys

from .cli import UsageError, add_backend_options, OneLineParser, add_job_options, error_line, spec_from_options
from .client import JobClient
from .constants import CELLS_DIR
from .errors import JobExists, JobNotFound, PaddleCloudError
from .jobs import Job
from .metrics import MetricPoint
from .spec import generate_name

PROG = "%%paddle_train"


class _HelpShown(Exception):
    pass


class _MagicParser(OneLineParser):
    def exit(self, status=0, message=None):  # --help: show it, then stop without SystemExit
        if message:
            print(message, file=sys.stderr)
        raise _HelpShown()


def build_parser() -> argparse.ArgumentParser:
    parser = _MagicParser(prog=PROG, description="Run this cell as the training script of a distributed job.")
    add_backend_options(parser, None)
    add_job_options(parser)
    parser.add_argument("--no-follow", action="store_true", help="do not show the live monitor below the cell")
    parser.add_argument("--var", metavar="NAME", help="also bind the job's handle to this variable")
    return parser


class TrainingJob:
    """A job started from a cell. Re-create one later with TrainingJob(name)."""

    def __init__(self, name: str, client: JobClient | None = None, script: str = ""):
        self.name = name
        self.client = client or JobClient()
        self.script = script

    def status(self) -> Job:
        return self.client.get(self.name)

    def logs(self, worker: int | None = None, tail: int | None = None, mine: bool = False) -> list[str]:
        """The log so far (merged, `[worker-I] ` prefixed with several workers); `mine`
        leaves out PaddlePaddle's own noise and the metric records."""
        return list(self.client.logs(self.name, worker=worker, tail=tail, mine=mine))

    def metrics(self) -> list[MetricPoint]:
        """Every metric point so far: paddle_ext.report() calls and Model.fit steps."""
        return list(self.client.metrics(self.name).points)

    def cancel(self) -> Job:
        return self.client.cancel(self.name)

    def wait(self, timeout: float | None = None) -> Job:
        """Block until the job ends (or `timeout` seconds pass); its state."""
        return self.client.wait(self.name, timeout=timeout, poll=0.5)

    def monitor(self):
        """A live JobMonitor widget for this job."""
        from .widgets import JobMonitor

        return JobMonitor(self.name, client=self.client)

    def __repr__(self) -> str:
        try:
            job = self.status()
        except PaddleCloudError as exc:
            return f"<TrainingJob {self.name}: {exc.message}>"
        return f"<TrainingJob {self.name}: {handle_state(job)}>"


def handle_state(job: Job) -> str:
    """A job's phase, and while it is queued where it stands: 'Queued · position 2 in ...'."""
    from .progress import queue_line

    return queue_line(job.queue) if job.queue else str(job.phase)


def write_cell(folder: str, name: str, code: str) -> str:
    """Write the cell's code to paddlecloud_cells/<name>.py under `folder`; the path relative to it."""
    relative = os.path.join(CELLS_DIR, f"{name}.py")
    os.makedirs(os.path.join(folder, CELLS_DIR), exist_ok=True)
    with open(os.path.join(folder, relative), "w", encoding="utf-8") as f:
        f.write(code if code.endswith("\n") else code + "\n")
    return relative


def cell_env(env: dict[str, str], inherited: str | None) -> dict[str, str]:
    """The cell job's environment: the user's, with the folder the job runs in (".") first on
    PYTHONPATH, before the user's PYTHONPATH (from --env, else the notebook's own)."""
    rest = env.get("PYTHONPATH", inherited)
    return {**env, "PYTHONPATH": os.pathsep.join(["."] + ([rest] if rest else []))}


def submit_cell(client: JobClient, args: argparse.Namespace, code: str, folder: str) -> TrainingJob:
    """Submit `code` as a job's training script, as `paddlecloud submit -- python <file>` would."""
    if not code.strip():
        raise UsageError("the cell has no code to run")
    if args.var is not None and not args.var.isidentifier():
        raise UsageError(f"argument --var: '{args.var}' is not a Python variable name")
    name = args.name or generate_name(("cell.py",))
    script = os.path.join(CELLS_DIR, f"{name}.py")
    spec = spec_from_options(args, ["python", script], name=name)  # checks every option first
    spec = dataclasses.replace(spec, env=cell_env(spec.env, os.environ.get("PYTHONPATH")))
    try:
        client.get(name)
        raise JobExists(name)  # never overwrite the script of an existing job
    except JobNotFound:
        pass
    write_cell(folder, name, code)
    try:
        job = client.submit(spec)
    except BaseException:
        os.unlink(os.path.join(folder, script))
        raise
    return TrainingJob(job.name, client, script)


def paddle_train(line: str, cell: str, shell=None) -> TrainingJob | None:
    """The cell magic; returns the handle, or None after printing one line for bad input."""
    try:
        try:
            argv = shlex.split(line)
        except ValueError as exc:
            raise UsageError(f"cannot split the options ({exc})") from exc
        args = build_parser().parse_args(argv)
        client = JobClient(args.backend, **({"namespace": args.namespace} if args.namespace else {}))
        handle = submit_cell(client, args, cell, os.getcwd())
    except _HelpShown:
        return None
    except (UsageError, PaddleCloudError, ValueError) as exc:
        print(error_line(PROG, exc)[0], file=sys.stderr)
        return None
    if args.var and shell is not None:
        shell.user_ns[args.var] = handle
    if not args.no_follow:
        from IPython.display import display

        display(handle.monitor())
    return handle


def load_ipython_extension(ipython) -> None:
    def magic(line: str, cell: str):
        return paddle_train(line, cell, ipython)

    magic.__doc__ = build_parser().format_help()
    ipython.register_magic_function(magic, magic_kind="cell", magic_name="paddle_train")
