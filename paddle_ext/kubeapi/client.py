"""`KubeApi`: JSON requests and byte streams against one API server with one identity
(`credentials`), over our own HTTP/1.1 (`transport`); REST paths and list bodies.

Errors are neutral (`KubeApiError` with the HTTP status and the API server's message,
`KubeUnreachable`); callers decide what they mean for users.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import json
import ssl
from typing import Any, AsyncIterator, Mapping
from urllib.parse import quote, urlencode

from ..timestamps import now
from .credentials import Credentials, ExecResult, KubeConfigError, find_credentials, run_exec_plugin
from .transport import ConnectionPool, Response, endpoint, ssl_context

REQUEST_TIMEOUT_SECONDS = 30.0
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
# What follows the bracket that closes managedFields: in a built-in kind's object the end of
# metadata and `spec` (ObjectMeta's fields in struct order, managedFields last); in a custom
# resource's, `name` (the keys of an unstructured object come sorted).
_MANAGED_FIELDS_ENDS = (b']},"spec":', b'],"name":"')
_METADATA_KEY = b'"metadata":{'
_ITEMS_KEY = b'"items":['  # where a list's items begin (the first '[' of a list's JSON)


def without_managed_fields(body: bytes) -> bytes:
    """A list's JSON without each item's metadata.managedFields (bookkeeping of server-side
    apply that nothing here reads, 40% of a Job's or a pod's bytes and about half of a Kueue
    Workload's; the API server has no way to leave it out, and decoding it in Python is most
    of what a long list costs).

    Cut on bytes, at the first ']' after the start that one of `_MANAGED_FIELDS_ENDS`
    follows. Inside a JSON string every '"' is escaped, so these byte sequences can only be
    structure, and managedFields' entries hold no arrays, so that ']' closes it. A cut that
    would cross into another object's metadata (an object of neither shape) leaves the body
    whole. Each byte is looked at about once: a long list costs no more than its length."""
    parts, pos = [], 0
    while (start := body.find(_MANAGED_FIELDS_START, pos)) >= 0:
        end = body.find(b"]", start + len(_MANAGED_FIELDS_START))
        while end >= 0 and not body.startswith(_MANAGED_FIELDS_ENDS, end):  # a ']' inside a string
            end = body.find(b"]", end + 1)
        if end < 0 or body.find(_METADATA_KEY, start, end) >= 0:
            return body
        parts.append(body[pos:start])
        pos = end + 1  # keep what follows the bracket: '}' closing metadata, or ',"name"'
    if not parts:
        return body
    parts.append(body[pos:])
    return b"".join(parts)


class WholeBody:
    """An answer's JSON decoded once all of it has come ({} for an empty body)."""

    def __init__(self) -> None:
        self._pieces: list[bytes] = []

    def feed(self, data: bytes) -> None:
        self._pieces.append(data)

    def finish(self) -> dict:
        body = b"".join(self._pieces)
        return json.loads(body) if body else {}


class ListDecoder:
    """A list's JSON decoded while it arrives (`feed` each piece, then `finish`): every item
    whole in what has come so far is decoded then, without its managedFields, so a long list
    is mostly decoded by the time its last byte comes (the API server sends a Kueue Workload
    list slower than this decodes it) instead of all of it after.

    Items are cut where the next one begins: `},` then the first item's opening up to its
    metadata (`{"metadata":{` for a built-in kind; `{"apiVersion":"...","kind":"...","metadata":{`
    for a custom resource, whose items all share those two values). Such bytes can only be
    structure (inside a JSON string every '"' is escaped), and a cut is kept only if what it
    cuts off decodes as one JSON value, so a nested object that opens the same way is never
    taken for an item. Objects are user input: after MAX_FALSE_CUTS such nested openings in one
    item, the rest of the list is left to `finish`, so no object makes the work grow faster than
    its size. Everything not cut off is decoded by `finish`, put back behind the bytes before the
    items: the items are those of json.loads of the whole body (each without managedFields where
    without_managed_fields can cut them). A body of another shape (no items near its start,
    spaces between them) is decoded whole."""

    HEAD_LIMIT = 1 << 16  # a list's items begin after its kind, apiVersion and metadata: far sooner
    OPENING_LIMIT = 512  # an item's metadata begins after its apiVersion and kind: far sooner
    MAX_FALSE_CUTS = 8

    def __init__(self) -> None:
        self._head: bytes | None = None  # the body up to and including '"items":['
        self._buf = b""  # what has come since, not yet decoded
        self._opening: bytes | None = None  # '},' and the first item's opening
        self._search = 0  # where in _buf the next cut is looked for
        self._false_cuts = 0  # in the item now at the start of _buf
        self._items: list = []
        self._whole: list[bytes] | None = None  # what is left to finish, not cut here

    def feed(self, data: bytes) -> None:
        if self._whole is not None:
            self._whole.append(data)
            return
        self._buf += data
        if self._head is None:
            at = self._buf.find(_ITEMS_KEY)
            if at < 0:
                if len(self._buf) > self.HEAD_LIMIT:
                    self._leave_to_finish()
                return
            self._head, self._buf = self._buf[:at + len(_ITEMS_KEY)], self._buf[at + len(_ITEMS_KEY):]
        if self._opening is None:
            metadata = self._buf.find(_METADATA_KEY, 0, self.OPENING_LIMIT)
            if self._buf.startswith(b'{"') and metadata >= 0:
                self._opening = b"}," + self._buf[:metadata + len(_METADATA_KEY)]
            elif self._buf[:1] == b"]" or (b'{"'.startswith(self._buf[:2]) and len(self._buf) < self.OPENING_LIMIT):
                return  # an empty list (finish decodes it), or the opening has not all come
            else:
                self._leave_to_finish()
                return
        while (cut := self._buf.find(self._opening, self._search)) >= 0:
            try:
                item = json.loads(without_managed_fields(self._buf[:cut + 1]))
            except ValueError:  # a nested object that opens as an item does: not an item's end
                self._false_cuts += 1
                if self._false_cuts > self.MAX_FALSE_CUTS:
                    self._leave_to_finish()
                    return
                self._search = cut + 1
                continue
            self._items.append(item)
            self._buf, self._search, self._false_cuts = self._buf[cut + 2:], 0, 0
        self._search = max(self._search, len(self._buf) - len(self._opening) + 1)

    def _leave_to_finish(self) -> None:
        self._whole = [(self._head or b"") + self._buf]
        self._head, self._buf = None, b""

    def finish(self) -> dict:
        body = b"".join(self._whole) if self._whole is not None else (self._head or b"") + self._buf
        if not body:
            return {}
        rest = json.loads(without_managed_fields(body))
        if self._items:
            rest["items"] = self._items + rest["items"]
        return rest


