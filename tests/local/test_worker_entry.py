"""paddle_ext.worker, the entry of Kubernetes workers that may restart, as real processes on
127.0.0.1: a lost peer makes the others exit with the restart code, a finished peer does
not, the user's own error passes through, SIGTERM exits 143. Each worker's "program" runs
until the test creates its gate file."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from paddle_ext.ports import free_port, free_ports
from paddle_ext.restarts import PEER_LOST_EXIT_CODE
from paddle_ext.worker import parse_answer
from serverutil import wait_for

REPO = Path(__file__).resolve().parents[2]
PROGRAM = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.05)\nsys.exit(int(sys.argv[2]))"


class Pair:
    def __init__(self, tmp_path: Path, codes=(0, 0)):
        port, other = free_ports(2)  # worker i answers on port + i * (other - port)
        self.ports = (port, other)
        self.gates = [tmp_path / f"gate-{i}" for i in (0, 1)]
        self.errs = [tmp_path / f"err-{i}" for i in (0, 1)]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.procs = [
            subprocess.Popen([sys.executable, "-m", "paddle_ext.worker", "--index", str(i), "--workers", "2",
                              "--peer", "127.0.0.1", "--port", str(port), "--port-step", str(other - port), "--",
                              sys.executable, "-c", PROGRAM, str(self.gates[i]), str(codes[i])],
                             stderr=open(self.errs[i], "w"), env=env, start_new_session=True)
            for i in (0, 1)]

    def both_up(self):
        wait_for(lambda: all("sees all 2 workers running" in err.read_text() for err in self.errs), 60,
                 "both workers seeing each other")

    def wait(self, i: int) -> int:
        return self.procs[i].wait(timeout=90)

    def seen_by(self, i: int) -> set[int]:
        """The peers worker i counts as seen running (from its answer, as its peers read it)."""
        with socket.create_connection(("127.0.0.1", self.ports[i]), timeout=10) as conn:
            answer = parse_answer(conn.makefile().read())
        assert answer is not None and answer[0] == "running", answer
        return set(answer[2])

    def close(self):
        """Kill each worker's whole process group: a worker the test SIGKILLed leaves its program
        behind (as a lost pod's would be, were it not in the pod), waiting for its gate."""
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=30)


@pytest.fixture
def pair_of(tmp_path):
    made = []

    def make(codes=(0, 0)):
        made.append(Pair(tmp_path, codes))
        return made[-1]

    yield make
    for pair in made:
        pair.close()


def test_a_peer_killed_makes_the_other_exit_with_the_restart_code(pair_of):
    pair = pair_of()
    pair.both_up()
    pair.procs[1].send_signal(signal.SIGKILL)
    assert pair.wait(0) == PEER_LOST_EXIT_CODE
    assert "worker 1 was lost" in pair.errs[0].read_text()


def test_a_deleted_pods_sigterm_exits_143_and_its_peer_restarts(pair_of):
    pair = pair_of()
    pair.both_up()
    pair.procs[1].send_signal(signal.SIGTERM)
    assert pair.wait(1) == 143
    assert pair.wait(0) == PEER_LOST_EXIT_CODE


def test_a_peer_that_finished_first_is_not_lost(pair_of):
    """Worker 1 finishes while worker 0 still runs: it leaves only once worker 0 no longer counts
    it among the peers seen running (it saw it finished), so worker 0 never takes its going for
    a loss, however long it runs on."""
    pair = pair_of()
    pair.both_up()
    assert pair.seen_by(0) == {1}
    pair.gates[1].touch()
    assert pair.wait(1) == 0
    assert pair.seen_by(0) == set()
    pair.gates[0].touch()
    assert pair.wait(0) == 0
    assert "was lost" not in pair.errs[0].read_text()


def test_workers_that_finish_together_both_end_well(pair_of):
    pair = pair_of()
    pair.both_up()
    for gate in pair.gates:
        gate.touch()
    assert (pair.wait(0), pair.wait(1)) == (0, 0)
    assert not any("was lost" in err.read_text() for err in pair.errs)


def test_the_users_own_error_passes_through(pair_of):
    pair = pair_of(codes=(0, 1))
    pair.both_up()
    pair.gates[1].touch()
    assert pair.wait(1) == 1
    pair.gates[0].touch()
    assert pair.wait(0) == 0


