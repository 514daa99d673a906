"""Build the JupyterLab extension into labextension/prebuilt/, only when its sources changed.

    python labextension/build.py [--link DIR]      (what `make setup` runs)

Steps, each skipped when its inputs are unchanged since the last run:
1. `npm ci` (from package-lock.json; the only step that needs the network), stamped
   with the lock file's hash in node_modules/, and kept by that hash under
   $PADDLECLOUD_CACHE/labextension-node-modules (~/.cache/paddlecloud): a fresh clone copies
   it in a few seconds instead of unpacking some 650 packages again (16 s on 2 CPUs);
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
NODE_MODULES_CACHE = Path(os.environ.get("PADDLECLOUD_CACHE") or Path.home() / ".cache" / "paddlecloud") \
    / "labextension-node-modules"
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


def lock_hash() -> str:
    return hashlib.sha256((HERE / "package-lock.json").read_bytes()).hexdigest()[:16]


def install_node_modules() -> None:
    lock = lock_hash()
    marker = NODE_MODULES / f".installed-{lock}"
    if marker.exists():
        return
    cached = NODE_MODULES_CACHE / lock
    if (cached / marker.name).exists():
        shutil.rmtree(NODE_MODULES, ignore_errors=True)
        print(f"+ cp -a {cached} {NODE_MODULES}", flush=True)  # a copy: builds may write under node_modules
        if subprocess.run(["cp", "-a", str(cached), str(NODE_MODULES)]).returncode == 0:
            return
        shutil.rmtree(NODE_MODULES, ignore_errors=True)  # the cache went away mid-copy: install instead
    run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"])
    marker.touch()
    keep_in_cache(cached)


def keep_in_cache(cached: Path) -> None:
    """Copy node_modules (just installed, its marker in it) to `cached`, the one install kept."""
    partial = cached.with_name(f"{cached.name}.partial-{os.getpid()}")
    try:
        NODE_MODULES_CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-a", str(NODE_MODULES), str(partial)], check=True)
        for old in NODE_MODULES_CACHE.iterdir():  # other lock files' installs
            if ".partial-" not in old.name:
                shutil.rmtree(old, ignore_errors=True)
        partial.rename(cached)
    except (OSError, subprocess.CalledProcessError) as exc:  # no cache: the next clone runs npm ci again
        print(f"node_modules not cached in {NODE_MODULES_CACHE}: {exc}", file=sys.stderr)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


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
