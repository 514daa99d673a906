"""A new user's home gets the example notebook and training script (standard library only).

One rule for every deployment: on a home's first start (no marker in HOME/.paddlecloud
yet) copy each example the home does not have; never overwrite a file; after that, do
nothing, so an example the user deleted stays deleted.

- The embedded default's spawner (paddle_ext.hub.local) calls `seed_home` before it
  starts a user's server.
- On Kubernetes the notebook container runs it as its postStart hook
  (`post_start_hook`, set in hub_config/jupyterhub_config.py), from the examples the
  notebook image carries (images/notebook/Dockerfile):

      python -m paddle_ext.homeseed /home/jovyan /opt/paddlecloud/examples
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Iterable

MARKER = Path(".paddlecloud") / "examples-copied"
IMAGE_EXAMPLES = "/opt/paddlecloud/examples"  # where the notebook image puts them


def seed_home(home: str | Path, examples: Iterable[str | Path]) -> list[Path]:
    """Copy the example files `home` lacks, on its first start only; return what was copied."""
    home = Path(home)
    marker = home / MARKER
    if marker.exists():
        return []
    marker.parent.mkdir(parents=True, exist_ok=True)
    copied = []
    for source in map(Path, examples):
        if not source.is_file():
            continue
        target = home / source.name
        try:
            with open(source, "rb") as reader, open(target, "xb") as writer:  # "x": never overwrite
                shutil.copyfileobj(reader, writer)
        except FileExistsError:
            continue
        shutil.copymode(source, target)
        copied.append(target)
    marker.touch()
    return copied


def post_start_hook(home: str, examples_folder: str = IMAGE_EXAMPLES) -> dict:
    """KubeSpawner's `lifecycle_hooks`: seed the home from the image's examples as the
    notebook container starts."""
    return {"postStart": {"exec": {"command": ["python", "-m", "paddle_ext.homeseed", home, examples_folder]}}}


def main(argv: list[str]) -> int:
    """`python -m paddle_ext.homeseed HOME EXAMPLES_FOLDER`. Exits 0 even when it cannot
    copy (said on stderr): a failed postStart hook would kill the notebook, and a server
    without the examples is better than no server."""
    if len(argv) != 2:
        print("usage: python -m paddle_ext.homeseed HOME EXAMPLES_FOLDER", file=sys.stderr)
        return 2
    home, folder = map(Path, argv)
    if not folder.is_dir():
        print(f"No examples to copy: {folder} is not a folder.", file=sys.stderr)
        return 0  # no marker either: an image that carries them later still seeds this home
    try:
        copied = seed_home(home, sorted(folder.iterdir()))
    except OSError as exc:
        print(f"Could not copy the examples into {home}: {exc}", file=sys.stderr)
        return 0
    for path in copied:
        print(f"Copied {path.name} into {home}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
