"""CLI argument handling and exit codes (no job runs here; see tests/local for real runs)."""

import json

import pytest

from paddle_ext.cli import main


@pytest.fixture(autouse=True)
def local_home(tmp_path, monkeypatch):
    monkeypatch.setenv("PADDLECLOUD_HOME", str(tmp_path))
    monkeypatch.setenv("PADDLECLOUD_BACKEND", "local")


@pytest.mark.parametrize("argv, words", [
    (["submit", "--workers", "0", "--", "python", "t.py"], "workers: must be at least 1"),
    (["submit", "--gpus-per-worker", "-1", "--", "python", "t.py"], "gpus_per_worker"),
    (["submit", "--name", "Big/Name", "--", "python", "t.py"], "name:"),
    (["submit", "--"], "command:"),
    (["submit", "--env", "NOEQUALS", "--", "x"], "KEY=VALUE"),
    (["submit", "--workers", "two", "--", "x"], "invalid int value"),
    (["submit", "--max-restarts", "-1", "--", "python", "t.py"], "max_restarts: must be at least 0"),
    (["submit", "--max-restarts", "11", "--", "python", "t.py"], "max_restarts: must be at most 10 here"),
    (["status", "nope"], "No job named 'nope'"),
    (["logs", "nope"], "No job named 'nope'"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_input_exits_2_with_one_line(argv, words, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_unknown_backend_from_environment(monkeypatch, capsys):
    monkeypatch.setenv("PADDLECLOUD_BACKEND", "moon")
    assert main(["list"]) == 2
    assert "unknown backend 'moon'" in capsys.readouterr().err


def test_list_json_when_empty(capsys):
    assert main(["list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"jobs": []}


def test_backend_option_before_or_after_the_command(capsys):
    assert main(["--backend", "local", "list", "--json"]) == 0
    assert main(["list", "--backend", "local", "--json"]) == 0
    assert main(["--backend", "moon", "list"]) == 2
    assert "invalid choice: 'moon'" in capsys.readouterr().err


def test_status_and_list_show_the_restarts():
    from paddle_ext.cli import _describe, _table
    from paddle_ext.jobs import Job

    job = Job(name="j", phase="Running", workers=2, spec={"max_restarts": 2}, restarts=1,
              last_restart_reason="worker 1 was killed by signal 9")
    assert "Restarts: 1 of at most 2 (now attempt 2 of 3: worker 1 was killed by signal 9)" in _describe(job)
    header, row = _table([job]).splitlines()
    assert header.split()[:4] == ["NAME", "PHASE", "WORKERS", "RESTARTS"] and row.split()[:4] == ["j", "Running", "2", "1"]
    never = Job(name="k", phase="Running", workers=1, spec={})
    assert "Restarts" not in _describe(never)
    assert (never.to_dict()["restarts"], never.to_dict()["attempt"], never.to_dict()["max_restarts"]) == (0, 1, 0)
    preempted = Job(name="p", phase="Running", workers=2, spec={}, requeues=1,
                    last_restart_reason="preempted: team b reclaimed its GPUs")
    assert ("Restarts: 0 of at most 0; requeued once by the queue (not counted) "
            "(now attempt 2 of 2: preempted: team b reclaimed its GPUs)") in _describe(preempted)
    assert _table([preempted]).splitlines()[1].split()[3] == "0+1"


def test_the_cell_magic_takes_max_restarts_as_the_cli_does():
    from paddle_ext.cli import spec_from_options
    from paddle_ext.magic import build_parser

    args = build_parser().parse_args(["--workers", "2", "--max-restarts", "3"])
    assert spec_from_options(args, ["python", "cell.py"]).max_restarts == 3
    assert spec_from_options(build_parser().parse_args([]), ["python", "cell.py"]).max_restarts is None  # the site's


def test_a_one_shot_command_pauses_the_cyclic_collector_only_while_it_runs(monkeypatch):
    import gc

    from paddle_ext import cli

    seen = []
    monkeypatch.setattr(cli, "run_command", lambda client, args: seen.append(gc.isenabled()) or 0)
    assert gc.isenabled()
    assert main(["list"]) == 0 and main(["logs", "--follow", "some-job"]) == 0
    assert seen == [False, True]  # a follow can run for hours: its cycles are still collected
    assert gc.isenabled()  # main() returns the process as it found it
