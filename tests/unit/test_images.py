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
