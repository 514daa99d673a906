"""A new home gets the examples once, and nothing the user has is ever overwritten
(paddle_ext.homeseed: the embedded default's spawner and the notebook pod's postStart hook)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from paddle_ext.homeseed import IMAGE_EXAMPLES, MARKER, main, post_start_hook, seed_home

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def examples(tmp_path):
    folder = tmp_path / "examples"
    folder.mkdir()
    (folder / "quickstart.ipynb").write_text("{}")
    (folder / "train.py").write_text("print('example')\n")
    return folder


def test_a_new_home_gets_the_examples_and_keeps_what_the_user_has(tmp_path, examples):
    home = tmp_path / "home"
    home.mkdir()
    (home / "train.py").write_text("mine\n")
    copied = seed_home(home, sorted(examples.iterdir()))
    assert copied == [home / "quickstart.ipynb"]
    assert (home / "quickstart.ipynb").read_text() == "{}"
    assert (home / "train.py").read_text() == "mine\n"
    assert (home / MARKER).is_file()


def test_only_the_first_start_copies_so_a_deleted_example_stays_deleted(tmp_path, examples):
    home = tmp_path / "home"
    assert len(seed_home(home, sorted(examples.iterdir()))) == 2
    (home / "quickstart.ipynb").unlink()
    assert seed_home(home, sorted(examples.iterdir())) == []
    assert not (home / "quickstart.ipynb").exists()


def test_the_command_copies_from_a_folder_and_never_fails_the_notebooks_start(tmp_path, examples, capsys):
    home = tmp_path / "home"
    assert main([str(home), str(examples)]) == 0
    assert sorted(p.name for p in home.iterdir()) == [".paddlecloud", "quickstart.ipynb", "train.py"]
    assert "Copied quickstart.ipynb" in capsys.readouterr().out

    other = tmp_path / "other"
    assert main([str(other), str(tmp_path / "missing")]) == 0  # an image without examples
    assert "is not a folder" in capsys.readouterr().err and not other.exists()  # no marker: a later image seeds it

    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        assert main([str(locked), str(examples)]) == 0
        assert "Could not copy the examples" in capsys.readouterr().err
    assert main([]) == 2


def test_it_runs_as_a_module_as_the_post_start_hook_runs_it(tmp_path, examples):
    command = post_start_hook(str(tmp_path / "home"), str(examples))["postStart"]["exec"]["command"]
    assert command[:3] == ["python", "-m", "paddle_ext.homeseed"]
    result = subprocess.run([sys.executable, *command[1:]], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "home" / "train.py").is_file()


def test_the_notebook_image_carries_the_examples_where_the_hook_looks():
    dockerfile = (REPO / "images" / "notebook" / "Dockerfile").read_text()
    copy = next(line for line in dockerfile.splitlines() if line.startswith("COPY paddle_ext/examples/"))
    assert copy.split()[-1].rstrip("/") == IMAGE_EXAMPLES
    assert {Path(source).name for source in copy.split()[1:-1]} == {"quickstart.ipynb", "train.py"}
