"""Hatch build hook: the wheel carries the prebuilt JupyterLab extension.

A regular wheel gets labextension/prebuilt/ as
share/jupyter/labextensions/@paddlecloud/jupyterlab-jobs (hatch shared-data, as
jupyter-resource-usage ships its extension). Building a wheel never runs npm: the
extension is built by `make setup` (labextension/build.py), and a build that does not
match the sources is refused rather than shipped. A source tree without labextension/
(the hub image copies only what the hub runs) gives a wheel without the extension.

Editable installs leave it out: `make setup` links the dev venv's labextensions entry
to labextension/prebuilt/ instead, so every rebuild is served without reinstalling.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


def _labextension_build(root: Path):
    spec = importlib.util.spec_from_file_location("paddlecloud_labextension_build", root / "labextension" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class LabExtensionHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        if self.target_name != "wheel" or version == "editable":
            return
        root = Path(self.root)
        if not (root / "labextension" / "package.json").is_file():
            self.app.display_warning("labextension/ is not in this source tree: the wheel has no JupyterLab panel")
            return
        lab = _labextension_build(root)
        problem = lab.check_built(root / "labextension")
        if problem:
            raise RuntimeError(f"Cannot build the wheel: {problem}; run `make setup` (or "
                               f"`python labextension/build.py`) first.")
        build_data["shared_data"][str(root / "labextension" / "prebuilt")] = (
            f"share/jupyter/labextensions/{lab.package_name()}")
