"""A job's code snapshot: what is taken, what is left out, its digest, the cap and its message."""

from __future__ import annotations

import os

import pytest

from paddle_ext.workspace import CodeTooLarge, collect, record_in_place, snapshot, unpack


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "project"
    (root / "pkg").mkdir(parents=True)
    (root / "my_train.py").write_text("import pkg.model\nprint('hi')\n")
    (root / "pkg" / "model.py").write_text("LAYERS = 3\n")
    for skipped in (".git/config", ".ipynb_checkpoints/x-checkpoint.py", "pkg/__pycache__/model.pyc",
                    ".cache/big", "paddlecloud-outputs/old-job/model.pdparams", "data/big.bin", "notes.log"):
        path = root / skipped
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * 100)
    (root / ".paddlecloudignore").write_text("data/\n*.log\n")
    (root / ".env").write_text("A=1\n")  # hidden files travel; hidden folders do not
    return root


def test_what_travels_and_what_is_left_out(project):
    assert [f.path for f in collect(str(project))] == [".env", ".paddlecloudignore", "my_train.py", "pkg/model.py"]


def test_the_digest_follows_content_and_the_archive_unpacks_to_the_same_files(project, tmp_path):
    first = snapshot(str(project))
    assert first.digest.startswith("sha256:") and first.record()["files"] == 4 and first.record()["stored"]
    assert snapshot(str(project)).digest == first.digest  # the same folder, the same digest
    (project / "pkg" / "model.py").write_text("LAYERS = 4\n")
    assert snapshot(str(project)).digest != first.digest
    out = tmp_path / "back"
    assert sorted(unpack(first.archive, str(out))) == sorted(f.path for f in first.files)
    assert (out / "pkg" / "model.py").read_text() == "LAYERS = 3\n"  # what was shipped, not what is there now


def test_over_the_cap_is_refused_naming_size_cap_and_largest_files(project):
    (project / "weights.bin").write_bytes(os.urandom(300_000))
    (project / "table.csv").write_bytes(os.urandom(100_000))
    with pytest.raises(CodeTooLarge) as info:
        snapshot(str(project), max_bytes=200_000)
    message = info.value.message
    assert info.value.status == 400 and info.value.to_dict()["error"] == "code_too_large"
    assert "compressed, over the 195.3 KiB a job can carry" in message
    assert "Largest files: weights.bin (293.0 KiB), table.csv (97.7 KiB)" in message
    assert "dataset" in message and "shared workspace" in message and ".paddlecloudignore" in message


def test_hopeless_folders_are_refused_without_reading_them(project):
    (project / "huge.bin").write_bytes(b"\0" * 3_000_000)  # compresses well, but 20x over the cap unread
    with pytest.raises(CodeTooLarge, match="before compression"):
        snapshot(str(project), max_bytes=100_000)


def test_a_job_run_in_place_records_its_folder_even_when_too_big_to_keep(project):
    (project / "weights.bin").write_bytes(os.urandom(300_000))
    record = record_in_place(str(project), max_bytes=100_000)
    assert record.archive is None and record.digest.startswith("sha256:")
    assert record.record()["stored"] is False and record.record()["files"] == 5


@pytest.mark.parametrize("entry", ["../outside.py", "/etc/passwd", "link"])
def test_an_archive_entry_outside_the_folder_or_not_a_plain_file_is_refused(entry, tmp_path, monkeypatch):
    import io
    import tarfile

    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:gz") as tar:
        info = tarfile.TarInfo(entry)
        if entry == "link":
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tar.addfile(info)
        else:
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
    for filters in (True, False):  # with and without tarfile's own filters (Python < 3.11.4 has none)
        if not filters:
            monkeypatch.delattr(tarfile, "data_filter", raising=False)
        with pytest.raises(ValueError, match="may not be unpacked"):
            unpack(data.getvalue(), str(tmp_path / "out"))
        assert not (tmp_path / "outside.py").exists() and not (tmp_path / "out" / "link").exists()


def bomb(entries: list[tuple[str, int]]) -> bytes:
    """A gzipped tar whose entries declare `size` bytes each (zeros: they compress to nothing)."""
    import io
    import tarfile

    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:gz") as tar:
        for name, size in entries:
            info = tarfile.TarInfo(name)
            info.size = size
            tar.addfile(info, io.BytesIO(bytes(size)) if size else None)
    return data.getvalue()


@pytest.mark.parametrize("entries, limit", [
    ([(f"f{i}.py", 0) for i in range(50)], "more than 40 files (MAX_UNPACKED_FILES)"),
    ([("a.bin", 600_000), ("b.bin", 600_000)], "more than 1.0 MiB (MAX_UNPACKED_BYTES)"),
    ([("ok.py", 10), ("huge.bin", 2 ** 40)], "more than 1.0 MiB (MAX_UNPACKED_BYTES)"),
])
def test_an_archive_over_the_unpack_caps_is_refused_and_nothing_is_written(entries, limit, tmp_path):
    from paddle_ext.workspace import ArchiveTooLarge

    if entries[-1][1] == 2 ** 40:  # a header that claims a terabyte, with no data behind it
        import io
        import tarfile
        data = io.BytesIO()
        with tarfile.open(fileobj=data, mode="w:gz") as tar:
            tar.addfile(tarfile.TarInfo("ok.py"), None)
            info = tarfile.TarInfo("huge.bin")
            info.size = 2 ** 40
            tar.addfile(info)  # header only
        archive = data.getvalue()
    else:
        archive = bomb(entries)
    out = tmp_path / "out"
    with pytest.raises(ArchiveTooLarge) as caught:
        unpack(archive, str(out), max_bytes=1024 * 1024, max_files=40)
    assert str(caught.value.message) == f"The code archive would unpack to {limit}; nothing was written."
    assert not out.exists()


