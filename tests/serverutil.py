"""The shared test helpers every tier builds on (one copy each):

- `free_port()`: a free TCP port on 127.0.0.1 (`free_ports(n)`: n different ones, for one server);
- `wait_for(check, timeout, what)`: await a condition; a timeout FAILS the test, naming
  what was awaited and the last value seen (no test continues after a wait ran out);
- `processes_under(home)` / `assert_no_processes_under(home)`: live processes whose
  PADDLECLOUD_HOME is `home` or below it (servers, hubs, proxies, job workers), so a test
  can assert that nothing it started is left running; `job_pids(home, name)`: a local
  job's own processes;
- `assert_error(response, status, code)`: the JSON error body every API promises;
  `tracebacks(log)`: errors a server or hub logged (asserted empty when it stops);
- `Gate`: a file a test job waits for, so "while the job runs" is a condition the test
  holds, not a race against the machine's speed (tests/local/scripts/ticker.py --until);
- `JupyterServer`: a real Jupyter server with the paddle_ext extension, and `sse_events`;
- `ChildServer`: the base of the other real servers a test runs as its own child (slapd,
  the OIDC provider): start with a log, fail fast if it exits, stop, log tail.

hubutil.py (the local JupyterHub, login) and browser/labpage.py (pages) build on these.
"""

from __future__ import annotations

import asyncio
import ctypes
import inspect
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Callable, TypeVar

import psutil
import requests

from paddle_ext.ports import free_port, free_ports  # noqa: F401 (the tests' one way to get ports)

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
from tools.k8s import procutil  # noqa: E402

T = TypeVar("T")


def wait_for(check: Callable[[], T], timeout: float = 60.0, what: str = "the condition",
             interval: float = 0.2, message: Callable[[], str] | None = None) -> T:
    """Poll `check()` until it returns something truthy and return that; after `timeout`
    seconds raise AssertionError naming `what`, the last value seen and, if given,
    `message()` (what the state was). The suite's one polling wait: every tier uses it."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(_timed_out(timeout, what, value, message))
        time.sleep(interval)


async def wait_for_async(check: Callable[[], object], timeout: float = 60.0, what: str = "the condition",
                         interval: float = 0.2, message: Callable[[], str] | None = None):
    """wait_for in a coroutine: `check()` may return an awaitable, which is awaited."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(_timed_out(timeout, what, value, message))
        await asyncio.sleep(interval)


def _timed_out(timeout: float, what: str, value, message: Callable[[], str] | None) -> str:
    text = f"timed out after {timeout:g}s waiting for {what}; last seen: {value!r}"[:3000]
    return f"{text}\n{message()}" if message else text


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def isolated_pytest(tmp_path: Path, suite: str, *args: str) -> tuple[list[str], dict[str, str]]:
    """The command and environment for a pytest run of `suite` (written to
    tmp_path/test_isolated.py) apart from this suite's configuration, plugins and random order,
    with tests/ importable: how the tests of our pytest plugins run them (`-p PLUGIN` in args)."""
    test_file = tmp_path / "test_isolated.py"
    test_file.write_text(textwrap.dedent(suite))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
           "--rootdir", str(tmp_path), "-c", os.devnull, *args, str(test_file)]
    return cmd, {**os.environ, "PYTHONPATH": str(REPO / "tests")}


