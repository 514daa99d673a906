"""Fixtures for the local tier: a real Jupyter server with the extension, on 127.0.0.1."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from serverutil import JupyterServer

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"


@pytest.fixture(scope="session")
def workdir(tmp_path_factory) -> Path:
    """The folder jobs start in: the example training script and the test scripts."""
    root = tmp_path_factory.mktemp("root")
    shutil.copy(REPO / "paddle_ext" / "examples" / "train.py", root / "train.py")
    for script in SCRIPTS.glob("*.py"):
        shutil.copy(script, root / script.name)
    return root


@pytest.fixture(scope="session")
def server(tmp_path_factory, workdir):
    home = tmp_path_factory.mktemp("home")
    srv = JupyterServer(home, workdir).start()
    yield srv
    srv.stop_and_check()  # nothing a test started may be left running
