"""paddle_ext.trainer_logs: each trainer's log file copied as whole lines (pump() driven
by hand here; the relay's thread and a real launcher are in tests/local/test_live_lines.py)."""

from __future__ import annotations

import os

from paddle_ext.trainer_logs import TrainerLogRelay, trainer_log


def relay_into(tmp_path, ranks):
    out = open(tmp_path / "out.log", "ab", buffering=0)
    relay = TrainerLogRelay(str(tmp_path / "launch"), ranks, out.fileno())
    return relay, out, lambda: (tmp_path / "out.log").read_text()


def append(tmp_path, rank, text):
    with open(trainer_log(str(tmp_path / "launch"), rank), "a") as f:
        f.write(text)


def test_one_trainer_whole_lines_only_until_the_end(tmp_path):
    relay, out, got = relay_into(tmp_path, 1)
    assert relay.pump() == 0  # no file yet
    append(tmp_path, 0, "step 1\nstep 2\npart")
    relay.pump()
    assert got() == "step 1\nstep 2\n"  # the partial line waits
    append(tmp_path, 0, "ial\nlast without newline")
    relay.pump()
    assert got() == "step 1\nstep 2\npartial\n"
    relay.pump(final=True)
    assert got() == "step 1\nstep 2\npartial\nlast without newline\n"
    out.close()


def test_several_trainers_carry_their_local_rank(tmp_path):
    relay, out, got = relay_into(tmp_path, 2)
    append(tmp_path, 1, "from one\n")
    append(tmp_path, 0, "from zero\nagain\n")
    relay.pump()
    assert sorted(got().splitlines()) == ["[local-rank-0] again", "[local-rank-0] from zero", "[local-rank-1] from one"]
    out.close()


def test_a_truncated_log_is_read_again_from_its_start(tmp_path):
    relay, out, got = relay_into(tmp_path, 1)
    append(tmp_path, 0, "first run, a long line\n")
    relay.pump()
    os.truncate(trainer_log(str(tmp_path / "launch"), 0), 0)  # --log_overwrite on a restart
    append(tmp_path, 0, "second\n")
    relay.pump()
    assert got() == "first run, a long line\nsecond\n"
    out.close()


def test_the_thread_copies_and_stop_leaves_nothing_behind(tmp_path):
    relay, out, got = relay_into(tmp_path, 1)
    relay.start()
    append(tmp_path, 0, "a\nb")
    relay.stop()  # whatever the thread saw, stop() copies the rest, the unfinished line too
    assert got() == "a\nb\n"
    out.close()
