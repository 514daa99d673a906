"""Reports loss and acc for --steps steps, --interval seconds apart, via paddle_ext.report().
With --gate FILE --gate-at K it waits before step K until FILE exists (a gate the test opens)."""
import argparse
import os
import time

import paddle_ext

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--interval", type=float, default=0.2)
parser.add_argument("--gate", help="wait before step --gate-at until this file exists")
parser.add_argument("--gate-at", type=int, default=0)
args = parser.parse_args()
rank = int(os.environ.get("PADDLE_TRAINER_ID", "0"))
for step in range(args.steps):
    while args.gate and step == args.gate_at and not os.path.exists(args.gate):
        time.sleep(0.2)
    paddle_ext.report(step=step, loss=1.0 / (step + 1) + rank, acc=step / args.steps)
    print(f"rank {rank}: step {step}", flush=True)
    time.sleep(args.interval)
print(f"rank {rank}: done", flush=True)
