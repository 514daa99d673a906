"""The cell magic's job environment (pure): the job's folder first on PYTHONPATH."""

from __future__ import annotations

from paddle_ext.magic import cell_env


def test_a_cell_job_imports_from_its_folder_first_and_keeps_the_users_pythonpath():
    assert cell_env({}, None) == {"PYTHONPATH": "."}
    assert cell_env({"A": "1"}, "/opt/lib") == {"A": "1", "PYTHONPATH": ".:/opt/lib"}  # the notebook's own
    assert cell_env({"PYTHONPATH": "/mine"}, "/opt/lib") == {"PYTHONPATH": ".:/mine"}  # --env wins
    assert cell_env({"PYTHONPATH": ""}, "/opt/lib") == {"PYTHONPATH": "."}
