"""paddle_ext.checkpoint with real Paddle on the CPU: what is saved comes back, a save is
atomic, only rank 0 writes, the last N are kept, and a resumed run ends where an
uninterrupted one does."""

import os
import pickle

import numpy as np
import pytest

paddle = pytest.importorskip("paddle")

from paddle_ext import checkpoint  # noqa: E402


@pytest.fixture(autouse=True)
def outputs(tmp_path, monkeypatch):
    monkeypatch.setenv("PADDLECLOUD_OUTPUT_DIR", str(tmp_path))
    monkeypatch.delenv("PADDLE_TRAINER_ID", raising=False)
    monkeypatch.setenv("PADDLECLOUD_RESTART", "0")  # resume() may set it: restored after each test
    monkeypatch.setenv("PADDLECLOUD_JOB_NAME", "train-x")
    paddle.set_device("cpu")
    return tmp_path


def make(seed):
    """A model and a stateless optimizer (in one process; Adam's state is keyed by names that
    only a fresh process repeats: see the run in subprocesses below)."""
    paddle.seed(seed)
    with paddle.utils.unique_name.guard():
        model = paddle.nn.Linear(4, 1)
        return model, paddle.optimizer.SGD(learning_rate=0.05, parameters=model.parameters())


def params(model):
    return {name: value.numpy().copy() for name, value in model.state_dict().items()}


RUN = """
import sys
import numpy as np
import paddle
from paddle_ext import checkpoint

seed, start_fresh, steps, save_at, out = int(sys.argv[1]), sys.argv[2] == "fresh", int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
paddle.set_device("cpu")
paddle.seed(seed)
model = paddle.nn.Linear(4, 1)
optimizer = paddle.optimizer.Adam(learning_rate=0.05, parameters=model.parameters())
start = 0 if start_fresh else checkpoint.resume(model, optimizer)
for step in range(start, steps):
    rng = np.random.default_rng(step)  # the data of a step depends on the step only
    x = paddle.to_tensor(rng.standard_normal((8, 4)).astype("float32"))
    loss = (model(x) - x.sum(axis=1, keepdim=True)).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.clear_grad()
    if step + 1 == save_at:
        checkpoint.save(model, optimizer, step + 1)
        break
np.savez(out, **{name: value.numpy() for name, value in model.state_dict().items()})
print("start", start)
"""


def run(tmp_path, *args):
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", RUN, *map(str, args)], capture_output=True, text=True,
                            timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_a_resumed_run_ends_where_an_uninterrupted_one_does(outputs, tmp_path):
    """Model and Adam state: 6 steps in one process equal 3 steps, a checkpoint, and 3 more
    in a new process that starts from other weights."""
    run(tmp_path, 0, "fresh", 6, -1, tmp_path / "whole.npz")
    run(tmp_path, 0, "fresh", 6, 3, tmp_path / "first.npz")
    assert [c.step for c in checkpoint.checkpoints()] == [3]
    said = run(tmp_path, 7, "resume", 6, -1, tmp_path / "again.npz")
    assert "resumed from checkpoint at step 3" in said and "start 3" in said
    whole, again = np.load(tmp_path / "whole.npz"), np.load(tmp_path / "again.npz")
    assert set(whole.files) == set(again.files)
    for name in whole.files:
        np.testing.assert_allclose(again[name], whole[name], rtol=1e-6, atol=1e-7)
    first = np.load(tmp_path / "first.npz")
    assert not all(np.allclose(first[name], whole[name]) for name in whole.files)  # the test can fail


def test_nothing_to_resume_from_is_step_zero_and_said_after_a_restart(monkeypatch, capsys):
    model, optimizer = make(0)
    before = params(model)
    assert checkpoint.resume(model, optimizer) == 0 and checkpoint.latest() is None
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("PADDLECLOUD_RESTART", "1")
    assert checkpoint.resume(model, optimizer) == 0
    assert "attempt 2: no checkpoint" in capsys.readouterr().err
    assert all((params(model)[k] == v).all() for k, v in before.items())


