"""Job backends: where jobs run. Pick one with `make_backend`."""

from .base import Job, JobBackend, WorkerState, make_backend, default_backend_name

__all__ = ["Job", "JobBackend", "WorkerState", "make_backend", "default_backend_name"]
