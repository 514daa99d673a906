"""The one command line every worker runs, locally and on Kubernetes (pure)."""

from __future__ import annotations

from .spec import JobSpec


def trainers_per_worker(gpus_per_worker: int) -> int:
    """How many trainers the launcher runs in one worker (its --nproc_per_node): one per
    GPU, one on CPU."""
    return max(int(gpus_per_worker or 0), 1)


def launch_argv(spec: JobSpec, master: str | None, rank: str | None, python: str = "python",
                log_dir: str | None = None, host: str | None = None) -> list[str]:
    """`python -m paddle.distributed.launch ... <command>` for one worker.

    `rank` is a string so Kubernetes can pass "$(JOB_COMPLETION_INDEX)"; `host` pins the
    address workers advertise to each other (127.0.0.1 when all run on one machine).
    With `master` and `rank` None (Kubeflow's PaddleJob), Paddle reads them from the
    PADDLE_MASTER / PADDLE_NNODES environment the operator sets. The user's
    command follows verbatim: Paddle runs it as given (a `.py` first argument is run
    with Paddle's own interpreter), never through a shell.
    """
    argv = [python, "-m", "paddle.distributed.launch"]
    if master is not None:
        argv += ["--master", master, "--nnodes", str(spec.workers)]
    if rank is not None:
        argv += ["--rank", rank]
    argv += ["--nproc_per_node", str(trainers_per_worker(spec.gpus_per_worker)), "--job_id", spec.name or "job"]
    if log_dir:
        argv += ["--log_dir", log_dir]
    if host:
        argv += ["--host", host]
    return argv + list(spec.command)
