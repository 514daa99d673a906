"""Static checks of images/*/Dockerfile (no container engine runs here to build them)."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILES = sorted((REPO / "images").glob("*/Dockerfile"))


def instructions(path):
    text = re.sub(r"\\\n", " ", path.read_text())
    return [line.strip().split(None, 1) for line in text.splitlines()
            if line.strip() and not line.strip().startswith("#")]


def test_there_are_the_four_images():
    assert [p.parent.name for p in DOCKERFILES] == ["hub", "notebook", "proxy", "worker"]


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.parent.name)
def test_runs_as_uid_1000_from_a_pinned_base(path):
    steps = instructions(path)
    users = [args for op, args in steps if op == "USER"]
    assert users and users[-1] == "1000", "pods must run non-root for Pod Security restricted"
    args = dict(a.split("=", 1) for op, a in steps if op == "ARG" and "=" in a)
    for op, base in steps:
        if op == "FROM":
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], base)
            assert ":" in base and not base.endswith(":latest"), base


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.parent.name)
def test_copied_sources_exist(path):
    for op, args in instructions(path):
        if op == "COPY":
            *sources, _dest = args.split()
            for source in sources:
                assert (REPO / source).exists(), f"{path.parent.name}: COPY {source} is missing"


def test_notebook_starts_the_single_user_server_and_hub_uses_the_kubernetes_config():
    notebook = dict((op, a) for op, a in instructions(REPO / "images" / "notebook" / "Dockerfile"))
    assert notebook["CMD"] == '["jupyterhub-singleuser"]'
    hub = instructions(REPO / "images" / "hub" / "Dockerfile")
    assert ["COPY", "hub_config/jupyterhub_config.py /etc/jupyterhub/jupyterhub_config.py"] in hub


def test_the_worker_images_part_of_the_package_needs_only_itself_and_the_standard_library():
    """The worker image carries a few modules of paddle_ext (reporting, checkpoints, the entry of
    jobs that may restart): what they import at module level must be among them or the standard
    library (paddle is imported inside checkpoint's functions, where the worker has it)."""
    import ast
    import sys

    copied = [source for op, args in instructions(REPO / "images" / "worker" / "Dockerfile") if op == "COPY"
              for source in args.split()[:-1] if re.fullmatch(r"paddle_ext/\w+\.py", source)]
    names = {Path(source).stem for source in copied}
    assert {"checkpoint", "restarts", "worker", "reporting"} <= names
    for source in copied:
        tree = ast.parse((REPO / source).read_text())
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.level:
                assert (node.module or "__init__").split(".")[0] in names, f"{source}: from .{node.module}"
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
                for module in modules:
                    assert module.split(".")[0] in sys.stdlib_module_names or module == "__future__", \
                        f"{source} imports {module}"


def left_out() -> list[str]:
    text = (REPO / "images" / "pip-leave-out.txt").read_text()
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


@pytest.mark.parametrize("image", ["hub", "notebook"])
def test_the_jupyter_images_remove_what_we_leave_out_after_their_last_install(image):
    runs = [args for op, args in instructions(REPO / "images" / image / "Dockerfile") if op == "RUN"]
    installs = [at for at, run in enumerate(runs) if "pip install" in run]
    removal = [at for at, run in enumerate(runs) if "pip uninstall -y -r /src/pip-leave-out.txt" in run]
    assert left_out() and removal and removal[-1] >= installs[-1]
    last = runs[removal[-1]]
    assert last.index("pip uninstall") > last.rindex("pip install")


def test_a_hub_or_jupyter_server_starts_without_importing_what_we_leave_out():
    """The dev venv as `make setup` leaves it: what JupyterHub and a notebook server import at
    their start, minus the packages of pip-leave-out.txt (rfc3987-syntax: 1.1 s each start)."""
    import subprocess
    import sys

    modules = [name.replace("-", "_") for name in left_out()]
    found = subprocess.run([sys.executable, "-c", "import sys, jupyterhub.app, jupyter_server.serverapp; "
                            f"print([m for m in sys.modules if m.split('.')[0] in {modules!r}])"],
                           capture_output=True, text=True, timeout=120)
    assert (found.returncode, found.stdout, found.stderr) == (0, "[]\n", "")


def test_an_images_key_follows_the_panels_sources_not_its_build_output(tmp_path):
    """The panel's build differs between two clones of one commit (webpack ids from the path):
    keyed on it, every fresh clone would rebuild the notebook image for nothing."""
    from tools.k8s import images

    (tmp_path / "Dockerfile").write_text("FROM base\nCOPY labextension /src/labextension\n")
    (tmp_path / "labextension" / "src").mkdir(parents=True)
    (tmp_path / "labextension" / "prebuilt").mkdir()
    (tmp_path / "labextension" / "src" / "index.ts").write_text("export {};\n")
    image = {"ref": "example", "dockerfile": "Dockerfile", "base": "base"}

    def key() -> str:
        return images.dockerfile_key(image, "base-key", context=str(tmp_path))

    before = key()
    (tmp_path / "labextension" / "prebuilt" / "remoteEntry.0123.js").write_text("built in another clone")
    (tmp_path / "labextension" / ".build-stamp").write_text("another build")
    assert key() == before
    (tmp_path / "labextension" / "src" / "index.ts").write_text("export const changed = 1;\n")
    assert key() != before


def test_the_worker_image_asks_for_the_setuptools_the_paddle_extra_does():
    """`import paddle` imports setuptools; the dev venv (pyproject's `paddle` extra) and the
    worker image (and the notebook image built from it) must agree on the version that keeps
    pkg_resources out of it."""
    import tomllib

    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["paddle"]
    wanted = [req for req in extra if req.startswith("setuptools")]
    runs = [args for op, args in instructions(REPO / "images" / "worker" / "Dockerfile") if op == "RUN"]
    assert len(wanted) == 1 and any(f'pip install "{wanted[0]}"' in run for run in runs), (wanted, runs)