LAST_WORDS = """
import signal, sys, time
def stop(*_):
    print("stopping: last words", flush=True)
    sys.exit(3)
signal.signal(signal.SIGTERM, stop)
print("step 1", flush=True)
print("to stderr", file=sys.stderr, flush=True)
while True:
    time.sleep(1)
"""


def test_a_worker_keeps_a_copy_of_its_output_to_its_last_line_on_sigterm(tmp_path):
    """Where outputs are kept: its pod deleted (a preemption), the copy still has every line,
    the worker's own included, as the container's output had them."""
    copies = tmp_path / "logs" / "worker-0"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PADDLECLOUD_LOG_COPY_DIR": str(copies),
           "PADDLECLOUD_POD_UID": "uid-0"}
    proc = subprocess.Popen([sys.executable, "-m", "paddle_ext.worker", "--index", "0", "--workers", "1",
                             "--peer", "127.0.0.1", "--port", str(free_port()), "--",
                             sys.executable, "-c", LAST_WORDS], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, text=True)
    try:
        out = proc.stdout.readline() + proc.stdout.readline()  # both streams reach the copy's one pipe
        assert out == "step 1\nto stderr\n", out
        proc.send_signal(signal.SIGTERM)
        rest, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143 and err == "", err
    assert out + rest == "step 1\nto stderr\nstopping: last words\n"
    [name] = os.listdir(copies)
    assert name.endswith("-uid-0.log") and (copies / name).read_text() == out + rest


STUBBORN = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
while not os.path.exists(sys.argv[1]): time.sleep(0.05)
"""
LAUNCHED = "import sys; open(sys.argv[1], 'w').close()"


def test_a_replacement_starts_no_launcher_while_a_peer_of_the_previous_attempt_runs(tmp_path):
    """Worker 1's pod is deleted and replaced at once. Worker 0 sees the loss but its launcher
    (the rendezvous host) ignores SIGTERM and stays until the test's gate opens; all that time
    the replacement waits. Once worker 0 has gone it still waits, for worker 0's own
    replacement to answer, and only then starts its launcher."""
    port, other = free_ports(2)
    step = str(other - port)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    old_gate, launched = tmp_path / "old-gate", tmp_path / "launched"
    errs = [tmp_path / name for name in ("err-0", "err-1", "err-1-new")]

    def worker(index: int, program: str, *args: str, err: Path) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "paddle_ext.worker", "--index", str(index), "--workers", "2",
                                 "--peer", "127.0.0.1", "--port", str(port), "--port-step", step, "--",
                                 sys.executable, "-c", program, *args],
                                stderr=open(err, "w"), env=env, start_new_session=True)

    procs = [worker(0, STUBBORN, str(old_gate), err=errs[0]),
             worker(1, PROGRAM, str(tmp_path / "never"), "0", err=errs[1])]
    try:
        wait_for(lambda: all("sees all 2 workers running" in err.read_text() for err in errs[:2]), 60,
                 "both workers seeing each other")
        procs[1].send_signal(signal.SIGTERM)
        assert procs[1].wait(timeout=30) == 143
        procs.append(worker(1, LAUNCHED, str(launched), err=errs[2]))
        wait_for(lambda: "worker 1 was lost" in errs[0].read_text(), 30, "worker 0 seeing worker 1 lost")
        wait_for(lambda: "waits for worker 0 of the previous attempt" in errs[2].read_text(), 30,
                 "the replacement waiting for the old worker 0")
        assert procs[0].poll() is None and not launched.exists()  # held by the gate: worker 0 still runs
        old_gate.touch()
        assert procs[0].wait(timeout=30) == PEER_LOST_EXIT_CODE
        wait_for(lambda: "waits for worker 0 to answer" in errs[2].read_text(), 30,
                 "the replacement waiting for worker 0's replacement")
        assert not launched.exists()
        procs.append(worker(0, PROGRAM, str(tmp_path / "never"), "0", err=tmp_path / "err-0-new"))
        wait_for(launched.exists, 60, "the replacement starting its launcher")
    finally:
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=30)