def die_with_parent() -> None:
    """preexec_fn for a server a test starts (slapd, the OIDC provider): the kernel kills it
    when the test process dies, even by SIGKILL, so nothing is left behind."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class ChildServer:
    """A server the test runs as its own child in `folder`, its output in `folder/<log_name>`:
    the kernel kills it if the test process dies, and `stop()` ends it (TERM, then KILL) and
    removes the folder. Subclasses set `label` and `log_name` and call `spawn()` and
    `check_alive()` (in their readiness check)."""

    label = "the server"
    log_name = "server.log"

    def __init__(self, folder: Path | str):
        self.folder = Path(folder).absolute()
        self.proc: subprocess.Popen | None = None

    def spawn(self, command: list[str], cwd: Path | str | None = None) -> None:
        log = open(self.folder / self.log_name, "ab")
        self.proc = subprocess.Popen(command, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                     preexec_fn=die_with_parent)
        log.close()
        procutil.CHILDREN[self.proc.pid] = self.proc

    def check_alive(self) -> None:
        """RuntimeError with the log's tail if the server has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"{self.label} exited with {self.proc.returncode}:\n{self.log_tail()}")

    def stop(self) -> None:
        """End the server (TERM, then KILL) and remove its folder; RuntimeError if it would not end."""
        if self.proc is not None:
            left = procutil.kill_and_wait([self.proc.pid], timeout=15)
            procutil.CHILDREN.pop(self.proc.pid, None)
            if left:
                raise RuntimeError(f"{self.label} (pid {self.proc.pid}) still runs after SIGKILL")
        shutil.rmtree(self.folder, ignore_errors=True)

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return (self.folder / self.log_name).read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return f"(no {self.log_name})"


def processes_under(home: Path | str) -> list[psutil.Process]:
    """Every live process whose PADDLECLOUD_HOME is `home` or a folder under it."""
    prefix = str(Path(home).absolute())
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            value = proc.environ().get("PADDLECLOUD_HOME", "")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if value == prefix or value.startswith(prefix + os.sep):
            found.append(proc)
    return found


def describe(procs: list[psutil.Process]) -> list[str]:
    described = []
    for proc in procs:
        try:
            described.append(f"pid {proc.pid}: {' '.join(proc.cmdline())[:200]}")
        except psutil.NoSuchProcess:
            pass
    return described


def kill_all(procs: list[psutil.Process]) -> None:
    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass


def assert_no_processes_under(home: Path | str, timeout: float = 30.0) -> None:
    """Wait (up to `timeout`) for every process under `home` to end; kill and FAIL if any stays."""
    deadline = time.monotonic() + timeout
    left = processes_under(home)
    while left and time.monotonic() < deadline:
        time.sleep(0.3)
        left = processes_under(home)
    described = describe(left)
    kill_all(left)
    assert not described, f"processes still running under {home}:\n" + "\n".join(described)


# The hub's and its proxy's own lines, interleaved with a child's stderr.
_LOG_RECORD = re.compile(r"\[[DIWEC] \d{4}-\d\d-\d\d |\d{4}-\d\d-\d\dT[\d:.]+Z \[ConfigProxy\]")


def tracebacks(log: Path | str) -> list[str]:
    """Each Python traceback in a server's or hub's log (from the line before it to the
    exception it ends in): an error the process hit, which the test asserts there is none
    of, instead of printing it. A process the hub told to stop (a user's server it interrupts
    while that is still starting: the traceback follows the hub's "Interrupting" line, or
    ends in KeyboardInterrupt) is not an error."""
    lines = Path(log).read_text(errors="replace").splitlines() if Path(log).exists() else []
    found, i = [], 0
    while i < len(lines):
        if not lines[i].startswith("Traceback"):
            i += 1
            continue
        end = i + 1
        while end < len(lines):
            line = lines[end]
            if not line or line[0].isspace() or line.startswith("Traceback") or _LOG_RECORD.match(line) or \
                    line.startswith(("During handling of the above exception", "The above exception")):
                end += 1
                continue
            if end + 2 < len(lines) and not lines[end + 1] and \
                    lines[end + 2].startswith(("During handling of the above exception", "The above exception")):
                end += 1  # a chained exception: the one that matters comes last
                continue
            break
        final = lines[end] if end < len(lines) else ""
        interrupted = final.startswith("KeyboardInterrupt") or any(
            "spawner" in line and " Interrupting " in line for line in lines[max(i - 3, 0):i])
        if not interrupted:
            found.append("\n".join(lines[max(i - 1, 0):end + 1][-40:]))
        i = end + 1
    return found


