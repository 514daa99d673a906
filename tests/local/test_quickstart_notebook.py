"""paddle_ext/examples/quickstart.ipynb runs top to bottom in a real kernel: the launcher cell,
the Python API (a real 2-worker Paddle job), the CLI cells, and a `%%paddle_train` cell (a
second real 2-worker job) whose paddle_ext.report() points come back as metrics."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

EXAMPLES = Path(__file__).resolve().parents[2] / "paddle_ext" / "examples"


def cell_text(cell) -> str:
    parts = []
    for output in cell.get("outputs", []):
        parts.append(output.get("text", ""))
        parts.append(output.get("data", {}).get("text/plain", ""))
    return "".join(parts)


def test_quickstart_notebook_runs(tmp_path, monkeypatch):
    notebook_path = tmp_path / "quickstart.ipynb"
    shutil.copy(EXAMPLES / "quickstart.ipynb", notebook_path)
    shutil.copy(EXAMPLES / "train.py", tmp_path / "train.py")
    nb = nbformat.read(notebook_path, as_version=4)
    assert all(not cell.get("outputs") for cell in nb.cells if cell.cell_type == "code"), \
        "paddle_ext/examples/quickstart.ipynb must be committed without outputs"

    # The kernel inherits this environment, as it would from the user's server.
    monkeypatch.setenv("PADDLECLOUD_HOME", str(tmp_path / ".paddlecloud"))
    monkeypatch.setenv("PADDLECLOUD_BACKEND", "local")
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()

    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert "JobLauncher(" in cell_text(code[0])
    followed = cell_text(code[2])
    assert "phase: Succeeded" in followed, followed[-2000:]
    for worker in (0, 1):
        assert f"[worker-{worker}] rank {worker}: all_reduce check ok: sum=3" in followed, followed[-2000:]
    job_name = cell_text(code[1]).split()[1]
    assert job_name in cell_text(code[3]) and "Succeeded" in cell_text(code[3]), cell_text(code[3])
    status_and_logs = cell_text(code[4])
    assert "Succeeded" in status_and_logs and "[worker-1] " in status_and_logs, status_and_logs
    # The magic: a cell as a 2-worker job with a live monitor, its 30 steps reported by each worker.
    assert "%%paddle_train --workers 2" in code[6].source
    assert any("JobMonitor" in output.get("data", {}).get("text/plain", "")
               or "application/vnd.jupyter.widget-view+json" in output.get("data", {})
               for output in code[6].get("outputs", [])), code[6].get("outputs")
    waited = cell_text(code[7])
    assert "phase: Succeeded" in waited and "60 metric points" in waited, waited
