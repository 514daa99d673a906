"""Run the embedded-default JupyterHub (hub_config/local_config.py) for tests.

Used by tests/local/test_hub.py and tests/browser/. The hub gets its own
PADDLECLOUD_HOME, demo password and free ports on 127.0.0.1; everything it starts
(proxy, single-user servers, training jobs) inherits a PADDLECLOUD_HOME under that
folder, which is how `LocalHub.processes()` finds them all for a clean shutdown.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import requests

from paddle_ext.hub.local import ADMIN_USER
from serverutil import describe, free_port, free_ports, processes_under, sse_events, tracebacks, wait_for  # noqa: F401

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "hub_config" / "local_config.py"
PROXY = REPO / "node_modules" / ".bin" / "configurable-http-proxy"


class HubError(RuntimeError):
    pass


def login(url: str, name: str, password: str) -> requests.Session:
    """Log in to the hub at `url` through its login form (with its _xsrf field), as a
    browser does; returns the session (its cookies). HubError if the hub refuses."""
    session = requests.Session()
    form = session.get(url + "/hub/login", timeout=60)
    form.raise_for_status()
    xsrf = session.cookies.get("_xsrf")
    if not xsrf:
        raise HubError("the login page set no _xsrf cookie")
    response = session.post(url + "/hub/login", data={"username": name, "password": password, "_xsrf": xsrf},
                            allow_redirects=False, timeout=60)
    if response.status_code != 302:
        raise HubError(f"login as {name!r} failed: HTTP {response.status_code}")
    return session


class LocalHub:
    """The local hub as a subprocess; `start()`, then `stop()` (which reports leftovers)."""

    config = CONFIG
    extra_args: tuple[str, ...] = ()  # more command-line configuration of the hub

    def __init__(self, home: Path, password: str = "demo-password-for-tests"):
        self.home = Path(home).absolute()
        self.password = password
        self.port, self.hub_api_port, self.proxy_api_port = free_ports(3)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.home / "hub.log"
        self.proc: subprocess.Popen | None = None

    # --- lifecycle ------------------------------------------------------------------

    def environment(self) -> dict[str, str]:
        """The hub's environment: this machine's, plus where state and ports go."""
        env = {
            **os.environ,
            "PADDLECLOUD_HOME": str(self.home),
            "PADDLECLOUD_DEMO_PASSWORD": self.password,
            "PADDLECLOUD_HUB_PORT": str(self.port),
            "PADDLECLOUD_HUB_API_PORT": str(self.hub_api_port),
            "PADDLECLOUD_PROXY_API_PORT": str(self.proxy_api_port),
            # the proxy, and the python, jupyter and paddlecloud the single-user servers run
            "PATH": os.pathsep.join([str(PROXY.parent), os.path.dirname(sys.executable), os.environ.get("PATH", "")]),
        }
        env.pop("JUPYTERHUB_API_TOKEN", None)
        return env

    def start(self, timeout: float = 120) -> "LocalHub":
        if not PROXY.exists():
            raise HubError(f"{PROXY} is missing; run `make setup` (npm install) first")
        self.home.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyterhub", "-f", str(self.config), "--debug", *self.extra_args],
            cwd=self.home, env=self.environment(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        log.close()

        def healthy() -> bool:
            if self.proc.poll() is not None:
                raise HubError(f"jupyterhub exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                return requests.get(self.url + "/hub/health", timeout=5).status_code == 200
            except requests.RequestException:
                return False

        try:
            wait_for(healthy, timeout, f"jupyterhub to answer at {self.url}/hub/health", interval=0.5)
        except AssertionError as exc:
            raise HubError(f"{exc}:\n{self.log_tail()}") from None
        return self

    def processes(self) -> list[psutil.Process]:
        """Every live process whose PADDLECLOUD_HOME is this hub's folder or under it."""
        return processes_under(self.home)

    def stop(self, grace: float = 90) -> list[str]:
        """Stop the hub the way Ctrl-C does, then kill whatever is left. (`grace`: a hub that
        stops a server still starting waits for the spawn, then interrupts, terminates and
        kills it: over 45 s on a loaded machine.)

        Returns a description of each process still alive after the grace period
        (hub, proxy, single-user servers, job workers) and of each server still starting when
        the hub was to stop (settle_spawns); empty means a clean shutdown.
        """
        still_starting: list[str] = []
        if self.proc is not None and self.proc.poll() is None:
            still_starting = self.settle_spawns()
            self.proc.send_signal(signal.SIGTERM)  # JupyterHub stops the servers and the proxy
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        deadline = time.monotonic() + 10
        leftovers = self.processes()
        while leftovers and time.monotonic() < deadline:
            time.sleep(0.5)
            leftovers = self.processes()
        described = describe(leftovers)
        for proc in leftovers:
            try:
                os.killpg(os.getpgid(proc.pid), signal.SIGKILL)
            except (psutil.NoSuchProcess, ProcessLookupError):
                pass
            except PermissionError:
                proc.kill()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        return still_starting + described

    def settle_spawns(self, timeout: float = 120) -> list[str]:
        """Wait until no user's server is still starting (a login in a browser starts one the
        test may never wait for); those still starting after `timeout` seconds, described. A
        hub stopped in the middle of a spawn stops that server, and JupyterHub 6.1's check on a
        spawn still pending after 10 s (slow_spawn_timeout) then logs an InvalidStateError
        traceback ("Exception is not set"): seen on a loaded machine. Needs the admin's demo
        login: a hub with another login (OpenID Connect, LDAP) is stopped as it is."""
        try:
            token = self.new_token(self.login(ADMIN_USER), ADMIN_USER)
        except (HubError, requests.RequestException):
            return []
        starting: list[str] = []

        def settled() -> bool:
            try:
                response = self.hub_api("GET", "/users", token)
            except requests.RequestException:
                return True  # the hub is gone: nothing left to wait for
            starting[:] = [user["name"] for user in response.json() for server in user["servers"].values()
                           if server.get("pending") == "spawn"] if response.status_code == 200 else []
            return not starting

        try:
            wait_for(settled, timeout, "no server still starting before the hub stops", interval=0.5)
        except AssertionError:
            return [f"{name}'s server, still starting {timeout:.0f} s after the test" for name in starting]
        return []

    def stop_and_check(self) -> None:
        """Stop the hub; FAIL if any process under its home is left running (leftovers are
        killed) or if its log (the hub's, its proxy's, services' and users' servers') holds
        a traceback."""
        leftovers = self.stop()
        assert not leftovers, "processes still running after the hub stopped:\n" + "\n".join(leftovers)
        found = tracebacks(self.log_path)
        assert not found, f"the hub logged {len(found)} traceback(s):\n" + "\n---\n".join(found[:3])

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return "(no hub log)"

    def user_home(self, name: str) -> Path:
        return self.home / "users" / name

    # --- as a user -------------------------------------------------------------------

    def login(self, name: str, password: str | None = None) -> requests.Session:
        """Log in through the login form (with its _xsrf field); returns the browser-like session."""
        return login(self.url, name, self.password if password is None else password)

    def new_token(self, session: requests.Session, name: str) -> str:
        """A hub API token for the logged-in user, created with the session cookie."""
        response = session.post(
            f"{self.url}/hub/api/users/{name}/tokens",
            json={"note": "tests", "expires_in": 3600},
            headers={"X-XSRFToken": session.cookies.get("_xsrf", path="/hub/") or session.cookies.get("_xsrf")},
            timeout=30,
        )
        if response.status_code != 201:
            raise HubError(f"creating a token for {name} failed: HTTP {response.status_code} {response.text[:300]}")
        return response.json()["token"]

    def hub_api(self, method: str, path: str, token: str, **kwargs) -> requests.Response:
        kwargs.setdefault("timeout", 60)
        headers = {"Authorization": f"token {token}", **kwargs.pop("headers", {})}
        return requests.request(method, f"{self.url}/hub/api{path}", headers=headers, **kwargs)

    def server(self, name: str, token: str) -> dict | None:
        """The user's default server as the hub's REST API reports it; None when it has none."""
        return self.hub_api("GET", f"/users/{name}", token).json().get("servers", {}).get("")

    def spawn(self, name: str, token: str, timeout: float = 240, **body) -> None:
        """Start the user's server through the hub's REST API (`body`: e.g. profile=...) and
        wait until it is ready."""
        check_spawn_accepted(name, self.hub_api("POST", f"/users/{name}/server", token, json=body or None))
        self.wait_ready(name, token, timeout)

    def wait_ready(self, name: str, token: str, timeout: float = 240) -> None:
        """The suite's one spawn wait: until the user's server is ready; fails at once, with
        the hub's log, when the server stops while starting."""
        def ready():
            server = self.server(name, token)
            if not server:
                raise HubError(f"{name}'s server stopped while starting:\n{self.log_tail()}")
            return server.get("ready")
        wait_for(ready, timeout=timeout, interval=0.5, what=f"{name}'s server to be ready", message=self.log_tail)


def check_spawn_accepted(name: str, response: requests.Response) -> None:
    """A spawn request the hub took: 201/202, or a 400 that says the server is already
    running or already starting (JupyterHub's words). Any other 400 is a refusal."""
    text = response.text
    taken = response.status_code in (201, 202) or (
        response.status_code == 400 and ("is already running" in text or "is pending" in text))
    if not taken:
        raise HubError(f"spawning {name}'s server failed: HTTP {response.status_code} {text[:300]}")


def end_phase(data: str) -> str:
    return json.loads(data).get("phase", "")
