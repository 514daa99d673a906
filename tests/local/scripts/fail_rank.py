"""Rank --rank exits with --code at once; the other ranks sleep (and must be stopped)."""
import argparse
import os
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--rank", type=int, default=1)
parser.add_argument("--code", type=int, default=3)
args = parser.parse_args()
rank = int(os.environ.get("PADDLE_TRAINER_ID", "0"))
print(f"rank {rank} pid {os.getpid()} up", flush=True)
if rank == args.rank:
    print(f"rank {rank} failing with {args.code}", flush=True)
    sys.exit(args.code)
time.sleep(300)
