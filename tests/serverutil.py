"""A real Jupyter server with the paddle_ext extension, as a subprocess on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JupyterServer:
    """`jupyter server` as a subprocess with its own token, state folder and root folder."""

    def __init__(self, home: Path, root: Path, token: str = "test-token", env: dict | None = None,
                 args: list[str] | None = None):
        self.home, self.root, self.token = home, root, token
        self.extra_env, self.extra_args = env or {}, args or []
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log_path = home / f"server-{self.port}.log"

    def start(self, timeout: float = 60) -> "JupyterServer":
        # The token travels in the environment: on the command line every local user could
        # read it (ps), and jupyter_server logs its command-line config at debug level.
        env = {**os.environ, "PADDLECLOUD_HOME": str(self.home), "PADDLECLOUD_BACKEND": "local",
               "JUPYTER_RUNTIME_DIR": str(self.home / "runtime"), "JUPYTER_TOKEN": self.token, **self.extra_env}
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root",
             f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0", "--ServerApp.ip=127.0.0.1",
             f"--ServerApp.root_dir={self.root}",
             *self.extra_args],
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

    def submit(self, **spec) -> dict:
        response = self.api("POST", "/jobs", json=spec)
        assert response.status_code == 201, response.text
        return response.json()

    def follow(self, name: str, **params):
        """Yield (event, data) from the job's SSE log stream until it ends."""
        with self.api("GET", f"/jobs/{name}/logs", params={"follow": "1", **params}, stream=True,
                      timeout=180) as response:
            assert response.status_code == 200, response.text
            assert response.headers["Content-Type"].startswith("text/event-stream")
            yield from sse_events(response)

    def follow_to_end(self, name: str, **params) -> tuple[list[str], dict]:
        """Every log line of the stream, and the `end` event's data (phase, reason, message)."""
        lines, end = [], None
        for event, data in self.follow(name, **params):
            if event == "end":
                end = json.loads(data)
            else:
                lines.append(data)
        return lines, end

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


