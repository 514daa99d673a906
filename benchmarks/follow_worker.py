"""One worker of the real-node follow benchmark (benchmarks/follow.py), run in the job's pod.

    python follow_worker.py RATE SECONDS START

Prints a readiness line (seq=-1) every second until START, a CLOCK_MONOTONIC time (a
container shares the host's monotonic clock), then RATE lines a second for SECONDS,
each carrying its write time (follow_io.payload), then one line of totals that the
followers' tally does not count. A late tick writes at once; nothing is skipped.

The lines go straight to the container's output, the standard output of Paddle's
launcher (our parent), not to our own: the launcher keeps a worker's output in a file
and echoes it in batches every 2 seconds or so, which would put Paddle's batching, not
the log path (containerd, kubelet, API server, follower), into every figure.
"""

from __future__ import annotations

import os
import sys
import time

from follow_io import payload


def main() -> int:
    rate, seconds, start_at = (float(arg) for arg in sys.argv[1:4])
    worker = int(os.environ["JOB_COMPLETION_INDEX"])
    out = open(f"/proc/{os.getppid()}/fd/1", "w")
    while (left := start_at - time.monotonic()) > 0:
        out.write(payload(worker, -1, time.monotonic()) + "\n")
        out.flush()
        time.sleep(min(1.0, left))
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
