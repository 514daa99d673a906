"""`make demo` itself, as a user runs it: the real Makefile target on a free port with a
PADDLECLOUD_HOME of its own. It prints where to log in and the password; that password
logs `admin` in (a hub admin) and a wrong one is refused; Ctrl-C stops it, and nothing
is left behind: no process, no open port, no file in the checkout."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading

import pytest

from hubutil import REPO, HubError, login
from serverutil import assert_no_processes_under, free_port, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def checkout_state() -> str:
    """Every file git sees in the checkout, ignored ones included, but Python's bytecode
    caches (a fresh checkout gets them from the first import, which is no leftover)."""
    listing = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout
    return "\n".join(line for line in listing.splitlines() if "__pycache__/" not in line and not line.endswith(".pyc"))


def test_make_demo_starts_logs_in_and_stops_leaving_nothing_behind(tmp_path):
    home, port = tmp_path / "paddlecloud", free_port()
    env = {key: value for key, value in os.environ.items()
           if key not in ("PADDLECLOUD_DEMO_PASSWORD", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env["PADDLECLOUD_HOME"] = str(home)
    before = checkout_state()
    demo = subprocess.Popen(["make", "--no-print-directory", "demo", f"PORT={port}"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(demo.stdout), daemon=True)
    reader.start()
    try:
        def banner():
            if demo.poll() is not None:
                raise AssertionError(f"make demo exited with {demo.returncode}:\n{''.join(output)[-3000:]}")
            text = "".join(output)
            return text if "Stop:      Ctrl-C" in text else None

        text = wait_for(banner, 300, "make demo's banner", interval=0.5)
        url = re.search(r"Open:\s+(\S+)", text).group(1)
        password = re.search(r"Password:\s+(\S+)", text).group(1)
        assert url == f"http://127.0.0.1:{port}"
        assert re.search(r"Admin:\s+admin\b", text) and re.search(r"State:\s+(\S+)", text).group(1) == str(home)
        assert (home / "hub" / "demo-password").read_text().strip() == password  # generated once, kept

        with pytest.raises(HubError, match="login as 'admin' failed"):
            login(url, "admin", password + "-wrong")
        admin = login(url, "admin", password)
        assert admin.get(url + "/hub/admin", timeout=60).status_code == 200  # admin is a hub admin
        someone = login(url, "someone", password)  # every user logs in with the demo password
        assert someone.get(url + "/hub/admin", timeout=60, allow_redirects=False).status_code == 403
    finally:
        os.killpg(demo.pid, signal.SIGINT)  # Ctrl-C in the terminal reaches make and everything it started
        try:
            demo.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
        reader.join(10)
    assert "Stopping PaddleCloud Hub" in "".join(output), "".join(output)[-3000:]
    assert_no_processes_under(home)
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still answers after the demo stopped"
    assert checkout_state() == before, "make demo left files in the checkout"
