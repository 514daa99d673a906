"""The values blocks of the admin guide's deploy page (docs/admin/deploy.md) without a cluster or
helm: the example values file and the try-values, each laid over the chart's values.yaml, pass
the chart's schema and are settings HubSettings reads; the example's GPU profiles run GPU images
and its jobs' default image is a GPU worker image (the chart's defaults would run GPU jobs in the
CPU worker image). The login blocks are tests/unit/test_login_values.py's."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from loginvalues import merged
from paddle_ext.hub.settings import HubSettings

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "paddlecloud-hub"
PAGE = REPO / "docs" / "admin" / "deploy.md"
MARKERS = {"example": "<!-- example-values: ", "try": "<!-- try-values: "}


def marked_block(kind: str) -> dict:
    """The ```yaml block right under the page's marker for `kind`."""
    text = PAGE.read_text()
    marker = MARKERS[kind]
    assert text.count(marker) == 1, f"{PAGE.name}'s {kind}-values marker is missing or repeated"
    section = text.split(marker, 1)[1].split("-->", 1)[1]
    assert section.startswith("\n```yaml\n"), f"the {kind} marker must be right above a ```yaml block"
    return yaml.safe_load(section.split("```yaml\n", 1)[1].split("\n```", 1)[0])


@pytest.mark.parametrize("kind", sorted(MARKERS))
def test_the_deploy_pages_values_pass_the_charts_schema_and_load_as_settings(kind, tmp_path):
    block = marked_block(kind)
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.validate(merged(yaml.safe_load((CHART / "values.yaml").read_text()), block), schema)
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(block["settings"]))
    HubSettings.load(str(path), environ={})


def test_the_example_runs_gpu_notebooks_and_gpu_jobs_in_gpu_images():
    settings = marked_block("example")["settings"]
    assert "gpu" in settings["gpu_image"], "the GPU profiles' notebook image"
    first = settings["worker_images"][0]["name"]
    assert "gpu" in first, f"a job that names no image runs the first worker image, {first}: it must be a GPU one"
