"""The `paddlecloud` CLI running real local jobs: every submit option reaches the job,
the command runs without a shell, `--max-runtime` ends a job DeadlineExceeded, and
`--follow`, `logs`, `status`, `list`, `cancel` behave as documented."""

import json
import os
import subprocess
import sys

import pytest

from catalogue import IMAGES, local_datasets
from serverutil import Gate, assert_no_processes_under, wait_for


@pytest.fixture
def cli(tmp_path, workdir):
    """`paddlecloud` on the local backend, state in this test's own folder; afterwards no
    process of its jobs may be left running."""
    home = tmp_path / "home"
    env = {**os.environ, "PADDLECLOUD_HOME": str(home), "PADDLECLOUD_BACKEND": "local",
           "PADDLECLOUD_DATASETS": json.dumps(local_datasets(tmp_path / "data")),
           "PADDLECLOUD_IMAGES": json.dumps(IMAGES)}

    def run(*args, timeout=180):
        return subprocess.run([sys.executable, "-m", "paddle_ext.cli", *args], cwd=workdir, env=env,
                              capture_output=True, text=True, timeout=timeout)
    try:
        yield run
    finally:
        assert_no_processes_under(home)


def test_submit_follow_succeeds_with_both_worker_prefixes(cli):
    result = cli("submit", "--workers", "2", "--follow", "--", "python", "train.py", "--epochs", "1")
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert "[worker-0] rank 0: all_reduce check ok: sum=3" in out
    assert "[worker-1] rank 1: all_reduce check ok: sum=3" in out
    name = out.splitlines()[0]
    assert result.stderr == f"Job {name} Succeeded: All 2 workers finished successfully.\n"
    status = json.loads(cli("status", name, "--json").stdout)
    assert (status["name"], status["phase"], status["workers"]) == (name, "Succeeded", 2)
    listing = cli("list").stdout.splitlines()
    assert any(line.split()[:3] == [name, "Succeeded", "2"] for line in listing), listing
    tail = cli("logs", name, "--worker", "1", "--tail", "2").stdout.splitlines()
    whole = cli("logs", name, "--worker", "1").stdout.splitlines()
    assert len(tail) == 2 and tail == whole[-2:] and len(whole) > 2
    assert "rank 1: done" in whole and not any(line.startswith("[worker-") for line in whole)


# Shell metacharacters: run through a shell, these would expand, run `touch` or redirect.
SHELL_WORDS = ["a b", "$HOME", "`touch pwned-backtick`", "$(touch pwned-subshell)", ";", "touch", "pwned-semicolon",
               "|", ">", "pwned-redirect", "*", "&&"]


def test_every_submit_option_reaches_the_job_and_no_shell_runs_it(cli, workdir, tmp_path):
    result = cli("submit", "--name", "all-options", "--workers", "2", "--cpu", "500m", "--memory", "1Gi",
                 "--image", IMAGES[1]["name"], "--dataset", "mnist", "--env", "PROBE_GREETING=hello world",
                 "--env", "PROBE_EQUATION=a=b", "--max-runtime", "900", "--max-restarts", "1", "--follow",
                 "--", "python", "probe.py", *SHELL_WORDS)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines()[0] == "all-options"
    seen = {line.split(" PROBE ")[0]: json.loads(line.split(" PROBE ", 1)[1])
            for line in result.stdout.splitlines() if " PROBE " in line}
    assert set(seen) == {"[worker-0]", "[worker-1]"}, result.stdout[-2000:]
    for worker in seen.values():  # what each worker process was started with, from inside it
        assert worker["argv"] == SHELL_WORDS
        assert worker["cwd"] == str(workdir)
        assert {k: v for k, v in worker["env"].items() if k.startswith("PROBE_")} == {
            "PROBE_GREETING": "hello world", "PROBE_EQUATION": "a=b"}
        assert worker["env"]["PADDLECLOUD_DATASET_MNIST"] == str(tmp_path / "data" / "mnist")
        assert worker["env"]["PADDLECLOUD_RESTART"] == "0"  # the first attempt
    assert not list(workdir.glob("pwned*")), "a shell ran the command"
    spec = json.loads(cli("status", "all-options", "--json").stdout)["spec"]
    assert spec == {"name": "all-options", "command": ["python", "probe.py", *SHELL_WORDS], "workers": 2,
                    "gpus_per_worker": 0, "cpu": "500m", "memory": "1Gi", "image": IMAGES[1]["name"],
                    "datasets": ["mnist"], "env": {"PROBE_GREETING": "hello world", "PROBE_EQUATION": "a=b"},
                    "max_runtime_seconds": 900, "max_restarts": 1}


