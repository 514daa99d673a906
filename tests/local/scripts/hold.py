"""Prints `held <rank> <token>`, then waits until the gate file exists (the test opens it
once it has seen that line), then prints `released <rank>`.

    python hold.py GATE TOKEN
"""
import os
import sys
import time

gate, token = sys.argv[1], sys.argv[2]
rank = os.environ.get("PADDLE_TRAINER_ID", "?")
print(f"held {rank} {token}")  # no flush: the job's environment must make it reach the log at once
while not os.path.exists(gate):
    time.sleep(0.05)
print(f"released {rank}")
