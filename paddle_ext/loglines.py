"""Log lines: the `[worker-I] ` prefix of merged logs, and which lines are the framework's
own noise rather than the user's output (pure).

"My output only" (the monitor's toggle, `paddlecloud logs --mine`, REST `?mine=1`) hides
what `FrameworkFilter` calls framework lines; the stored log keeps every line. The
patterns come from real PaddlePaddle 3 runs under `paddle.distributed.launch`:

    LAUNCH INFO 2026-11-30 09:33:28,711 -----------  Configuration  ------------   launcher
    [2026-11-30 09:33:29,172] [    INFO] _client.py:1025 - HTTP Request: ...       Paddle's Python logger
    I1130 09:33:30.985277 17370 tcp_utils.cc:109] Retry to connect ...             glog (I/W/E/F)
    ======================= Modified FLAGS detected =======================        FLAGS banner, to its
    FLAGS(name='FLAGS_enable_pir_in_executor', current_value=True, ...)             closing ==== line
    /.../site-packages/paddle/x.py:712: UserWarning: No ccache found. ...          warnings raised inside
      warnings.warn(warning_message)                                                installed packages, and
                                                                                    the source line after
    /.../paddle/phi/kernels/x.cc:12:5: warning: unused variable 'y'                 compiler warnings

A warning raised in the user's own files is the user's business and stays. The
`paddle_ext.report()` records (`PADDLECLOUD_METRIC {...}`) are hidden as well under "my
output only": the charts show them.
"""

from __future__ import annotations

import re

from .constants import LOCAL_RANK_PREFIX, METRIC_MARKER, WORKER_PREFIX

