"""Prints `tick <rank> <i>` every --interval seconds, --count times (no Paddle collectives)."""
import argparse
import os
import time

parser = argparse.ArgumentParser()
parser.add_argument("--count", type=int, default=20)
parser.add_argument("--interval", type=float, default=0.25)
args = parser.parse_args()
rank = os.environ.get("PADDLE_TRAINER_ID", "?")
for i in range(args.count):
    print(f"tick {rank} {i}", flush=True)
    time.sleep(args.interval)
print(f"ticker {rank} done", flush=True)
