"""The restart rule (paddle_ext.restarts): which exits are retried, what a restart says."""

import dataclasses

import pytest

from paddle_ext.restarts import (PEER_LOST_EXIT_CODE, USER_EXIT_CODES, decide, exit_cause, failure_message,
                                 may_be_a_consequence,
                                 restart_marker, signal_of)


@pytest.mark.parametrize("code, retryable, words", [
    (1, False, "exited with code 1"),       # a Python exception
    (3, False, "exited with code 3"),       # sys.exit(3)
    (128, False, "exited with code 128"),
    (-9, True, "was killed by signal 9"),   # the launcher itself killed (Popen's code)
    (247, True, "was killed by signal 9"),  # Paddle's launcher: sys.exit(-9) of its trainer
    (137, True, "was killed by signal 9"),  # a shell's or container's 128+9 (OOM killer, SIGKILL)
    (143, True, "was killed by signal 15"),  # SIGTERM of a deleted pod's container
    (None, True, "was lost (it ended without an exit code)"),
    (PEER_LOST_EXIT_CODE, True, "stopped because a peer worker was lost"),
])
def test_the_users_own_errors_are_not_retried_and_losses_are(code, retryable, words):
    assert exit_cause(code) == exit_cause(code) and exit_cause(code).retryable is retryable
    assert exit_cause(code).words == words


def test_the_user_exit_codes_and_the_signal_codes_do_not_overlap():
    assert all(signal_of(code) is None for code in USER_EXIT_CODES)
    assert all(signal_of(code) is not None for code in range(129, 256))
    assert PEER_LOST_EXIT_CODE not in USER_EXIT_CODES


def test_a_killed_worker_explains_its_peers_errors_and_restarts_while_restarts_are_left():
    # Worker 1 killed; worker 0's program then failed on the lost connection (exit 1).
    decision = decide({0: 1, 1: 247}, attempt=0, max_restarts=2)
    assert (decision.restart, decision.worker, decision.reason) == (True, 1, "worker 1 was killed by signal 9")
    last = decide({0: 1, 1: 247}, attempt=2, max_restarts=2)
    assert (last.restart, last.retryable) == (False, True)
    assert failure_message(last.reason, 2, 2, last.retryable) == (
        "Worker 1 was killed by signal 9. Restarted 2 of at most 2 times; no restarts are left.")


def test_a_killed_worker_is_named_before_a_peer_that_aborted_or_was_stopped():
    # Worker 1 SIGKILLed (247); worker 0's trainer aborted on the broken connection (250: SIGABRT).
    decision = decide({0: 250, 1: 247}, attempt=0, max_restarts=2)
    assert (decision.restart, decision.reason) == (True, "worker 1 was killed by signal 9")
    assert decide({0: PEER_LOST_EXIT_CODE, 1: 143}, 0, 1).reason == "worker 1 was killed by signal 15"
    assert decide({0: None, 1: 250}, 0, 1).worker == 0  # lost is a cause
    assert [may_be_a_consequence(code) for code in (1, 250, 143, PEER_LOST_EXIT_CODE, 247, None)] == [
        True, True, True, True, False, False]


def test_a_users_error_ends_the_job_at_once():
    decision = decide({1: 1}, attempt=0, max_restarts=5)
    assert (decision.restart, decision.retryable, decision.reason) == (False, False, "worker 1 exited with code 1")
    assert failure_message(decision.reason, 0, 5, False) == (
        "Worker 1 exited with code 1. Not restarted: an error in the job's own code fails it at once.")
    assert failure_message("worker 1 exited with code 3", 0, 0, False) == "Worker 1 exited with code 3."
    with pytest.raises(ValueError):
        decide({}, 0, 1)


def test_the_marker_line_names_the_attempt_and_the_reason():
    assert restart_marker(1, 2, "worker 1 was killed by signal 9") == (
        "--- attempt 2 of 3: worker 1 was killed by signal 9; restarting ---")


