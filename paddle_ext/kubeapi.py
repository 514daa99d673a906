"""A small async client for the Kubernetes REST API: JSON in and out, and streams.

Everything of ours that talks to Kubernetes (the job backend, the quota store and the
quota sync) goes through `KubeApi`, so there is one way to find credentials, one way to
read errors, and no 2-second import of a generated client before the first request.
The transport is HTTP/1.1 on asyncio streams (standard library only): importing aiohttp
cost a command ~0.35 s, most of it building an SSL context we never used.

Credentials: inside a pod, the pod's service account; elsewhere a kubeconfig ($KUBECONFIG
or ~/.kube/config, several files joined with ':'), with client certificates, tokens,
token files, basic auth or an exec plugin (as kubectl supports them).

Errors are neutral (`KubeApiError` with the HTTP status and the API server's message,
`KubeUnreachable`); callers decide what they mean for users.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import datetime
import json
import os
import socket
import ssl
import subprocess
import tempfile
import time
from typing import Any, AsyncIterator, Callable, Mapping
from urllib.parse import quote, urlencode, urlsplit

import yaml

from .constants import SERVICE_ACCOUNT_DIR, in_cluster
from .timestamps import now, parse_time

REQUEST_TIMEOUT_SECONDS = 30.0
CONNECT_TIMEOUT_SECONDS = 10.0
MERGE_PATCH = "application/merge-patch+json"


class KubeApiError(Exception):
    """The API server answered with an error status."""

    def __init__(self, status: int, message: str, reason: str = ""):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.reason = reason  # the Status object's reason: NotFound, AlreadyExists, Forbidden, ...

    def describe(self, action: str) -> str:
        return f"Kubernetes could not {action} (HTTP {self.status}): {self.message}"


class KubeUnreachable(Exception):
    """The API server could not be reached (connection refused, TLS failure, timeout)."""


class KubeConfigError(Exception):
    """No usable credentials: the kubeconfig is missing, unreadable or unsupported."""


# ---------------------------------------------------------------- paths


def api_path(api_version: str, plural: str, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None) -> str:
    """The REST path of a collection or an object: api_path("batch/v1", "jobs", "ns", "x")."""
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    parts = [base]
    if namespace is not None:
        parts.append(f"namespaces/{quote(namespace, safe='')}")
    parts.append(plural)
    if name is not None:
        parts.append(quote(name, safe=""))
    if subresource:
        parts.append(subresource)
    return "/".join(parts)


# ---------------------------------------------------------------- bodies

_MANAGED_FIELDS_START = b',"managedFields":['
_MANAGED_FIELDS_END = b']},"spec":'
_METADATA_KEY = b'"metadata":{'


def without_managed_fields(body: bytes) -> bytes:
    """A list's JSON without each item's metadata.managedFields (bookkeeping of server-side
    apply that nothing here reads, and 40% of a Job's or a pod's bytes; the API server has
    no way to leave it out, and decoding it in Python is most of what a long list costs).

    Cut on bytes, for built-in kinds: the API server writes ObjectMeta's fields in order,
    managedFields last, and `spec` right after `metadata`. Inside a JSON string every '"'
    is escaped, so these byte sequences can only be structure, and managedFields' own keys
    are never `spec` or `metadata`. Anything else (a custom resource's keys come sorted)
    shows as a cut that would cross into another object's metadata: then the body is
    returned whole."""
    parts, pos = [], 0
    while (start := body.find(_MANAGED_FIELDS_START, pos)) >= 0:
        end = body.find(_MANAGED_FIELDS_END, start)
        if end < 0 or body.find(_METADATA_KEY, start, end) >= 0:
            return body
        parts.append(body[pos:start])
        pos = end + 1  # keep the '}' that closes metadata
    if not parts:
        return body
    parts.append(body[pos:])
    return b"".join(parts)


# ---------------------------------------------------------------- credentials


@dataclasses.dataclass
class Credentials:
    server: str
    namespace: str | None = None
    ca_file: str | None = None
    ca_data: bytes | None = None
    insecure: bool = False
    tls_server_name: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    cert_data: bytes | None = None
    key_data: bytes | None = None
    token: str | None = None
    token_file: str | None = None
    username: str | None = None
    password: str | None = None
    exec_config: dict | None = None


def in_cluster_credentials() -> Credentials:
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if ":" in host:
        host = f"[{host}]"
    folder = SERVICE_ACCOUNT_DIR
    namespace = None
    with contextlib.suppress(OSError):
        with open(os.path.join(folder, "namespace"), encoding="utf-8") as f:
            namespace = f.read().strip() or None
    return Credentials(server=f"https://{host}:{port}", namespace=namespace,
                       ca_file=os.path.join(folder, "ca.crt"), token_file=os.path.join(folder, "token"))


def default_kubeconfig() -> str:
    return os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")


def _load_documents(paths: str) -> list[tuple[str, dict]]:
    documents = []
    for path in filter(None, paths.split(os.pathsep)):
        try:
            with open(path, encoding="utf-8") as f:
                data = yaml.safe_load(f) or {}
        except FileNotFoundError:
            continue
        except (OSError, yaml.YAMLError) as exc:
            raise KubeConfigError(f"Cannot read the kubeconfig {path}: {exc}") from exc
        if not isinstance(data, dict):
            raise KubeConfigError(f"The kubeconfig {path} is not a kubeconfig document.")
        documents.append((os.path.dirname(os.path.abspath(path)), data))
    if not documents:
        raise KubeConfigError(f"No kubeconfig found at {paths}; set KUBECONFIG to yours.")
    return documents


def _named(documents: list[tuple[str, dict]], section: str, name: str) -> tuple[str, dict]:
    """The first entry called `name` in `section` (kubectl's merge rule: first file wins)."""
    for folder, data in documents:
        for entry in data.get(section) or []:
            if entry.get("name") == name:
                key = section[:-1]  # clusters -> cluster
                return folder, entry.get(key) or {}
    raise KubeConfigError(f"The kubeconfig has no {section[:-1]} named '{name}'.")


def _relative(folder: str, path: str | None) -> str | None:
    return None if not path else path if os.path.isabs(path) else os.path.join(folder, path)


def _b64(text: str | None) -> bytes | None:
    return base64.b64decode(text) if text else None


def kubeconfig_credentials(paths: str | None = None, context: str | None = None) -> Credentials:
    """Credentials of the kubeconfig's current (or the named) context."""
    documents = _load_documents(paths or default_kubeconfig())
    if not context:
        context = next((data.get("current-context") for _, data in documents if data.get("current-context")), None)
    if not context:
        raise KubeConfigError("The kubeconfig sets no current context; pass one explicitly.")
    _, ctx = _named(documents, "contexts", context)
    cluster_folder, cluster = _named(documents, "clusters", ctx.get("cluster", ""))
    user_folder, user = _named(documents, "users", ctx.get("user", "")) if ctx.get("user") else ("", {})
    if user.get("auth-provider"):
        raise KubeConfigError("The kubeconfig's user uses an auth-provider, which is not supported; "
                              "use an exec credential plugin (as current cloud CLIs do).")
    if not cluster.get("server"):
        raise KubeConfigError(f"The kubeconfig's cluster for context '{context}' has no server.")
    return Credentials(
        server=cluster["server"].rstrip("/"),
        namespace=ctx.get("namespace"),
        ca_file=_relative(cluster_folder, cluster.get("certificate-authority")),
        ca_data=_b64(cluster.get("certificate-authority-data")),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        tls_server_name=cluster.get("tls-server-name"),
        cert_file=_relative(user_folder, user.get("client-certificate")),
        key_file=_relative(user_folder, user.get("client-key")),
        cert_data=_b64(user.get("client-certificate-data")),
        key_data=_b64(user.get("client-key-data")),
        token=user.get("token"),
        token_file=_relative(user_folder, user.get("tokenFile")),
        username=user.get("username"),
        password=user.get("password"),
        exec_config=user.get("exec"),
    )


def find_credentials(kubeconfig: str | None = None, context: str | None = None) -> Credentials:
    """The pod's service account inside a cluster (unless a kubeconfig is named), else the kubeconfig."""
    if in_cluster() and not kubeconfig:
        return in_cluster_credentials()
    return kubeconfig_credentials(kubeconfig, context)


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
class ExecResult:
    token: str | None
    cert: tuple[bytes, bytes] | None
    expires: datetime.datetime | None


def run_exec_plugin(config: Mapping[str, Any]) -> ExecResult:
    """Run a kubeconfig exec credential plugin and read its ExecCredential."""
    env = {**os.environ, **{item["name"]: item["value"] for item in config.get("env") or []}}
    env["KUBERNETES_EXEC_INFO"] = json.dumps({
        "apiVersion": config.get("apiVersion", "client.authentication.k8s.io/v1"),
        "kind": "ExecCredential", "spec": {"interactive": False}})
    command = [config["command"], *(config.get("args") or [])]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KubeConfigError(f"The kubeconfig's credential plugin {config['command']} failed: {exc}") from exc
    if done.returncode != 0:
        raise KubeConfigError(f"The kubeconfig's credential plugin {config['command']} exited with "
                              f"{done.returncode}: {done.stderr.strip()[:300]}")
    try:
        status = json.loads(done.stdout).get("status") or {}
    except ValueError as exc:
        raise KubeConfigError(f"The credential plugin {config['command']} printed no ExecCredential.") from exc
    cert = None
    if status.get("clientCertificateData") and status.get("clientKeyData"):
        cert = (status["clientCertificateData"].encode(), status["clientKeyData"].encode())
    return ExecResult(status.get("token"), cert, parse_time(status.get("expirationTimestamp")))


# ---------------------------------------------------------------- the client


@dataclasses.dataclass
class _Endpoint:
    host: str
    port: int
    base_path: str  # a server URL may carry a path (https://proxy/k8s/clusters/c-1)
    host_header: str
    tls: bool


def _endpoint(server: str) -> _Endpoint:
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
    return _Endpoint(host, port, parts.path.rstrip("/"), shown if parts.port is None else f"{shown}:{port}", tls)


class _Connection:
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


class _Response:
    """Status, headers (lower-case names) and the body of one answer, read as it comes."""

    def __init__(self, conn: _Connection, status: int, reason: str, headers: dict[str, str], method: str):
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


IDLE_SECONDS = 30.0  # an unused kept-alive connection older than this is closed, not reused
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})


