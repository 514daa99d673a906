"""When a job restarts: which worker exits are retried, and how a restart is said (pure).

The rule, the same on both backends, read from the exit code of a worker's
`paddle.distributed.launch` (which passes on its trainer's):

- 0: the worker finished.
- 1-128 (USER_EXIT_CODES): the user's program exited with an error of its own (a Python
  exception is 1, `sys.exit(n)` is n). Not retried: the same code would fail the same way.
- killed by a signal (a negative code from the operating system; 129-255, which is how a
  launcher reports a trainer killed by signal N: 128+N from a shell, 256-N from Python's
  `sys.exit(-N)`): the worker was lost (out of memory, `kill -9`, its node or pod went
  away). Retried.
- PEER_LOST_EXIT_CODE: our worker entry on Kubernetes saw a peer worker go away while its
  own program failed (the program's error was the lost peer's consequence). Retried.

A retried failure restarts all workers together (a collective job cannot continue with a
hole), with $PADDLECLOUD_RESTART one higher, up to the job's `max_restarts`; then the job
fails with the last reason and the count. The standard library only: the local
supervisor imports this.
"""

from __future__ import annotations

import dataclasses
import re

USER_EXIT_CODES = range(1, 129)
# Our worker entry's exit when its program failed because a peer was lost (Kubernetes): in
# the signal range, so not a user's code, and no common signal's (256-56 would be a real-time
# signal, which never kills a worker).
PEER_LOST_EXIT_CODE = 200
MAX_SIGNAL = 64
# Among several retryable failures of one attempt, which is the cause and which its
# consequence: a worker lost or SIGKILLed (kill -9, the OOM killer, its node gone) is named
# before one that aborted (SIGABRT: what gloo/NCCL do when a peer's connection breaks) or was
# terminated (SIGTERM: how workers are stopped), and those before our peer-lost exit.
CONSEQUENTIAL_SIGNALS = frozenset({6, 15})


@dataclasses.dataclass(frozen=True)
class ExitCause:
    """How a worker ended: whether that is worth a restart, and in words ("was killed by signal 9")."""

    retryable: bool
    words: str


def signal_of(code: int) -> int | None:
    """The signal a worker's exit code says killed it, or None."""
    if code < 0:
        return -code
    if 128 < code <= 128 + MAX_SIGNAL:
        return code - 128
    if 256 - MAX_SIGNAL <= code <= 255:
        return 256 - code
    return None


def exit_cause(code: int | None) -> ExitCause:
    """Why a worker's exit code counts as it does (see the module's rule)."""
    if code is None:
        return ExitCause(True, "was lost (it ended without an exit code)")
    if code == PEER_LOST_EXIT_CODE:
        return ExitCause(True, "stopped because a peer worker was lost")
    if code in USER_EXIT_CODES:
        return ExitCause(False, f"exited with code {code}")
    signal = signal_of(code)
    if signal is not None:
        return ExitCause(True, f"was killed by signal {signal}")
    return ExitCause(code != 0, f"exited with code {code}")


def _consequence_rank(code: int | None) -> int:
    """0 for a likely root cause (lost, SIGKILL, another signal), 1 for a signal a peer's
    loss causes or our stop sends, 2 for our peer-lost exit."""
    if code == PEER_LOST_EXIT_CODE:
        return 2
    return 1 if code is not None and signal_of(code) in CONSEQUENTIAL_SIGNALS else 0


def may_be_a_consequence(code: int | None) -> bool:
    """Whether a failure is as likely the consequence of another worker's as a cause: the
    user's own error (a peer's lost connection raises one), an abort or a stop. Whoever sees
    such a failure first should let the other workers end before naming the cause."""
    return not exit_cause(code).retryable or _consequence_rank(code) > 0


def attempt_label(attempt: int, max_restarts: int) -> str:
    """'attempt 2 of 3' for the attempt numbered `attempt` (0 first) of a job allowed
    `max_restarts` restarts."""
    return f"attempt {attempt + 1} of {max_restarts + 1}"


def restart_marker(next_attempt: int, max_restarts: int, reason: str) -> str:
    """The line each worker's log gets where a restart begins, e.g.
    '--- attempt 2 of 3: worker 1 was killed by signal 9; restarting ---'."""
    return f"--- {attempt_label(next_attempt, max_restarts)}: {reason}; restarting ---"


_MARKER = re.compile(r"--- attempt (\d{1,6}) of \d{1,6}: .*; restarting ---\Z")


def marker_attempt(line: str) -> int | None:
    """The attempt (0 first) a restart_marker() line begins; None for any other line."""
    match = _MARKER.match(line.rstrip("\r\n"))
    return int(match.group(1)) - 1 if match else None


def failure_message(reason: str, restarts: int, max_restarts: int, retryable: bool) -> str:
    """The failed job's message: the last reason, and the count of restarts made."""
    sentence = reason[0].upper() + reason[1:] + "."
    if not retryable:
        if max_restarts:
            sentence += " Not restarted: an error in the job's own code fails it at once."
        return sentence
    if not max_restarts:
        return sentence
    return sentence + f" Restarted {restarts} of at most {max_restarts} times; no restarts are left."


@dataclasses.dataclass(frozen=True)
class Decision:
    """What an attempt's failures lead to: a restart of all workers, or the job's end."""

    restart: bool
    worker: int
    reason: str  # "worker 1 was killed by signal 9"
    retryable: bool


def decide(failures: dict[int, int | None], attempt: int, max_restarts: int) -> Decision:
    """From the workers that failed on their own in attempt `attempt` (index -> exit code;
    None: lost; not those stopped because of another's failure): restart when any failure
    is retryable and restarts are left. A retryable failure explains the others (a peer's
    error after a worker was killed is not the user's bug), so it names the reason."""
    if not failures:
        raise ValueError("decide() needs at least one failure")
    causes = {index: exit_cause(code) for index, code in sorted(failures.items())}
    retryable = sorted((index for index, cause in causes.items() if cause.retryable),
                       key=lambda index: (_consequence_rank(failures[index]), index))
    worker = retryable[0] if retryable else next(iter(causes))
    reason = f"worker {worker} {causes[worker].words}"
    return Decision(bool(retryable) and attempt < max_restarts, worker, reason, bool(retryable))
