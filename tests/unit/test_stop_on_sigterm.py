"""A run stopped with SIGTERM tears its fixtures down (tests/stop_on_sigterm.py)."""

import signal
import subprocess

from serverutil import die_with_parent, isolated_pytest, wait_for

SUITE = '''
import os, signal
import pytest

@pytest.fixture(scope="session")
def started_thing():
    yield
    open(os.environ["TORN_DOWN"], "w").close()

def test_waits_to_be_stopped(started_thing):
    open(os.environ["RUNNING"], "w").close()
    signal.pause()  # until the SIGTERM the outer test sends
'''


def run_and_terminate(tmp_path, plugin: bool) -> tuple[bool, int]:
    running, torn_down = tmp_path / "running", tmp_path / "torn-down"
    cmd, env = isolated_pytest(tmp_path, SUITE, *(("-p", "stop_on_sigterm") if plugin else ()))
    env.update(RUNNING=str(running), TORN_DOWN=str(torn_down))
    # die_with_parent: a run of this test that is itself killed leaves no held run waiting forever
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=die_with_parent)
    try:
        wait_for(lambda: running.exists() or proc.poll() is not None, timeout=60, what="the held test to start")
        assert proc.poll() is None, proc.communicate()[0].decode()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return torn_down.exists(), proc.returncode


def test_a_sigterm_ends_the_run_with_its_fixtures_torn_down(tmp_path):
    torn_down, code = run_and_terminate(tmp_path, plugin=True)
    assert torn_down
    assert code == 2  # pytest's "interrupted"


def test_without_the_plugin_a_sigterm_leaves_the_fixtures_standing(tmp_path):
    torn_down, code = run_and_terminate(tmp_path, plugin=False)
    assert not torn_down and code == -signal.SIGTERM