def test_the_log_says_the_step_and_the_attempt(monkeypatch, capsys):
    model, optimizer = make(0)
    checkpoint.save(model, optimizer, 50)
    monkeypatch.setenv("PADDLECLOUD_RESTART", "1")
    assert checkpoint.resume(model, optimizer) == 50
    assert "resumed from checkpoint at step 50" in capsys.readouterr().out
    assert checkpoint.attempt() == 1


def test_a_run_resuming_its_own_jobs_checkpoint_is_a_later_attempt_though_no_failure_was_counted(monkeypatch, capsys):
    """A queue's requeue (Kueue preempted the job) is not a failure: $PADDLECLOUD_RESTART stays
    0, but the checkpoint says which attempt wrote it, so the log does not say 'attempt 1'
    twice, and the next checkpoint carries the attempt on."""
    model, optimizer = make(0)
    checkpoint.save(model, optimizer, 10)  # attempt 0 (the first)
    assert checkpoint.resume(model, optimizer) == 10
    assert "resumed from checkpoint at step 10" in (out := capsys.readouterr().out) and "attempt 2" in out, out
    assert checkpoint.attempt() == 1
    checkpoint.save(model, optimizer, 20)  # written by attempt 1
    monkeypatch.setenv("PADDLECLOUD_RESTART", "0")  # a fresh process: requeued again
    assert checkpoint.resume(model, optimizer) == 20 and checkpoint.attempt() == 2
    monkeypatch.setenv("PADDLECLOUD_RESTART", "0")
    monkeypatch.setenv("PADDLECLOUD_JOB_NAME", "fine-tune")  # another job starting from this one's checkpoint
    assert checkpoint.resume(model, optimizer) == 20 and checkpoint.attempt() == 0


def test_a_restarted_run_notes_the_step_it_resumed_from_for_the_jobs_status(monkeypatch, outputs):
    """Rank 0 of a restarted attempt leaves a resume record beside the checkpoints; the status
    reads the step back only for the same job and attempt; a fresh start notes nothing."""
    model, optimizer = make(0)
    assert checkpoint.resume(model, optimizer) == 0
    folder = outputs / "checkpoints"
    assert checkpoint.read_resume_record(str(folder)) is None  # attempt 1: nothing to say
    monkeypatch.setenv("PADDLECLOUD_RESTART", "1")
    assert checkpoint.resume(model, optimizer, quiet=True) == 0  # restarted with no checkpoint
    assert checkpoint.read_resume_record(str(folder)) == {"job": "train-x", "attempt": 1, "step": 0}
    checkpoint.save(model, optimizer, 500)
    monkeypatch.setenv("PADDLECLOUD_RESTART", "2")
    monkeypatch.setenv("PADDLE_TRAINER_ID", "1")  # another rank: writes nothing
    assert checkpoint.resume(model, optimizer, quiet=True) == 500
    assert checkpoint.read_resume_record(str(folder))["attempt"] == 1
    monkeypatch.setenv("PADDLE_TRAINER_ID", "0")
    assert checkpoint.resume(model, optimizer, quiet=True) == 500
    record = checkpoint.read_resume_record(str(folder))
    assert record == {"job": "train-x", "attempt": 2, "step": 500}
    assert checkpoint.resumed_step(record, "train-x", 3) == 500  # Job.attempt counts from 1
    assert checkpoint.resumed_step(record, "train-x", 2) is None  # attempt 3 has not resumed yet
    assert checkpoint.resumed_step(record, "other", 3) is None
    assert [c.step for c in checkpoint.checkpoints()] == [500] and sorted(os.listdir(folder)) == [
        "resumed.json", "step-000000500.pdckpt"]


@pytest.mark.parametrize("record", [None, {}, {"job": "a", "attempt": True, "step": 5},
                                    {"job": "a", "attempt": 1, "step": -5}, {"job": "a", "attempt": "1", "step": 5},
                                    {"job": "a", "attempt": 1}])
def test_a_resume_record_that_is_not_one_gives_no_step(record):
    assert checkpoint.resumed_step(record, "a", 2) is None


