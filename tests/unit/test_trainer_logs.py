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


# A stand-in launcher (the real one is in tests/local/test_live_lines.py): it prints its own
# copy to stdout (which must be left out) and a message to stderr (kept), writes a trainer
# line to workerlog.0, then waits for SIGTERM and exits 3.
FAKE_LAUNCHER = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
print("the launcher's late copy", flush=True)
print("LAUNCH INFO own message", file=sys.stderr, flush=True)
with open(os.path.join(sys.argv[1], "workerlog.0"), "a") as f:  # last: once it is relayed, the rest is out
    f.write("trainer line\\n")
while True:
    time.sleep(1)
"""


def test_the_container_program_relays_forwards_a_stop_and_keeps_the_exit_code(tmp_path):
    """What a Kubernetes worker runs: `python -c <this module's source> LOG_DIR RANKS -- LAUNCHER...`."""
    import signal
    import subprocess
    import sys

    from paddle_ext.manifests import program

    log_dir = tmp_path / "launch"
    proc = subprocess.Popen([sys.executable, "-c", program("trainer_logs"), str(log_dir), "1", "--",
                             sys.executable, "-c", FAKE_LAUNCHER, str(log_dir)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "trainer line\n"  # blocks until relayed (pytest-timeout bounds it)
        proc.send_signal(signal.SIGTERM)  # what a container's stop sends its first process
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 3, err
    assert out == ""  # the launcher's own copy never shows
    assert "LAUNCH INFO own message" in err


def test_the_container_program_says_how_to_call_it():
    import subprocess
    import sys

    from paddle_ext.manifests import program

    proc = subprocess.run([sys.executable, "-c", program("trainer_logs"), "dir", "x", "--", "true"], capture_output=True,
                          text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (2, "usage: trainer_logs LOG_DIR RANKS -- LAUNCHER_ARGV...\n")


def test_my_output_only_sees_through_the_local_rank_prefix():
    from paddle_ext.loglines import users_lines

    lines = ["[worker-1] [local-rank-1] LAUNCH INFO 2026-11-30 09:33:28,711 starting",
             "[worker-1] [local-rank-1] I1130 09:33:30.985277 17370 tcp_utils.cc:109] Retry",
             "[worker-1] [local-rank-1] epoch 1 loss 0.5"]
    assert users_lines(lines) == ["[worker-1] [local-rank-1] epoch 1 loss 0.5"]


def test_the_standalone_copy_of_the_local_rank_prefix_is_the_packages():
    from paddle_ext import constants, trainer_logs

    assert trainer_logs.LOCAL_RANK_PREFIX == constants.LOCAL_RANK_PREFIX


def test_a_burst_longer_than_one_read_is_passed_on_whole(tmp_path):
    from paddle_ext import trainer_logs

    relay, out, got = relay_into(tmp_path, 1)
    lines = "".join(f"line {i:07d}\n" for i in range(3 * trainer_logs.READ_SIZE // 13 + 5))  # > 3 reads
    append(tmp_path, 0, lines + "tail")
    relay.pump()
    assert got() == lines
    relay.stop()
    assert got() == lines + "tail\n"
    out.close()


async def test_a_follower_wakes_when_the_job_folder_is_written(tmp_path):
    """The local follow's wait (backends.local.written): woken by the write, not by its timeout."""
    import asyncio

    from paddle_ext.backends.local import written
    from paddle_ext.trainer_logs import DirectoryWatch

    watch = DirectoryWatch(str(tmp_path))
    try:
        assert watch.fd is not None  # Linux has inotify; the CI machine too
        asyncio.get_running_loop().call_soon(lambda: (tmp_path / "worker-0.log").write_text("a line\n"))
        assert await written(watch, 600) is True
    finally:
        watch.close()


async def test_without_inotify_the_follower_waits_its_interval():
    from paddle_ext.backends.local import written
    from paddle_ext.trainer_logs import DirectoryWatch

    watch = DirectoryWatch("/nonexistent-folder-for-this-test")  # no watch can be added
    assert watch.fd is None
    assert await written(watch, 0.01) is False
