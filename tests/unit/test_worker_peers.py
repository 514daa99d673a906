"""How a worker (paddle_ext.worker) reads its peers' answers: which silences make a peer lost.
The peers' answers are scripted; tests/local/test_worker_entry.py runs real worker pairs."""

from __future__ import annotations

import socket

import pytest

from paddle_ext import worker as worker_module
from paddle_ext.worker import MISSES_FOR_LOSS, Worker

RUNNING = ("running", "token-1", {})


@pytest.fixture
def worker(monkeypatch):
    """Worker 0 of 2 (listening on a free port), whose look at worker 1 gets the next of
    `answers`: an answer, or an OSError to raise."""
    made = Worker(index=0, workers=2, peer="127.0.0.1", port=0, argv=[])
    answers: list = []

    def ask_or_raise(index):
        assert index == 1
        answer = answers.pop(0)
        if isinstance(answer, OSError):
            raise answer
        return answer

    monkeypatch.setattr(made, "ask_or_raise", ask_or_raise)
    made.answers = answers
    yield made
    made.close()


@pytest.mark.parametrize("silence", [TimeoutError("timed out"), socket.gaierror(-3, "Temporary failure in name resolution"),
                                     OSError(113, "No route to host")])
def test_a_peer_that_misses_fewer_looks_in_a_row_than_the_limit_is_not_lost(worker, silence):
    """A stalled peer (a CPU-starved node, a slow name lookup) once restarted a healthy job."""
    worker.answers[:] = [RUNNING, *[silence] * (MISSES_FOR_LOSS - 1), RUNNING, *[silence] * (MISSES_FOR_LOSS - 1)]
    assert [worker.look() for _ in range(2 * MISSES_FOR_LOSS)] == [None] * (2 * MISSES_FOR_LOSS)


def test_a_peer_silent_for_the_limit_of_looks_in_a_row_is_lost(worker):
    worker.answers[:] = [RUNNING, *[TimeoutError("timed out")] * MISSES_FOR_LOSS]
    assert [worker.look() for _ in range(1 + MISSES_FOR_LOSS)] == [None] * MISSES_FOR_LOSS + [1]


def test_a_peer_that_refuses_is_lost_at_once(worker):
    """A worker going away closes its listener first (on SIGTERM too)."""
    worker.answers[:] = [RUNNING, ConnectionRefusedError(111, "Connection refused")]
    assert [worker.look(), worker.look()] == [None, 1]


def test_a_replaced_peer_is_lost_at_once_and_a_peer_never_seen_running_never_is(worker):
    worker.answers[:] = [ConnectionRefusedError(111, "refused"), TimeoutError("timed out"), RUNNING,
                         ("running", "token-2", {})]
    assert [worker.look() for _ in range(4)] == [None, None, None, 1]


def test_after_its_program_failed_a_worker_looks_until_a_silent_peer_is_lost_or_answers(worker, monkeypatch):
    """A program that failed because its peer's pod vanished (its looks time out) restarts the
    job; it is not the user's error."""
    monkeypatch.setattr(worker_module.time, "sleep", lambda seconds: None)
    worker.answers[:] = [RUNNING, *[TimeoutError("timed out")] * MISSES_FOR_LOSS]
    assert worker.look() is None and worker.look_until_sure() == 1
    worker.answers[:] = [TimeoutError("timed out"), RUNNING]
    worker.misses.clear()
    assert worker.look_until_sure() is None and worker.answers == []
