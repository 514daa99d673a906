"""PaddleCloudExtension: the jupyter-server extension, enabled by the package's jupyter-config.

Configure it like any Jupyter app, e.g. in jupyter_server_config.py:

    c.PaddleCloudExtension.backend = "local"
    c.LocalBackend.max_workers = 4
    c.JobBackend.datasets = [{"name": "mnist", "path": "/data/mnist", "mount_path": "/datasets/mnist"}]
"""

from __future__ import annotations

import os

from jupyter_server.extension.application import ExtensionApp
from traitlets import Unicode, default

from ..backends.registry import backend_class, default_backend_name, make_backend
from ..constants import SERVER_BASE_URL_ENV, SERVER_ROOT_ENV
from .handlers import FALLBACK, HANDLERS


class PaddleCloudExtension(ExtensionApp):
    name = "paddle_ext"
    load_other_extensions = True

    backend = Unicode(
        help="Where jobs run: 'local' (processes on this machine) or 'kubernetes' "
             "(this user's namespace). Default: $PADDLECLOUD_BACKEND, else kubernetes "
             "inside a cluster, else local.",
    ).tag(config=True)

    @default("backend")
    def _default_backend(self):
        return default_backend_name()

    def initialize_settings(self):
        options = {"parent": self}
        if "working_dir" in backend_class(self.backend).class_trait_names():  # jobs run where the server does
            options["working_dir"] = self.serverapp.root_dir
        job_backend = make_backend(self.backend, **options)
        self.settings["paddle_backend"] = job_backend
        self.settings["paddle_root_dir"] = os.path.abspath(os.path.expanduser(self.serverapp.root_dir))
        # Kernels this server starts inherit them: the widgets link output folders into JupyterLab.
        os.environ[SERVER_ROOT_ENV] = self.settings["paddle_root_dir"]
        os.environ[SERVER_BASE_URL_ENV] = self.serverapp.base_url
        self.log.info("PaddleCloud: %s job backend", job_backend.name)

    def initialize_handlers(self):
        self.handlers.extend([*HANDLERS, FALLBACK])

    async def stop_extension(self):
        job_backend = self.settings.get("paddle_backend")
        if job_backend is not None:
            await job_backend.close()
