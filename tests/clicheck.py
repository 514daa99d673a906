"""Every `paddlecloud` command, with good and bad input, on a given backend: no warnings or
tracebacks on any path, exit codes as documented, errors as one line. Shared by the local
tier (tests/local/test_cli_every_command.py) and the cluster tier (tests/cluster/test_cli_k8s.py).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Callable

# What must never appear on a command's own output, whatever the input. (A job's log, as
# `logs` prints it, is the job's: Paddle's own warnings in it are shown as they are.)
UNTIDY = re.compile(r"Traceback|Warning|warning:|Unclosed|Task was destroyed|Exception ignored|RuntimeError")

Run = Callable[..., subprocess.CompletedProcess]


def commands(done: str, output: Path) -> list[tuple[list[str], int, str]]:
    """(argv, exit code, words on stdout or stderr) for an ended two-worker job `done`."""
    return [
        (["list"], 0, done),
        (["list", "--json"], 0, f'"name": "{done}"'),
        (["status", done], 0, "Phase:    Succeeded"),
        (["status", done, "--json"], 0, '"phase": "Succeeded"'),
        (["logs", done], 0, "[worker-1] "),
        (["logs", done, "--worker", "1"], 0, ""),  # its lines: check_log_selection
        (["logs", done, "--tail", "1"], 0, "[worker-0] "),
        (["logs", done, "-f"], 0, "[worker-0] "),
        (["cancel", done], 0, f"{done} Succeeded"),
        (["quota"], 0, "RESOURCE"),
        (["quota", "--json"], 0, '"limits"'),
        (["code", done, "-o", str(output)], 0, f"of {done}"),
        (["status", "no-such-job"], 2, "No job named 'no-such-job'."),
        (["status", ".."], 2, "No job named '..'."),
        (["status", "a/b"], 2, "No job named 'a/b'."),
        (["status", "x" * 300], 2, "No job named"),
        (["logs", "no-such-job"], 2, "No job named"),
        (["logs", done, "--worker", "9"], 2, "there is no worker 9"),
        (["logs", done, "--worker", "x"], 2, "must be a whole number"),
        (["logs", done, "--tail", "-1"], 2, "must not be negative"),
        (["cancel", "no-such-job"], 2, "No job named"),
        (["code", "no-such-job", "-o", str(output) + "-2"], 2, "No job named"),
        (["code", done, "-o", str(output)], 2, "is not an empty folder"),
        (["submit", "--cpu", "1e9999", "--", "python", "x.py"], 2, "cpu: '1e9999' is out of the range"),
        (["submit", "--memory", "1Ei", "--", "python", "x.py"], 2, "more than Kubernetes can count"),
        (["submit", "--env", "PADDLE_MASTER=evil:1", "--", "python", "x.py"], 2, "read by Paddle's launcher"),
        (["submit", "--env", "NOEQUALS", "--", "python", "x.py"], 2, "KEY=VALUE"),
        (["submit", "--name", "Bad_Name", "--", "python", "x.py"], 2, "name: must use only lowercase"),
        (["submit", "--image", "UPPER/case", "--", "python", "x.py"], 2, "image:"),
        (["submit", "--max-runtime", "99999999999", "--", "python", "x.py"], 2, "max_runtime_seconds: must be at most"),
        (["submit", "--workers", "0", "--", "python", "x.py"], 2, "workers: must be at least 1"),
        (["submit", "--"], 2, "command:"),
        (["submit", "--", "--help"], 2, "must not start with '-'"),
        (["submit", "--", "python", "x" * 70000], 2, "the most a job may carry is 65536"),
        (["frobnicate"], 2, "invalid choice"),
        ([], 2, "required"),
    ]


def check_log_selection(run: Run, done: str) -> None:
    """`logs` gives both workers' lines, `--worker 1` only worker 1's (without the prefix),
    `--tail 1` one line per worker, and a follow of an ended job the whole log, every line once."""
    whole = run("logs", done).stdout.splitlines()
    for worker in (0, 1):
        assert any(line.startswith(f"[worker-{worker}] ") for line in whole), "\n".join(whole[-20:])
    one = run("logs", done, "--worker", "1").stdout.splitlines()
    prefix = "[worker-1] "
    assert one and one == [line[len(prefix):] for line in whole if line.startswith(prefix)], \
        "`logs --worker 1` is not worker 1's lines of `logs`:\n" + "\n".join(one[-20:])
    tail = run("logs", done, "--tail", "1").stdout.splitlines()
    assert sorted(line.split("]")[0] for line in tail) == ["[worker-0", "[worker-1"], tail
    assert sorted(run("logs", done, "-f").stdout.splitlines()) == sorted(whole), "a follow of an ended job differs"


def check_every_command(run: Run, done: str, output: Path) -> int:
    """Run them all; returns how many were tried (each is asserted)."""
    tried = 0
    for argv, code, words in commands(done, output):
        result = run(*argv)
        seen = result.stdout + result.stderr
        own = result.stderr + ("" if argv[:1] == ["logs"] else result.stdout)
        where = f"paddlecloud {' '.join(argv)[:80]} -> {result.returncode}\n{seen[-1500:]}"
        assert not UNTIDY.search(own), where
        assert result.returncode == code, where
        assert words in seen, where
        if code:
            assert result.stdout == "" and len(result.stderr.strip().splitlines()) == 1, where
            assert result.stderr.startswith("paddlecloud: "), where
        else:
            assert result.stderr == "", where
        tried += 1
    check_log_selection(run, done)
    listing = run("list").stdout.splitlines()
    header = listing[0]
    for column in ("PHASE", "WORKERS", "CREATED", "REASON", "MESSAGE"):  # aligned: each starts at one offset
        assert all(len(line) <= header.index(column) or line[header.index(column) - 2:header.index(column)] == "  "
                   for line in listing[1:]), "\n".join(listing)
    row = next(line for line in listing if line.startswith(done + " "))
    assert re.search(r"\s{2}Completed\s{2,}All 2 workers finished successfully\.$", row), row
    assert json.loads(run("status", done, "--json").stdout)["reason"] == "Completed"
    return tried