def test_the_job_folder_lists_its_restarts_in_order(tmp_path):
    from paddle_ext.backends import local_files as files

    assert files.restarts(str(tmp_path)) == []
    files.write_json(files.decision_file(str(tmp_path), 0), {"restart": True, "reason": "worker 1 was lost"})
    files.write_json(files.decision_file(str(tmp_path), 1), {"restart": False, "reason": "worker 0 exited with code 1"})
    assert [d["reason"] for d in files.restarts(str(tmp_path))] == ["worker 1 was lost"]


def test_a_requeue_is_an_attempt_the_job_did_not_spend_a_restart_on():
    from paddle_ext.jobs import Job, Phase

    preempted = Job(name="a", phase=Phase.RUNNING, workers=2, spec={"max_restarts": 0}, requeues=1,
                    last_restart_reason="preempted: team b reclaimed its GPUs")
    assert (preempted.attempt, preempted.restarts) == (2, 0)
    assert preempted.attempt_line() == "attempt 2 of 2: preempted: team b reclaimed its GPUs"
    assert preempted.to_dict()["requeues"] == 1 and preempted.to_dict()["attempt"] == 2
    both = Job(name="a", phase=Phase.RUNNING, workers=2, spec={"max_restarts": 2}, restarts=1, requeues=1,
               last_restart_reason="worker 1 was killed by signal 9")
    assert both.attempt_line() == "attempt 3 of 4: worker 1 was killed by signal 9"
    assert Job(name="a", phase=Phase.RUNNING, workers=2, spec={"max_restarts": 2}).attempt_line() == ""


def test_the_attempt_line_says_when_the_restart_happened_and_the_step_resumed_from():
    from paddle_ext.jobs import Job, Phase

    job = Job(name="a", phase=Phase.RUNNING, workers=2, spec={"max_restarts": 3}, restarts=1,
              last_restart_reason="worker 1 was evicted or preempted", last_restart_at="2026-12-03T14:02:41Z",
              resumed_from_step=500)
    assert job.attempt_line() == "attempt 2 of 4: worker 1 was evicted or preempted at 14:02 UTC; resumed from step 500"
    assert (job.to_dict()["last_restart_at"], job.to_dict()["resumed_from_step"]) == ("2026-12-03T14:02:41Z", 500)
    fresh = dataclasses.replace(job, last_restart_at=None, resumed_from_step=0)
    assert fresh.attempt_line() == ("attempt 2 of 4: worker 1 was evicted or preempted; "
                                    "no checkpoint, started again from step 0")
    assert dataclasses.replace(job, last_restart_at="+02:00 tomorrow").attempt_line().startswith(
        "attempt 2 of 4: worker 1 was evicted or preempted at +02:00 tomorrow;")  # not a time: said as it is
    assert dataclasses.replace(job, last_restart_at="2026-12-03T15:02:41+01:00").attempt_line() == job.attempt_line()


def test_a_backend_reads_the_step_resumed_from_only_from_kept_outputs_in_its_folder(tmp_path):
    from paddle_ext import checkpoint
    from paddle_ext.backends.base import with_resume
    from paddle_ext.jobs import Job, Phase, outputs_record

    outputs = tmp_path / "workspace" / "paddlecloud-outputs" / "a"
    (outputs / checkpoint.FOLDER).mkdir(parents=True)
    (outputs / checkpoint.FOLDER / checkpoint.RESUME_RECORD).write_text('{"job": "a", "attempt": 1, "step": 40}')
    job = Job(name="a", phase=Phase.RUNNING, workers=1, spec={"max_restarts": 1}, restarts=1,
              outputs=outputs_record(str(outputs), kept=True))
    assert with_resume(job).resumed_from_step == 40
    assert with_resume(job, str(tmp_path / "workspace")).resumed_from_step == 40
    assert with_resume(job, str(tmp_path / "elsewhere")) is job  # a path the job's annotation names, outside
    assert with_resume(dataclasses.replace(job, restarts=0)) == dataclasses.replace(job, restarts=0)  # attempt 1
    assert with_resume(dataclasses.replace(job, outputs=outputs_record(str(outputs), kept=False))).resumed_from_step is None
    assert with_resume(dataclasses.replace(job, restarts=2)).resumed_from_step is None  # attempt 3 not resumed yet
