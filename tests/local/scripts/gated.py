"""A job held open by the test: prints `gated up`, then waits until the file named by
--gate exists and exits 0. The test decides when it ends; no timer does."""
import argparse
import os
import time

parser = argparse.ArgumentParser()
parser.add_argument("--gate", required=True)
args = parser.parse_args()
print("gated up", flush=True)
while not os.path.exists(args.gate):
    time.sleep(0.1)
print("gated done", flush=True)
