"""Live lines: how long after a training script's `print` the line shows in `paddlecloud
logs -f`, against the same script run bare (`python live.py`, what a user would otherwise
watch) and under a bare `python -m paddle.distributed.launch` (Paddle's own copy of its
trainer's output).

The script (LIVE_SCRIPT) prints `ready`, waits at a gate (a file) until every follower
has shown that line, then prints N lines at a steady interval, each carrying
time.monotonic() when printed (one clock for every process on the machine); the
follower's output is read and stamped as it arrives in this process: latency = arrival -
print. Ours runs 2 workers on the local backend, followed at once by the CLI and by the
notebook server's REST follow (SSE); correctness in the
same runs: every line of every worker arrives exactly once, in its order, with its
`[worker-I] ` prefix.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from common import Row, Section, fmt_ms, log, percentile

LIVE_SCRIPT = """\
import os, sys, time
gate, count, interval = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
rank = os.environ.get("PADDLE_TRAINER_ID", "0")
print(f"ready {rank}")
while not os.path.exists(gate):
    time.sleep(0.01)
for i in range(count):
    print(f"live {rank} {i} {time.monotonic():.6f}")
    time.sleep(interval)
print(f"done {rank}")
"""
LINE = re.compile(r"^(?:\[worker-(\d+)\] )?live (\d+) (\d+) (\d+\.\d+)$")
WORKERS = 2
INTERVAL = 0.05


class Stamped:
    """A stream's lines (a process's standard output, or with `sse` the data lines of a
    text/event-stream), each stamped with time.monotonic() on arrival."""

    def __init__(self, stream, proc: subprocess.Popen | None = None, sse: bool = False):
        self.proc, self.sse = proc, sse
        self.lines: list[tuple[float, str]] = []
        self.changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream):
        try:
            for raw in stream:
                now = time.monotonic()
                text = raw.decode(errors="replace").rstrip("\r\n")
                if self.sse:
                    if not text.startswith("data:"):
                        continue
                    text = text[6:] if text.startswith("data: ") else text[5:]
                with self.changed:
                    self.lines.append((now, text))
                    self.changed.notify_all()
        except (OSError, ValueError):  # the connection closed under us
            pass

    def wait_for(self, predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate([text for _, text in self.lines]):
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():  # (the output ended without them)
                    raise RuntimeError(f"{what}: not seen within {timeout:g}s; last lines: "
                                       f"{[t for _, t in self.lines[-5:]]}")
                self.changed.wait(min(left, 0.5))

    def finish(self, timeout: float) -> int:
        code = self.proc.wait(timeout) if self.proc else 0
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise RuntimeError(f"the stream did not end within {timeout:g}s of its job")
        return code


class LocalServer:
    """`jupyter server` with the paddle_ext extension on the local backend (127.0.0.1),
    reading the jobs of PADDLECLOUD_HOME `home`: the REST follow's end."""

    def __init__(self, base: str, home: str):
        from follow import NotebookServer

        self.server = NotebookServer(base, dict(os.environ), "unused")
        self.server.env.update({"PADDLECLOUD_HOME": home, "PADDLECLOUD_BACKEND": "local"})
        self.server.cmd = [c for c in self.server.cmd if not c.startswith("--KubernetesBackend.")]

    def __enter__(self):
        self.server.start()
        self.server.wait_ready()
        return self

    def __exit__(self, *exc):
        self.server.stop()

    def follow(self, name: str):
        req = urllib.request.Request(f"{self.server.url}/paddle/api/jobs/{name}/logs?follow=1",
                                     headers={"Authorization": f"token {self.server.token}"})
        return urllib.request.urlopen(req, timeout=300)


def _stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _latencies(lines: list[tuple[float, str]], workers: int, count: int) -> tuple[dict[int, list[float]], bool, str]:
    """Per worker the latencies, whether every line came once and in order, and why not."""
    got: dict[int, list[int]] = {}
    latency: dict[int, list[float]] = {}
    for arrived, text in lines:
        match = LINE.match(text)
        if not match:
            continue
        prefix, rank, i, printed = match.groups()
        worker = int(prefix) if prefix is not None else int(rank)
        if workers > 1 and prefix is None:
            return latency, False, f"a line without its worker prefix: {text!r}"
        if prefix is not None and int(prefix) != int(rank):
            return latency, False, f"a line under the wrong worker: {text!r}"
        got.setdefault(worker, []).append(int(i))
        latency.setdefault(worker, []).append(arrived - float(printed))
    for worker in range(workers):
        if got.get(worker) != list(range(count)):
            seen = got.get(worker, [])
            return latency, False, (f"worker {worker}: {len(seen)} of {count} lines, "
                                    f"{'in order' if seen == sorted(seen) else 'out of order'}")
    return latency, True, ""