def job_pids(home: Path | str, name: str | None = None) -> list[int]:
    """Every live process of local job `name` (or of every job) under state folder `home`,
    found by its workers' process groups (supervisor, launcher, trainers)."""
    from paddle_ext.backends import local_files

    jobs = Path(home) / "jobs"
    folders = [jobs / name] if name else [p for p in jobs.iterdir() if p.is_dir() and not p.name.startswith(".")] \
        if jobs.is_dir() else []
    return [pid for folder in folders for pgid in local_files.worker_pids(str(folder)).values()
            for pid in local_files.group_members(pgid)]


def assert_error(response: requests.Response, status: int, code: str) -> dict:
    """`status` with the documented body: JSON {"error": code, "message": one sentence}."""
    assert response.status_code == status, (response.status_code, response.text[:300])
    assert response.headers.get("Content-Type", "").startswith("application/json"), response.headers
    body = response.json()
    assert body.get("error") == code, body
    message = body.get("message")
    assert isinstance(message, str) and len(message) > 1 and message.endswith(".") \
        and "\n" not in message and "Traceback" not in message, body
    return body


class Gate:
    """A file in `folder` that test jobs wait for (`ticker.py --until <gate.path>`):
    they run until the test calls `open()`.

    `open_after(seconds)` is a failsafe for a test that blocks on a stream which ends only
    with the job: it opens the gate late, so the job ends, and sets `forced`, which the
    test then asserts is False (what it waited for never came)."""

    def __init__(self, folder: Path | str, name: str | None = None):
        self.path = Path(folder).absolute() / (name or f"gate-{os.urandom(4).hex()}")
        self.forced = False
        self._timer: threading.Timer | None = None

    def open(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.path.touch()

    @property
    def is_open(self) -> bool:
        return self.path.exists()

    def open_after(self, seconds: float) -> "Gate":
        def force():
            if not self.is_open:
                self.forced = True
                self.path.touch()

        self._timer = threading.Timer(seconds, force)
        self._timer.daemon = True
        self._timer.start()
        return self

    def __str__(self) -> str:
        return str(self.path)


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

    def start(self, timeout: float = 120) -> "JupyterServer":
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
        log.close()

        def up() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"jupyter server exited: {self.log_path.read_text()[-2000:]}")
            try:
                return requests.get(self.url + "/api/status", headers=self.headers, timeout=5).ok
            except requests.ConnectionError:
                return False

        wait_for(up, timeout, f"the Jupyter server at {self.url} (log: {self.log_path})", interval=0.3)
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def stop_and_check(self) -> None:
        """Cancel every unfinished job, stop the server, and FAIL if any process under its
        home (the server, a job's supervisor, launcher or trainer) is left running, or if
        the server logged a traceback."""
        try:
            if self.proc and self.proc.poll() is None:
                for job in self.api("GET", "/jobs").json()["jobs"]:
                    if job["phase"] not in ("Succeeded", "Failed", "Cancelled"):
                        self.api("DELETE", f"/jobs/{job['name']}")
        finally:
            self.stop()
        assert_no_processes_under(self.home)
        found = tracebacks(self.log_path)
        assert not found, f"the Jupyter server logged {len(found)} traceback(s):\n" + "\n---\n".join(found[:3])

    @property
    def headers(self) -> dict:
        return {"Authorization": f"token {self.token}"}

    def api(self, method: str, path: str, **kwargs) -> requests.Response:
        kwargs.setdefault("headers", self.headers)
        kwargs.setdefault("timeout", 60)
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
        assert end is not None, f"the log stream of {name} closed without `event: end`"
        return lines, end

    def job(self, name: str) -> dict:
        response = self.api("GET", f"/jobs/{name}")
        assert response.status_code == 200, response.text
        return response.json()

    def wait_for(self, name: str, phases, timeout: float = 180) -> dict:
        """The job once its phase is one of `phases`; FAILS after `timeout` seconds."""
        seen = {}

        def reached():
            seen["job"] = self.job(name)
            return seen["job"] if seen["job"]["phase"] in phases else None

        try:
            return wait_for(reached, timeout, f"job {name} to reach {phases}", interval=0.3)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nlast state: {seen.get('job')}") from None

    def log(self, name: str, **params) -> str:
        response = self.api("GET", f"/jobs/{name}/logs", params=params)
        assert response.status_code == 200, response.text
        return response.text


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
