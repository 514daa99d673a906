"""The backend registry: every name, the class behind it, loaded only when asked for."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import paddle_ext
from paddle_ext.backends.base import JobBackend
from paddle_ext.backends.registry import BACKENDS, backend_class, backend_names, config_section, make_backend
from paddle_ext.cli import build_parser


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_each_name_loads_its_backend(name):
    cls = backend_class(name)
    assert issubclass(cls, JobBackend) and cls.name == name and config_section(name) == cls.__name__


def test_an_unknown_name_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match="unknown backend 'moon' \\(choose local or kubernetes\\)"):
        make_backend("moon")
    with pytest.raises(ValueError, match="unknown backend"):
        config_section("moon")


def test_the_cli_offers_the_registered_names():
    backend = next(a for a in build_parser()._actions if "--backend" in a.option_strings)
    assert backend.choices == backend_names() == ["local", "kubernetes"]


def test_every_backend_has_one_user_defaulting_to_the_hub_user(monkeypatch, tmp_path):
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")
    for name in BACKENDS:
        assert "user" not in backend_class(name).class_own_traits()
    assert make_backend("local", home=str(tmp_path)).user == "alice"
    assert make_backend("kubernetes", namespace="ns").user == "alice"
    assert make_backend("local", home=str(tmp_path), user="bob").user == "bob"


def test_a_local_backend_does_not_load_the_kubernetes_code(tmp_path):
    package = Path(paddle_ext.__file__).resolve().parent
    code = ("import sys; from paddle_ext.backends.registry import make_backend; make_backend('local'); "
            "print(sorted(m for m in sys.modules if m.startswith('paddle_ext.backends.kube')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            env={"PYTHONPATH": str(package.parent), "PATH": os.environ.get("PATH", ""),
                                 "PADDLECLOUD_HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
