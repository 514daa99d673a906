"""A job's code: the folder it was submitted from, as a snapshot that travels with it.

Every submit records the folder's files (path, size, sha256), a digest over them, and
on Kubernetes ships them to the workers as a gzipped tar, so a job always runs, and
is known to have run, exactly the code it was given. What never belongs in a job is
left out: `.git`, `.ipynb_checkpoints`, `__pycache__`, hidden folders, earlier jobs'
`paddlecloud-outputs/`, and whatever the folder's `.paddlecloudignore` (gitignore
syntax) names.

Symbolic links do not travel: a link's target is outside the snapshot's control (it may
point out of the folder, to the user's home or a dataset, and would dangle or point
elsewhere on a worker), and `unpack` refuses links in an archive for the same reason. So
`snapshot` leaves them out of the archive and the digest alike and records their paths
(`CodeSnapshot.skipped`, the `skipped` list of the job's `code` field): what the snapshot
says it holds is exactly what unpacks.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import os
import tarfile
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    import pathspec

from .constants import CODE_MAX_BYTES, MAX_UNPACKED_BYTES, MAX_UNPACKED_FILES, OUTPUTS_FOLDER
from .errors import PaddleCloudError
from .job_folder import OverCap, checked_members, extract
from .quantity import human_bytes

IGNORE_FILE = ".paddlecloudignore"
# Outputs of earlier jobs (checkpoints, models) are not the code of the next one.
ALWAYS_SKIPPED = frozenset({".git", ".ipynb_checkpoints", "__pycache__", OUTPUTS_FOLDER})
ARCHIVE_NAME = "code.tar.gz"
DEFAULT_MAX_BYTES = CODE_MAX_BYTES  # (constants.py says why)
# Folders this many times the cap are refused without reading them first.
HOPELESS_FACTOR = 20
# A folder that does not travel (it is run in place) is digested up to this size.
MAX_DIGESTED_BYTES = 256 * 1024 * 1024
LARGEST_SHOWN = 3
# The job's `code` field names at most this many skipped links.
SKIPPED_SHOWN = 20


@dataclasses.dataclass(frozen=True)
class CodeFile:
    path: str  # relative, '/'-separated
    size: int
    sha256: str = ""  # empty until digested
    link: str | None = None  # a symlink's target (stored as a link)


@dataclasses.dataclass(frozen=True)
class CodeSnapshot:
    """What a job ran: the folder, its files and their digest; `archive` when shipped."""

    workdir: str
    files: tuple[CodeFile, ...]
    archive: bytes | None = None
    skipped: tuple[str, ...] = ()  # symbolic links left out (see the module's docstring)

    @property
    def digest(self) -> str | None:
        """sha256 over every file's path and content (None: the folder was too big to read)."""
        if any(not f.link and not f.sha256 for f in self.files):
            return None
        lines = "".join(f"{f.path}\0{f.link or f.sha256}\n" for f in self.files)
        return "sha256:" + hashlib.sha256(lines.encode()).hexdigest()

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def record(self) -> dict:
        """The job's `code` field: what it ran, whether the files can be read back, and the
        symbolic links left out (only when there were some)."""
        record = {"workdir": self.workdir, "digest": self.digest, "files": len(self.files), "bytes": self.size,
                  "stored": self.archive is not None}
        if self.skipped:
            record["skipped"] = {"reason": "symbolic links do not travel with a job",
                                 "count": len(self.skipped), "paths": list(self.skipped[:SKIPPED_SHOWN])}
        return record


class ArchiveTooLarge(PaddleCloudError):
    """A code archive that would unpack to more than the caps allow."""

    code = "code_too_large"
    status = 400

    def __init__(self, what: str):
        super().__init__(f"The code archive would unpack to {what}; nothing was written.")


class CodeTooLarge(PaddleCloudError):
    """The folder cannot travel with the job."""

    code = "code_too_large"
    status = 400

    def __init__(self, workdir: str, size: int, cap: int, largest: Iterable[CodeFile], compressed: bool):
        shown = ", ".join(f"{f.path} ({human_bytes(f.size)})" for f in largest)
        what = "compressed" if compressed else "before compression"
        super().__init__(
            f"The folder {workdir} is {human_bytes(size)} {what}, over the {human_bytes(cap)} a job can carry "
            f"with it. Largest files: {shown}. Put data in a dataset or in the shared workspace, or list "
            f"what the job does not need in {IGNORE_FILE}.")
        self.size, self.cap = size, cap

    def to_dict(self) -> dict:
        return {**super().to_dict(), "fields": {"workdir": self.message}}


def ignore_spec(root: str) -> "pathspec.PathSpec":
    import pathspec  # here, not at the top: commands that only read jobs never need it

    try:
        with open(os.path.join(root, IGNORE_FILE), encoding="utf-8") as f:
            return pathspec.GitIgnoreSpec.from_lines(f)
    except FileNotFoundError:
        return pathspec.GitIgnoreSpec.from_lines([])


