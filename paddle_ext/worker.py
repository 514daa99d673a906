"""The entry of a Kubernetes worker that may restart: runs Paddle's launcher and makes a lost
peer restart every worker, not just the lost one (standard library only: the worker image
carries this file).

    python -m paddle_ext.worker --index I --workers N --peer HOST_TEMPLATE --port P [--port-step S] -- LAUNCH_ARGV...

A Kubernetes Indexed Job replaces only the pod that failed; a collective job cannot go on
with a hole, and its other workers may hang in a collective waiting for the lost one. So
each worker answers on `--port` with its state ("running", "done", "failed") and a token of
its own, and watches its peers (`--peer` with {i} for the index, e.g.
"train-x-{i}.train-x"; worker i answers on P + i*S, S being 0 where each worker has a
host of its own): when a peer it has seen running stops answering (refuses at once, or
misses MISSES_FOR_LOSS looks in a row) or answers with another token (it was replaced), the
worker stops its launcher and exits with
PEER_LOST_EXIT_CODE, which the job's podFailurePolicy counts as a restart
(paddle_ext.restarts). The same happens when its own program fails while a peer is lost.

A worker that ends keeps answering ("done" or "failed") until no peer could take its going
for a loss (each peer has finished, is gone, or no longer counts it among the peers it has
seen running: it has seen it finished), at most LINGER_SECONDS. On SIGTERM (its pod is
deleted, evicted or preempted) it stops answering first, then stops the launcher, and exits
128 + 15.

A worker starts its launcher only once every peer of its attempt answers (at most
PEERS_WAIT_SECONDS, then it starts anyway). Paddle's launcher dies at once on a peer's name
that does not resolve yet (worker 0's, the master), which is the case while a replaced pod's
successor is not up; a peer that answers has a name that resolves (the relay that runs the
launcher waits for the names it dials too, its own among them: paddle_ext.trainer_logs). A worker's
answer also names the peers' tokens it has seen, so a replacement tells the previous
attempt's workers apart: one that has seen another token for the replacement's index still
runs the old attempt, and will stop once it sees that peer replaced; the replacement waits
for it too, or it would join the old attempt's rendezvous at worker 0 and fail with it.

Where the job's outputs are kept (LOG_COPY_DIR_ENV is set), the worker keeps a copy of the
container's whole output, its own lines included, to its last line on SIGTERM too
(paddle_ext.trainer_logs.OutputCopy).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

from .restarts import PEER_LOST_EXIT_CODE, USER_EXIT_CODES
from .trainer_logs import OutputCopy

CHECK_SECONDS = 3.0  # between looks at the peers
CONNECT_SECONDS = 2.0  # a peer that does not answer within this is not there, this time
# Looks in a row that a peer seen running may miss (no answer in time, its name not resolving)
# before it counts as lost: one miss can be a stall (a CPU-starved node, a slow DNS answer), and
# a healthy job must not restart for it. A refused connection counts at once: a worker closes
# its listener first when it goes away.
MISSES_FOR_LOSS = 3
LINGER_SECONDS = 2 * CHECK_SECONDS + 2 * CONNECT_SECONDS  # long enough for every peer to look once more
SETTLE_POLL_SECONDS = CHECK_SECONDS / 10  # between a finished worker's looks at whether its peers know
STOP_SECONDS = 20.0  # for the launcher to stop its trainers after SIGTERM
STOP_POLL_SECONDS = 0.05
# The most a worker waits for its peers before starting its launcher: their pods starting, and
# the old attempt's workers seeing the loss and stopping (up to 3 * LINGER_SECONDS + STOP_SECONDS).
PEERS_WAIT_SECONDS = 120.0
ANSWER_MAX_BYTES = 1 << 20
SIGTERM_EXIT_CODE = 128 + signal.SIGTERM


def parse_answer(text: str) -> tuple[str, str, dict[int, str]] | None:
    """A peer's answer (Worker.answer) as (state, token, the tokens it has seen by index), or None
    when it is garbled."""
    fields = text.split()
    if len(fields) not in (2, 3):
        return None
    seen = {}
    for pair in fields[2].split(",") if len(fields) == 3 else ():
        peer, _, token = pair.partition("=")
        if peer.isdigit():
            seen[int(peer)] = token
    return fields[0], fields[1], seen


class Worker:
    def __init__(self, index: int, workers: int, peer: str, port: int, argv: list[str], port_step: int = 0):
        self.index, self.workers, self.peer, self.argv = index, workers, peer, argv
        self.base_port, self.port_step = port, port_step
        port = port + index * port_step
        self.token = os.urandom(8).hex()
        self.state = "running"
        self.seen: dict[int, str] = {}  # peer -> its token, once seen running
        self.misses: dict[int, int] = {}  # peer seen running -> its looks missed in a row
        self.lost: int | None = None
        self.child: subprocess.Popen | None = None
        self.copy: OutputCopy | None = None
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("", port))
        self.listener.listen(64)
        self.stopping = threading.Event()

    # ---------------------------------------------------------------- answering peers

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed: we are going away
            with conn:
                try:
                    conn.sendall(self.answer().encode())
                except OSError:
                    pass

    def answer(self) -> str:
        """'STATE TOKEN [INDEX=TOKEN,...]': the peers' tokens this worker has seen running."""
        seen = ",".join(f"{index}={token}" for index, token in self.seen.copy().items())
        return f"{self.state} {self.token} {seen}".rstrip() + "\n"

    def close(self) -> None:
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()

    # ---------------------------------------------------------------- watching peers

    def address(self, index: int) -> tuple[str, int]:
        return self.peer.replace("{i}", str(index)), self.base_port + index * self.port_step

    def ask(self, index: int) -> tuple[str, str, dict[int, str]] | None:
        """(state, token, the tokens it has seen by index) of a peer, or None when it does not answer."""
        try:
            return self.ask_or_raise(index)
        except OSError:
            return None

    def ask_or_raise(self, index: int) -> tuple[str, str, dict[int, str]] | None:
        """ask(), raising the OSError of a peer that does not answer (None: a garbled answer)."""
        data = b""
        with socket.create_connection(self.address(index), timeout=CONNECT_SECONDS) as conn:
            conn.settimeout(CONNECT_SECONDS)
            while len(data) < ANSWER_MAX_BYTES and (piece := conn.recv(65536)):
                data += piece
        return parse_answer(data.decode(errors="replace"))

    def waiting_for(self) -> str | None:
        """What this worker's launcher must not start without yet (see the module's doc), in
        words, or None: a peer that does not answer, or one still running the previous attempt."""
        for index in range(self.workers):
            if index != self.index:
                answer = self.ask(index)
                if answer is None:
                    return f"worker {index} to answer"
                if answer[2].get(self.index, self.token) != self.token:
                    return f"worker {index} of the previous attempt to stop"
        return None

    def wait_for_the_peers(self) -> None:
        """Start no launcher before every peer of this attempt answers (at most PEERS_WAIT_SECONDS)."""
        deadline = time.monotonic() + PEERS_WAIT_SECONDS
        told = set()
        while (waiting := self.waiting_for()) is not None and time.monotonic() < deadline:
            if waiting not in told:
                print(f"paddlecloud: worker {self.index} waits for {waiting}", file=sys.stderr, flush=True)
                told.add(waiting)
            time.sleep(CHECK_SECONDS / 10)

    def look(self) -> int | None:
        """The first peer seen running that is now gone (refuses, or missed MISSES_FOR_LOSS
        looks in a row) or replaced; None if none is."""
        for index in range(self.workers):
            if index == self.index:
                continue
            refused = False
            try:
                answer = self.ask_or_raise(index)
            except ConnectionRefusedError:
                answer, refused = None, True
            except OSError:
                answer = None
            if answer is None:
                if index in self.seen:
                    self.misses[index] = self.misses.get(index, 0) + 1
                    if refused or self.misses[index] >= MISSES_FOR_LOSS:
                        return index
                continue
            self.misses.pop(index, None)
            state, token, _ = answer
            if index in self.seen and token != self.seen[index]:
                return index
            if state == "running":
                if index not in self.seen and len(self.seen) == self.workers - 2:
                    print(f"paddlecloud: worker {self.index} sees all {self.workers} workers running",
                          file=sys.stderr, flush=True)
                self.seen[index] = token
            else:
                self.seen.pop(index, None)  # finished: its end is not a loss
        return None

    def look_until_sure(self) -> int | None:
        """look(), again every CHECK_SECONDS while a peer seen running misses its looks but is
        not lost yet: a program that failed with its peer gone must not pass for the user's error."""
        for _ in range(MISSES_FOR_LOSS):
            lost = self.look()
            if lost is not None or not self.misses:
                return lost
            time.sleep(CHECK_SECONDS)
        return None

    def knows_we_finished(self, index: int) -> bool:
        """Whether peer `index` can no longer take this (finished) worker's going for a loss: it
        has finished too, it is gone (refuses the connection, or its name no longer resolves),
        or it does not count this worker among the peers it has seen running. A peer that does
        not answer in time may still be running: not known."""
        try:
            answer = self.ask_or_raise(index)
        except (ConnectionRefusedError, socket.gaierror):
            return True
        except OSError:
            return False
        if answer is None:
            return False
        state, _, seen = answer
        return state != "running" or seen.get(self.index) != self.token

    def linger(self) -> None:
        """Keep answering as finished until every peer knows (knows_we_finished, twice in a row:
        a peer's look may have read us running just before we finished and not yet noted it), at
        most LINGER_SECONDS."""
        deadline = time.monotonic() + LINGER_SECONDS
        peers = [index for index in range(self.workers) if index != self.index]
        in_a_row = 0
        while time.monotonic() < deadline:
            in_a_row = in_a_row + 1 if all(self.knows_we_finished(index) for index in peers) else 0
            if in_a_row == 2:
                return
            time.sleep(SETTLE_POLL_SECONDS)

    def watch(self) -> None:
        while not self.stopping.wait(CHECK_SECONDS):
            lost = self.look()
            if lost is not None and self.state == "running":
                self.lost = lost
                print(f"paddlecloud: worker {lost} was lost; stopping this worker so that all restart together",
                      file=sys.stderr, flush=True)
                self.stop_child()
                return

    # ---------------------------------------------------------------- the launcher

    def stop_child(self) -> None:
        if self.child is not None and self.child.poll() is None:
            self.child.terminate()
            try:
                self.child.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self.child.kill()

    def stop_child_in_handler(self) -> None:
        """stop_child for the SIGTERM handler. The main thread it interrupted holds the
        launcher's Popen wait lock, so Popen.wait here could only sit out its timeout: poll the
        launcher's exit with waitpid instead (the main thread never returns to its wait)."""
        child = self.child
        if child is None or child.returncode is not None:
            return
        child.terminate()
        deadline = time.monotonic() + STOP_SECONDS
        while time.monotonic() < deadline:
            try:
                if os.waitpid(child.pid, os.WNOHANG)[0]:
                    return
            except ChildProcessError:  # reaped already
                return
            time.sleep(STOP_POLL_SECONDS)
        child.kill()

    def on_sigterm(self, _signum, _frame) -> None:
        self.state = "stopping"
        self.close()  # peers see us gone before our trainers stop
        self.stopping.set()
        self.stop_child_in_handler()
        self.stop_copy()
        os._exit(SIGTERM_EXIT_CODE)

    def stop_copy(self) -> None:
        copy, self.copy = self.copy, None  # once, whether SIGTERM or the end comes first
        if copy is not None:
            copy.stop()

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.on_sigterm)
        self.copy = OutputCopy.from_environment()
        try:
            return self.supervise()
        finally:
            self.stop_copy()

    def supervise(self) -> int:
        threading.Thread(target=self.serve, daemon=True).start()
        watcher = threading.Thread(target=self.watch, daemon=True)
        self.wait_for_the_peers()
        self.child = subprocess.Popen(self.argv)
        watcher.start()
        code = self.child.wait()
        self.stopping.set()
        watcher.join()
        if self.lost is None and code in USER_EXIT_CODES:
            self.lost = self.look_until_sure()  # did our program fail because a peer went away?
        if self.lost is not None:
            self.close()
            return PEER_LOST_EXIT_CODE
        self.state = "done" if code == 0 else "failed"
        self.linger()  # peers see us finished, not lost
        self.close()
        return code if code >= 0 else 128 - code


def parse(args: list[str]) -> tuple[dict, list[str]]:
    if "--" not in args:
        raise SystemExit("usage: python -m paddle_ext.worker --index I --workers N --peer TEMPLATE --port P -- ARGV...")
    split = args.index("--")
    options, argv = args[:split], args[split + 1:]
    values = dict(zip(options[::2], options[1::2]))
    return {"index": int(values["--index"]), "workers": int(values["--workers"]), "peer": values["--peer"],
            "port": int(values["--port"]), "port_step": int(values.get("--port-step", 0))}, argv


def main(args: list[str]) -> int:
    options, argv = parse(args)
    return Worker(argv=argv, **options).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
