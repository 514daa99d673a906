"""Whether a local job's worker is alive: its process group (led by the worker's supervisor),
with real processes. The answers must be the walk over every process's /proc entry's, and the
two common ones (leader running; no process left) must come without that walk."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from paddle_ext.backends import local_files as files

# A group leader that starts a child in its group, says the child's pid and exits.
LEAVES_A_CHILD = ("import subprocess, sys; child = subprocess.Popen(['sleep', '60']); "
                  "print(child.pid, flush=True); sys.exit(0)")


@pytest.fixture
def no_walk(monkeypatch):
    """Fails a test that walks /proc process by process."""
    def walked():
        raise AssertionError("walked every process's /proc entry")
    monkeypatch.setattr(files, "_live_processes", walked)


def test_a_group_whose_leader_runs_is_alive_without_a_walk(no_walk):
    leader = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        assert files.group_alive(leader.pid)
    finally:
        leader.kill()
        leader.wait()


def test_a_group_with_no_process_left_is_dead_without_a_walk(no_walk):
    leader = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    leader.wait()  # reaped: the kernel knows no process of the group
    assert not files.group_alive(leader.pid)
    assert files.group_members(leader.pid) == []


def test_a_group_whose_leader_ended_is_alive_while_its_child_runs():
    leader = subprocess.Popen([sys.executable, "-c", LEAVES_A_CHILD], start_new_session=True,
                              stdout=subprocess.PIPE, text=True)
    child = int(leader.stdout.readline())
    leader.wait()
    try:
        assert files.group_alive(leader.pid)
        assert files.group_members(leader.pid) == [child]
    finally:
        os.killpg(leader.pid, signal.SIGKILL)


def test_a_group_of_a_zombie_only_is_not_alive():
    leader = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    try:
        os.waitid(os.P_PID, leader.pid, os.WEXITED | os.WNOWAIT)  # ended, not reaped: a zombie
        assert not files.group_alive(leader.pid)
        assert files.group_members(leader.pid) == []
    finally:
        leader.wait()
