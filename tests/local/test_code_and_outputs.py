"""A job runs the folder it was submitted from, records what it ran, and keeps what it
writes to $PADDLECLOUD_OUTPUT_DIR (the embedded default; tests/cluster has the same on pods)."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile

import pytest

from paddle_ext.workspace import snapshot

TRAIN = """import os, sys
from model import greeting
rank = os.environ.get("PADDLE_TRAINER_ID", "?")
print(f"rank {rank}: {greeting()}", flush=True)
if rank == "0":
    with open(os.path.join(os.environ["PADDLECLOUD_OUTPUT_DIR"], "result.txt"), "w") as f:
        f.write("checkpoint of rank 0\\n")
"""


@pytest.fixture
def project(server):
    """A folder inside the server's root with a script that imports a module beside it."""
    folder = server.root / "projects" / f"p{os.urandom(3).hex()}"
    folder.mkdir(parents=True)
    (folder / "my_train.py").write_text(TRAIN)
    (folder / "model.py").write_text("def greeting():\n    return 'hello from model v1'\n")
    (folder / "scratch.tmp").write_text("not code")
    (folder / ".paddlecloudignore").write_text("*.tmp\n")
    return folder


def test_rest_runs_the_named_folder_records_its_code_and_keeps_outputs(server, project):
    relative = str(project.relative_to(server.root))
    response = server.api("POST", "/jobs", params={"workdir": relative},
                          json={"command": ["python", "my_train.py"], "workers": 2})
    assert response.status_code == 201, response.text
    job = response.json()
    expected = snapshot(str(project))
    assert job["code"] == {"workdir": str(project), "digest": expected.digest, "files": 3,
                           "bytes": expected.size, "stored": True}
    (project / "model.py").write_text("def greeting():\n    return 'changed after submit'\n")
    lines, end = server.follow_to_end(job["name"])
    assert end["phase"] == "Succeeded", lines[-20:]
    assert "[worker-0] rank 0: " in "\n".join(lines) and "[worker-1] rank 1: " in "\n".join(lines)

    outputs = server.api("GET", f"/jobs/{job['name']}").json()["outputs"]
    assert outputs["kept"] and outputs["path"] == str(project / "paddlecloud-outputs" / job["name"])
    assert (project / "paddlecloud-outputs" / job["name"] / "result.txt").read_text() == "checkpoint of rank 0\n"

    archive = server.api("GET", f"/jobs/{job['name']}/code")
    assert archive.status_code == 200 and archive.headers["Content-Type"] == "application/gzip"
    with tarfile.open(fileobj=io.BytesIO(archive.content)) as tar:
        assert sorted(tar.getnames()) == [".paddlecloudignore", "model.py", "my_train.py"]
        original = tar.extractfile("model.py").read()
    assert b"hello from model v1" in original  # what was submitted, not what is there now


@pytest.mark.parametrize("folder, words", [("../..", "inside the server's root"), ("no/such/folder", "names no folder")])
def test_rest_refuses_folders_outside_the_root_or_missing(server, folder, words):
    response = server.api("POST", "/jobs", params={"workdir": folder}, json={"command": ["python", "x.py"]})
    assert response.status_code == 400 and words in response.json()["message"]
    assert response.json()["error"] == "bad_request"


def test_cli_submits_from_the_current_folder_and_gets_the_code_back(project, tmp_path, server):
    env = {**os.environ, "PADDLECLOUD_HOME": str(tmp_path / "state"), "PADDLECLOUD_BACKEND": "local"}

    def cli(*args, cwd=project):
        return subprocess.run([sys.executable, "-m", "paddle_ext.cli", *args], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=180)

    submitted = cli("submit", "--follow", "--", "python", "my_train.py")
    assert submitted.returncode == 0, submitted.stderr[-2000:]
    name = submitted.stdout.splitlines()[0]
    assert "rank 0: hello from model v1" in submitted.stdout
    back = tmp_path / "back"
    got = cli("code", name, "--output", str(back))
    assert got.returncode == 0, got.stderr
    for file in ("my_train.py", "model.py"):
        assert hashlib.sha256((back / file).read_bytes()).digest() == \
            hashlib.sha256((project / file).read_bytes()).digest()
    assert not (back / "scratch.tmp").exists()  # ignored files are not shipped
    refused = cli("code", name, "--output", str(back))
    assert refused.returncode == 2 and "not an empty folder" in refused.stderr
