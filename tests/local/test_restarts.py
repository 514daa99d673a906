"""Restarts on the embedded default (issue 24), with real two-worker Paddle runs: a trainer
killed with SIGKILL at step 50 restarts both workers together, which resume from the last
checkpoint and finish with the same model as a run never interrupted; a script that exits 1
on purpose fails at once. The kill happens at a gate (the script pauses at step 50 and says
so in a file holding its pid), never after a timer."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import numpy as np
import pytest

from paddle_ext.backends import local_files
from serverutil import job_pids, wait_for

TRAIN = ["python", "train.py", "--epochs", "4", "--steps", "20", "--checkpoint-every", "10"]
MARKER = "--- attempt 2 of 3: worker 1 was killed by signal 9; restarting ---"


DETAIL = re.compile(r"-+ ERROR LOG DETAIL -+\n.*?(?=LAUNCH INFO [^\n]* Exit code)", re.S)


def without_launcher_detail(log: str) -> str:
    """The log less the block Paddle's launcher prints after a trainer fails: the trainer's
    last lines again, under ERROR LOG DETAIL (the launcher's own repeat, on every failure)."""
    return DETAIL.sub("", log)


def epoch_losses(log: str, rank: int) -> dict[int, float]:
    log = without_launcher_detail(log)
    found = {}
    for match in re.finditer(rf"rank {rank}: epoch (\d+)/4 step \d+ loss ([0-9.]+)", log):
        assert int(match[1]) not in found, f"epoch {match[1]} reported twice:\n{log}"
        found[int(match[1])] = float(match[2])
    return found


def final_model(job: dict) -> dict:
    paddle = pytest.importorskip("paddle")
    state = paddle.load(str(Path(job["outputs"]["path"]) / "final.pdparams"))
    return {name: np.asarray(value) for name, value in state.items()}


def test_a_killed_trainer_restarts_both_workers_from_the_checkpoint_and_the_job_succeeds(server, tmp_path):
    pause = tmp_path / "pause"  # never created: only the kill moves the job on
    job = server.submit(command=[*TRAIN, "--pause-at", "50", "--pause-file", str(pause)], workers=2, max_restarts=2)
    name = job["name"]
    assert (job["restarts"], job["attempt"], job["max_restarts"]) == (0, 1, 2)
    markers = [Path(f"{pause}.attempt0.rank{rank}") for rank in (0, 1)]
    wait_for(lambda: all(marker.exists() for marker in markers), 240, "both ranks paused at step 50")
    trainer = int(markers[1].read_text())
    supervisor = local_files.worker_pids(str(Path(server.home) / "jobs" / name))[1]
    assert trainer in local_files.descendants(supervisor)  # the trainer of this job's worker 1
    os.kill(trainer, signal.SIGKILL)

    final = server.wait_for(name, ("Succeeded", "Failed"), timeout=300)
    assert final["phase"] == "Succeeded", final
    assert (final["restarts"], final["attempt"]) == (1, 2)
    assert final["last_restart_reason"] == "worker 1 was killed by signal 9"
    assert final["created"] < final["last_restart_at"] <= final["finished"], final  # ISO UTC: ordered as text
    assert final["resumed_from_step"] == 50, final  # rank 0's resume record, read by the status
    assert [w["exit_code"] for w in final["worker_states"]] == [0, 0]

    for rank in (0, 1):
        log = server.log(name, worker=str(rank))
        # Both attempts' lines are kept, each once, in order, the marker between them.
        assert log.count(MARKER) == 1, log
        before, after = log.split(MARKER)
        assert f"rank {rank}: paused at step 50" in before and "resumed from" not in before
        assert "resumed from checkpoint at step 50" in after
        assert f"rank {rank}: done" in after and f"rank {rank}: done" not in before
        losses = epoch_losses(log, rank)
        assert sorted(losses) == [1, 2, 3, 4]
        assert "epoch 2/4 step 40" in before and "epoch 3/4 step 60" in after
        # The curve goes on from where it was: no jump back to the first epoch's loss.
        assert losses[3] < losses[1] / 10 and losses[4] < losses[1] / 10, losses
    merged = server.log(name)
    assert merged.count(MARKER) == 2  # once in each worker's log

    plain = server.submit(command=TRAIN, workers=2, max_restarts=2)
    whole = server.wait_for(plain["name"], ("Succeeded", "Failed"), timeout=300)
    assert whole["phase"] == "Succeeded" and whole["restarts"] == 0
    resumed, uninterrupted = final_model(final), final_model(whole)
    assert set(resumed) == set(uninterrupted)
    for key, value in uninterrupted.items():
        np.testing.assert_allclose(resumed[key], value, rtol=1e-5, atol=1e-6)
    assert job_pids(server.home, name) == []


def test_a_peer_whose_collective_breaks_when_a_worker_is_killed_does_not_make_it_the_users_error(server, tmp_path):
    """Only rank 1 pauses: rank 0 goes on into the next step's all-reduce and is inside it when
    rank 1 is killed (with gloo on the CPU it waits there; a backend that fails would exit 1).
    The killed worker is the cause; rank 0 is stopped and both restart."""
    pause = tmp_path / "pause"  # never created
    job = server.submit(command=[*TRAIN, "--pause-at", "50", "--pause-rank", "1", "--pause-file", str(pause)],
                        workers=2, max_restarts=1)
    marker = Path(f"{pause}.attempt0.rank1")
    wait_for(marker.exists, 240, "rank 1 paused at step 50")
    os.kill(int(marker.read_text()), signal.SIGKILL)
    final = server.wait_for(job["name"], ("Succeeded", "Failed"), timeout=300)
    assert (final["phase"], final["restarts"]) == ("Succeeded", 1), final
    assert final["last_restart_reason"] == "worker 1 was killed by signal 9"
    assert "resumed from checkpoint at step 50" in server.log(job["name"], worker="1")


def test_a_job_that_keeps_losing_a_worker_fails_after_max_restarts_with_the_count_and_the_reason(server, tmp_path):
    pause = tmp_path / "pause"  # never created
    job = server.submit(command=[*TRAIN, "--pause-at", "50", "--pause-attempts", "2", "--pause-file", str(pause)],
                        workers=2, max_restarts=1)
    name = job["name"]
    for attempt in (0, 1):
        markers = [Path(f"{pause}.attempt{attempt}.rank{rank}") for rank in (0, 1)]
        wait_for(lambda markers=markers: all(marker.exists() for marker in markers), 240,
                 f"both ranks paused in attempt {attempt}")
        os.kill(int(markers[1].read_text()), signal.SIGKILL)
    final = server.wait_for(name, ("Succeeded", "Failed"), timeout=300)
    assert (final["phase"], final["reason"], final["restarts"]) == ("Failed", "WorkerFailed", 1), final
    assert final["message"].startswith(
        "Worker 1 was killed by signal 9. Restarted 1 of at most 1 times; no restarts are left."), final["message"]
    log = server.log(name, worker="1")
    assert log.count("--- attempt 2 of 2: worker 1 was killed by signal 9; restarting ---") == 1
    assert "resumed from checkpoint at step 50" in log
    assert job_pids(server.home, name) == []


def test_a_script_that_exits_1_fails_at_once_without_a_restart(server):
    job = server.submit(command=["python", "train.py", "--epochs", "1", "--exit-code", "1", "--fail-rank", "1"],
                        workers=2, max_restarts=2)
    final = server.wait_for(job["name"], ("Succeeded", "Failed"), timeout=240)
    assert final["phase"] == "Failed" and final["reason"] == "WorkerFailed"
    assert (final["restarts"], final["attempt"], final["last_restart_reason"]) == (0, 1, "")
    assert final["message"].startswith("Worker 1 exited with code 1. Not restarted")
    assert "--- attempt" not in server.log(job["name"])
    assert job_pids(server.home, job["name"]) == []