class KubeApi:
    """JSON requests and byte streams against one API server with one identity.

    The transport is a small HTTP/1.1 client on asyncio streams (kept-alive connections,
    chunked bodies, TLS with client certificates): the notebook side needs nothing else,
    and a command pays no import of an HTTP library (aiohttp's alone was ~0.35 s)."""

    MAX_CONNECTIONS = 64

    def __init__(self, credentials: Credentials):
        self.credentials = credentials
        self._endpoint: _Endpoint | None = None
        self._ssl: ssl.SSLContext | bool | None = None
        self._idle: list[_Connection] = []
        self._slots: asyncio.Semaphore | None = None
        self._setup_lock = asyncio.Lock()  # concurrent first requests share one TLS set-up
        self._exec: ExecResult | None = None

    @classmethod
    def connect(cls, kubeconfig: str | None = None, context: str | None = None) -> KubeApi:
        return cls(find_credentials(kubeconfig, context))

    @property
    def namespace(self) -> str | None:
        return self.credentials.namespace

    async def _exec_credential(self) -> ExecResult | None:
        config = self.credentials.exec_config
        if not config:
            return None
        if self._exec is None or (self._exec.expires is not None and
                                  self._exec.expires - now() < datetime.timedelta(seconds=30)):
            self._exec = await asyncio.to_thread(run_exec_plugin, config)
        return self._exec

    async def _setup(self) -> None:
        if self._endpoint is not None:
            return
        async with self._setup_lock:
            if self._endpoint is None:
                endpoint = _endpoint(self.credentials.server)
                exec_result = await self._exec_credential()
                self._ssl = ssl_context(self.credentials, exec_result.cert if exec_result else None)
                self._slots = asyncio.Semaphore(self.MAX_CONNECTIONS)
                self._endpoint = endpoint

    async def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        creds = self.credentials
        token = creds.token
        if creds.token_file:
            # Projected service-account tokens rotate: read the file every time (it is tiny).
            with open(creds.token_file, encoding="utf-8") as f:
                token = f.read().strip()
        exec_result = await self._exec_credential()
        if exec_result and exec_result.token:
            token = exec_result.token
        if token:
            headers["Authorization"] = f"Bearer {token}"
        elif creds.username is not None:
            raw = f"{creds.username}:{creds.password or ''}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(raw).decode()
        return headers

    async def _open(self) -> _Connection:
        endpoint = self._endpoint
        tls = self._ssl if endpoint.tls else None
        extra = {}
        if tls and self.credentials.tls_server_name:
            extra["server_hostname"] = self.credentials.tls_server_name
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(endpoint.host, endpoint.port, ssl=tls, limit=1 << 20, **extra),
            CONNECT_TIMEOUT_SECONDS)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Connection(reader, writer)

    def _take_idle(self) -> _Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if conn.alive() and time.monotonic() - conn.idle_since < IDLE_SECONDS:
                return conn
            conn.close()
        return None

    def _give_back(self, conn: _Connection) -> None:
        conn.idle_since = time.monotonic()
        self._idle.append(conn)

    async def _exchange(self, conn: _Connection, method: str, target: str, headers: dict[str, str],
                        data: bytes | None) -> _Response:
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self._endpoint.host_header}",
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
        return _Response(conn, int(code), reason, answer_headers, method)

    @contextlib.asynccontextmanager
    async def _response(self, method: str, path: str, params: Mapping[str, Any] | None, body: Any,
                        content_type: str | None, timeout: float | None):
        try:
            await self._setup()
        except (OSError, ssl.SSLError) as exc:
            raise KubeConfigError(f"Cannot set up TLS for {self.credentials.server}: {exc}") from exc
        data = None if body is None else json.dumps(body).encode()
        if data is not None and content_type is None:
            content_type = "application/json"
        query = {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in (params or {}).items()
                 if v is not None}
        target = quote(self._endpoint.base_path + path, safe="/%:@!$&'()*+,;=-._~")
        if query:
            target += "?" + urlencode(query)
        headers = await self._headers(content_type)
        conn = resp = None
        async with self._slots:
            try:
                async with _deadline(timeout):
                    for attempt in (1, 2):
                        conn = self._take_idle()
                        reused = conn is not None
                        if conn is None:
                            conn = await self._open()
                        try:
                            resp = await self._exchange(conn, method, target, headers, data)
                            break
                        except (ConnectionError, asyncio.IncompleteReadError, OSError):
                            conn.close()
                            # A kept-alive connection the server closed meanwhile: once more on a new one.
                            if attempt == 2 or not reused or method not in IDEMPOTENT:
                                raise
                    if resp.status >= 400:
                        raise await _error(resp)
                yield resp
            except KubeApiError:
                raise
            except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError,
                    ssl.SSLError, OSError, ValueError) as exc:
                raise KubeUnreachable(f"Cannot reach the Kubernetes API server at {self.credentials.server}: "
                                      f"{exc or type(exc).__name__}") from exc
            finally:
                if conn is not None:
                    if resp is not None and resp.complete and resp.reusable:
                        self._give_back(conn)
                    else:
                        conn.close()

    async def request(self, method: str, path: str, params: Mapping[str, Any] | None = None,
                      body: Any = None, content_type: str | None = None,
                      trim: Callable[[bytes], bytes] | None = None) -> dict:
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_SECONDS):  # the whole exchange, body included
                async with self._response(method, path, params, body, content_type, None) as resp:
                    raw = await resp.read()
        except TimeoutError as exc:
            raise KubeUnreachable(f"Cannot reach the Kubernetes API server at {self.credentials.server}: "
                                  f"no complete answer within {REQUEST_TIMEOUT_SECONDS:g}s") from exc
        return json.loads(trim(raw) if trim else raw) if raw else {}

    async def get(self, path: str, **params: Any) -> dict:
        return await self.request("GET", path, params)

    async def list(self, path: str, **params: Any) -> dict:
        """A collection of objects that have a `spec`, without their managedFields
        (`without_managed_fields`)."""
        return await self.request("GET", path, params, trim=without_managed_fields)

    async def create(self, path: str, body: dict) -> dict:
        return await self.request("POST", path, body=body)

    async def replace(self, path: str, body: dict) -> dict:
        return await self.request("PUT", path, body=body)

    async def patch(self, path: str, body: dict) -> dict:
        return await self.request("PATCH", path, body=body, content_type=MERGE_PATCH)

    async def delete(self, path: str, **params: Any) -> dict:
        return await self.request("DELETE", path, params)

    async def stream(self, path: str, params: Mapping[str, Any] | None = None,
                     chunk_size: int = 1 << 16) -> AsyncIterator[bytes]:
        """The response body in chunks as they arrive (e.g. a followed pod log): every
        byte that has arrived when the reader asks, up to about `chunk_size`."""
        async with self._response("GET", path, params, None, None, REQUEST_TIMEOUT_SECONDS) as resp:
            async for chunk in resp.chunks(chunk_size):
                yield chunk

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


@contextlib.asynccontextmanager
async def _deadline(seconds: float | None):
    """Connecting, sending and the answer's head within `seconds`; None: no limit here."""
    if seconds is None:
        yield
    else:
        async with asyncio.timeout(seconds):
            yield


async def _error(resp: _Response) -> KubeApiError:
    text = (await resp.read()).decode("utf-8", errors="replace")
    try:
        status = json.loads(text)
        return KubeApiError(resp.status, status.get("message") or resp.reason or text, status.get("reason") or "")
    except ValueError:
        return KubeApiError(resp.status, text.strip() or (resp.reason or ""), "")
    except AttributeError:  # JSON, but not a Status object
        return KubeApiError(resp.status, text.strip() or (resp.reason or ""), "")


async def split_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Whole lines (without the newline) from a stream of chunks; a last unterminated line too."""
    partial = b""
    async for chunk in chunks:
        data = partial + chunk
        lines = data.split(b"\n")
        partial = lines.pop()
        for line in lines:
            yield line
    if partial:
        yield partial
