"""paddle_ext.trainer_logs: each trainer's log file copied as whole lines (pump() driven
by hand here; the relay's thread and a real launcher are in tests/local/test_live_lines.py)."""

from __future__ import annotations

import os

import pytest

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


@pytest.mark.parametrize("helpers_in_image", [False, True])
def test_the_container_program_relays_forwards_a_stop_and_keeps_the_exit_code(tmp_path, helpers_in_image):
    """What a Kubernetes worker runs: `python -c <this module's source> LOG_DIR RANKS -- LAUNCHER...`,
    or `python -m paddle_ext.trainer_logs ...` in the site's images."""
    import signal
    import subprocess
    import sys

    from paddle_ext.manifests import ManifestSettings, helper_command

    log_dir = tmp_path / "launch"
    _, *helper = helper_command("trainer_logs", ManifestSettings(namespace="ns", image="img",
                                                                 helpers_in_image=helpers_in_image))
    proc = subprocess.Popen([sys.executable, *helper, str(log_dir), "1", "--",
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
    assert err.endswith("paddlecloud: this worker received SIGTERM and stops\n"), err  # the launcher said no more


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


# ---------------------------------------------------------------- the copy of a worker's output

COPYING_LAUNCHER = """
import os, signal, sys, time
def stop(*_):
    print("LAUNCH INFO stopping: last words", file=sys.stderr, flush=True)
    sys.exit(3)
signal.signal(signal.SIGTERM, stop)
print("LAUNCH INFO own message", file=sys.stderr, flush=True)
print("copy asked of me:", os.environ.get("PADDLECLOUD_LOG_COPY_DIR"), file=sys.stderr, flush=True)
with open(os.path.join(sys.argv[1], "workerlog.0"), "a") as f:
    f.write("trainer line\\n")
while True:
    time.sleep(1)
"""


def run_relay_with_copy(tmp_path, copy_dir):
    """The container program with a copy asked for in `copy_dir`, stopped once its trainer's
    line is out: (exit code, standard output, standard error)."""
    import signal
    import subprocess
    import sys

    from paddle_ext.manifests import program

    log_dir = tmp_path / "launch"
    env = {**os.environ, "PADDLECLOUD_LOG_COPY_DIR": str(copy_dir), "PADDLECLOUD_POD_UID": "pod-uid-1"}
    proc = subprocess.Popen([sys.executable, "-c", program("trainer_logs"), str(log_dir), "1", "--",
                             sys.executable, "-c", COPYING_LAUNCHER, str(log_dir)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        out = ""
        while "trainer line\n" not in out:  # (pytest-timeout bounds it)
            out += proc.stdout.readline()
        proc.send_signal(signal.SIGTERM)
        rest, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    return proc.returncode, out + rest, err


def test_the_container_program_keeps_a_copy_of_all_its_output_to_the_last_line(tmp_path):
    from paddle_ext.backends.kubernetes_logs import parse_copy_name

    code, out, err = run_relay_with_copy(tmp_path, tmp_path / "logs" / "worker-0")
    assert code == 3 and err == "", err
    # everything the container prints, the launcher's messages too, in one output and its copy
    assert out == ("LAUNCH INFO own message\ncopy asked of me: None\ntrainer line\n"
                   "paddlecloud: this worker received SIGTERM and stops\nLAUNCH INFO stopping: last words\n")
    [name] = os.listdir(tmp_path / "logs" / "worker-0")
    assert parse_copy_name(name).pod == "pod-uid-1"
    assert (tmp_path / "logs" / "worker-0" / name).read_text() == out


def test_a_copy_that_cannot_be_kept_is_said_once_and_the_job_runs_on(tmp_path):
    (tmp_path / "a-file").write_text("")
    code, out, err = run_relay_with_copy(tmp_path, tmp_path / "a-file" / "worker-0")
    assert code == 3
    assert err.startswith(f"paddlecloud: not keeping a copy of this worker's log in {tmp_path}/a-file/worker-0: ")
    assert err.count("paddlecloud: not keeping") == 1 and "LAUNCH INFO stopping: last words" in err
    assert "paddlecloud: this worker received SIGTERM and stops\n" in err
    assert out == "trainer line\n"


def test_a_copys_name_sorts_by_its_workers_start_and_names_its_pod():
    from paddle_ext.backends.kubernetes_logs import parse_copy_name
    from paddle_ext.trainer_logs import copy_file_name

    name = copy_file_name(1_800_000_000.25, "0f1e2d3c-aaaa-bbbb-cccc-111122223333")
    assert name == "20270115T080000.250000Z-0f1e2d3c-aaaa-bbbb-cccc-111122223333.log"
    assert parse_copy_name(name).started == "20270115T080000.250000Z"
    assert copy_file_name(1_800_000_000.25, "x") < copy_file_name(1_800_000_001.0, "a")


def test_the_standalone_copy_of_the_environment_names_is_the_packages():
    from paddle_ext import constants, trainer_logs

    assert (trainer_logs.LOG_COPY_DIR_ENV, trainer_logs.POD_UID_ENV) == (constants.LOG_COPY_DIR_ENV,
                                                                          constants.POD_UID_ENV)


def test_the_names_the_launcher_dials_are_the_masters_and_its_own_not_the_users_arguments():
    from paddle_ext.manifests import ManifestSettings, indexed_job
    from paddle_ext.spec import JobSpec
    from paddle_ext.trainer_logs import dialled_names

    spec = JobSpec(name="train-x", command=["train.py", "--master", "mine:1", "--host", "h"], workers=2)
    command = indexed_job(spec, ManifestSettings(namespace="ns", image="img"))["spec"]["template"]["spec"][
        "containers"][0]["command"]
    assert dialled_names(command, {}) == ["train-x-0.train-x", "train-x-$(JOB_COMPLETION_INDEX).train-x"]
    launcher = ["python", "-m", "paddle.distributed.launch", "--nproc_per_node", "1", "train.py"]
    assert dialled_names(launcher, {"PADDLE_MASTER": "job-master-0:36543"}) == ["job-master-0"]  # an operator's
    assert dialled_names(launcher, {}) == []
    assert dialled_names([*launcher[:3], "--master", "[::1]:8090", *launcher[3:]], {}) == ["::1"]
    assert dialled_names(["python", "train.py", "--master", "m:1"], {}) == []  # not the launcher


def test_the_launcher_waits_until_the_names_it_dials_resolve_and_says_so_once_it_waits_long(capsys):
    from paddle_ext.trainer_logs import NAMES_CHECK_SECONDS, NAMES_QUIET_SECONDS, wait_for_names

    asked = []
    pod_up = {"w-0.w": False, "w-1.w": True}
    clock = [0.0]

    def resolves(name):
        asked.append(name)
        if len(asked) == 5:  # worker 0's pod gets its address while we wait (looked at 0, 1, then 2)
            pod_up["w-0.w"] = True
        return pod_up[name]

    def sleep(seconds):
        slept.append(seconds)
        clock[0] += seconds

    slept: list[float] = []
    assert wait_for_names(["w-0.w", "w-1.w"], resolves=resolves, clock=lambda: clock[0], sleep=sleep) == []
    assert slept == [NAMES_CHECK_SECONDS, NAMES_CHECK_SECONDS]
    assert capsys.readouterr().err == ""  # a short wait, as most are: nothing said

    asked.clear()
    pod_up["w-0.w"] = False
    slow = iter([False] * 30 + [True])
    assert wait_for_names(["w-0.w"], resolves=lambda name: next(slow), clock=lambda: clock[0], sleep=sleep) == []
    assert capsys.readouterr().err == "paddlecloud: waits for the name w-0.w to resolve (its pod is starting)\n"
    assert 30 * NAMES_CHECK_SECONDS > NAMES_QUIET_SECONDS  # it said so once, though it waited longer


def test_the_wait_for_names_ends_at_its_limit_or_on_a_stop():
    from paddle_ext.trainer_logs import wait_for_names

    clock = iter(range(100))
    assert wait_for_names(["w-0.w"], resolves=lambda name: False, clock=lambda: next(clock), sleep=lambda s: None,
                          limit=10) == ["w-0.w"]
    assert next(clock) == 11  # started at 0, looked at 1..10: it gave up at the limit, not before
    stops = iter([False, False, True])
    assert wait_for_names(["w-0.w"], stopped=lambda: next(stops), resolves=lambda name: False,
                          sleep=lambda s: None) == ["w-0.w"]


def test_a_stop_while_a_name_does_not_resolve_ends_the_container_without_its_launcher(tmp_path):
    """A name with an empty label never resolves (and no lookup leaves the machine); the
    relay says so after NAMES_QUIET_SECONDS."""
    import signal
    import subprocess
    import sys

    started = tmp_path / "launcher-started"
    launcher = [sys.executable, "-c", f"open({str(started)!r}, 'w')", "paddle.distributed.launch",
                "--master", "worker..never:8090", "--host", "localhost"]
    proc = subprocess.Popen([sys.executable, "-m", "paddle_ext.trainer_logs", str(tmp_path / "launch"), "1", "--",
                             *launcher], stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr.readline() == ("paddlecloud: waits for the name worker..never to resolve "
                                          "(its pod is starting)\n")  # blocks until said (pytest-timeout bounds it)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert (proc.returncode, err) == (128 + signal.SIGTERM, "paddlecloud: this worker received SIGTERM and stops\n")
    assert not started.exists()
