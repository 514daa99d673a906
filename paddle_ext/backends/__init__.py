"""Job backends: where jobs run (the notebook side). Pick one with `make_backend`
(`registry`: every backend's name and class).

The names below load on first use: a local job's supervisor imports
`paddle_ext.backends.local_supervisor`, which must not pay for asyncio and traitlets
(about 0.2 s before every local worker starts).
"""

from __future__ import annotations

import importlib

# Each name and the module that defines it.
_HOMES = {"JobBackend": ".base", "make_backend": ".registry", "default_backend_name": ".registry",
          "backend_names": ".registry"}
__all__ = list(_HOMES)


def __getattr__(name: str) -> object:
    if name in _HOMES:
        value = getattr(importlib.import_module(_HOMES[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'paddle_ext.backends' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
