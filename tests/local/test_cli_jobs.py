"""The `paddlecloud` CLI running real local jobs."""

import os
import subprocess
import sys

import pytest


@pytest.fixture
def cli(tmp_path, workdir):
    env = {**os.environ, "PADDLECLOUD_HOME": str(tmp_path), "PADDLECLOUD_BACKEND": "local"}

    def run(*args, timeout=180):
        return subprocess.run([sys.executable, "-m", "paddle_ext.cli", *args], cwd=workdir, env=env,
                              capture_output=True, text=True, timeout=timeout)
    return run


def test_submit_follow_succeeds_with_both_worker_prefixes(cli):
    result = cli("submit", "--workers", "2", "--follow", "--", "python", "train.py", "--epochs", "1")
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert "[worker-0] rank 0: all_reduce check ok: sum=3" in out
    assert "[worker-1] rank 1: all_reduce check ok: sum=3" in out
    name = out.splitlines()[0]
    assert "Succeeded" in result.stderr
    status = cli("status", name, "--json")
    assert '"phase": "Succeeded"' in status.stdout
    listing = cli("list")
    assert name in listing.stdout and "Succeeded" in listing.stdout
    logs = cli("logs", name, "--worker", "1", "--tail", "2")
    assert len(logs.stdout.splitlines()) == 2


def test_failing_job_exits_1(cli):
    result = cli("submit", "--workers", "2", "--follow", "--", "python", "fail_rank.py", "--code", "3")
    assert result.returncode == 1
    assert "Worker 1 exited with code 3" in result.stderr


def test_submit_prints_name_last_and_cancel(cli):
    result = cli("submit", "--name", "cli-cancel", "--", "python", "ticker.py", "--count", "500")
    assert result.returncode == 0 and result.stdout.strip().splitlines()[-1] == "cli-cancel"
    cancel = cli("cancel", "cli-cancel")
    assert cancel.returncode == 0 and "Cancelled" in cancel.stdout
    again = cli("submit", "--name", "cli-cancel", "--", "python", "ticker.py")
    assert again.returncode == 2 and "already exists" in again.stderr


def test_logs_mine_and_status_progress(cli):
    result = cli("submit", "--workers", "2", "--", "python", "ticker.py", "--count", "40", "--interval", "0.25")
    name = result.stdout.strip().splitlines()[-1]
    status = ""
    for _ in range(100):
        status = cli("status", name).stdout
        if "[2/3 Running]" in status:
            break
    assert "Progress: Starting > Running > Finished" in status  # a local run is not queued, scheduled or pulled
    assert "worker-0  [2/3 Running] its processes are running" in status, status
    assert [p["step"] for p in __import__("json").loads(cli("status", name, "--json").stdout)["progress"]] \
        == ["Running", "Running"]
    follow = cli("logs", name, "--follow", "--mine")
    assert follow.returncode == 0
    lines = follow.stdout.splitlines()
    assert "[worker-1] ticker 1 done" in lines and not any("LAUNCH" in line for line in lines)
    assert any("LAUNCH INFO" in line for line in cli("logs", name).stdout.splitlines())
