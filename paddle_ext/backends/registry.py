"""Where jobs can run: each backend's name and the class behind it, as an import string
loaded on first use (as dask-gateway names its backends). A new backend is one entry here.

The CLI, the server extension and the hub read the names from here; nothing imports a
backend's module until one is made, so `paddlecloud --backend local` never loads the
Kubernetes code.
"""

from __future__ import annotations

import os

from ..constants import BACKEND_ENV, in_cluster

TYPE_CHECKING = False  # not typing's: the CLI reads the names here and does not load typing
if TYPE_CHECKING:
    from typing import Any

    from .base import JobBackend

LOCAL = "local"
KUBERNETES = "kubernetes"

BACKENDS: dict[str, str] = {
    LOCAL: "paddle_ext.backends.local:LocalBackend",
    KUBERNETES: "paddle_ext.backends.kubernetes:KubernetesBackend",
}


def backend_names() -> list[str]:
    return list(BACKENDS)


def default_backend_name() -> str:
    """PADDLECLOUD_BACKEND, else `kubernetes` inside a cluster, else `local`."""
    return os.environ.get(BACKEND_ENV) or (KUBERNETES if in_cluster() else LOCAL)


def config_section(name: str) -> str:
    """The traitlets config section of a backend's own settings (its class name), known
    without loading the backend."""
    return _import_string(name).rpartition(":")[2]


def backend_class(name: str) -> type[JobBackend]:
    """The backend's class, its module loaded now."""
    import importlib

    module, _, attribute = _import_string(name).partition(":")
    return getattr(importlib.import_module(module), attribute)


def make_backend(name: str | None = None, **kwargs: Any) -> JobBackend:
    """The named backend (default: default_backend_name()) with the hub's settings for it
    under the caller's own config (JobBackend.with_site_config)."""
    return backend_class(name or default_backend_name()).with_site_config(**kwargs)


def _import_string(name: str) -> str:
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend '{name}' (choose {' or '.join(BACKENDS)})") from None
