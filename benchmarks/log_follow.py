"""Job logs: `paddlecloud logs` side by side with `kubectl logs`, on the real test control plane.

Starts tools/k8s's control plane on 127.0.0.1 (2 fake nodes), submits a 2-worker job
with the Kubernetes backend, gives each worker pod a CRI log file of N lines (KWOK
serves it through the real API server's pods/log), then measures:

  1. reading the whole merged log once: wall time (median) and peak RSS of
     `paddlecloud --backend kubernetes logs NAME` vs `kubectl logs -l ... --prefix`;
  2. follow latency: time from appending a marker line to a worker's log file until
     `paddlecloud logs NAME -f` and `kubectl logs -f -l ... --prefix` print it.

Writes a markdown table to benchmarks/results.md. Run with `make bench`.
Every loop is bounded; the cluster is always stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import queue
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from tools.k8s.cluster import Cluster, cri_log_lines, default_bin_dir  # noqa: E402

from paddle_ext.backends.base import JobSpec  # noqa: E402
from paddle_ext.backends.kubernetes import KubernetesBackend  # noqa: E402

NAMESPACE = "bench"
JOB = "bench-logs"
SELECTOR = f"paddlecloud.io/job={JOB}"
TIME_V = "/usr/bin/time"
RUN_TIMEOUT = 300  # seconds, any single command
IMPORTS = "import paddle_ext.cli, paddle_ext.backends.kubernetes, kubernetes_asyncio.client, kubernetes_asyncio.config"


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- setup


def worker_lines(index: int, n: int) -> list[str]:
    """N training-log-like lines (~60 bytes each)."""
    return [f"rank {index}: step {k:07d} loss {1.0 / (k + 1):.6f} lr 0.000100 ips 1234.5"
            for k in range(n)]


def job_pods(cluster: Cluster) -> dict[int, dict]:
    """Worker index -> pod of our job."""
    items = cluster.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={SELECTOR}")["items"]
    return {int(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]): p for p in items}


def running(pod: dict) -> bool:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return bool(statuses) and "running" in (statuses[0].get("state") or {})


async def submit_job(kubeconfig: str) -> None:
    backend = KubernetesBackend(kubeconfig=kubeconfig, namespace=NAMESPACE)
    try:
        await backend.submit(JobSpec(name=JOB, command=["python", "train.py"], workers=2))
    finally:
        await backend.close()


def wait_for_pods(cluster: Cluster, timeout: float = 60) -> dict[int, str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = job_pods(cluster)
        if len(pods) == 2 and all(running(p) for p in pods.values()):
            return {i: p["metadata"]["name"] for i, p in pods.items()}
        time.sleep(0.2)
    raise RuntimeError(f"the job's 2 worker pods were not Running within {timeout}s")


def write_logs(paths: dict[int, str], n: int) -> None:
    for index, path in paths.items():
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(cri_log_lines(worker_lines(index, n)))
        os.replace(tmp, path)


# ---------------------------------------------------------------- one-shot read


def strip_prefix(line: str) -> str:
    """The line without `[worker-I] ` (ours) or `[pod/NAME/CONTAINER] ` (kubectl)."""
    return line.split("] ", 1)[1] if line.startswith("[") and "] " in line else line


def run_once(cmd: list[str], env: dict, out_path: str) -> tuple[float, int | None, int]:
    """Run cmd with stdout to out_path: (wall seconds, peak RSS in KiB or None, exit code)."""
    use_time = os.access(TIME_V, os.X_OK)
    full = [TIME_V, "-v"] + cmd if use_time else cmd
    with open(out_path, "w") as out:
        t0 = time.monotonic()
        proc = subprocess.run(full, env=env, stdout=out, stderr=subprocess.PIPE, text=True, timeout=RUN_TIMEOUT)
        wall = time.monotonic() - t0
    rss = None
    if use_time:
        found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
        rss = int(found.group(1)) if found else None
    if proc.returncode != 0:
        log(f"exit {proc.returncode}: {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return wall, rss, proc.returncode


def measure_read(name: str, cmd: list[str], env: dict, runs: int, tmp: str, expected: list[str]) -> dict:
    walls, rsss, lines = [], [], None
    out_path = os.path.join(tmp, "out.txt")
    for _ in range(runs):
        wall, rss, code = run_once(cmd, env, out_path)
        if code != 0:
            raise RuntimeError(f"{name} failed (exit {code})")
        walls.append(wall)
        if rss is not None:
            rsss.append(rss)
        with open(out_path) as f:
            got = f.read().splitlines()
        lines = len(got)
    same = sorted(strip_prefix(line) for line in got) == expected
    return {"wall": statistics.median(walls), "walls": walls, "rss_kib": max(rsss) if rsss else None,
            "lines": lines, "same_content": same}


# ---------------------------------------------------------------- follow latency


class Follower:
    """A `logs -f` process whose stdout lines are timestamped on arrival."""

    def __init__(self, name: str, cmd: list[str], env: dict):
        self.name = name
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, bufsize=1)
        self.lines: queue.Queue = queue.Queue()
        self.count = 0
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put((time.monotonic(), line.rstrip("\n")))

    def drain(self, quiet: float, timeout: float) -> int:
        """Consume lines until none came for `quiet` seconds (at most `timeout`)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.lines.get(timeout=quiet)
                self.count += 1
            except queue.Empty:
                return self.count
        return self.count

    def wait_for(self, marker: str, timeout: float) -> float | None:
        """Monotonic time the line with marker arrived; None on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                when, line = self.lines.get(timeout=left)
            except queue.Empty:
                return None
            self.count += 1
            if marker in line:
                return when

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def measure_follow(commands: dict[str, list[str]], env: dict, path: str, reps: int) -> dict:
    followers = {name: Follower(name, cmd, env) for name, cmd in commands.items()}
    latencies: dict[str, list[float]] = {name: [] for name in commands}
    missed: dict[str, int] = {name: 0 for name in commands}
    try:
        for f in followers.values():  # each has printed what was there and is now waiting
            log(f"follow: {f.name} printed {f.drain(quiet=2.0, timeout=60)} lines before the first marker")
        for rep in range(reps):
            marker = f"MARKER-{rep}-{uuid.uuid4().hex[:8]}"
            t0 = time.monotonic()
            with open(path, "a") as f:
                f.write(cri_log_lines([f"rank 1: {marker}"]))
            for name, follower in followers.items():
                seen = follower.wait_for(marker, timeout=20)
                if seen is None:
                    missed[name] += 1
                else:
                    latencies[name].append(seen - t0)
            time.sleep(0.5)
    finally:
        for f in followers.values():
            f.stop()
    return {name: {"median": statistics.median(v) if v else None, "all": v, "missed": missed[name]}
            for name, v in latencies.items()}


# ---------------------------------------------------------------- report


def fmt_s(value: float | None) -> str:
    return "—" if value is None else (f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s")


def fmt_mib(kib: int | None) -> str:
    return "—" if kib is None else f"{kib / 1024:.0f} MiB"


def k8s_version() -> str:
    with open(os.path.join(REPO, "tools", "k8s", "VERSIONS")) as f:
        for line in f:
            if line.startswith("KUBERNETES="):
                return line.split("=", 1)[1].strip()
    return "?"


def report(reads: dict, imports: dict, briefed: dict, follow: dict, runs: int, reps: int, follow_lines: int) -> str:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    rows = [
        "# Benchmarks: job logs, `paddlecloud logs` vs `kubectl logs`",
        "",
        f"- Date: {now}",
        f"- Machine: {os.cpu_count()} CPUs (nproc), {platform.platform()}, Python {platform.python_version()}",
        f"- Control plane: Kubernetes {k8s_version()} (tools/k8s, KWOK serves pod logs from files), 2 nodes",
        "- Job: 2 workers; each worker pod's log is a CRI file of N lines (~60 bytes each)",
        "",
        f"## Reading the whole merged log once (median of {runs} runs; peak RSS: max over runs, `/usr/bin/time -v`)",
        "",
        "| N lines per worker | tool | wall time (median) | peak RSS | lines printed | same lines as written |",
        "|---:|---|---:|---:|---:|:---:|",
    ]
    for n, by_tool in reads.items():
        for tool, r in by_tool.items():
            rows.append(f"| {n:,} | {tool} | {fmt_s(r['wall'])} | {fmt_mib(r['rss_kib'])} | {r['lines']:,} "
                        f"| {'yes' if r['same_content'] else 'NO'} |")
    rows += ["", f"Fixed cost inside ours: `python -c \"{IMPORTS}\"` alone takes {fmt_s(imports['wall'])} "
             f"and {fmt_mib(imports['rss_kib'])} (Python start-up and imports, no API call).",
             "", "Commands:", "",
             f"- ours: `paddlecloud --backend kubernetes logs {JOB} --namespace {NAMESPACE}`",
             f"- kubectl: `kubectl logs -l {SELECTOR} --prefix --max-log-requests 10 --tail=-1 -n {NAMESPACE}`",
             "",
             "`--tail=-1` is needed: with a label selector `kubectl logs` prints only the last 10 lines "
             "per pod unless told otherwise. Without it (the command as first written down):",
             ""]
    for n, r in briefed.items():
        rows.append(f"- N = {n:,}: `kubectl logs -l {SELECTOR} --prefix --max-log-requests 10 -n {NAMESPACE}` "
                    f"printed {r['lines']:,} lines of {2 * n:,} ({fmt_s(r['wall'])}).")
    rows += ["", f"## Follow latency (append one line to worker 1's log file, time until printed; "
                 f"{reps} repetitions, {follow_lines} lines per worker already there)", "",
             "| tool | median | min | max | missed (20 s timeout) |", "|---|---:|---:|---:|---:|"]
    for tool, r in follow.items():
        v = r["all"]
        rows.append(f"| {tool} | {fmt_s(r['median'])} | {fmt_s(min(v) if v else None)} | "
                    f"{fmt_s(max(v) if v else None)} | {r['missed']} |")
    rows += ["", "Commands: `paddlecloud --backend kubernetes logs "
                 f"{JOB} -f --namespace {NAMESPACE}` and `kubectl logs -f -l {SELECTOR} --prefix "
                 f"--max-log-requests 10 -n {NAMESPACE}`. Both read the same API server stream "
                 "(pods/log?follow=true), so KWOK's file watching is part of both numbers.", ""]
    return "\n".join(rows)


# ---------------------------------------------------------------- main


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", default="10000,100000", help="lines per worker, comma-separated")
    parser.add_argument("--runs", type=int, default=3, help="runs per tool and size (median)")
    parser.add_argument("--follow-reps", type=int, default=10)
    parser.add_argument("--follow-lines", type=int, default=100, help="lines per worker before following")
    parser.add_argument("--out", default=os.path.join(HERE, "results.md"))
    args = parser.parse_args(argv)
    sizes = [int(x) for x in args.lines.split(",")]

    bin_dir = default_bin_dir()
    kubectl = shutil.which("kubectl") or os.path.join(bin_dir, "kubectl")
    ours = shutil.which("paddlecloud")
    ours = [ours] if ours else [sys.executable, "-m", "paddle_ext.cli"]

    state = tempfile.mkdtemp(prefix="paddlecloud-bench-")
    cluster = Cluster(state, bin_dir, nodes=2, complete_after="10m")
    try:
        t0 = time.monotonic()
        cluster.start()
        log(f"cluster ready in {time.monotonic() - t0:.1f}s at {cluster.server}")
        assert cluster.server.startswith("https://127.0.0.1:")
        env = {**os.environ, "KUBECONFIG": cluster.kubeconfig}
        env.pop("PADDLECLOUD_BACKEND", None)
        cluster.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        asyncio.run(submit_job(cluster.kubeconfig))
        pods = wait_for_pods(cluster)
        log(f"pods: {pods}")
        log_dir = os.path.join(state, "podlogs")
        os.makedirs(log_dir)
        paths = {i: os.path.join(log_dir, f"{name}.log") for i, name in pods.items()}
        write_logs(paths, 1)
        for i, name in pods.items():
            cluster.set_pod_log(NAMESPACE, name, paths[i])

        ours_read = ours + ["--backend", "kubernetes", "logs", JOB, "--namespace", NAMESPACE]
        kubectl_read = [kubectl, "logs", "-l", SELECTOR, "--prefix", "--max-log-requests", "10", "-n", NAMESPACE]

        # KWOK picks up the Logs objects shortly after they are created: wait until both lines show.
        deadline = time.monotonic() + 60
        while True:
            got = subprocess.run(kubectl_read, env=env, capture_output=True, text=True, timeout=30).stdout
            if len(got.splitlines()) == 2:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"pod logs not served within 60s: {got!r}")
            time.sleep(0.5)

        # The fixed cost of our command: Python start-up plus importing the Kubernetes client.
        imports = measure_read("imports", [sys.executable, "-c", IMPORTS], env, args.runs, state, [])
        log(f"imports only: {imports['wall']:.2f}s {fmt_mib(imports['rss_kib'])}")

        reads, briefed = {}, {}
        for n in sizes:
            write_logs(paths, n)
            expected = sorted(line for i in sorted(paths) for line in worker_lines(i, n))
            log(f"N={n}: reading ({args.runs} runs per tool)")
            reads[n] = {
                "paddlecloud logs": measure_read("paddlecloud", ours_read, env, args.runs, state, expected),
                "kubectl logs --tail=-1": measure_read("kubectl", kubectl_read + ["--tail=-1"], env, args.runs,
                                                       state, expected),
            }
            briefed[n] = measure_read("kubectl (no --tail)", kubectl_read, env, 1, state, expected)
            for tool, r in reads[n].items():
                log(f"  {tool}: {r['wall']:.2f}s {fmt_mib(r['rss_kib'])} {r['lines']} lines same={r['same_content']}")
            log(f"  kubectl without --tail: {briefed[n]['lines']} lines")

        write_logs(paths, args.follow_lines)
        follow = measure_follow({
            "paddlecloud logs -f": ours_read + ["-f"],
            "kubectl logs -f": kubectl_read + ["-f"],
        }, env, paths[1], args.follow_reps)
        for tool, r in follow.items():
            log(f"  follow {tool}: {r['all']} missed={r['missed']}")
    finally:
        cluster.stop()
        shutil.rmtree(state, ignore_errors=True)

    text = report(reads, imports, briefed, follow, args.runs, args.follow_reps, args.follow_lines)
    print(text)
    with open(args.out, "w") as f:
        f.write(text)
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
