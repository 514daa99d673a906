"""The spawn benchmark's driver times spawner methods by name (benchmarks/spawn_driver.py):
a rename in the spawner must fail here, in the unit tier, not at the next `make bench`."""

from __future__ import annotations

import importlib.util
from pathlib import Path

# Loaded from its file: benchmarks/ is not put on sys.path (its `common` would shadow others).
_SPEC = importlib.util.spec_from_file_location(
    "bench_spawn_driver", Path(__file__).resolve().parents[2] / "benchmarks" / "spawn_driver.py")
spawn_driver = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(spawn_driver)


def test_every_spawner_method_the_driver_times_exists():
    from kubespawner import KubeSpawner

    from paddle_ext.hub.spawner import PaddleCloudSpawner

    assert spawn_driver.missing_methods(KubeSpawner, PaddleCloudSpawner) == []


def test_a_renamed_method_is_named():
    from kubespawner import KubeSpawner

    class Renamed(KubeSpawner):  # does not override the namespace step any more
        pass

    assert spawn_driver.missing_methods(KubeSpawner, Renamed) == [f"Renamed.{spawn_driver.NAMESPACE_METHOD} (our override)"]


def test_the_driver_plays_the_hub_on_its_api_port():
    from paddle_ext.constants import HUB_API_PORT

    assert spawn_driver.MockHub.api_url == f"http://127.0.0.1:{HUB_API_PORT}/hub/api"
