"""Every trainer's output, live, from the files Paddle's launcher writes (standard library only).

`python -m paddle.distributed.launch --log_dir DIR ...` runs each trainer (local rank J)
with its output going to `DIR/workerlog.J`, and copies only `workerlog.0` to its own
output, about every 2 seconds and at most 1,000 lines at a time: a `print` of the
training loop would reach a follower seconds late, and the other local ranks' never.
`TrainerLogRelay` follows every `workerlog.J` itself, woken by inotify as the trainers
write (a short poll where inotify is missing), and writes each whole line to one output
as soon as it is complete, prefixed `[local-rank-J] ` when the worker runs several
trainers. The launcher is still what runs the trainers (its environment, rendezvous and
restarts); only its copy of their output is left out (its standard output), its own
messages (standard error) are kept.

The launcher starts only once the names it dials resolve: the master's (`--master`) and its
own (`--host`), at most NAMES_WAIT_SECONDS. Paddle's launcher resolves them on each try to
reach the master and dies at once on a resolver error, and a worker's name is in the cluster's
DNS only once its pod has an address: a worker whose pod starts before worker 0's would
otherwise fail the job (as would a replaced worker 0 on its own name).

Where the job's outputs are kept, the worker's first process of ours also keeps a copy of
the container's whole output (`OutputCopy`): one file per pod under LOG_COPY_DIR_ENV, so
that an attempt whose pod is deleted (a preemption, a requeue) still has its log
(paddle_ext.backends.kubernetes_logs reads them).

Pure standard library and no other module of the package, so that a worker that has
only this file can run it: on Kubernetes each worker's container runs this very source as
`python -c SOURCE LOG_DIR RANKS -- python -m paddle.distributed.launch ...`
(paddle_ext.manifests.worker_command), whatever image the job uses; locally the worker's
supervisor runs the relay (paddle_ext.backends.local_supervisor).
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping

TRAINER_LOG = "workerlog.{rank}"  # paddle.distributed.launch's collective controller
LOCAL_RANK_PREFIX = "[local-rank-{rank}] "  # = paddle_ext.constants.LOCAL_RANK_PREFIX (this file runs standalone)
READ_SIZE = 1 << 20
IDLE_CHECK_SECONDS = 0.5  # inotify wakes us; this bounds a missed event (a queue overflow)
POLL_SECONDS = 0.02  # without inotify
LOG_COPY_DIR_ENV = "PADDLECLOUD_LOG_COPY_DIR"  # = paddle_ext.constants.LOG_COPY_DIR_ENV
POD_UID_ENV = "PADDLECLOUD_POD_UID"  # = paddle_ext.constants.POD_UID_ENV
COPY_DRAIN_SECONDS = 10.0  # at the end, for what is still in the copy's pipe
LAUNCHER_MODULE = "paddle.distributed.launch"
NAMES_WAIT_SECONDS = 120.0  # then the launcher starts anyway, and says why it cannot go on
NAMES_CHECK_SECONDS = 0.3
# A name usually resolves within a second or two of the pod's start (its DNS record follows its
# address): the log says what the worker waits for only once it has waited this long.
NAMES_QUIET_SECONDS = 5.0

_IN_MODIFY, _IN_CLOSE_WRITE, _IN_MOVED_TO, _IN_CREATE = 0x2, 0x8, 0x80, 0x100


def trainer_log(log_dir: str, rank: int) -> str:
    return os.path.join(log_dir, TRAINER_LOG.format(rank=rank))


class _Follow:
    """One growing file: its offset and a partial last line."""

    def __init__(self, path: str, prefix: bytes):
        self.path, self.prefix = path, prefix
        self.offset = 0
        self.partial = b""

    def take(self, final: bool) -> tuple[bytes, bool]:
        """The whole lines of the next piece written since the last call (prefixed), with
        `final` a last line without its newline too; and whether more is waiting (a long
        burst is passed on a piece at a time, never read whole)."""
        data = b""
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < self.offset:  # truncated (the launcher's --log_overwrite): from the start
                    self.offset, self.partial = 0, b""
                f.seek(self.offset)
                data = f.read(READ_SIZE)
        except FileNotFoundError:
            pass
        self.offset += len(data)
        more = len(data) == READ_SIZE
        final = final and not more
        data = self.partial + data
        cut = len(data) if final else data.rfind(b"\n") + 1
        whole, self.partial = data[:cut], data[cut:]
        if not whole:
            return b"", more
        if not whole.endswith(b"\n"):
            whole += b"\n"
        if self.prefix:
            whole = self.prefix + whole[:-1].replace(b"\n", b"\n" + self.prefix) + b"\n"
        return whole, more


class DirectoryWatch:
    """A directory's inotify descriptor, `fd` (None where the system has none, or the
    user's inotify instances are used up: then callers poll)."""

    def __init__(self, directory: str):
        self.fd = None
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd < 0:
                return
            if libc.inotify_add_watch(fd, os.fsencode(directory),
                                      _IN_MODIFY | _IN_CLOSE_WRITE | _IN_MOVED_TO | _IN_CREATE) < 0:
                os.close(fd)
                return
            self.fd = fd
        except (OSError, AttributeError):
            self.fd = None

    def drain(self) -> None:
        """Forget the events so far (the caller looks at the files itself)."""
        if self.fd is None:
            return
        try:
            while os.read(self.fd, 65536):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class TrainerLogRelay:
    """Follows `workerlog.0 .. workerlog.{ranks-1}` in `log_dir` and writes their whole
    lines to the file descriptor `out` (one write per batch of lines: appended atomically
    next to what else writes there). `start()` runs it in a thread; `stop()` copies what
    is left, a last line without a newline included, and returns once all is written."""

    def __init__(self, log_dir: str, ranks: int, out: int):
        os.makedirs(log_dir, exist_ok=True)
        several = ranks > 1
        self.files = [_Follow(trainer_log(log_dir, rank),
                              LOCAL_RANK_PREFIX.format(rank=rank).encode() if several else b"")
                      for rank in range(ranks)]
        self.out = out
        self._watch = DirectoryWatch(log_dir)
        self._wake_r, self._wake_w = os.pipe()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="trainer-log-relay", daemon=True)

    def pump(self, final: bool = False) -> int:
        """Copy what is new in every file now; the bytes written."""
        written = 0
        for follow in self.files:
            more = True
            while more:
                chunk, more = follow.take(final)
                while chunk:
                    n = os.write(self.out, chunk)
                    written += n
                    chunk = chunk[n:]
        return written

    def _run(self) -> None:
        watched = [self._wake_r] + ([self._watch.fd] if self._watch.fd is not None else [])
        timeout = IDLE_CHECK_SECONDS if self._watch.fd is not None else POLL_SECONDS
        while not self._stopping:
            try:
                ready, _, _ = select.select(watched, [], [], timeout)
            except InterruptedError:
                continue
            if self._watch.fd in ready:
                self._watch.drain()
            self.pump()

    def start(self) -> TrainerLogRelay:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop following (the thread, if started) and copy what is left; closes what it opened."""
        self._stopping = True
        os.write(self._wake_w, b"x")
        if self._thread.ident is not None:  # started
            self._thread.join()
        self.pump(final=True)
        self._watch.close()
        os.close(self._wake_r)
        os.close(self._wake_w)


def copy_file_name(started: float, pod: str) -> str:
    """'20261203T165118.123456Z-<pod>.log': the copy of one pod's output, named so that the
    copies sort by when their workers started (paddle_ext.backends.kubernetes_logs parses it)."""
    micros = int(started * 1_000_000) % 1_000_000
    return f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime(started))}.{micros:06d}Z-{pod}.log"


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


class OutputCopy:
    """Our standard output and error (and so our children's) become one pipe, whose every
    piece goes on, as soon as it is read, to the container's standard output and to the file
    `folder`/copy_file_name(now, pod): the file holds the very lines the container's log
    does. Where the file cannot be made or written, this says so once on standard error and
    goes on without it: the copy never fails the job. `stop()`, once our children have
    ended, passes on what is left and gives back the original outputs."""

    def __init__(self, folder: str, pod: str):
        self.file: int | None = os.open(os.path.join(folder, copy_file_name(time.time(), pod)),
                            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        sys.stdout.flush()
        sys.stderr.flush()
        self.out, self.err = os.dup(1), os.dup(2)
        self._read, write = os.pipe()
        os.dup2(write, 1)
        os.dup2(write, 2)
        os.close(write)
        self._thread = threading.Thread(target=self._run, name="output-copy", daemon=True)
        self._thread.start()

    @classmethod
    def from_environment(cls) -> OutputCopy | None:
        """The copy LOG_COPY_DIR_ENV asks for, or None. Takes the variable out of our
        environment: our children's output is in our copy already."""
        folder = os.environ.pop(LOG_COPY_DIR_ENV, "")
        if not folder:
            return None
        pod = os.environ.get(POD_UID_ENV) or socket.gethostname()
        try:
            os.makedirs(folder, exist_ok=True)
            return cls(folder, pod)
        except OSError as exc:
            print(f"paddlecloud: not keeping a copy of this worker's log in {folder}: {exc.strerror or exc}",
                  file=sys.stderr, flush=True)
            return None

    def _run(self) -> None:
        while data := os.read(self._read, READ_SIZE):
            try:
                _write_all(self.out, data)
            except OSError:
                pass  # the container's output is gone; the copy goes on
            if self.file is not None:
                try:
                    _write_all(self.file, data)
                except OSError as exc:
                    os.write(self.err, f"paddlecloud: stopped copying this worker's log: {exc.strerror or exc}\n"
                             .encode())
                    os.close(self.file)
                    self.file = None

    def stop(self) -> None:
        """Give back the original outputs and pass on what is left in the pipe (for at most
        COPY_DRAIN_SECONDS: a process of the job's own may still hold it)."""
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self.out, 1)
        os.dup2(self.err, 2)
        self._thread.join(COPY_DRAIN_SECONDS)
        if not self._thread.is_alive():
            os.close(self._read)
            if self.file is not None:
                os.close(self.file)


