"""JupyterLab greets no user with "get notified about official Jupyter news?": the package's
settings override (jupyter-config/lab/overrides.d/paddlecloud.json, installed by pyproject's
shared-data into JupyterLab's app settings) turns the news feed and the update check off.
Read here by jupyterlab_server's own override loader and checked against the installed
JupyterLab's schema for that plugin, so a renamed setting or value fails."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import jsonschema
import pytest

REPO = Path(__file__).resolve().parents[2]
OVERRIDE = REPO / "jupyter-config" / "lab" / "overrides.d" / "paddlecloud.json"
PLUGIN = "@jupyterlab/apputils-extension:notification"


def test_the_override_is_installed_into_jupyterlabs_app_settings():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    shared = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["shared-data"]
    assert shared[str(OVERRIDE.relative_to(REPO))] == "share/jupyter/lab/settings/overrides.d/paddlecloud.json"


def test_jupyterlab_reads_it_and_its_schema_accepts_news_off(tmp_path):
    settings_utils = pytest.importorskip("jupyterlab_server.settings_utils")
    jupyterlab = pytest.importorskip("jupyterlab")
    (tmp_path / "overrides.d").mkdir()
    shutil.copy(OVERRIDE, tmp_path / "overrides.d" / OVERRIDE.name)
    overrides, error = settings_utils._get_overrides(str(tmp_path))
    assert not error, error
    assert overrides[PLUGIN]["fetchNews"] == "false" and overrides[PLUGIN]["checkForUpdates"] is False
    # The plugin's schema as the installed JupyterLab ships it ("false" = Never; "none" asks).
    schema_file = Path(jupyterlab.__file__).parent / "schemas" / "@jupyterlab" / "apputils-extension" / "notification.json"
    schema = json.loads(schema_file.read_text())
    jsonschema.validate(overrides[PLUGIN], schema)
