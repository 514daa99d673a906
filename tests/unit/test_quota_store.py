"""The local quota store: a JSON file changed under an fcntl lock, never losing an update."""

from __future__ import annotations

import json
import multiprocessing

import pytest

from paddle_ext.errors import BackendUnavailable
from paddle_ext.quota.model import Limits, QuotaConflict
from paddle_ext.quota.store import LocalQuotaStore


def test_roundtrip_and_file_format(tmp_path):
    store = LocalQuotaStore(str(tmp_path / "state" / "quotas.json"))
    assert store.read().version == 0
    store.update_sync("users", "alice", {"gpus": 2})
    store.update_sync("groups", "ml", {"cpu": "16"})
    config = store.read()
    assert config.users["alice"].limits == Limits(gpus=2)
    assert config.groups["ml"].limits == Limits(cpu="16")
    on_disk = json.loads((tmp_path / "state" / "quotas.json").read_text())
    assert on_disk["version"] == 2
    assert on_disk["users"] == {"alice": {"limits": {"gpus": 2}, "revision": 1}}
    assert not [p.name for p in (tmp_path / "state").iterdir() if p.name.startswith(".quotas-")]


def _writer(path: str, index: int) -> None:
    store = LocalQuotaStore(path)
    for round_ in range(10):
        store.update_sync("users", f"user{index}", {"pods": round_ + 1})
        store.update_sync("default", None, {"running_jobs": index} if round_ % 2 else {})


def test_concurrent_writers_lose_nothing(tmp_path):
    path = str(tmp_path / "quotas.json")
    context = multiprocessing.get_context("fork")
    procs = [context.Process(target=_writer, args=(path, i)) for i in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    config = LocalQuotaStore(path).read()
    assert config.version == 4 * 20
    assert {name: entry.limits.pods for name, entry in config.users.items()} == {f"user{i}": 10 for i in range(4)}


def test_stale_revision_is_refused_and_changes_nothing(tmp_path):
    store = LocalQuotaStore(str(tmp_path / "quotas.json"))
    store.update_sync("users", "alice", {"gpus": 2})          # revision 1
    store.update_sync("users", "alice", {"gpus": 3, "revision": 1})  # an editor who saw revision 1
    before = (tmp_path / "quotas.json").read_text()
    with pytest.raises(QuotaConflict):
        store.update_sync("users", "alice", {"gpus": 8, "revision": 1})  # a second editor, also from revision 1
    assert (tmp_path / "quotas.json").read_text() == before
    assert store.read().users["alice"].limits.gpus == 3


def test_a_broken_file_is_reported_not_overwritten(tmp_path):
    path = tmp_path / "quotas.json"
    path.write_text("{not json")
    store = LocalQuotaStore(str(path))
    with pytest.raises(BackendUnavailable, match="not valid"):
        store.update_sync("users", "alice", {"gpus": 2})
    assert path.read_text() == "{not json"
    path.write_text('{"users": {"alice": {"limits": {"gpus": -4}}}}')  # edited by hand
    with pytest.raises(BackendUnavailable, match="gpus: must not be negative"):
        store.read()


def test_the_site_default_comes_with_every_read_and_is_never_written(tmp_path):
    path = tmp_path / "quotas.json"
    site = Limits(gpus=4, memory="64Gi")
    store = LocalQuotaStore(str(path), site_default=site)
    assert store.read().site_default == site  # no file yet
    written = store.update_sync("users", "alice", {"gpus": 1})
    assert written.site_default == site and store.read().site_default == site
    assert "64Gi" not in path.read_text()
    assert LocalQuotaStore(str(path)).read().site_default == Limits()