_PREFIX = re.compile(r"^\[worker-(\d+)\] ")
_LOCAL_RANK = re.compile("^" + re.escape(LOCAL_RANK_PREFIX).replace(re.escape("{rank}"), r"\d+"))
_LAUNCH = re.compile(r"^LAUNCH (?:DEBUG|INFO|WARNING|ERROR|CRITICAL) ")
_GLOG = re.compile(r"^[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d+\s+\d+ [\w.\-/]+:\d+\] ")
_PADDLE_LOGGER = re.compile(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3}\] \[\s*(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\] ")
_FLAGS_BANNER = re.compile(r"^=+ .*FLAGS.* =+$")
_BANNER_END = re.compile(r"^=+$")
_PACKAGE_WARNING = re.compile(r"^\S*/(?:site|dist)-packages/\S+\.py:\d+: \w*Warning: ")
_COMPILER = re.compile(r"^\S+\.(?:c|cc|cpp|cxx|cu|cuh|h|hpp):\d+(?::\d+)?: (?:warning|note): ")
_FRAMEWORK_MESSAGES = frozenset({
    "The loss value printed in the log is the current step, and the metric is the average value of previous steps.",
    "WARNING: Logging before InitGoogleLogging() is written to STDERR",
})


def prefix_line(worker: int, line: str) -> str:
    """The merged-log form of a line of one of several workers."""
    return WORKER_PREFIX.format(index=worker) + line


# Logs travel as bytes in pieces of whole lines ("chunks": UTF-8, every line ending in
# b"\n", no b"\r" before it). Each step below costs a few C-level passes per piece, not
# Python work per line, which is what makes a 100,000-line log quick to read.

_CR_BEFORE_LF = re.compile(rb"\r+\n")


def clean_chunk(data: bytes) -> bytes:
    """Whole lines as a log shows them: a line's trailing carriage returns dropped and
    bytes that are not UTF-8 replaced (U+FFFD), as decoding line by line would."""
    if b"\r" in data:
        data = _CR_BEFORE_LF.sub(b"\n", data)
    if not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            data = data.decode("utf-8", errors="replace").encode("utf-8")
    return data


def prefix_chunk(worker: int, chunk: bytes) -> bytes:
    """`prefix_line` for every line of a chunk."""
    prefix = WORKER_PREFIX.format(index=worker).encode()
    return prefix + chunk[:-1].replace(b"\n", b"\n" + prefix) + b"\n"


def chunk_lines(chunk: bytes) -> list[str]:
    """The lines of a chunk, without their newlines."""
    return chunk.decode("utf-8", errors="replace").split("\n")[:-1]


def lines_chunk(lines: list[str]) -> bytes:
    """Lines (without newlines) as one chunk."""
    return ("\n".join(lines) + "\n").encode("utf-8", errors="replace") if lines else b""


class LineSplitter:
    """Cuts a byte stream into chunks of whole lines, keeping a partial last line for later."""

    def __init__(self) -> None:
        self.partial = b""

    def feed(self, data: bytes) -> bytes:
        """The whole lines completed by `data` (b"" if none), cleaned."""
        cut = data.rfind(b"\n")
        if cut < 0:
            self.partial += data
            return b""
        whole = self.partial + data[:cut + 1] if self.partial else data[:cut + 1]
        self.partial = data[cut + 1:]
        return clean_chunk(whole)

    def end(self) -> bytes:
        """A last line without a newline, as a whole line (b"" if none)."""
        rest, self.partial = self.partial, b""
        return clean_chunk(rest + b"\n") if rest else b""


def split_chunk(chunk: bytes, skip: int) -> bytes:
    """The chunk without its first `skip` lines."""
    if skip <= 0:
        return chunk
    at = -1
    for _ in range(skip):
        at = chunk.find(b"\n", at + 1)
        if at < 0:
            return b""
    return chunk[at + 1:]


def last_lines(data: bytes, count: int) -> bytes:
    """The last `count` whole lines of `data` (which ends with a newline, or is empty)."""
    if count <= 0 or not data:
        return b""
    at = len(data) - 1  # the final newline
    for _ in range(count):
        at = data.rfind(b"\n", 0, at)
        if at < 0:
            return data
    return data[at + 1:]


def split_prefix(line: str) -> tuple[int | None, str]:
    """(worker, line without the prefix) of a merged-log line; (None, line) without one."""
    match = _PREFIX.match(line)
    if not match:
        return None, line
    return int(match.group(1)), line[match.end():]


class FrameworkFilter:
    """Says, line by line, whether a line is framework noise. Stateful (a banner spans
    lines; a warning's source line follows it), so use one per log stream; merged
    logs with `[worker-I] ` prefixes keep one state per worker."""

    def __init__(self) -> None:
        self._in_banner: dict[int | None, bool] = {}
        self._after_warning: dict[int | None, bool] = {}

    def is_framework(self, line: str) -> bool:
        worker, text = split_prefix(line)
        text = _LOCAL_RANK.sub("", text, count=1).rstrip("\b \r")  # one of several trainers' lines
        if self._in_banner.get(worker):
            if _BANNER_END.match(text):
                self._in_banner[worker] = False
            return True
        if self._after_warning.pop(worker, False) and text.startswith("  ") and text.strip():
            return True
        if _FLAGS_BANNER.match(text):
            self._in_banner[worker] = True
            return True
        if _PACKAGE_WARNING.match(text) or _COMPILER.match(text):
            self._after_warning[worker] = True
            return True
        return bool(_LAUNCH.match(text) or _GLOG.match(text) or _PADDLE_LOGGER.match(text)
                    or text in _FRAMEWORK_MESSAGES)


    def hides(self, line: str) -> bool:
        """Whether "my output only" hides the line: framework noise, or a metric record."""
        return self.is_framework(line) or split_prefix(line)[1].startswith(METRIC_MARKER)


def framework_flags(lines: list[str]) -> list[bool]:
    """For each line of one stream (merged or not), whether it is framework noise."""
    noise = FrameworkFilter()
    return [noise.is_framework(line) for line in lines]


def users_lines(lines: list[str]) -> list[str]:
    """What "my output only" shows: the user's own printed lines."""
    noise = FrameworkFilter()
    return [line for line in lines if not noise.hides(line)]