def test_a_resume_record_is_read_only_as_a_small_regular_file(tmp_path):
    """The folder is the user's: a link, a FIFO (which would block a reader), a huge or broken
    file gives no record, never an error or a hang."""
    record = tmp_path / checkpoint.RESUME_RECORD
    assert checkpoint.read_resume_record(str(tmp_path)) is None
    (tmp_path / "elsewhere.json").write_text('{"job": "a", "attempt": 1, "step": 5}')
    record.symlink_to(tmp_path / "elsewhere.json")
    assert checkpoint.read_resume_record(str(tmp_path)) is None
    record.unlink()
    os.mkfifo(record)
    assert checkpoint.read_resume_record(str(tmp_path)) is None
    record.unlink()
    record.write_text("not json")
    assert checkpoint.read_resume_record(str(tmp_path)) is None
    record.write_text("[1, 2]")
    assert checkpoint.read_resume_record(str(tmp_path)) is None
    record.write_text('{"job": "a", "attempt": 1, "step": 5}' + " " * 5000)
    assert checkpoint.read_resume_record(str(tmp_path)) is None
    record.write_text('{"job": "a", "attempt": 1, "step": 5}')
    assert checkpoint.read_resume_record(str(tmp_path)) == {"job": "a", "attempt": 1, "step": 5}


def test_the_attempt_after_a_checkpoint_counts_only_this_jobs_own():
    assert checkpoint.attempt_after({"attempt": 0, "job": "a"}, "a", 0) == 1
    assert checkpoint.attempt_after({"attempt": 0, "job": "a"}, "a", 3) == 3  # failures counted past it
    assert checkpoint.attempt_after({"attempt": 0, "job": "a"}, "b", 0) == 0
    assert checkpoint.attempt_after({"attempt": 0, "job": ""}, "", 0) == 0  # run by hand: no job to match
    assert checkpoint.attempt_after({"step": 5}, "a", 0) == 0  # written before attempts were recorded
    for written in (True, -1, "2", None):
        assert checkpoint.attempt_after({"attempt": written, "job": "a"}, "a", 0) == 0


def test_the_last_n_are_kept(outputs):
    model, optimizer = make(0)
    for step in range(1, 6):
        checkpoint.save(model, optimizer, step * 10, keep=2)
    assert [c.step for c in checkpoint.checkpoints()] == [40, 50]
    assert checkpoint.latest().step == 50
    assert sorted(os.listdir(outputs / "checkpoints")) == ["step-000000040.pdckpt", "step-000000050.pdckpt"]
    with pytest.raises(ValueError, match="keep must be at least 1"):
        checkpoint.save(model, optimizer, 60, keep=0)


def test_only_rank_zero_writes(monkeypatch, outputs):
    model, optimizer = make(0)
    monkeypatch.setenv("PADDLE_TRAINER_ID", "1")
    assert checkpoint.save(model, optimizer, 10) is None
    assert not (outputs / "checkpoints").exists()


def test_a_failed_save_leaves_the_last_checkpoint_whole_and_no_temporary_file(outputs):
    model, optimizer = make(0)
    checkpoint.save(model, optimizer, 10)
    with pytest.raises((pickle.PicklingError, TypeError, AttributeError)):
        checkpoint.save(model, optimizer, 20, extra={"unpicklable": lambda: None})
    assert os.listdir(outputs / "checkpoints") == ["step-000000010.pdckpt"]
    fresh, fresh_opt = make(1)
    assert checkpoint.resume(fresh, fresh_opt, quiet=True) == 10
    assert all((params(fresh)[k] == v).all() for k, v in params(model).items())


def test_a_data_parallel_style_wrapper_saves_and_loads_the_inner_model(outputs):
    class Wrapper:  # what paddle.DataParallel does to state names: the layer under `_layers`
        def __init__(self, layer):
            self._layers = layer

    model, optimizer = make(0)
    checkpoint.save(Wrapper(model), optimizer, 5)
    state = paddle.load(str(checkpoint.latest().path))
    assert set(state["model"]) == set(model.state_dict())
    other, other_opt = make(1)
    assert checkpoint.resume(Wrapper(other), other_opt, quiet=True) == 5
    assert all((params(other)[k] == v).all() for k, v in params(model).items())


def test_files_that_are_not_checkpoints_are_ignored(outputs):
    where = outputs / "checkpoints"
    where.mkdir()
    for name in (".tmp-abc.pdckpt", "step-1.txt", "notes.md", "step-x.pdckpt"):
        (where / name).write_text("x")
    assert checkpoint.latest() is None