def test_the_default_caps_refuse_a_gzip_bomb_of_many_files(tmp_path):
    from paddle_ext.constants import MAX_UNPACKED_FILES
    from paddle_ext.workspace import ArchiveTooLarge

    archive = bomb([(f"d/f{i}", 0) for i in range(MAX_UNPACKED_FILES + 1)])
    with pytest.raises(ArchiveTooLarge, match="MAX_UNPACKED_FILES"):
        unpack(archive, str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_a_folder_with_symlinks_round_trips_without_them_and_says_so(project, tmp_path):
    """Links are not shipped: not in the archive, not in the digest, named in the record;
    what the snapshot lists is exactly what unpacks."""
    os.symlink("my_train.py", project / "inside-link.py")
    os.symlink("/etc/passwd", project / "pkg" / "outside-link")
    made = snapshot(str(project))
    assert made.skipped == ("inside-link.py", "pkg/outside-link")
    assert made.record()["skipped"] == {"reason": "symbolic links do not travel with a job", "count": 2,
                                        "paths": ["inside-link.py", "pkg/outside-link"]}
    os.remove(project / "inside-link.py")
    os.remove(project / "pkg" / "outside-link")
    without = snapshot(str(project))
    assert without.digest == made.digest and "skipped" not in without.record()
    out = tmp_path / "out"
    assert sorted(unpack(made.archive, str(out))) == sorted(f.path for f in made.files)
    assert not any(os.path.islink(os.path.join(folder, name)) for folder, _, names in os.walk(out) for name in names)
    in_place = record_in_place(str(project), max_bytes=10)
    assert in_place.archive is None and "skipped" not in in_place.record()


def run_job_folder(archive: bytes | None, tmp_path, max_bytes=1024 * 1024, max_files=40, helpers_in_image=False):
    """The jobs' init container, as Kubernetes runs it: this source under `python -c`, or
    (helpers_in_image) the module under `python -m`, as in the site's images."""
    import subprocess
    import sys

    from paddle_ext.manifests import ManifestSettings, helper_command

    path = tmp_path / "code.tar.gz"
    if archive is not None:
        path.write_bytes(archive)
    folder, outputs = tmp_path / "job", tmp_path / "outputs" / "job"
    _, *helper = helper_command("job_folder", ManifestSettings(namespace="ns", image="img",
                                                               helpers_in_image=helpers_in_image))
    proc = subprocess.run([sys.executable, "-I", *helper, str(path) if archive is not None else "",
                           str(folder), str(outputs), str(max_bytes), str(max_files)],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    return proc, folder, outputs


@pytest.mark.parametrize("entries, limit", [
    ([(f"f{i}.py", 0) for i in range(50)], "more than 40 files"),
    ([("a.bin", 600_000), ("b.bin", 600_000)], "more than 1048576 bytes"),
])
def test_the_jobs_init_container_refuses_an_archive_over_the_caps_and_writes_nothing(entries, limit, tmp_path):
    proc, folder, outputs = run_job_folder(bomb(entries), tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"The code archive would unpack to {limit}; nothing was written."
    assert not folder.exists() and not outputs.exists()


def test_the_jobs_init_container_refuses_a_link_or_an_entry_outside_the_folder(tmp_path):
    import io
    import tarfile

    for name, kind in (("../outside.py", tarfile.REGTYPE), ("link", tarfile.SYMTYPE)):
        data = io.BytesIO()
        with tarfile.open(fileobj=data, mode="w:gz") as tar:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, "/etc/passwd" if kind == tarfile.SYMTYPE else ""
            tar.addfile(info, io.BytesIO(b""))
        proc, folder, _ = run_job_folder(data.getvalue(), tmp_path)
        assert proc.returncode == 1 and f"may not be unpacked: {name!r}" in proc.stderr
        assert not folder.exists() and not (tmp_path / "outside.py").exists()


@pytest.mark.parametrize("helpers_in_image", [False, True])
def test_the_jobs_init_container_unpacks_a_snapshot_and_makes_the_outputs_folder(project, tmp_path, helpers_in_image):
    made = snapshot(str(project))
    proc, folder, outputs = run_job_folder(made.archive, tmp_path, helpers_in_image=helpers_in_image)
    assert proc.returncode == 0, proc.stderr
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) == sorted(
        f.path for f in made.files)
    assert outputs.is_dir()


def test_the_jobs_init_container_without_code_makes_only_the_outputs_folder(tmp_path):
    proc, folder, outputs = run_job_folder(None, tmp_path)  # the job runs on the shared workspace
    assert proc.returncode == 0, proc.stderr
    assert outputs.is_dir() and not folder.exists()
