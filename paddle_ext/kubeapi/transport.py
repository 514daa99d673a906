"""HTTP/1.1 on asyncio streams (standard library only), for the Kubernetes client:
kept-alive connections, chunked bodies, TLS with client certificates. Importing aiohttp
cost a command ~0.35 s, most of it building an SSL context we never used.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import socket
import ssl
import tempfile
import time
from typing import AsyncIterator
from urllib.parse import urlsplit

from .credentials import Credentials, KubeConfigError

CONNECT_TIMEOUT_SECONDS = 10.0
IDLE_SECONDS = 30.0  # an unused kept-alive connection older than this is closed, not reused
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})


def _load_pem_pair(context: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """ssl can only load a client certificate from files: write them privately, load, remove."""
    with tempfile.TemporaryDirectory(prefix="paddlecloud-tls-") as folder:
        cert_path, key_path = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
        for path, data in ((cert_path, cert), (key_path, key)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        context.load_cert_chain(cert_path, key_path)


def ssl_context(credentials: Credentials, exec_cert: tuple[bytes, bytes] | None = None) -> ssl.SSLContext | bool:
    if not credentials.server.startswith("https://"):
        return False
    context = ssl.create_default_context(
        cafile=credentials.ca_file, cadata=credentials.ca_data.decode() if credentials.ca_data else None)
    if credentials.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    try:
        if credentials.cert_file and credentials.key_file:
            context.load_cert_chain(credentials.cert_file, credentials.key_file)
        elif credentials.cert_data and credentials.key_data:
            _load_pem_pair(context, credentials.cert_data, credentials.key_data)
        elif exec_cert:
            _load_pem_pair(context, *exec_cert)
    except (OSError, ssl.SSLError) as exc:
        raise KubeConfigError(f"Cannot load the kubeconfig's client certificate: {exc}") from exc
    return context


@dataclasses.dataclass
class Endpoint:
    host: str
    port: int
    base_path: str  # a server URL may carry a path (https://proxy/k8s/clusters/c-1)
    host_header: str
    tls: bool


def endpoint(server: str) -> Endpoint:
    parts = urlsplit(server)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise KubeConfigError(f"The API server address '{server}' is not an http(s) URL.")
    tls = parts.scheme == "https"
    try:
        port = parts.port or (443 if tls else 80)
    except ValueError as exc:
        raise KubeConfigError(f"The API server address '{server}' has a bad port.") from exc
    host = parts.hostname
    shown = f"[{host}]" if ":" in host else host
    return Endpoint(host, port, parts.path.rstrip("/"), shown if parts.port is None else f"{shown}:{port}", tls)


class Connection:
    """One HTTP/1.1 connection (kept alive between requests when the answer allows)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer
        self.used = 0  # requests sent on it
        self.idle_since = 0.0

    def alive(self) -> bool:
        return not (self.reader.at_eof() or self.writer.is_closing() or self.reader.exception() is not None)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class Response:
    """Status, headers (lower-case names) and the body of one answer, read as it comes."""

    def __init__(self, conn: Connection, status: int, reason: str, headers: dict[str, str], method: str):
        self.conn = conn
        self.status = status
        self.reason = reason
        self.headers = headers
        self.complete = False  # the whole body was read: the connection may serve another request
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            self._mode, self._left = "length", 0
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._mode, self._left = "chunked", 0
        elif "content-length" in headers:
            self._mode, self._left = "length", int(headers["content-length"])
        else:
            self._mode, self._left = "eof", 0
        self.reusable = self._mode != "eof" and "close" not in headers.get("connection", "").lower()

    async def chunks(self, size: int = 1 << 16) -> AsyncIterator[bytes]:
        """The body in pieces as they arrive; with chunked transfer encoding each piece
        holds every chunk that had already arrived (a burst comes as one piece)."""
        reader = self.conn.reader
        if self._mode == "length":
            while self._left > 0:
                data = await reader.read(min(size, self._left))
                if not data:
                    raise asyncio.IncompleteReadError(b"", self._left)
                self._left -= len(data)
                yield data
        elif self._mode == "eof":
            while data := await reader.read(size):
                yield data
        else:
            async for data in _dechunk(reader, size):
                yield data
        self.complete = True

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])


