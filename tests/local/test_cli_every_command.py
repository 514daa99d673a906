"""Every `paddlecloud` command on the local backend, good input and bad: tidy output, the
documented exit codes, one line per error (tests/clicheck.py)."""

import os
import subprocess
import sys

import pytest

from clicheck import UNTIDY, check_every_command

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_every_command_is_tidy_on_the_local_backend(tmp_path, workdir):
    env = {**os.environ, "PADDLECLOUD_HOME": str(tmp_path / "home"), "PADDLECLOUD_BACKEND": "local"}

    def run(*args):
        return subprocess.run([sys.executable, "-m", "paddle_ext.cli", *args], cwd=workdir, env=env,
                              capture_output=True, text=True, timeout=180)

    submitted = run("submit", "--name", "tidy", "--workers", "2", "--follow", "--",
                    "python", "ticker.py", "--count", "2", "--interval", "0.1")
    assert submitted.returncode == 0 and not UNTIDY.search(submitted.stderr), submitted.stderr
    assert submitted.stderr == "Job tidy Succeeded: All 2 workers finished successfully.\n"
    tried = check_every_command(run, "tidy", tmp_path / "code")
    print(f"\nlocal CLI: {tried + 1} commands, all tidy")
