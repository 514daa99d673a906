"""The `paddlecloud` command: submit, list, status, logs, cancel, quota.

Exit codes: 0 success; 1 a job failed or the backend refused (quota, unavailable);
2 bad input (one line on stderr, never a traceback); 130 interrupted.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys

from .constants import DEFAULT_CPU, DEFAULT_GPUS_PER_WORKER, DEFAULT_MEMORY, DEFAULT_WORKERS
from .errors import PaddleCloudError

# Everything else loads when a command needs it: `--help` and a mistyped option cost only
# the interpreter, argparse and these two small modules (typing included, on a slow
# machine that was a fifth of the time).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Sequence

    from .client import JobClient
    from .jobs import Job
    from .quota.model import QuotaReport
    from .spec import JobSpec

INPUT_ERROR_STATUSES = (400, 404, 409)


class UsageError(Exception):
    pass


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):  # one clear line instead of usage + error
        raise UsageError(message)


# `paddlecloud list`'s columns, in order (the benchmark checks an empty listing against them).
# RESTARTS: the restarts spent, then "+N" for requeues by the queue (attempts not spent: Job.requeues)
LIST_COLUMNS = ("NAME", "PHASE", "WORKERS", "RESTARTS", "CREATED", "REASON", "MESSAGE")

def _env_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--env needs KEY=VALUE (got '{text}')")
    return key, value


def _count(text: str) -> int:
    """A whole number of at least 0 (worker indexes, line counts)."""
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number (got '{text}')") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"must not be negative (got {number})")
    return number


def add_backend_options(parser: argparse.ArgumentParser, default) -> None:
    from .backends.registry import backend_names

    parser.add_argument("--backend", choices=backend_names(), default=default,
                        help="where jobs run (default: $PADDLECLOUD_BACKEND, else kubernetes in a cluster, else local)")
    parser.add_argument("--namespace", default=default,
                        help="Kubernetes namespace (default: the kubeconfig context's)")


def add_job_options(parser: argparse.ArgumentParser) -> None:
    """What a job asks for: the one definition `paddlecloud submit` and `%%paddle_train` share."""
    parser.add_argument("--name", help="job name (lowercase letters, digits, '-'); generated if absent")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS, help="number of workers (nodes)")
    parser.add_argument("--gpus-per-worker", type=int, default=DEFAULT_GPUS_PER_WORKER, help="GPUs per worker")
    parser.add_argument("--cpu", default=DEFAULT_CPU, help="CPU per worker, e.g. 2 or 500m")
    parser.add_argument("--memory", default=DEFAULT_MEMORY, help="memory per worker, e.g. 8Gi")
    parser.add_argument("--image", help="container image (Kubernetes)")
    parser.add_argument("--dataset", action="append", default=[], help="dataset to mount (repeatable)")
    parser.add_argument("--env", action="append", default=[], type=_env_pair, help="KEY=VALUE (repeatable)")
    parser.add_argument("--max-runtime", type=int, help="stop the job after this many seconds")
    parser.add_argument("--max-restarts", type=int, help="restart all workers together up to this many times "
                        "after a worker is lost, killed or evicted (default: the site's)")


def spec_from_options(args: argparse.Namespace, command: list[str], name: str | None = None) -> JobSpec:
    """The JobSpec that add_job_options' options describe (SpecError names what is wrong)."""
    from .spec import JobSpec

    return JobSpec(
        name=name or args.name, command=command, workers=args.workers,
        gpus_per_worker=args.gpus_per_worker, cpu=args.cpu, memory=args.memory,
        image=args.image, datasets=args.dataset, env=dict(args.env),
        max_runtime_seconds=args.max_runtime, max_restarts=args.max_restarts,
    )


def error_line(prog: str, exc: BaseException) -> tuple[str, int]:
    """The one line (and exit code) a command shows for bad input or a refusal."""
    if isinstance(exc, UsageError):
        return f"{prog}: error: {exc}", 2
    if isinstance(exc, PaddleCloudError):
        return f"{prog}: {exc.message}", 2 if exc.status in INPUT_ERROR_STATUSES else 1
    return f"{prog}: error: {exc}", 2


