"""`pip install paddlecloud-hub` gives what runs: the wheel carries the hub configs, the
examples, the quota page and the prebuilt JupyterLab extension, declares the clients the
code imports, and its demo finds its config without a checkout."""

from __future__ import annotations

import email
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LABEXT = "share/jupyter/labextensions/@paddlecloud/jupyterlab-jobs"


def labextension_build():
    spec = importlib.util.spec_from_file_location("labextension_build", REPO / "labextension" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
                   "paddle_ext/server/openapi.yaml", "paddle_ext/hub/quota_openapi.yaml",
                   "paddle_ext/hub/templates/spawn_pending.html"):
        assert needed in names, needed
    assert any(n.endswith("etc/jupyter/jupyter_server_config.d/paddle_ext.json") for n in names)
    assert any(n.endswith("share/jupyter/lab/settings/overrides.d/paddlecloud.json") for n in names)


# Declared without being imported: the JupyterLab the lab extension runs in.
RUNTIME_ONLY = {"jupyterlab"}


def _normal(name: str) -> str:
    return name.lower().replace("_", "-")


# Modules that run only inside a training script, under Paddle (the `paddle` extra): like the
# examples, their `import paddle` is the script's, not the package's.
RUNS_UNDER_PADDLE = {"checkpoint.py"}


def imported_distributions(folder: Path, skip: tuple[str, ...] = ()) -> set[str]:
    """The distributions whose modules the package's code under `folder`, but not in its
    subfolders `skip`, imports (the examples are the users' code, run under Paddle)."""
    import ast
    import importlib.metadata

    owners = importlib.metadata.packages_distributions()
    found = set()
    for path in folder.rglob("*.py"):
        if set(path.relative_to(folder).parts) & {"examples", *skip} or path.name in RUNS_UNDER_PADDLE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top not in sys.stdlib_module_names and top != "paddle_ext":
                    found.update(_normal(d) for d in owners[top])
    return found


def test_the_wheel_declares_what_the_code_imports_and_nothing_it_does_not(wheel):
    with zipfile.ZipFile(wheel) as archive:
        meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = email.message_from_bytes(archive.read(meta))
    requires = {}
    for full in metadata.get_all("Requires-Dist"):
        name = _normal(full.split(";")[0].split(">")[0].split("<")[0].split("[")[0].strip())
        requires.setdefault(full.split("extra == ")[1].strip("'\"") if "extra ==" in full else "base", set()).add(name)
    base_code = imported_distributions(REPO / "paddle_ext", skip=("hub",))
    hub_code = imported_distributions(REPO / "paddle_ext" / "hub")
    assert base_code <= requires["base"], f"imported but not declared: {base_code - requires['base']}"
    assert hub_code <= requires["base"] | requires["hub"], (
        f"imported by the hub code but not declared: {hub_code - requires['base'] - requires['hub']}")
    unused = requires["base"] - base_code - hub_code - RUNTIME_ONLY
    assert not unused, f"declared but never imported: {unused}"
    assert "pyyaml" in requires["base"] and "kubernetes" not in requires["base"]  # the sync client is for tests only


def test_an_installed_wheel_finds_its_own_demo_config(wheel, tmp_path):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                   check=True, timeout=300)
    code = "from paddle_ext.hub import demo; print(demo.local_config())"
    found = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONPATH": str(site)}).stdout.strip()
    assert found == str(site / "paddle_ext" / "hub" / "config" / "local_config.py")


