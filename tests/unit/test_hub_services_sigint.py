"""The Kubernetes hub's services stop on SIGINT however the hub was started. JupyterHub stops a
service with SIGINT and waits 10 s before a SIGTERM; a hub started with SIGINT ignored (a shell's
background command) passed the ignore on to the services it starts, so every stop sat out those
seconds (hub_config/jupyterhub_config.py undoes the ignore before any service starts)."""

import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SERVICE = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"


def service_handles_sigint(load_config: bool, tmp_path) -> str:
    """What a Python process says that a hub process started with SIGINT ignored starts, after
    loading the hub's config (`load_config`) or not."""
    hub = ("import subprocess, sys\n"
           "from traitlets.config import PyFileConfigLoader\n"
           f"if {load_config}:\n"
           f"    PyFileConfigLoader('jupyterhub_config.py', {str(REPO / 'hub_config')!r}).load_config()\n"
           f"print(subprocess.run([sys.executable, '-c', {SERVICE!r}], capture_output=True, text=True).stdout.strip())")
    env = {**os.environ, "PADDLECLOUD_AUTHENTICATOR_CLASS": "dummy", "PADDLECLOUD_ALLOWED_USERS": "alice",
           "PADDLECLOUD_HUB_STATE_DIR": str(tmp_path / "state")}
    result = subprocess.run([sys.executable, "-c", hub], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()[-1]


def test_a_service_of_a_hub_started_with_sigint_ignored_stops_on_sigint(tmp_path):
    assert service_handles_sigint(True, tmp_path) == "True"


def test_without_the_hub_config_the_service_inherits_the_ignore(tmp_path):
    assert service_handles_sigint(False, tmp_path) == "False"