def build_parser() -> argparse.ArgumentParser:
    # --backend/--namespace work before or after the command; after it they win.
    common = OneLineParser(add_help=False)
    add_backend_options(common, argparse.SUPPRESS)
    parser = OneLineParser(prog="paddlecloud", description="Run distributed PaddlePaddle training jobs.")
    add_backend_options(parser, None)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    submit = commands.add_parser("submit", parents=[common], help="start a job; prints its name")
    add_job_options(submit)
    submit.add_argument("--follow", "-f", action="store_true", help="stream logs until the job ends")
    submit.add_argument("job_command", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARG...]",
                        help="what each worker runs, after --")

    listing = commands.add_parser("list", parents=[common], help="list jobs")
    listing.add_argument("--json", action="store_true", help="print the jobs as JSON")

    status = commands.add_parser("status", parents=[common], help="show a job's state")
    status.add_argument("name", help="the job's name")
    status.add_argument("--json", action="store_true", help="print the job as JSON")

    logs = commands.add_parser("logs", parents=[common], help="print a job's logs")
    logs.add_argument("name", help="the job's name")
    logs.add_argument("--follow", "-f", action="store_true", help="keep streaming until the job ends")
    logs.add_argument("--worker", type=_count, help="only this worker's log")
    logs.add_argument("--tail", type=_count, help="only the last N lines (per worker)")
    logs.add_argument("--mine", action="store_true",
                      help="only your own output: leave out PaddlePaddle's launcher, glog and warning lines "
                           "and paddle_ext.report() records")

    cancel = commands.add_parser("cancel", parents=[common], help="stop a job")
    cancel.add_argument("name", help="the job's name")

    code = commands.add_parser("code", parents=[common], help="get back the code a job ran")
    code.add_argument("name", help="the job's name")
    code.add_argument("--output", "-o", help="folder to write it to (default: ./<name>-code; must be empty)")

    quota = commands.add_parser("quota", parents=[common], help="show your limits and usage")
    quota.add_argument("--json", action="store_true", help="print limits and usage as JSON")
    return parser


def _print_json(data) -> None:
    import json

    print(json.dumps(data, indent=2, sort_keys=True))


def _describe(job: Job) -> str:
    from .progress import describe, queue_detail, steps_line

    lines = [
        f"Name:     {job.name}",
        f"Phase:    {job.phase}",
        f"Workers:  {job.workers}",
        f"Created:  {job.created or '-'}",
        f"Finished: {job.finished or '-'}",
    ]
    if job.reason:
        lines.append(f"Reason:   {job.reason}")
    if job.message:
        lines.append(f"Message:  {_one_line(job.message)}")
    if job.queue:
        lines.append(f"Queue:    {queue_detail(job.queue)}")
        if job.queue.estimated_start and job.queue.estimate_basis:
            lines.append(f"Estimate: {job.queue.estimated_start}, from {job.queue.estimate_basis}")
    if job.max_restarts or job.restarts or job.requeues:
        lines.append(f"Restarts: {job.restarts} of at most {job.max_restarts}"
                     + (f"; requeued {requeues_words(job.requeues)} by the queue (not counted)" if job.requeues else "")
                     + (f" (now {job.attempt_line()})" if job.attempt > 1 else ""))
    for worker in job.worker_states:
        code = "" if worker.exit_code is None else f" (exit code {worker.exit_code})"
        extra = f" - {worker.reason}" if worker.reason else ""
        lines.append(f"  worker-{worker.index}: {worker.phase}{code}{extra}")
    if job.progress:
        lines.append("Progress: " + steps_line(job.progress))
        lines.extend("  " + describe(progress) for progress in job.progress)
    return "\n".join(lines)


MESSAGE_WIDTH = 72  # the list's last column; `status NAME` shows a message whole


def _one_line(text: str, width: int | None = None) -> str:
    """`text` on one line (newlines and tabs as spaces), shortened to `width` with '...'."""
    text = " ".join(text.split())
    if width is not None and len(text) > width:
        return text[:width - 3].rstrip() + "..."
    return text


def requeues_words(count: int) -> str:
    """'once', 'twice', '3 times'."""
    return {1: "once", 2: "twice"}.get(count, f"{count} times")


