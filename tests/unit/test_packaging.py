"""`pip install paddlecloud-hub` gives what runs: the wheel carries the hub configs, the
examples and the quota page, declares the clients the code imports, and its demo finds
its config without a checkout."""

from __future__ import annotations

import email
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(out), str(REPO)], check=True, timeout=300)
    (path,) = out.glob("paddlecloud_hub-*.whl")
    return path


def test_the_wheel_carries_configs_examples_and_the_quota_page(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("paddle_ext/hub/config/local_config.py", "paddle_ext/hub/config/jupyterhub_config.py",
                   "paddle_ext/examples/quickstart.ipynb", "paddle_ext/examples/train.py",
                   "paddle_ext/hub/static/admin.html", "paddle_ext/hub/static/admin.js",
                   "paddle_ext/server/openapi.yaml", "paddle_ext/hub/quota_openapi.yaml"):
        assert needed in names, needed
    assert any(n.endswith("etc/jupyter/jupyter_server_config.d/paddle_ext.json") for n in names)


def test_the_wheel_declares_the_clients_the_code_imports(wheel):
    with zipfile.ZipFile(wheel) as archive:
        meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = email.message_from_bytes(archive.read(meta))
    requires = [r.split(";")[0].split(">")[0].split("<")[0].strip() for r in metadata.get_all("Requires-Dist")]
    base = [r for r, full in zip(requires, metadata.get_all("Requires-Dist")) if "extra ==" not in full]
    assert "aiohttp" in base and "pyyaml" in base  # the Kubernetes backend's only needs
    assert "kubernetes" not in base  # the sync client is for tests only


def test_an_installed_wheel_finds_its_own_demo_config(wheel, tmp_path):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                   check=True, timeout=300)
    code = "from paddle_ext.hub import demo; print(demo.local_config())"
    found = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONPATH": str(site)}).stdout.strip()
    assert found == str(site / "paddle_ext" / "hub" / "config" / "local_config.py")
