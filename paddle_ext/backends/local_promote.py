"""Start the local queue's jobs that fit now: what a worker's supervisor runs once its
worker has ended (a process of its own, so the supervisor never imports the backend).

    python -m paddle_ext.backends.local_promote JOBS_DIR
"""

from __future__ import annotations

import sys

from .local import promote_from_settings


def main(args: list[str]) -> int:
    if len(args) != 1:
        print("usage: local_promote JOBS_DIR", file=sys.stderr)
        return 2
    promote_from_settings(args[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