def test_max_runtime_ends_the_job_deadline_exceeded(cli, tmp_path):
    gate = Gate(tmp_path)  # never opened: only the deadline can end this job
    result = cli("submit", "--workers", "2", "--max-runtime", "3", "--follow",
                 "--", "python", "ticker.py", "--until", str(gate), "--interval", "0.2")
    name = result.stdout.splitlines()[0]
    message = "The job ran longer than its limit of 3 seconds and was stopped."
    assert (result.returncode, result.stderr) == (1, f"Job {name} Failed: {message}\n"), result.stderr[-2000:]
    status = json.loads(cli("status", name, "--json").stdout)
    assert (status["phase"], status["reason"], status["message"]) == ("Failed", "DeadlineExceeded", message)
    assert "reached the job's time limit; stopping it" in cli("logs", name).stdout


def test_a_job_that_ignores_the_deadline_leaves_nothing_running(cli, tmp_path):
    """At the deadline the launcher is asked to stop, then killed; the trainers it started
    in sessions of their own, and a helper each of them detached, must not outlive the job
    (the fixture fails the test if any process of the job is left)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    result = cli("submit", "--workers", "2", "--max-runtime", "12", "--follow",
                 "--", "python", "stubborn.py", "--marks", str(marks))
    name = result.stdout.splitlines()[0]
    assert result.returncode == 1 and "ran longer than its limit of 12 seconds" in result.stderr, result.stderr[-2000:]
    # (the trainers came up before the deadline: else nothing would have been left to stop)
    assert sorted(p.name for p in marks.iterdir()) == ["up-0", "up-1"], result.stdout[-2000:]
    assert json.loads(cli("status", name, "--json").stdout)["reason"] == "DeadlineExceeded"


def test_a_cancelled_job_that_ignores_the_stop_leaves_nothing_running(cli, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    name = cli("submit", "--workers", "2", "--", "python", "stubborn.py", "--marks", str(marks)).stdout.strip()
    wait_for(lambda: len(list(marks.iterdir())) == 2, timeout=120, what="both trainers to be up")
    cancel = cli("cancel", name)
    assert (cancel.returncode, cancel.stdout) == (0, f"{name} Cancelled\n"), cancel.stderr


def test_failing_job_exits_1(cli):
    result = cli("submit", "--workers", "2", "--follow", "--", "python", "fail_rank.py", "--code", "3")
    assert result.returncode == 1
    assert "Worker 1 exited with code 3" in result.stderr


def test_submit_prints_name_last_and_cancel(cli, tmp_path):
    name = f"cli-cancel-{os.urandom(2).hex()}"
    gate = Gate(tmp_path)  # never opened: only the cancel ends this job
    result = cli("submit", "--name", name, "--", "python", "ticker.py", "--until", str(gate))
    assert result.returncode == 0 and result.stdout.strip().splitlines()[-1] == name
    cancel = cli("cancel", name)
    assert cancel.returncode == 0 and cancel.stdout == f"{name} Cancelled\n"
    again = cli("submit", "--name", name, "--", "python", "ticker.py")
    assert again.returncode == 2
    assert again.stderr == f"paddlecloud: A job named '{name}' already exists; choose another name.\n"


def test_logs_mine_and_status_progress(cli, tmp_path):
    gate = Gate(tmp_path)  # the job runs until the test has seen what it needs
    result = cli("submit", "--workers", "2", "--", "python", "ticker.py", "--until", str(gate), "--interval", "0.25")
    name = result.stdout.strip().splitlines()[-1]
    try:
        def both_running():
            status = cli("status", name).stdout
            return status if status.count("[3/4 Running]") == 2 else None

        status = wait_for(both_running, 180, f"both workers of {name} Running in `paddlecloud status`", interval=0.5)
        assert "Progress: Queued > Starting > Running > Finished" in status  # a local run is not scheduled or pulled
        assert "worker-0  [3/4 Running] its processes are running" in status, status
        progress = json.loads(cli("status", name, "--json").stdout)["progress"]
        assert [p["step"] for p in progress] == ["Running", "Running"]
    finally:
        gate.open()
    follow = cli("logs", name, "--follow", "--mine")
    assert follow.returncode == 0
    lines = follow.stdout.splitlines()
    assert "[worker-1] ticker 1 done" in lines and not any("LAUNCH" in line for line in lines)
    assert any("LAUNCH INFO" in line for line in cli("logs", name).stdout.splitlines())
