"""Reports, from inside a worker, what it was started with: one line
`PROBE {"rank", "argv", "env", "cwd"}` (env: every PROBE_* and PADDLECLOUD_* variable).
With $PROBE_GATE set it then waits until that file exists (a gate the test opens)."""
import json
import os
import sys
import time

env = {k: v for k, v in os.environ.items() if k.startswith(("PROBE_", "PADDLECLOUD_"))}
print("PROBE " + json.dumps({"rank": os.environ.get("PADDLE_TRAINER_ID"), "argv": sys.argv[1:], "env": env,
                             "cwd": os.getcwd()}), flush=True)
gate = os.environ.get("PROBE_GATE")
while gate and not os.path.exists(gate):
    time.sleep(0.2)
