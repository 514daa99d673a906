"""A job's folder, put in place by its pod's init container (standard library only).

The code travels as a gzipped tar in a ConfigMap that the user's own account writes, so
its entries are untrusted: `checked_members` admits only plain files and folders inside the
target, at most `max_files` entries and `max_bytes` in all, reading the headers one by one
(a bomb of entries stops at the cap, not at its end) before anything is written.
`paddle_ext.workspace.unpack` uses the same check in the notebook (`paddlecloud code`).

Pure standard library and no other module of the package, so that any worker image with
a Python runs it: on Kubernetes the init container runs this very source as
`python -c SOURCE ARCHIVE FOLDER OUTPUTS MAX_BYTES MAX_FILES`
(paddle_ext.manifests.workspace_parts), ours or a user's image, with or without paddle_ext.
"""

from __future__ import annotations

import os
import sys
import tarfile


class OverCap(Exception):
    """An archive over one of the caps: `cap` is "files" or "bytes"."""

    def __init__(self, cap: str):
        super().__init__(cap)
        self.cap = cap


def checked_members(tar: tarfile.TarFile, max_bytes: int, max_files: int) -> list[tarfile.TarInfo]:
    """The archive's entries, each checked (ValueError naming a bad one; OverCap past a cap)."""
    members, total = [], 0
    for member in tar:
        if len(members) >= max_files:
            raise OverCap("files")
        parts = member.name.split("/")
        if member.name.startswith("/") or ".." in parts or not (member.isfile() or member.isdir()):
            raise ValueError(f"The code archive holds an entry that may not be unpacked: {member.name!r}")
        total += member.size
        if total > max_bytes:
            raise OverCap("bytes")
        members.append(member)
    return members


def extract(tar: tarfile.TarFile, members: list[tarfile.TarInfo], target: str) -> None:
    os.makedirs(target, exist_ok=True)
    # The extraction filter where this Python has it (3.11.4+); the check above either way.
    tar.extractall(target, members=members, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))


def main(argv: list[str]) -> str | None:
    """Unpack ARCHIVE (none: "") into FOLDER and make OUTPUTS; a message when refused."""
    archive, folder, outputs, max_bytes, max_files = argv
    if archive:
        with tarfile.open(archive, mode="r:gz") as tar:
            try:
                members = checked_members(tar, int(max_bytes), int(max_files))
            except OverCap as exc:
                limit = f"{max_files} files" if exc.cap == "files" else f"{max_bytes} bytes"
                return f"The code archive would unpack to more than {limit}; nothing was written."
            except ValueError as exc:
                return f"{exc}; nothing was written."
            extract(tar, members, folder)
    os.makedirs(outputs, exist_ok=True)
    return None


if __name__ == "__main__":  # also under `python -c SOURCE ...`
    sys.exit(main(sys.argv[1:]))
