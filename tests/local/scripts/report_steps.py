"""Reports loss and acc for --steps steps, --interval seconds apart, via paddle_ext.report()."""
import argparse
import os
import time

import paddle_ext

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--interval", type=float, default=0.2)
args = parser.parse_args()
rank = int(os.environ.get("PADDLE_TRAINER_ID", "0"))
for step in range(args.steps):
    paddle_ext.report(step=step, loss=1.0 / (step + 1) + rank, acc=step / args.steps)
    print(f"rank {rank}: step {step}", flush=True)
    time.sleep(args.interval)
print(f"rank {rank}: done", flush=True)
