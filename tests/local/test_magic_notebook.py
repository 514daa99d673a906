"""%%paddle_train in a real kernel (nbclient): a cell becomes a real 2-worker PaddlePaddle job
on the local backend, its handle's .metrics() holds what the cell reported, and a bad
option prints the CLI's message on one line."""

from __future__ import annotations

import os
import sys

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TRAINING_CELL = """%%paddle_train --workers 2 --var job
import paddle
import paddle.distributed as dist
import paddle_ext
from helpers import HELLO  # the notebook folder's own module, importable as in the notebook

dist.init_parallel_env()
rank = dist.get_rank()
total = paddle.to_tensor([float(rank + 1)])
dist.all_reduce(total)
print(f"rank {rank}: all_reduce sum={float(total.numpy()[0]):g} {HELLO}", flush=True)
for step in range(5):
    paddle_ext.report(step=step, loss=1.0 / (step + 1), rank_plus_step=rank + step)
"""


def outputs(cell, name=None):
    return [o for o in cell.get("outputs", []) if name is None or o.get("name") == name]


def text(cell, name=None) -> str:
    return "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in outputs(cell, name))


def test_a_cell_runs_as_a_two_worker_job_and_reports_metrics(tmp_path, monkeypatch):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in (
        "%load_ext paddle_ext",
        TRAINING_CELL,
        "handle = _\n"
        "state = job.wait(300)\n"
        "print('phase:', state.phase, '| same handle:', handle is job, '| name:', job.name)\n"
        "print('points:', sorted((p.worker, p.step, p.values['rank_plus_step']) for p in job.metrics()))\n"
        "print('logs:', [line for line in job.logs(mine=True) if 'all_reduce' in line])",
        "%%paddle_train --workers two\nprint('never runs')",
        "%%paddle_train --workers 0\nprint('never runs')",
        "import os\nprint(sorted(os.listdir('paddlecloud_cells')))",
    )]
    (tmp_path / "helpers.py").write_text("HELLO = 'from helpers.py'\n")
    monkeypatch.setenv("PADDLECLOUD_HOME", str(tmp_path / ".paddlecloud"))
    monkeypatch.setenv("PADDLECLOUD_BACKEND", "local")
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    NotebookClient(nb, timeout=400, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    load, training, check, bad_type, bad_value, listing = nb.cells

    assert not outputs(load)
    views = [o for o in outputs(training) if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert len(views) == 1, "the monitor shows below the cell"
    assert "<TrainingJob cell-" in text(training)
    report = text(check)
    assert "phase: Succeeded | same handle: True" in report, report
    name = report.split("| name: ")[1].split()[0]
    expected = sorted((w, s, w + s) for w in (0, 1) for s in range(5))
    assert f"points: {expected}" in report, report
    assert "[worker-0] rank 0: all_reduce sum=3 from helpers.py" in report, report
    assert "[worker-1] rank 1: all_reduce sum=3 from helpers.py" in report, report

    # shipped exactly as a submitted script: a visible file in the notebook's folder
    script = tmp_path / "paddlecloud_cells" / f"{name}.py"
    assert script.read_text() == TRAINING_CELL.split("\n", 1)[1]
    assert f"['{name}.py']" in text(listing), "bad options submit nothing and write nothing"

    for cell, line in ((bad_type, "%%paddle_train: error: argument --workers: invalid int value: 'two'"),
                       (bad_value, "%%paddle_train: Invalid job spec: workers: must be at least 1 (got 0).")):
        assert text(cell, "stderr") == line + "\n", cell.outputs
        assert not [o for o in outputs(cell) if o["output_type"] == "error"]
        assert "Traceback" not in text(cell)
