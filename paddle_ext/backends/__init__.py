"""Job backends: where jobs run (the notebook side). Pick one with `make_backend`."""

from .base import JobBackend, default_backend_name, make_backend

__all__ = ["JobBackend", "make_backend", "default_backend_name"]
