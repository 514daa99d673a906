"""PaddleCloud Hub: distributed PaddlePaddle training from Jupyter, on one machine or a shared cluster."""

from .client import JobClient
from .errors import PaddleCloudError
from .spec import JobSpec

__version__ = "0.1.0"
__all__ = ["JobClient", "JobSpec", "PaddleCloudError", "__version__"]


def _jupyter_server_extension_points():
    return [{"module": "paddle_ext.server.app", "app": _extension_app()}]


def _extension_app():
    from .server.app import PaddleCloudExtension

    return PaddleCloudExtension
