"""What every benchmark section shares: running a command and timing it, medians and
percentiles, interleaving ours with the baseline, the machine's load, and table rows.

A section returns a `Section`: its summary rows (one per goal of issue 15) and the
markdown of its details (per-run figures, commands, correctness checks).
"""

from __future__ import annotations

import dataclasses
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TIME_V = "/usr/bin/time"
RUN_TIMEOUT = 600  # seconds, any single command


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- numbers


def median(values):
    return statistics.median(values) if values else None


def percentile(values, q: float):
    """The q-th percentile (0-100), nearest-rank on the sorted values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return ordered[rank - 1]


def ratio(ours, theirs):
    return None if ours is None or not theirs else ours / theirs


def fmt_s(value) -> str:
    if value is None:
        return "—"
    if value < 0.01:
        return f"{value * 1000:.1f} ms"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def fmt_ms(value) -> str:
    return "—" if value is None else f"{value * 1000:.1f} ms"


def fmt_mib(kib) -> str:
    return "—" if kib is None else f"{kib / 1024:.0f} MiB"


def fmt_ratio(value) -> str:
    return "—" if value is None else f"{value:.3f}×"  # 3 decimals: 1.2027 must not read as 1.20


# ---------------------------------------------------------------- running commands


@dataclasses.dataclass
class Run:
    wall: float
    rss_kib: int | None
    code: int
    stdout: bytes
    stderr: str
    cpu: float | None = None  # user + system seconds (`/usr/bin/time -v`)


def run_timed(cmd: list[str], env: dict | None = None, cwd: str | None = None, stdout_path: str | None = None,
              timeout: float = RUN_TIMEOUT) -> Run:
    """Run `cmd` once under /usr/bin/time -v: wall seconds (measured here), peak RSS, exit
    code, and stdout (or, with `stdout_path`, stdout written to that file)."""
    use_time = os.access(TIME_V, os.X_OK)
    full = [TIME_V, "-v"] + cmd if use_time else cmd
    out = open(stdout_path, "wb") if stdout_path else subprocess.PIPE
    try:
        t0 = time.monotonic()
        proc = subprocess.run(full, env=env, cwd=cwd, stdout=out, stderr=subprocess.PIPE, timeout=timeout)
        wall = time.monotonic() - t0
    finally:
        if stdout_path:
            out.close()
    stderr = proc.stderr.decode(errors="replace")
    rss = cpu = None
    if use_time:
        found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", stderr)
        rss = int(found.group(1)) if found else None
        times = re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", stderr)
        cpu = sum(float(t) for t in times) if len(times) == 2 else None
        stderr = stderr.split("\tCommand being timed:")[0]
    return Run(wall, rss, proc.returncode, proc.stdout or b"", stderr, cpu)


def interleave(reps: int, runners: dict, pause: float = 0.0) -> dict[str, list]:
    """Call each runner once per repetition, the order rotated every repetition so that
    neither side always runs first (on a loaded machine the moment matters)."""
    names = list(runners)
    results: dict[str, list] = {name: [] for name in names}
    for rep in range(reps):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            results[name].append(runners[name]())
            if pause:
                time.sleep(pause)
    return results


# ---------------------------------------------------------------- the machine


def wait_until(check, timeout: float, what: str, interval: float = 0.5):
    """Poll `check` until it returns something true, and return that; RuntimeError naming
    `what` when `timeout` seconds pass first."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout:.0f}s")
        time.sleep(interval)


def loadavg() -> float:
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


class LoadSampler:
    """The 1-minute load average, sampled every few seconds while a section runs."""

    def __init__(self, every: float = 5.0):
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._every = every
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.samples.append(loadavg())
            self._stop.wait(self._every)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)

    def describe(self) -> str:
        if not self.samples:
            return "—"
        return (f"{min(self.samples):.1f} / {median(self.samples):.1f} / {max(self.samples):.1f} "
                f"(min / median / max of {len(self.samples)} samples)")


def versions(kubectl: str | None) -> dict[str, str]:
    found = {"python": platform.python_version(), "os": platform.platform()}
    with open(os.path.join(REPO, "tools", "k8s", "VERSIONS")) as f:
        for line in f:
            if "=" in line and not line.startswith("#"):
                key, value = line.strip().split("=", 1)
                found[key.lower()] = value
    if kubectl:
        out = subprocess.run([kubectl, "version", "--client", "-o", "json"], capture_output=True, text=True).stdout
        match = re.search(r'"gitVersion":\s*"([^"]+)"', out)
        found["kubectl"] = match.group(1) if match else "?"
    try:
        import importlib.metadata as md

        for package in ("paddlepaddle", "jupyter_server", "jupyterhub", "jupyterhub-kubespawner"):
            try:
                found[package] = md.version(package)
            except md.PackageNotFoundError:
                pass
    except ImportError:
        pass
    found["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                     text=True).stdout.strip()
    # results.md itself is not code: the previous run may have left it changed
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                            ":(exclude)benchmarks/results.md"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    if dirty:
        found["commit"] += " (with uncommitted changes)"
    return found


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def tool(name: str, bin_dir: str | None = None) -> str:
    """`name` in bin_dir, next to this interpreter (the venv's console scripts), else on PATH."""
    for folder in (bin_dir, os.path.dirname(sys.executable)):
        if folder and os.access(os.path.join(folder, name), os.X_OK):
            return os.path.join(folder, name)
    found = shutil.which(name)
    if found:
        return found
    raise SystemExit(f"{name} not found (looked in {bin_dir}, next to {sys.executable}, on PATH)")


# ---------------------------------------------------------------- results


@dataclasses.dataclass
class Row:
    """One line of the summary: a goal of issue 15."""
    what: str
    ours: str
    baseline: str
    ratio: str
    goal: str
    met: bool | None  # None: not measured
    note: str = ""


@dataclasses.dataclass
class Section:
    title: str
    rows: list[Row]
    details: str
    load: str = ""
    seconds: float = 0.0
    correct: bool = True  # every correctness check of the section passed


def verdict(met: bool | None) -> str:
    return {True: "met", False: "**not met**", None: "not measured"}[met]
