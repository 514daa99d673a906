"""Start the embedded default: a local PaddleCloud Hub on this machine.

    python -m paddle_ext.hub.demo --port 8000    (what `make demo` runs; also `paddlecloud-demo`)

Prepares $PADDLECLOUD_HOME (default ~/.paddlecloud), settles the demo password
(PADDLECLOUD_DEMO_PASSWORD, else one generated once and kept in
$PADDLECLOUD_HOME/hub/demo-password), prints where to log in, and runs JupyterHub
with the local hub config until Ctrl-C. The config reads the password from the same
place (paddle_ext.hub.local), so the password this prints is the one the hub checks.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from ..constants import HOME_ENV
from .local import ADMIN_USER, DEFAULT_PORT, PASSWORD_ENV, PORT_ENV, demo_password, home, hub_dir, prepare

CONFIG_NAME = "local_config.py"
# A wheel carries the hub configs inside the package; a checkout has them in hub_config/.
PACKAGED_CONFIG = Path(__file__).resolve().parent / "config" / CONFIG_NAME
CHECKOUT_CONFIG = Path(__file__).resolve().parents[2] / "hub_config" / CONFIG_NAME


class DemoError(Exception):
    """A problem the person starting the demo can fix; printed as one line."""


def local_config() -> Path:
    for path in (PACKAGED_CONFIG, CHECKOUT_CONFIG):
        if path.is_file():
            return path
    raise DemoError(f"The local hub config is missing ({PACKAGED_CONFIG}); reinstall paddlecloud-hub.")


def find_proxy() -> str | None:
    """configurable-http-proxy on PATH (`make setup` installs it into node_modules/.bin)."""
    return shutil.which("configurable-http-proxy")


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


def banner(url: str, password: str, state: Path) -> str:
    return "\n".join([
        "",
        "PaddleCloud Hub (embedded default) is running.",
        f"  Open:      {url}",
        f"  Admin:     {ADMIN_USER}",
        f"  Password:  {password}   (every user, admin included; set {PASSWORD_ENV} to choose it)",
        f"  State:     {state}",
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
    parser = argparse.ArgumentParser(prog="python -m paddle_ext.hub.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=int(os.environ.get(PORT_ENV) or DEFAULT_PORT),
                        help=f"port of the hub on 127.0.0.1 (default: ${PORT_ENV} or {DEFAULT_PORT})")
    args = parser.parse_args(argv)
    try:
        config = local_config()
        if find_proxy() is None:
            raise DemoError("configurable-http-proxy was not found on PATH; run `make setup` (it installs it "
                            "into node_modules/.bin) or `npm install -g configurable-http-proxy`.")
        if not 0 < args.port < 65536:
            raise DemoError(f"--port must be between 1 and 65535 (got {args.port}).")
        state = home()
        prepare(state)
        password = demo_password(state)
    except (DemoError, OSError) as exc:
        print(f"paddlecloud-demo: {exc}", file=sys.stderr)
        return 2

    url = f"http://127.0.0.1:{args.port}"
    env = {**os.environ, HOME_ENV: str(state), PORT_ENV: str(args.port)}
    cmd = [sys.executable, "-m", "jupyterhub", "-f", str(config)]
    print(f"Starting PaddleCloud Hub at {url} (state in {state}) ...", flush=True)
    # cwd = the hub's state folder, so nothing JupyterHub writes lands in the checkout.
    proc = subprocess.Popen(cmd, env=env, cwd=hub_dir(state))
    # SIGINT even when started in the background (where it is inherited as ignored),
    # and SIGTERM (e.g. from a supervisor), take the same path as Ctrl-C.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        if wait_until_up(f"{url}/hub/health", proc, timeout=120) or proc.poll() is None:
            print(banner(url, password, state), flush=True)
        return proc.wait()
    except KeyboardInterrupt:
        # Ctrl-C in a terminal reaches JupyterHub too (same process group); give it time
        # to stop the single-user servers and the proxy.
        print("\nStopping PaddleCloud Hub ...", flush=True)
        code = stop(proc)
        return 0 if code in (0, -signal.SIGTERM, -signal.SIGINT) else code


if __name__ == "__main__":
    sys.exit(main())