async def _dechunk(reader: asyncio.StreamReader, size: int) -> AsyncIterator[bytes]:
    """Decode `Transfer-Encoding: chunked`, yielding the payload of every complete chunk
    in the buffer at once."""
    buf = b""
    while True:
        pieces, pos = [], 0
        while True:
            line_end = buf.find(b"\r\n", pos)
            if line_end < 0:
                break
            try:
                length = int(buf[pos:line_end].split(b";", 1)[0], 16)
            except ValueError as exc:
                raise ValueError(f"bad chunk header {buf[pos:line_end][:40]!r}") from exc
            if length == 0:  # the last chunk: optional trailers, then an empty line
                trailer_end = buf.find(b"\r\n\r\n", line_end)
                if buf[line_end:line_end + 4] != b"\r\n\r\n" and trailer_end < 0:
                    break
                end = line_end + 4 if buf[line_end:line_end + 4] == b"\r\n\r\n" else trailer_end + 4
                if pieces:
                    yield b"".join(pieces)
                if buf[end:]:
                    raise ValueError("data after the last chunk")
                return
            start = line_end + 2
            if len(buf) < start + length + 2:
                break
            pieces.append(buf[start:start + length])
            pos = start + length + 2
        if pieces:
            yield b"".join(pieces)
        buf = buf[pos:]
        data = await reader.read(max(size, 0))
        if not data:
            raise asyncio.IncompleteReadError(buf, None)
        buf += data


class ConnectionPool:
    """Kept-alive connections to one API server, at most `size` in use at once (`slots`)."""

    def __init__(self, endpoint: Endpoint, tls: ssl.SSLContext | bool, server_hostname: str | None, size: int):
        self.endpoint = endpoint
        self.tls = tls
        self.server_hostname = server_hostname  # TLS: the name to expect on the certificate, if not the host's
        self.slots = asyncio.Semaphore(size)
        self._idle: list[Connection] = []

    async def send(self, method: str, target: str, headers: dict[str, str], data: bytes | None) -> Response:
        """One request, answered up to the end of the head (the body is the caller's to read,
        then `release`); on a kept-alive connection when there is one."""
        for attempt in (1, 2):
            conn = self._take_idle()
            reused = conn is not None
            if conn is None:
                conn = await self._open()
            try:
                return await self._exchange(conn, method, target, headers, data)
            except (ConnectionError, asyncio.IncompleteReadError, OSError):
                conn.close()
                # A kept-alive connection the server closed meanwhile: once more on a new one.
                if attempt == 2 or not reused or method not in IDEMPOTENT:
                    raise
            except BaseException:
                conn.close()
                raise

    def release(self, resp: Response) -> None:
        """Keep the answer's connection for another request if the body was read whole and
        the server allows it; else close it."""
        if resp.complete and resp.reusable:
            resp.conn.idle_since = time.monotonic()
            self._idle.append(resp.conn)
        else:
            resp.conn.close()

    def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    async def _open(self) -> Connection:
        endpoint = self.endpoint
        tls = self.tls if endpoint.tls else None
        extra = {}
        if tls and self.server_hostname:
            extra["server_hostname"] = self.server_hostname
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(endpoint.host, endpoint.port, ssl=tls, limit=1 << 20, **extra),
            CONNECT_TIMEOUT_SECONDS)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return Connection(reader, writer)

    def _take_idle(self) -> Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if conn.alive() and time.monotonic() - conn.idle_since < IDLE_SECONDS:
                return conn
            conn.close()
        return None

    async def _exchange(self, conn: Connection, method: str, target: str, headers: dict[str, str],
                        data: bytes | None) -> Response:
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self.endpoint.host_header}",
                 *(f"{k}: {v}" for k, v in headers.items())]
        if data is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(data or b'')}")
        conn.used += 1
        conn.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (data or b""))
        await conn.writer.drain()
        head = await conn.reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head[:-4].decode("latin-1").split("\r\n")
        version, _, rest = status_line.partition(" ")
        code, _, reason = rest.partition(" ")
        if not version.startswith("HTTP/") or not code.isdigit():
            raise ValueError(f"not an HTTP answer: {status_line[:80]!r}")
        answer_headers: dict[str, str] = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            key = name.strip().lower()
            answer_headers[key] = (answer_headers[key] + ", " + value.strip()) if key in answer_headers \
                else value.strip()
        return Response(conn, int(code), reason, answer_headers, method)