def dialled_names(argv: list[str], environ: Mapping[str, str]) -> list[str]:
    """The host names Paddle's launcher `argv` resolves as it starts: the master's
    (`--master HOST:PORT`, else PADDLE_MASTER where an operator sets it) and its own
    (`--host HOST`), read from the launcher's own options only (each takes a value; the
    user's command follows them). None for another command."""
    if LAUNCHER_MODULE not in argv:
        return []
    options = argv[argv.index(LAUNCHER_MODULE) + 1:]
    given: dict[str, str] = {}
    for option, value in zip(options[::2], options[1::2]):
        if not option.startswith("--"):
            break
        given[option] = value
    master = given.get("--master") or environ.get("PADDLE_MASTER", "")
    names = [(master.rpartition(":")[0] or master).strip("[]"), given.get("--host", "")]  # [::1]:8090 -> ::1
    return [name for name in dict.fromkeys(names) if name]


def _resolves(name: str) -> bool:
    try:
        socket.getaddrinfo(name, None)
    except (OSError, UnicodeError):  # UnicodeError: not a name at all (an empty label)
        return False
    return True


def wait_for_names(names: list[str], stopped=lambda: False, resolves=_resolves, clock=time.monotonic,
                   sleep=time.sleep, limit: float = NAMES_WAIT_SECONDS) -> list[str]:
    """Wait until every one of `names` resolves, at most `limit` seconds and not once
    `stopped()`, saying once on standard error each name it still waits for after
    NAMES_QUIET_SECONDS; the names that still do not resolve."""
    started = clock()
    told = set()
    while True:
        waiting = [name for name in names if not resolves(name)]
        waited = clock() - started
        if not waiting or stopped() or waited >= limit:
            return waiting
        for name in waiting if waited >= NAMES_QUIET_SECONDS else ():
            if name not in told:
                print(f"paddlecloud: waits for the name {name} to resolve (its pod is starting)",
                      file=sys.stderr, flush=True)
                told.add(name)
        sleep(NAMES_CHECK_SECONDS)


FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def stop_notice(signum: int) -> bytes:
    """The line a worker writes to standard error when told to stop. Paddle's launcher stopped
    while it waits for its peers ends with `AssertionError: No container in the pod` (its
    rendezvous client swallows the exit its signal handler raises): this line, just before,
    says it was stopped and not broken."""
    return f"paddlecloud: this worker received {signal.Signals(signum).name} and stops\n".encode()


def run(log_dir: str, ranks: int, argv: list[str]) -> int:
    """Run the launcher `argv` with every trainer's lines relayed to our standard output,
    its own messages on our standard error and its copy of local rank 0's output left out;
    the signals a container's stop sends are passed on to it (as the container's first
    process we would otherwise ignore them). Its exit code, 128 + N for a signal N. The
    launcher starts once the names it dials resolve (wait_for_names)."""
    children: list[subprocess.Popen] = []
    early: list[int] = []  # a stop that came before the launcher did

    def forward(received, _frame):
        os.write(sys.stderr.fileno(), stop_notice(received))  # not print: it may interrupt one
        if children:
            children[0].send_signal(received)
        else:
            early.append(received)

    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, forward)
    copy = OutputCopy.from_environment()
    try:
        return _launch(log_dir, ranks, argv, children, early)
    finally:
        if copy is not None:
            copy.stop()


def _launch(log_dir: str, ranks: int, argv: list[str], children: list[subprocess.Popen], early: list[int]) -> int:
    unresolved = wait_for_names(dialled_names(argv, os.environ), stopped=lambda: bool(early))
    if early:  # stopped before the launcher started: nothing to stop
        return 128 + early[0]
    if unresolved:
        print(f"paddlecloud: {', '.join(unresolved)} still not resolving after {NAMES_WAIT_SECONDS:.0f} s; "
              "starting the launcher anyway", file=sys.stderr, flush=True)
    relay = TrainerLogRelay(log_dir, ranks, sys.stdout.fileno())
    try:
        children.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL))
    except OSError as exc:
        relay.stop()
        print(f"paddlecloud: could not start {argv[0]}: {exc}", file=sys.stderr, flush=True)
        return 127
    relay.start()  # (after the fork: nothing of ours runs in another thread while it happens)
    for received in early:
        children[0].send_signal(received)
    code = children[0].wait()
    relay.stop()
    return code if code >= 0 else 128 - code


def main(args: list[str]) -> int:
    if len(args) < 4 or args[2] != "--" or not args[1].isdigit():
        print("usage: trainer_logs LOG_DIR RANKS -- LAUNCHER_ARGV...", file=sys.stderr)
        return 2
    return run(args[0], int(args[1]), args[3:])


if __name__ == "__main__":  # also under `python -c SOURCE ...`
    sys.exit(main(sys.argv[1:]))
