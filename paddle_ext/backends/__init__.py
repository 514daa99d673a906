"""Job backends: where jobs run (the notebook side). Pick one with `make_backend`.

The names below load on first use: a local job's supervisor imports
`paddle_ext.backends.local_supervisor`, which must not pay for asyncio and traitlets
(about 0.2 s before every local worker starts).
"""

from __future__ import annotations

import importlib

__all__ = ["JobBackend", "make_backend", "default_backend_name"]


def __getattr__(name: str) -> object:
    if name in __all__:
        value = getattr(importlib.import_module(".base", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'paddle_ext.backends' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
