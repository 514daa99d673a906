"""A line a training script prints reaches the followers while the script still runs:
from every trainer, with its `[worker-I] ` prefix, and once (paddle_ext.trainer_logs copies
each trainer's log file as it grows; Paddle's launcher's own late copy of local rank 0's
output is left out).

Each job prints `held <rank> <token>` (without flushing) and then waits at a gate, a file
the test creates only once it has seen every held line: a line that reached the follower
only when the job ended (or never) fails the wait at its deadline. No wall clock is
asserted; how fast the lines come is benchmarks/live_lines.py's measure.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading

import pytest

from serverutil import Gate, assert_no_processes_under, wait_for

from paddle_ext.manifests import program

WAIT_SECONDS = 180  # a loaded 2-core machine starts two Paddle launchers slowly
FAILSAFE_SECONDS = 300  # the gate opens by itself then, so a stuck stream still ends (and the test fails)


class Lines:
    """The lines of a stream, read in a thread as they come."""

    def __init__(self, stream):
        self.seen: list[str] = []
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream):
        for raw in stream:
            self._queue.put(raw.decode(errors="replace").rstrip("\n") if isinstance(raw, bytes) else raw.rstrip("\n"))

    def _drain(self) -> list[str]:
        while not self._queue.empty():  # one consumer: what empty() says stays true
            self.seen.append(self._queue.get_nowait())
        return self.seen

    def wait_for_all(self, wanted: list[str], what: str) -> list[str]:
        return wait_for(lambda: self._drain() if all(w in self._drain() for w in wanted) else None,
                        WAIT_SECONDS, what, interval=0.05) or self.seen

    def rest(self, timeout: float = 120) -> list[str]:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the stream did not end once the job had"
        return self._drain()


@pytest.fixture
def cli(tmp_path, workdir):
    home = tmp_path / "home"
    env = {**os.environ, "PADDLECLOUD_HOME": str(home), "PADDLECLOUD_BACKEND": "local"}
    # The job's own environment must make an unflushed print reach the log: not this one's.
    env.pop("PYTHONUNBUFFERED", None)

    def run(*args, **kwargs):
        return subprocess.run([sys.executable, "-m", "paddle_ext.cli", *args], cwd=workdir, env=env,
                              capture_output=True, text=True, timeout=180, **kwargs)

    run.popen = lambda *args: subprocess.Popen([sys.executable, "-m", "paddle_ext.cli", *args], cwd=workdir, env=env,
                                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        yield run
    finally:
        assert_no_processes_under(home)


def test_cli_follow_shows_each_workers_line_while_the_script_is_held(cli, tmp_path):
    gate = Gate(tmp_path).open_after(FAILSAFE_SECONDS)
    token = os.urandom(4).hex()
    submitted = cli("submit", "--workers", "2", "--", "python", "hold.py", str(gate), token)
    assert submitted.returncode == 0, submitted.stderr[-2000:]
    name = submitted.stdout.strip().splitlines()[-1]
    follow = cli.popen("logs", name, "-f")
    try:
        lines = Lines(follow.stdout)
        held = [f"[worker-0] held 0 {token}", f"[worker-1] held 1 {token}"]
        lines.wait_for_all(held, f"both workers' held lines in `paddlecloud logs {name} -f` before the gate opens")
        assert not gate.is_open  # seen while both scripts still wait at the gate
        gate.open()
        assert follow.wait(120) == 0, follow.stderr.read().decode()[-2000:]
        out = lines.rest()
    finally:
        gate.open()
        follow.kill()
        follow.wait()
    assert not gate.forced
    for line in held + ["[worker-0] released 0", "[worker-1] released 1"]:
        assert out.count(line) == 1, (line, out[-40:])  # once: the launcher's own copy is left out
    assert out.index(held[1]) < out.index("[worker-1] released 1")


def test_rest_follow_streams_the_held_line_of_the_second_worker(server, tmp_path):
    gate = Gate(tmp_path).open_after(FAILSAFE_SECONDS)
    token = os.urandom(4).hex()
    job = server.submit(command=["python", "hold.py", str(gate), token], workers=2)
    held = {f"[worker-0] held 0 {token}", f"[worker-1] held 1 {token}"}
    lines, end = [], None
    try:
        for event, data in server.follow(job["name"]):
            if event == "end":
                end = json.loads(data)
                break
            lines.append(data)
            if held <= set(lines) and not gate.is_open:
                gate.open()  # both seen while the scripts wait: now let them finish
    finally:
        gate.open()
    assert not gate.forced, f"the held lines did not come while the job ran: {lines[-20:]}"
    assert end is not None and end["phase"] == "Succeeded", (end, lines[-20:])
    assert {"[worker-0] released 0", "[worker-1] released 1"} <= set(lines)
    assert all(lines.count(line) == 1 for line in held), lines


def test_a_second_local_rank_reaches_the_workers_output_while_held(workdir, tmp_path):
    """Two trainers under one real launcher (--nproc_per_node 2, on CPU), run as a
    Kubernetes worker's container runs it (paddle_ext.manifests.worker_command: this
    package's relay as `python -c`): the launcher itself copies only local rank 0's
    output; the worker's output has both, each with its local rank, while they are held."""
    gate = Gate(tmp_path).open_after(FAILSAFE_SECONDS)
    token = os.urandom(4).hex()
    log_dir = tmp_path / "launch"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # as every job's environment has it
    worker = subprocess.Popen([sys.executable, "-c", program("trainer_logs"), str(log_dir), "2", "--",
                               sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", "2",
                               "--log_dir", str(log_dir), "hold.py", str(gate), token],
                              cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        lines = Lines(worker.stdout)
        held = [f"[local-rank-0] held 0 {token}", f"[local-rank-1] held 1 {token}"]
        lines.wait_for_all(held, "both local ranks' held lines in the worker's output before the gate opens")
        assert not gate.is_open
        gate.open()
        assert worker.wait(120) == 0
        out = lines.rest()
    finally:
        gate.open()
        if worker.poll() is None:
            os.killpg(worker.pid, 9)
            worker.wait()
    assert not gate.forced
    assert sorted(line for line in out if "held" in line or "released" in line) == [
        f"[local-rank-0] held 0 {token}", "[local-rank-0] released 0",
        f"[local-rank-1] held 1 {token}", "[local-rank-1] released 1"], out  # each once, nothing else of theirs