def _one(tool: str, ours: list[str], base: str, number: int, count: int, server: LocalServer | None = None,
         home: str | None = None) -> dict[str, dict]:
    """One run of `tool`: per follower ("ours": the CLI and "rest": the SSE follow, at once;
    else the tool's own output) whether it was correct and its latencies."""
    work = os.path.join(base, f"run-{number}")
    home = home or os.path.join(base, f"home-{number}")
    os.makedirs(work)
    with open(os.path.join(work, "live.py"), "w") as f:
        f.write(LIVE_SCRIPT)
    gate = os.path.join(work, "gate")
    args = [gate, str(count), str(INTERVAL)]
    env = {**os.environ, "PADDLECLOUD_HOME": home, "PYTHONUNBUFFERED": "1"}  # bare: as on a terminal
    env.pop("PADDLECLOUD_BACKEND", None)
    workers = WORKERS if tool == "ours" else 1
    name = f"live-{number}"
    if tool == "ours":
        submit = subprocess.run(ours + ["--backend", "local", "submit", "--name", name, "--workers", str(workers),
                                        "--", "python", "live.py", *args], env=env, cwd=work, capture_output=True,
                                timeout=120)
        if submit.returncode != 0:
            failed = {"ok": False, "why": f"submit failed: {submit.stderr.decode()[-300:]}"}
            return {"ours": failed, "rest": failed}
        cmd = ours + ["--backend", "local", "logs", name, "-f"]
    elif tool == "bare":
        cmd = [sys.executable, "live.py", *args]
    else:
        cmd = [sys.executable, "-m", "paddle.distributed.launch", "--log_dir", os.path.join(work, "log"), "live.py",
               *args]
    proc = subprocess.Popen(cmd, env=env, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    followers = {tool: Stamped(proc.stdout, proc)}
    response = None
    try:
        if tool == "ours" and server is not None:
            response = server.follow(name)
            followers["rest"] = Stamped(response, sse=True)
        ready = [f"{f'[worker-{w}] ' if workers > 1 else ''}ready {w}" for w in range(workers)]
        for label, out in followers.items():
            out.wait_for(lambda texts: all(r in texts for r in ready), 180, f"{label}: the ready lines")
        open(gate, "w").close()
        codes = {label: out.finish(count * INTERVAL * 3 + 120) for label, out in followers.items()}
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        open(gate, "w").close()
        _stop(proc)
        return {label: {"ok": False, "why": str(exc)[:300]} for label in followers}
    finally:
        _stop(proc)
        if response is not None:
            response.close()
        if tool == "ours":  # the job's detached processes must be gone before the next run
            from paddle_ext.backends import local_files

            job = os.path.join(home, "jobs", name)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and any(
                    local_files.group_members(pgid) for pgid in local_files.worker_pids(job).values()):
                time.sleep(0.1)
    results = {}
    for label, out in followers.items():
        latency, ok, why = _latencies(out.lines, workers, count)
        results[label] = {"ok": ok and codes[label] == 0, "why": why or (f"exit {codes[label]}" if codes[label] else ""),
                          "latency": latency}
    return results


def live_section(ours: list[str], count: int, runs: int) -> Section:
    t_start = time.monotonic()
    base = tempfile.mkdtemp(prefix="bench-live-")
    counter = iter(range(10_000))
    tools = ("ours", "bare", "launcher")
    results: dict[str, list[dict]] = {tool: [] for tool in ("ours", "rest", "bare", "launcher")}
    log(f"live: {runs} runs per tool of {count} lines, one every {INTERVAL * 1000:.0f} ms")
    ours_home = os.path.join(base, "home-ours")  # the notebook server's, for every run of ours
    try:
        with LocalServer(base, ours_home) as server:
            for rep in range(runs):
                order = tools[rep % len(tools):] + tools[:rep % len(tools)]
                for tool in order:
                    got = _one(tool, ours, base, next(counter), count, server=server,
                               home=ours_home if tool == "ours" else None)
                    for label, result in got.items():
                        if not result["ok"]:
                            log(f"  {label} run failed: {result['why']}")
                        results[label].append(result)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    stats = {}
    for tool, entries in results.items():
        every = [v for e in entries for values in e.get("latency", {}).values() for v in values]
        per_worker = {}
        for e in entries:
            for worker, values in e.get("latency", {}).items():
                per_worker.setdefault(worker, []).extend(values)
        stats[tool] = {"p50": percentile(every, 50), "p99": percentile(every, 99), "max": max(every, default=None),
                       "ok": all(e["ok"] for e in entries), "lines": len(every),
                       "why": [e["why"] for e in entries if not e["ok"]][:1],
                       "workers": {w: percentile(v, 99) for w, v in sorted(per_worker.items())}}
        log(f"  {tool}: p50 {fmt_ms(stats[tool]['p50'])} p99 {fmt_ms(stats[tool]['p99'])} ok={stats[tool]['ok']}")
    o, b = stats["ours"], stats["bare"]
    met = bool(o["ok"] and b["ok"] and o["p99"] is not None and o["p99"] <= 0.5)
    row = Row("live line: print → `paddlecloud logs -f`, local, 2 workers, p99",
              f"{fmt_ms(o['p99'])} (p50 {fmt_ms(o['p50'])})",
              f"{fmt_ms(b['p99'])} (p50 {fmt_ms(b['p50'])}; bare `python live.py` on its own output)",
              f"+{fmt_ms(o['p99'] - b['p99'])}" if o["p99"] is not None and b["p99"] is not None else "—",
              "p99 ≤ 500 ms", met,
              f"(for comparison, Paddle's own copy under a bare `python -m paddle.distributed.launch`: p99 "
              f"{fmt_ms(stats['launcher']['p99'])})")
    r = stats["rest"]
    rest_row = Row("live line: print → REST follow (`GET …/logs?follow=1`, SSE), local, 2 workers, p99",
                   f"{fmt_ms(r['p99'])} (p50 {fmt_ms(r['p50'])})",
                   f"{fmt_ms(b['p99'])} (p50 {fmt_ms(b['p50'])}; the bare script)",
                   f"+{fmt_ms(r['p99'] - b['p99'])}" if r["p99"] is not None and b["p99"] is not None else "—",
                   "p99 ≤ 500 ms", bool(r["ok"] and b["ok"] and r["p99"] is not None and r["p99"] <= 0.5),
                   "(the same runs as the CLI's row, both following at once)")
    lines = [__doc__.split("\n\n", 1)[1].strip(), "",
             f"{runs} run(s) per tool, rotating the order, {count} lines per worker, one every "
             f"{INTERVAL * 1000:.0f} ms; percentiles over every line of every run. **Correct**: every line "
             "of every worker once, in order, with its prefix (ours), and the command exited 0.", "",
             "| command | lines | p50 | p99 | max | p99 per worker | correct |", "|---|---:|---:|---:|---:|---|:---:|"]
    shown = {"ours": f"paddlecloud --backend local submit --workers {WORKERS} -- python live.py …; "
                     "paddlecloud --backend local logs NAME -f",
             "rest": "GET /paddle/api/jobs/NAME/logs?follow=1 (jupyter server, local backend; the same jobs)",
             "bare": "python live.py … (PYTHONUNBUFFERED=1, as on a terminal)",
             "launcher": "python -m paddle.distributed.launch --log_dir DIR live.py …"}
    for tool, s in stats.items():
        per = ", ".join(f"{w}: {fmt_ms(v)}" for w, v in s["workers"].items())
        lines.append(f"| `{shown[tool]}` | {s['lines']} | {fmt_ms(s['p50'])} | {fmt_ms(s['p99'])} | "
                     f"{fmt_ms(s['max'])} | {per} | {'yes' if s['ok'] else 'NO: ' + '; '.join(s['why'])} |")
    lines += ["", "Ours: each worker's supervisor copies every trainer's log file (the launcher's `--log_dir`, "
              "`workerlog.J`) into the worker's log as it grows, woken by inotify (paddle_ext.trainer_logs); the "
              "CLI's follow, and the notebook server's behind the REST follow, read that file as soon as it is written (inotify again; every 50 ms without it). The bare launcher instead copies its trainer's file to "
              "its own output after each ~2 s watch of the trainer, which is what a follower of its output saw "
              "before (and still sees under `python -m paddle.distributed.launch` by hand)."]
    return Section("Live lines: print → follow (local)", [row, rest_row], "\n".join(lines),
                   seconds=time.monotonic() - t_start,
                   correct=o["ok"] and r["ok"] and b["ok"] and stats["launcher"]["ok"])
