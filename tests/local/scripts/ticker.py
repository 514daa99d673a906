"""Prints `tick <rank> <i>` every --interval seconds, --count times (no Paddle collectives).

With --until FILE it ticks until FILE exists (a gate the test opens), so a test can hold
the job running for as long as it needs instead of guessing how long is enough. First it
prints `env NAME=value` for each PROBE_* and PADDLECLOUD_DATASET_* variable it was given.
"""
import argparse
import os
import time

parser = argparse.ArgumentParser()
parser.add_argument("--count", type=int, default=20)
parser.add_argument("--interval", type=float, default=0.25)
parser.add_argument("--until", help="tick until this file exists (instead of --count times)")
args = parser.parse_args()
rank = os.environ.get("PADDLE_TRAINER_ID", "?")
for name in sorted(os.environ):
    if name.startswith(("PROBE_", "PADDLECLOUD_DATASET_")):
        print(f"env {name}={os.environ[name]}", flush=True)
i = 0
while (not os.path.exists(args.until)) if args.until else i < args.count:
    print(f"tick {rank} {i}", flush=True)
    time.sleep(args.interval)
    i += 1
print(f"ticker {rank} done", flush=True)
