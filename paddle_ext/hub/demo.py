"""Start the embedded default: a local PaddleCloud Hub on this machine.

    python -m paddle_ext.demo --port 8000      (what `make demo` runs)

Prepares $PADDLECLOUD_HOME (default ~/.paddlecloud), settles the demo password
(PADDLECLOUD_DEMO_PASSWORD, else one generated once and kept in
$PADDLECLOUD_HOME/hub/demo-password), prints where to log in, and runs JupyterHub
with hub_config/local_config.py until Ctrl-C.

The config imports `paddlecloud_home`, `hub_dir` and `demo_password` from here, so
the password this prints is the one the hub checks.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ADMIN_USER = "admin"
DEFAULT_PORT = 8000
PASSWORD_ENV = "PADDLECLOUD_DEMO_PASSWORD"
PORT_ENV = "PADDLECLOUD_HUB_PORT"
PASSWORD_FILE = "demo-password"
REPO_ROOT = Path(__file__).resolve().parent.parent
LOCAL_CONFIG = REPO_ROOT / "hub_config" / "local_config.py"


class DemoError(Exception):
    """A problem the person starting the demo can fix; printed as one line."""


def paddlecloud_home() -> Path:
    return Path(os.environ.get("PADDLECLOUD_HOME") or Path.home() / ".paddlecloud").absolute()


def hub_dir(home: Path | None = None) -> Path:
    """The hub's own state: database, cookie secret, proxy pid file, demo password."""
    return (home or paddlecloud_home()) / "hub"


def users_dir(home: Path | None = None) -> Path:
    """One home folder per hub user lives in here."""
    return (home or paddlecloud_home()) / "users"


def demo_password(home: Path | None = None) -> str:
    """The password every user logs in with.

    PADDLECLOUD_DEMO_PASSWORD wins; otherwise a random one is generated on first use
    and kept (mode 0600) so it stays the same across restarts.
    """
    from_env = os.environ.get(PASSWORD_ENV, "")
    if from_env:
        return from_env
    path = hub_dir(home) / PASSWORD_FILE
    try:
        saved = path.read_text().strip()
    except FileNotFoundError:
        saved = ""
    if saved:
        return saved
    path.parent.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(12)
    # O_EXCL: if two starts race, one of them writes and both read the same file.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as f:
        f.write(password + "\n")
    return password


def find_proxy() -> str | None:
    """configurable-http-proxy: the repository's node_modules first, then PATH."""
    local = REPO_ROOT / "node_modules" / ".bin" / "configurable-http-proxy"
    if os.access(local, os.X_OK):
        return str(local)
    return shutil.which("configurable-http-proxy")


def prepare(home: Path) -> None:
    for folder in (hub_dir(home), users_dir(home)):
        folder.mkdir(parents=True, exist_ok=True)
    os.chmod(hub_dir(home), 0o700)  # holds the cookie secret and the password


def wait_until_up(url: str, proc: subprocess.Popen, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    return False


def banner(url: str, password: str, home: Path) -> str:
    return "\n".join([
        "",
        "PaddleCloud Hub (embedded default) is running.",
        f"  Open:      {url}",
        f"  Admin:     {ADMIN_USER}",
        f"  Password:  {password}   (every user, admin included; set {PASSWORD_ENV} to choose it)",
        f"  State:     {home}",
        "  Stop:      Ctrl-C",
        "",
    ])


def stop(proc: subprocess.Popen, grace: float = 30.0) -> int:
    """Ask JupyterHub to shut down (it stops the proxy and the users' servers), then insist."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m paddle_ext.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=int(os.environ.get(PORT_ENV) or DEFAULT_PORT),
                        help=f"port of the hub on 127.0.0.1 (default: ${PORT_ENV} or {DEFAULT_PORT})")
    args = parser.parse_args(argv)
    try:
        if not LOCAL_CONFIG.is_file():
            raise DemoError(f"{LOCAL_CONFIG} is missing; run the demo from a checkout of the repository.")
        if find_proxy() is None:
            raise DemoError("configurable-http-proxy was not found; run `make setup` (it installs it into node_modules).")
        if not 0 < args.port < 65536:
            raise DemoError(f"--port must be between 1 and 65535 (got {args.port}).")
        home = paddlecloud_home()
        prepare(home)
        password = demo_password(home)
    except (DemoError, OSError) as exc:
        print(f"paddle_ext.demo: {exc}", file=sys.stderr)
        return 2

    url = f"http://127.0.0.1:{args.port}"
    env = {**os.environ, "PADDLECLOUD_HOME": str(home), PORT_ENV: str(args.port)}
    cmd = [sys.executable, "-m", "jupyterhub", "-f", str(LOCAL_CONFIG)]
    print(f"Starting PaddleCloud Hub at {url} (state in {home}) ...", flush=True)
    # cwd = the hub's state folder, so nothing JupyterHub writes lands in the checkout.
    proc = subprocess.Popen(cmd, env=env, cwd=hub_dir(home))
    # SIGINT even when started in the background (where it is inherited as ignored),
    # and SIGTERM (e.g. from a supervisor), take the same path as Ctrl-C.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        if wait_until_up(f"{url}/hub/health", proc, timeout=120) or proc.poll() is None:
            print(banner(url, password, home), flush=True)
        return proc.wait()
    except KeyboardInterrupt:
        # Ctrl-C in a terminal reaches JupyterHub too (same process group); give it time
        # to stop the single-user servers and the proxy.
        print("\nStopping PaddleCloud Hub ...", flush=True)
        code = stop(proc)
        return 0 if code in (0, -signal.SIGTERM, -signal.SIGINT) else code


if __name__ == "__main__":
    sys.exit(main())
