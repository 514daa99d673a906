"""PaddleCloud Hub: distributed PaddlePaddle training from Jupyter, on one machine or a shared cluster.

Attributes load on first use, so `import paddle_ext; paddle_ext.report(...)` inside a
training job's workers needs nothing beyond the standard library (no Jupyter, no
traitlets, no aiohttp).
"""

from __future__ import annotations

from .lazy import lazy_attributes

__version__ = "0.1.0"
__all__ = ["JobClient", "JobSpec", "PaddleCloudError", "report", "__version__"]

_LAZY = {"JobClient": ".client", "JobSpec": ".spec", "PaddleCloudError": ".errors", "report": ".reporting"}
__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())


def load_ipython_extension(ipython) -> None:
    """`%load_ext paddle_ext`: the `%%paddle_train` cell magic."""
    from .magic import load_ipython_extension as load

    load(ipython)


def _jupyter_server_extension_points():
    return [{"module": "paddle_ext.server.app", "app": _extension_app()}]


def _extension_app():
    from .server.app import PaddleCloudExtension

    return PaddleCloudExtension
