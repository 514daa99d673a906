"""Fixtures for the local tier: a real Jupyter server with the extension, on 127.0.0.1."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JupyterServer:
    """`jupyter server` as a subprocess with its own token, state folder and root folder."""

    def __init__(self, home: Path, root: Path, token: str = "test-token"):
        self.home, self.root, self.token = home, root, token
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log_path = home / f"server-{self.port}.log"

    def start(self, timeout: float = 60) -> "JupyterServer":
        env = {**os.environ, "PADDLECLOUD_HOME": str(self.home), "PADDLECLOUD_BACKEND": "local",
               "JUPYTER_RUNTIME_DIR": str(self.home / "runtime")}
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root",
             f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0", "--ServerApp.ip=127.0.0.1",
             f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={self.root}"],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter server exited: {self.log_path.read_text()[-2000:]}")
            try:
                if requests.get(self.url + "/api/status", headers=self.headers, timeout=2).ok:
                    return self
            except requests.ConnectionError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"jupyter server did not start: {self.log_path.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    @property
    def headers(self) -> dict:
        return {"Authorization": f"token {self.token}"}

    def api(self, method: str, path: str, **kwargs) -> requests.Response:
        kwargs.setdefault("headers", self.headers)
        kwargs.setdefault("timeout", 30)
        return requests.request(method, self.url + "/paddle/api" + path, **kwargs)

    def wait_for(self, name: str, phases, timeout: float = 120) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.api("GET", f"/jobs/{name}").json()
            if job["phase"] in phases:
                return job
            time.sleep(0.3)
        raise AssertionError(f"job {name} never reached {phases}; last: {job}")


def sse_events(response: requests.Response):
    """(event, data) pairs from a text/event-stream response."""
    event, data = "message", []
    for raw in response.iter_lines(decode_unicode=True):
        if raw is None:
            continue
        if raw == "":
            if data:
                yield event, "\n".join(data)
            event, data = "message", []
        elif raw.startswith(":"):
            continue
        elif raw.startswith("event:"):
            event = raw[len("event:"):].strip()
        elif raw.startswith("data:"):
            data.append(raw[len("data: "):] if raw.startswith("data: ") else raw[len("data:"):])


@pytest.fixture(scope="session")
def workdir(tmp_path_factory) -> Path:
    """The folder jobs start in: the example training script and the test scripts."""
    root = tmp_path_factory.mktemp("root")
    shutil.copy(REPO / "examples" / "train.py", root / "train.py")
    for script in SCRIPTS.glob("*.py"):
        shutil.copy(script, root / script.name)
    return root


@pytest.fixture(scope="session")
def server(tmp_path_factory, workdir):
    home = tmp_path_factory.mktemp("home")
    srv = JupyterServer(home, workdir).start()
    yield srv
    srv.stop()
