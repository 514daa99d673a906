"""The login tests' servers (slapd, the OIDC provider) leave nothing behind: stopped, their
process and folder are gone; and when the test process itself is killed (SIGKILL: no teardown
runs), the kernel ends them too (tests/serverutil.py: die_with_parent)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from availability import skip_or_fail

from ldaputil import missing_tools
from oidcutil import missing
from serverutil import wait_for

from tools.k8s.procutil import pid_alive

pytestmark = [pytest.mark.timeout(300)]

TESTS = Path(__file__).resolve().parents[1]
START = {
    "slapd": "from ldaputil import Directory\nserver = Directory(Path(sys.argv[1])).start()\n",
    "oidc-provider": "from oidcutil import ACCOUNTS, OIDCProvider\n"
                     "server = OIDCProvider(Path(sys.argv[1]), ACCOUNTS, 'http://127.0.0.1:1/cb').start()\n",
}
UNAVAILABLE = {"slapd": ", ".join(missing_tools()), "oidc-provider": missing()}


@pytest.mark.parametrize("kind", START)
def test_stopped_or_killed_with_the_test_a_login_server_leaves_nothing(kind, tmp_path):
    if UNAVAILABLE[kind]:
        skip_or_fail(f"{kind}: {UNAVAILABLE[kind]}")
    program = ("import sys\nfrom pathlib import Path\n" + START[kind] +
               "print(server.proc.pid, flush=True)\nif sys.argv[2] == 'stop':\n    server.stop()\n"
               "else:\n    sys.stdin.read()\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)])}

    folder = tmp_path / "stopped"
    done = subprocess.run([sys.executable, "-c", program, str(folder), "stop"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert not pid_alive(int(done.stdout.split()[0])) and not folder.exists()

    test = subprocess.Popen([sys.executable, "-c", program, str(tmp_path / "killed"), "wait"], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        pid = int(test.stdout.readline())
        assert pid_alive(pid)
        test.send_signal(signal.SIGKILL)
        test.wait(30)
        wait_for(lambda: not pid_alive(pid), 30, f"{kind} (pid {pid}) to end with the killed test process")
    finally:
        if test.poll() is None:
            test.kill()
            test.wait(30)
