"""A worker that will not stop when asked: it ignores SIGTERM, and starts a helper in a
session of its own (as a daemon would) that ignores it too. Once both run it prints
`stubborn <rank> up` and, with --marks DIR, creates DIR/up-<rank>; then sleeps until killed."""
import argparse
import os
import signal
import subprocess
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--marks", help="folder to create up-<rank> in once running")
args = parser.parse_args()
signal.signal(signal.SIGTERM, signal.SIG_IGN)
helper = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(3600)"
subprocess.Popen([sys.executable, "-c", helper], start_new_session=True)
rank = os.environ.get("PADDLE_TRAINER_ID", "?")
print(f"stubborn {rank} up", flush=True)
if args.marks:
    open(os.path.join(args.marks, f"up-{rank}"), "w").close()
while True:
    time.sleep(1)
