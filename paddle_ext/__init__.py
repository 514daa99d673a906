"""PaddleCloud Hub: distributed PaddlePaddle training from Jupyter, on one machine or a shared cluster.

Attributes load on first use, so `import paddle_ext; paddle_ext.report(...)` inside a
training job's workers needs nothing beyond the standard library (no Jupyter, no
traitlets, no aiohttp).
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"
__all__ = ["JobClient", "JobSpec", "PaddleCloudError", "report", "__version__"]

_LAZY = {"JobClient": ".client", "JobSpec": ".spec", "PaddleCloudError": ".errors", "report": ".reporting"}


def __getattr__(name: str) -> object:  # (no `typing` here: every command imports this)
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'paddle_ext' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def load_ipython_extension(ipython) -> None:
    """`%load_ext paddle_ext`: the `%%paddle_train` cell magic."""
    from .magic import load_ipython_extension as load

    load(ipython)


def _jupyter_server_extension_points():
    return [{"module": "paddle_ext.server.app", "app": _extension_app()}]


def _extension_app():
    from .server.app import PaddleCloudExtension

    return PaddleCloudExtension