def test_the_wheel_carries_the_prebuilt_labextension_of_these_sources(wheel):
    with zipfile.ZipFile(wheel) as archive:
        data = {name.split(".data/data/", 1)[1]: name for name in archive.namelist() if ".data/data/" in name}
        package = json.loads(archive.read(data[f"{LABEXT}/package.json"]))
        install = json.loads(archive.read(data[f"{LABEXT}/install.json"]))
        entry = f"{LABEXT}/{package['jupyterlab']['_build']['load']}"
        assert entry in data, "the federated entry point the package.json names is missing"
        code = b"".join(archive.read(name) for path, name in data.items() if path.endswith(".js"))
        assert b"paddle/api" in code and b"paddlecloud:new-job" in code  # our plugin, not an empty shell
    assert package["name"] == "@paddlecloud/jupyterlab-jobs"
    assert package["version"] == "0.1.0" == wheel.name.split("-")[1]
    assert install["packageName"] == "paddlecloud-hub"
    built = sorted(p.relative_to(REPO / "labextension" / "prebuilt").as_posix()
                   for p in (REPO / "labextension" / "prebuilt").rglob("*") if p.is_file())
    assert sorted(name[len(LABEXT) + 1:] for name in data if name.startswith(LABEXT + "/")) == built
    assert labextension_build().check_built() is None  # the build is the one of the sources here


def test_the_installed_wheel_is_a_working_prebuilt_labextension(wheel, tmp_path):
    prefix = tmp_path / "prefix"  # --ignore-installed: else pip uninstalls the dev venv's editable install
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--ignore-installed", "-q", "--prefix", str(prefix),
                    str(wheel)],
                   check=True, timeout=300)
    listing = subprocess.run([sys.executable, "-m", "jupyter", "labextension", "list"], capture_output=True,
                             text=True, timeout=120, env={**os.environ, "JUPYTER_PATH": str(prefix / "share" / "jupyter"),
                                                          "NO_COLOR": "1"})
    section = listing.stdout + listing.stderr
    section = section.split(str(prefix / "share" / "jupyter" / "labextensions"), 1)[1].split("\n\n", 1)[0]
    line = next(line for line in section.splitlines() if "@paddlecloud/jupyterlab-jobs" in line)
    assert "enabled" in line and "OK" in line and "(python, paddlecloud-hub)" in line, line


def test_a_stale_or_missing_labextension_build_is_refused_not_shipped(tmp_path):
    lab = labextension_build()
    copy = tmp_path / "labextension"
    shutil.copytree(REPO / "labextension", copy, ignore=shutil.ignore_patterns("node_modules", "lib"))
    assert lab.check_built(copy) is None
    (copy / "src" / "index.ts").write_text((copy / "src" / "index.ts").read_text() + "\n// changed\n")
    assert lab.check_built(copy) == "the JupyterLab extension was built from other sources than these"
    shutil.rmtree(copy / "prebuilt")
    assert lab.check_built(copy) == "the JupyterLab extension is not built"


def test_a_fresh_clone_copies_node_modules_from_the_cache_and_a_new_lock_installs_again(tmp_path, monkeypatch):
    """labextension/build.py: `npm ci` runs once per package-lock.json on a machine; a fresh
    clone gets a copy of that install, and a changed lock file installs (and is kept) anew."""
    build = labextension_build()
    here = tmp_path / "labextension"
    here.mkdir()
    (here / "package-lock.json").write_text('{"lockfileVersion": 3}')
    monkeypatch.setattr(build, "HERE", here)
    monkeypatch.setattr(build, "NODE_MODULES", here / "node_modules")
    monkeypatch.setattr(build, "NODE_MODULES_CACHE", tmp_path / "cache")
    installs = []

    def fake_npm(command):
        assert command[:2] == ["npm", "ci"]
        installs.append((here / "package-lock.json").read_text())
        (here / "node_modules" / "typescript").mkdir(parents=True)
        (here / "node_modules" / "typescript" / "tsc.js").write_text("installed")

    monkeypatch.setattr(build, "run", fake_npm)
    build.install_node_modules()
    assert len(installs) == 1

    shutil.rmtree(here / "node_modules")  # a fresh clone on the same machine
    build.install_node_modules()
    assert len(installs) == 1
    assert (here / "node_modules" / "typescript" / "tsc.js").read_text() == "installed"
    build.install_node_modules()  # installed already: nothing to do
    assert len(installs) == 1

    (here / "package-lock.json").write_text('{"lockfileVersion": 3, "packages": {}}')
    shutil.rmtree(here / "node_modules")
    build.install_node_modules()
    assert len(installs) == 2
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [build.lock_hash()]
