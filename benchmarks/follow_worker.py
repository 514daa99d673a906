"""One worker of the real-node follow benchmark (benchmarks/follow.py), run in the job's pod.

    python follow_worker.py RATE SECONDS GATE

Prints a readiness line (seq=-1) every second until the file GATE holds START, a
CLOCK_MONOTONIC time (a container shares the host's monotonic clock), and START has come:
the benchmark writes GATE into every worker's container once each follower has a readiness
line of every worker, so the writing waits for the followers, not for a timer. Then it prints
RATE lines a second for SECONDS,
each carrying its write time (follow_io.payload), then one line of totals that the
followers' tally does not count. A late tick writes at once; nothing is skipped.

The lines go to this trainer's own standard output, as a user's `print` does: Paddle's
launcher keeps it in its file (`workerlog.0`), the worker's relay (paddle_ext.trainer_logs)
copies each line to the container's output as it is written, and the kubelet, the API
server and the follower take it from there. So every figure includes the whole path a
user's line takes. (The launcher's own copy, every 2 seconds or so, is left out by the
product: the launcher's standard output goes nowhere, so a line written there is lost.)
"""

from __future__ import annotations

import os
import sys
import time

from follow_io import payload


READY_EVERY_SECONDS = 1.0
GATE_POLL_SECONDS = 0.1


def read_gate(gate: str) -> float | None:
    try:
        with open(gate) as f:
            return float(f.read())
    except (FileNotFoundError, ValueError):  # not there yet (it is written whole, by a rename)
        return None


def wait_for_start(gate: str, worker: int, out) -> None:
    start_at, said_ready = None, float("-inf")
    while start_at is None or time.monotonic() < start_at:
        now = time.monotonic()
        if now - said_ready >= READY_EVERY_SECONDS:
            out.write(payload(worker, -1, now) + "\n")
            out.flush()
            said_ready = now
        if start_at is None:
            start_at = read_gate(gate)
        time.sleep(GATE_POLL_SECONDS if start_at is None else max(0.0, min(GATE_POLL_SECONDS, start_at - now)))


def main() -> int:
    rate, seconds, gate = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    worker = int(os.environ["JOB_COMPLETION_INDEX"])
    out = sys.stdout
    wait_for_start(gate, worker, out)
    count, period = int(rate * seconds), 1.0 / rate
    start = time.monotonic()
    worst_lag = 0.0
    for seq in range(count):
        wait = start + seq * period - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        else:
            worst_lag = max(worst_lag, -wait)
        out.write(payload(worker, seq, time.monotonic()) + "\n")
        out.flush()
    took = time.monotonic() - start
    out.write(f"w={worker} totals lines={count} took={took:.6f} worst_lag={worst_lag:.6f}\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