def _skipped_folder(name: str) -> bool:
    return name in ALWAYS_SKIPPED or name.startswith(".")


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def collect(root: str) -> list[CodeFile]:
    """The files of `root` a job takes along, sorted by path (not yet digested)."""
    root = os.path.abspath(root)
    spec = ignore_spec(root)
    found: list[CodeFile] = []
    for folder, dirs, names in os.walk(root):
        relative_folder = os.path.relpath(folder, root)
        prefix = "" if relative_folder == "." else relative_folder.replace(os.sep, "/") + "/"
        dirs[:] = sorted(d for d in dirs if not _skipped_folder(d) and not os.path.islink(os.path.join(folder, d))
                         and not spec.match_file(prefix + d + "/"))
        for name in sorted(names):
            relative = prefix + name
            path = os.path.join(folder, name)
            if spec.match_file(relative):
                continue
            if os.path.islink(path):
                found.append(CodeFile(relative, 0, link=os.readlink(path)))
            elif os.path.isfile(path):
                found.append(CodeFile(relative, os.path.getsize(path)))
    return sorted(found, key=lambda f: f.path)


def digested(root: str, files: Iterable[CodeFile]) -> tuple[CodeFile, ...]:
    return tuple(f if f.link else dataclasses.replace(f, sha256=_sha256(os.path.join(root, f.path)))
                 for f in files)


def build_archive(root: str, files: Iterable[CodeFile]) -> bytes:
    """A gzipped tar of `files` (relative to `root`), owner and group cleared: plain files
    only (a symbolic link, or anything else, is refused: `snapshot` leaves links out)."""
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as zipped:
        with tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for item in files:
                info = tar.gettarinfo(os.path.join(root, item.path), arcname=item.path)
                if item.link is not None or not info.isreg():
                    raise ValueError(f"Only plain files travel with a job; {item.path!r} is not one")
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                with open(os.path.join(root, item.path), "rb") as f:
                    tar.addfile(info, f)
    return buffer.getvalue()


def _without_links(files: Iterable[CodeFile]) -> tuple[list[CodeFile], tuple[str, ...]]:
    """(the files that travel, the paths of the symbolic links left out)."""
    files = list(files)
    return [f for f in files if f.link is None], tuple(f.path for f in files if f.link is not None)


def snapshot(root: str, max_bytes: int | None = DEFAULT_MAX_BYTES) -> CodeSnapshot:
    """The folder's snapshot with its archive, refused (CodeTooLarge) over `max_bytes`
    compressed. Symbolic links are left out and named in `skipped`."""
    root = os.path.abspath(root)
    files, skipped = _without_links(collect(root))
    largest = sorted(files, key=lambda f: f.size, reverse=True)[:LARGEST_SHOWN]
    total = sum(f.size for f in files)
    if max_bytes is not None and total > max_bytes * HOPELESS_FACTOR:
        raise CodeTooLarge(root, total, max_bytes, largest, compressed=False)
    files = digested(root, files)
    archive = build_archive(root, files)
    if max_bytes is not None and len(archive) > max_bytes:
        raise CodeTooLarge(root, len(archive), max_bytes, largest, compressed=True)
    return CodeSnapshot(root, files, archive, skipped)


def record_in_place(root: str, max_bytes: int | None = DEFAULT_MAX_BYTES) -> CodeSnapshot:
    """For a job that runs in the folder itself: the snapshot when it fits `max_bytes`
    (so the code can be read back), else the file list, digested if not too big to read."""
    try:
        return snapshot(root, max_bytes)
    except CodeTooLarge:
        files, skipped = _without_links(collect(os.path.abspath(root)))
        if sum(f.size for f in files) <= MAX_DIGESTED_BYTES:
            files = list(digested(root, files))
        return CodeSnapshot(os.path.abspath(root), tuple(files), skipped=skipped)


def unpack(archive: bytes, target: str, max_bytes: int = MAX_UNPACKED_BYTES,
           max_files: int = MAX_UNPACKED_FILES) -> list[str]:
    """Extract a snapshot archive into `target`; the relative paths written. Only plain files
    and folders inside `target` (checked here: the Pythons of Debian bookworm images, 3.11.2,
    predate tarfile's extraction filters), at most `max_files` entries and `max_bytes` in
    all (ArchiveTooLarge). Every entry is checked before anything is written
    (paddle_ext.job_folder, which the jobs' init containers run too)."""
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        try:
            members = checked_members(tar, max_bytes, max_files)
        except OverCap as exc:
            raise ArchiveTooLarge(f"more than {max_files} files (MAX_UNPACKED_FILES)" if exc.cap == "files"
                                  else f"more than {human_bytes(max_bytes)} (MAX_UNPACKED_BYTES)") from None
        extract(tar, members, target)
    return [m.name for m in members]