# ---------------------------------------------------------------- the client


class KubeApi:
    """JSON requests and byte streams against one API server with one identity.

    The transport is a small HTTP/1.1 client on asyncio streams (`transport`): the
    notebook side needs nothing else, and a command pays no import of an HTTP library
    (aiohttp's alone was ~0.35 s)."""

    MAX_CONNECTIONS = 64

    def __init__(self, credentials: Credentials):
        self.credentials = credentials
        self._pool: ConnectionPool | None = None
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

    async def _setup(self) -> ConnectionPool:
        if self._pool is not None:
            return self._pool
        async with self._setup_lock:
            if self._pool is None:
                server = endpoint(self.credentials.server)
                exec_result = await self._exec_credential()
                tls = ssl_context(self.credentials, exec_result.cert if exec_result else None)
                self._pool = ConnectionPool(server, tls, self.credentials.tls_server_name, self.MAX_CONNECTIONS)
        return self._pool

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

    @contextlib.asynccontextmanager
    async def _response(self, method: str, path: str, params: Mapping[str, Any] | None, body: Any,
                        content_type: str | None, timeout: float | None):
        try:
            pool = await self._setup()
        except (OSError, ssl.SSLError) as exc:
            raise KubeConfigError(f"Cannot set up TLS for {self.credentials.server}: {exc}") from exc
        data = None if body is None else json.dumps(body).encode()
        if data is not None and content_type is None:
            content_type = "application/json"
        query = {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in (params or {}).items()
                 if v is not None}
        target = quote(pool.endpoint.base_path + path, safe="/%:@!$&'()*+,;=-._~")
        if query:
            target += "?" + urlencode(query)
        headers = await self._headers(content_type)
        resp = None
        async with pool.slots:
            try:
                async with _deadline(timeout):
                    resp = await pool.send(method, target, headers, data)
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
                if resp is not None:
                    pool.release(resp)

    async def request(self, method: str, path: str, params: Mapping[str, Any] | None = None,
                      body: Any = None, content_type: str | None = None) -> dict:
        return await self._decoded(method, path, params, body, content_type, WholeBody())

    async def _decoded(self, method: str, path: str, params: Mapping[str, Any] | None, body: Any,
                       content_type: str | None, decoder: WholeBody | ListDecoder) -> dict:
        """The answer's JSON body, fed to `decoder` as it arrives."""
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_SECONDS):  # the whole exchange, body included
                async with self._response(method, path, params, body, content_type, None) as resp:
                    async for chunk in resp.chunks():
                        decoder.feed(chunk)
        except TimeoutError as exc:
            raise KubeUnreachable(f"Cannot reach the Kubernetes API server at {self.credentials.server}: "
                                  f"no complete answer within {REQUEST_TIMEOUT_SECONDS:g}s") from exc
        return decoder.finish()

    async def get(self, path: str, **params: Any) -> dict:
        return await self.request("GET", path, params)

    async def list(self, path: str, **params: Any) -> dict:
        """A collection of objects that have a `spec`, without their managedFields
        (`without_managed_fields`), decoded while it arrives (`ListDecoder`)."""
        return await self._decoded("GET", path, params, None, None, ListDecoder())

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
        if self._pool is not None:
            self._pool.close()


@contextlib.asynccontextmanager
async def _deadline(seconds: float | None):
    """Connecting, sending and the answer's head within `seconds`; None: no limit here."""
    if seconds is None:
        yield
    else:
        async with asyncio.timeout(seconds):
            yield


async def _error(resp: Response) -> KubeApiError:
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