def _table(jobs: list[Job]) -> str:
    """One job per line, in aligned columns; a reason and its message never run together.
    A queued job's message is where it stands in line."""
    from .progress import queue_detail

    rows = [LIST_COLUMNS]
    rows += [(j.name, str(j.phase), str(j.workers),
              str(j.restarts) + (f"+{j.requeues}" if j.requeues else ""), j.created or "-", str(j.reason) or "-",
              _one_line(queue_detail(j.queue, brief=True) if j.queue else j.message, MESSAGE_WIDTH) or "-")
             for j in jobs]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def _print_logs(client: JobClient, name: str, **options) -> None:
    """The log to stdout as it comes, passed on in pieces of whole lines (never line by line)."""
    sys.stdout.flush()
    client.write_logs(name, sys.stdout.buffer, **options)


def _follow(client: JobClient, name: str) -> int:
    from .jobs import Phase

    _print_logs(client, name, follow=True)
    job = client.wait(name, timeout=30, poll=0.5)
    summary = f"Job {job.name} {job.phase}" + (f": {job.message}" if job.message else "")
    print(summary, file=sys.stderr)
    return 0 if job.phase == Phase.SUCCEEDED else 1


def one_shot(args: argparse.Namespace) -> bool:
    """A command that reads, prints and returns (not one that follows a job's logs)."""
    return not getattr(args, "follow", False)


def run(args: argparse.Namespace) -> int:
    from .client import JobClient

    # What a one-shot command decodes lives until it returns, and the cyclic collector would
    # only scan it again and again: a third of the work after a 1,000-job listing arrived.
    # Paused for that command alone (main() also runs inside other processes, e.g. tests).
    paused = one_shot(args) and gc.isenabled()
    if paused:
        gc.disable()
    options = {"namespace": args.namespace} if args.namespace else {}
    try:
        client = JobClient(args.backend, **options)
        try:
            return run_command(client, args)
        finally:
            client.close()
    finally:
        if paused:
            gc.enable()


def run_command(client: JobClient, args: argparse.Namespace) -> int:
    if args.command == "submit":
        command = args.job_command[1:] if args.job_command[:1] == ["--"] else args.job_command
        job = client.submit(spec_from_options(args, command))
        print(job.name, flush=True)
        return _follow(client, job.name) if args.follow else 0
    if args.command == "list":
        jobs = client.list()
        if args.json:
            _print_json({"jobs": [job.to_dict() for job in jobs]})
        else:
            print(_table(jobs))
        return 0
    if args.command == "status":
        job = client.get(args.name)
        if args.json:
            _print_json(job.to_dict())
        else:
            print(_describe(job))
        return 0
    if args.command == "logs":
        _print_logs(client, args.name, worker=args.worker, tail=args.tail, follow=args.follow, mine=args.mine)
        return 0
    if args.command == "cancel":
        job = client.cancel(args.name)
        print(f"{job.name} {job.phase}")
        return 0
    if args.command == "code":
        output = os.path.abspath(args.output or f"{args.name}-code")
        if os.path.exists(output) and (not os.path.isdir(output) or os.listdir(output)):
            raise UsageError(f"{output} exists and is not an empty folder; choose another --output")
        written = client.code(args.name, output)
        job = client.get(args.name)
        print(f"{len(written)} files of {args.name} ({(job.code or {}).get('digest')}) in {output}")
        return 0
    if args.command == "quota":
        quota = client.quota()
        if args.json:
            _print_json(quota.to_dict())
        else:
            print(quota_table(quota))
        return 0
    raise UsageError(f"unknown command {args.command}")


def quota_table(quota: QuotaReport) -> str:
    """RESOURCE / USED / LIMIT / FROM (user, group:<name> or default), then the running
    jobs and GPU-hours."""
    from .quota.model import FIELDS

    limits = quota.limits.set_fields()
    rows = [("RESOURCE", "USED", "LIMIT", "FROM")]
    for field in FIELDS:
        rows.append((field, str(quota.used.get(field, 0)), str(limits.get(field, "unlimited")),
                     quota.sources.get(field, "")))
    lines = [f"{a:<14}{b:<10}{c:<12}{d}".rstrip() for a, b, c, d in rows]
    if quota.running:
        lines.append(f"running jobs: {', '.join(quota.running)}")
    hours = quota.gpu_hours
    lines.append(f"GPU-hours: {hours.get('7d', 0)} in the last 7 days, {hours.get('30d', 0)} in the last 30 days")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return run(args)
    except (UsageError, PaddleCloudError, ValueError) as exc:  # ValueError: e.g. an unknown backend name
        line, code = error_line("paddlecloud", exc)
        print(line, file=sys.stderr)
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
