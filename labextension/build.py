"""Build the JupyterLab extension into labextension/prebuilt/, only when its sources changed.

    python labextension/build.py [--link DIR]      (what `make setup` runs)

Steps, each skipped when its inputs are unchanged since the last run:
1. `npm ci` (from package-lock.json; the only step that needs the network), stamped
   with the lock file's hash in node_modules/;
2. `tsc`, then `jupyter-builder build` (PyPI `jupyter-builder` driving npm
   `@jupyter/builder`; `@jupyterlab/core-meta` from node_modules, so nothing is
   downloaded), stamped with `source_digest()` in .build-stamp.

`--link DIR` makes DIR (a labextensions folder entry of the dev venv) a symlink to
prebuilt/, as `jupyter labextension develop` does, so the dev servers serve each new
build. The wheel does not build anything: hatch_build.py copies prebuilt/ into it and
refuses a build whose stamp does not match the sources (see `check_built`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUTPUT = HERE / "prebuilt"
STAMP = HERE / ".build-stamp"
NODE_MODULES = HERE / "node_modules"
# What the built extension is made of; tests and their config are not part of it.
SOURCES = ("package.json", "package-lock.json", "tsconfig.json", "src", "style", "install.json")


def package_name() -> str:
    return json.loads((HERE / "package.json").read_text())["name"]


def source_digest(root: Path = HERE) -> str:
    """A hash of every file the build reads, names and contents, in a fixed order."""
    digest = hashlib.sha256()
    for entry in SOURCES:
        path = root / entry
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            digest.update(file.relative_to(root).as_posix().encode() + b"\0")
            digest.update(file.read_bytes() + b"\0")
    return digest.hexdigest()


def check_built(root: Path = HERE) -> str | None:
    """None when prebuilt/ is the build of the current sources, else a sentence saying why not."""
    stamp = root / STAMP.name
    if not (root / OUTPUT.name / "package.json").is_file() or not stamp.is_file():
        return "the JupyterLab extension is not built"
    if stamp.read_text().strip() != source_digest(root):
        return "the JupyterLab extension was built from other sources than these"
    return None


def run(command: list[str]) -> None:
    print("+", " ".join(command), flush=True)
    subprocess.run(command, cwd=HERE, check=True)


def install_node_modules() -> None:
    lock = hashlib.sha256((HERE / "package-lock.json").read_bytes()).hexdigest()[:16]
    marker = NODE_MODULES / f".installed-{lock}"
    if marker.exists():
        return
    run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"])
    marker.touch()


def builder() -> str:
    """jupyter-builder from this Python's environment (it comes with JupyterLab 4.6)."""
    found = shutil.which("jupyter-builder", path=str(Path(sys.executable).parent)) or shutil.which("jupyter-builder")
    if not found:
        sys.exit("jupyter-builder is missing: install JupyterLab >= 4.6 (or `pip install jupyter-builder`)")
    return found


def build() -> bool:
    """Build when the sources changed; True if a build ran."""
    install_node_modules()
    if check_built() is None:
        return False
    STAMP.unlink(missing_ok=True)
    shutil.rmtree(OUTPUT, ignore_errors=True)
    run([str(NODE_MODULES / ".bin" / "tsc"), "-p", "tsconfig.json"])
    run([builder(), "build", "."])
    shutil.copy(HERE / "install.json", OUTPUT / "install.json")
    STAMP.write_text(source_digest() + "\n")
    return True


def link(target: Path) -> None:
    """Make `target` a symlink to prebuilt/ (replacing a copy a wheel install left there)."""
    if target.is_symlink() and target.resolve() == OUTPUT.resolve():
        return
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.symlink_to(OUTPUT, target_is_directory=True)
    print(f"linked {target} -> {OUTPUT}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--link", type=Path, help="labextensions folder entry to point at the build")
    args = parser.parse_args(argv)
    print(f"{package_name()}: {'built' if build() else 'up to date'}", flush=True)
    if args.link:
        link(Path(os.path.abspath(args.link)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
