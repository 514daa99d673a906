"""The two ends of the follow benchmark (benchmarks/follow.py), each its own process so
that neither shares an interpreter (or its lock) with what it measures.

    follow_io.py write --rate R --seconds S --out W.json FILE...
        appends, every 1/R s, one CRI log line to each FILE (worker I = the I-th file):
        `w=I seq=K t=T ...`, T being time.monotonic() just before the write. The lines
        keep to their schedule; a late tick writes at once (its own T), nothing is skipped.

    follow_io.py read --workers N --lines K --out R.json [--ready PATH] (--sse URL | -- COMMAND...)
        runs COMMAND (or opens the SSE URL; the token comes from $BENCH_TOKEN) and stamps
        every piece of output as it arrives: a line's latency is the arrival time minus
        its T (CLOCK_MONOTONIC is the same clock in every process). Touches PATH once it
        has seen every worker's `seq=-1` line; exits once it has seen seq 0..K-1 of every
        worker, or on SIGTERM, writing percentiles and the lost / duplicated / out-of-order
        counts to R.json.
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse

LINE = re.compile(rb"w=(\d+) seq=(-?\d+) t=(\d+\.\d+)")


class Stop(Exception):
    pass


def _stop(signum, frame):
    raise Stop()


def payload(worker: int, seq: int, t: float) -> str:
    """A training-log-like line (~90 bytes) that carries its worker, number and write time."""
    return f"w={worker} seq={seq} t={t:.6f} loss {1.0 / (seq + 2):.6f} lr 0.000100 ips 1234.5"


def cri(text: str) -> bytes:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return f"{stamp} stdout F {text}\n".encode()


# ---------------------------------------------------------------- write


def write(args) -> int:
    fds = [os.open(path, os.O_WRONLY | os.O_APPEND) for path in args.files]
    count = int(args.rate * args.seconds)
    period = 1.0 / args.rate
    start = time.monotonic()
    worst_lag = 0.0
    try:
        for seq in range(count):
            due = start + seq * period
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            else:
                worst_lag = max(worst_lag, -wait)
            for worker, fd in enumerate(fds):
                now = time.monotonic()
                os.write(fd, cri(payload(worker, seq, now)))
    finally:
        for fd in fds:
            os.close(fd)
    took = time.monotonic() - start
    with open(args.out, "w") as f:
        json.dump({"lines_per_worker": count, "workers": len(fds), "seconds": took,
                   "rate_per_worker": count / took if took else None, "worst_lag": worst_lag}, f)
    return 0


# ---------------------------------------------------------------- read


def percentile(values, q):
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return ordered[rank - 1]


class Tally:
    def __init__(self, workers: int, lines: int):
        self.workers, self.lines = workers, lines
        self.seqs: list[list[int]] = [[] for _ in range(workers)]
        self.latencies: list[float] = []
        self.ready: set[int] = set()
        self.unique = [set() for _ in range(workers)]
        self.complete = 0  # workers whose every line arrived
        self.other = 0  # data lines that are not ours (should stay 0)

    def feed(self, data: bytes, when: float) -> None:
        for match in LINE.finditer(data):
            worker, seq = int(match.group(1)), int(match.group(2))
            if worker >= self.workers:
                self.other += 1
                continue
            if seq < 0:
                self.ready.add(worker)
                continue
            self.latencies.append(when - float(match.group(3)))
            self.seqs[worker].append(seq)
            unique = self.unique[worker]
            if seq not in unique:
                unique.add(seq)
                if len(unique) == self.lines:
                    self.complete += 1

    @property
    def done(self) -> bool:
        return self.complete == self.workers

    def summary(self) -> dict:
        lost = dup = disorder = 0
        for seqs, unique in zip(self.seqs, self.unique):
            lost += self.lines - len(unique & set(range(self.lines)))
            dup += len(seqs) - len(unique)
            disorder += sum(1 for a, b in zip(seqs, seqs[1:]) if b <= a)
        lat = self.latencies
        return {"received": len(lat), "expected": self.workers * self.lines, "lost": lost, "duplicated": dup,
                "out_of_order": disorder, "other_lines": self.other,
                "p50": percentile(lat, 50), "p90": percentile(lat, 90), "p99": percentile(lat, 99),
                "p999": percentile(lat, 99.9), "max": max(lat) if lat else None,
                "mean": sum(lat) / len(lat) if lat else None}


def read(args) -> int:
    signal.signal(signal.SIGTERM, _stop)
    tally = Tally(args.workers, args.lines)
    proc = conn = None
    error = ""
    started = time.monotonic()
    try:
        if args.sse:
            url = urllib.parse.urlsplit(args.sse)
            conn = http.client.HTTPConnection(url.hostname, url.port, timeout=args.timeout)
            conn.request("GET", url.path + "?" + url.query, headers={
                "Authorization": f"token {os.environ.get('BENCH_TOKEN', '')}", "Accept": "text/event-stream"})
            resp = conn.getresponse()
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
            chunk = lambda: resp.read1(1 << 20)  # noqa: E731
        else:
            errors = open(args.out + ".stderr", "wb")
            proc = subprocess.Popen(args.command, stdout=subprocess.PIPE, stderr=errors, stdin=subprocess.DEVNULL)
            errors.close()
            fd = proc.stdout.fileno()
            chunk = lambda: os.read(fd, 1 << 20)  # noqa: E731
        rest = b""
        while not tally.done:
            data = chunk()
            when = time.monotonic()
            if not data:
                error = "the stream ended before every line arrived"
                break
            data = rest + data
            cut = data.rfind(b"\n") + 1
            rest = data[cut:]
            tally.feed(data[:cut], when)
            if args.ready and len(tally.ready) == args.workers:
                with open(args.ready, "w"):
                    pass
                args.ready = None
    except Stop:
        error = error or "stopped (SIGTERM) before every line arrived"
    except Exception as exc:  # noqa: BLE001 (reported in the result)
        error = f"{type(exc).__name__}: {exc}"
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
        if conn is not None:
            conn.close()
    result = tally.summary()
    result.update({"error": error if not tally.done else "", "seconds": time.monotonic() - started})
    with open(args.out, "w") as f:
        json.dump(result, f)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    w = sub.add_parser("write")
    w.add_argument("--rate", type=float, required=True)
    w.add_argument("--seconds", type=float, required=True)
    w.add_argument("--out", required=True)
    w.add_argument("files", nargs="+")
    r = sub.add_parser("read")
    r.add_argument("--workers", type=int, required=True)
    r.add_argument("--lines", type=int, required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--ready")
    r.add_argument("--sse")
    r.add_argument("--timeout", type=float, default=600)
    r.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.mode == "write":
        return write(args)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.sse and not args.command:
        parser.error("read needs --sse URL or -- COMMAND")
    return read(args)


if __name__ == "__main__":
    sys.exit(main())
