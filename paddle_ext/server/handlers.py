"""REST handlers under /paddle/api (docs/user/rest.md lists them).

Every handler needs an authenticated user allowed to use this server
(`@authorized`); errors are JSON {"error", "message"} from one place (JsonErrorsMixin).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
from pathlib import Path

import yaml
from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from jupyter_server.utils import url_path_join
from tornado import web
from tornado.iostream import StreamClosedError

from ..backends.base import JobBackend, check_worker
from ..errors import InvalidRequest, NotFound, SpecError
from ..json_errors import JsonErrorsMixin
from ..quantity import LARGEST_COUNT
from ..spec import JobSpec, text_problem

AUTH_RESOURCE = "paddle"
HEARTBEAT_SECONDS = 15.0
STREAM_BUFFER = 256  # pieces of a followed log waiting to be sent, at most
API_PREFIX = "/paddle/api"
OPENAPI_DOCUMENT = Path(__file__).with_name("openapi.yaml")


@functools.cache
def openapi_document() -> dict:
    """This API's OpenAPI document (paddle_ext/server/openapi.yaml)."""
    return yaml.safe_load(OPENAPI_DOCUMENT.read_text(encoding="utf-8"))


class PaddleHandler(JsonErrorsMixin, ExtensionHandlerMixin, APIHandler):
    auth_resource = AUTH_RESOURCE

    @property
    def backend(self) -> JobBackend:
        return self.settings["paddle_backend"]

    def folder_argument(self, name: str = "workdir") -> str:
        """A folder named relative to the server's root (default: the root), kept inside it."""
        root = self.settings["paddle_root_dir"]
        relative = self.get_argument(name, "").strip().strip("/")
        problem = text_problem(relative)
        if problem:
            raise InvalidRequest(f"The '{name}' parameter {problem}.")
        folder = os.path.realpath(os.path.join(root, relative))
        if os.path.commonpath([folder, os.path.realpath(root)]) != os.path.realpath(root):
            raise InvalidRequest(f"The '{name}' parameter must name a folder inside the server's root "
                                 f"(got '{relative}').")
        if not os.path.isdir(folder):
            raise InvalidRequest(f"The '{name}' parameter names no folder: '{relative}' does not exist.")
        return folder

    def bool_argument(self, name: str) -> bool:
        return self.get_argument(name, "0").lower() in ("1", "true", "yes")

    def int_argument(self, name: str) -> int | None:
        value = self.get_argument(name, None)
        if value is None:
            return None
        try:
            number = int(value)
        except ValueError as exc:
            raise InvalidRequest(f"The '{name}' parameter must be a whole number (got '{value}').") from exc
        if number < 0:
            raise InvalidRequest(f"The '{name}' parameter must not be negative (got {number}).")
        if number > LARGEST_COUNT:
            raise InvalidRequest(f"The '{name}' parameter must be at most {LARGEST_COUNT} (got {number}).")
        return number


class MetricsHandler(PaddleHandler):
    """Metric points found in the job's logs: `?since=<cursor>` for only what is new
    (docs/user/rest.md documents the JSON)."""

    @web.authenticated
    @authorized
    async def get(self, name):
        page = await self.backend.metrics(name, self.get_argument("since", None) or None)
        self.write_json(page.to_dict())


class JobsHandler(PaddleHandler):
    @web.authenticated
    @authorized
    async def get(self):
        jobs = await self.backend.list()
        self.write_json({"jobs": [job.to_dict() for job in jobs]})

    @web.authenticated
    @authorized
    async def post(self):
        try:
            data = json.loads(self.request.body or b"null")
        except json.JSONDecodeError as exc:
            raise SpecError({"spec": f"the request body is not valid JSON ({exc.msg})"}) from exc
        except ValueError as exc:  # not UTF-8, or a number too long to read
            raise SpecError({"spec": "the request body is not valid JSON text"}) from exc
        job = await self.backend.submit(JobSpec.from_dict(data), workdir=self.folder_argument())
        self.set_header("Location", self.request.path.rstrip("/") + "/" + job.name)
        self.write_json(job.to_dict(), status=201)


class JobHandler(PaddleHandler):
    @web.authenticated
    @authorized
    async def get(self, name):
        self.write_json((await self.backend.get(name)).to_dict())

    @web.authenticated
    @authorized
    async def delete(self, name):
        self.write_json((await self.backend.cancel(name)).to_dict(), status=202)


class LogsHandler(PaddleHandler):
    """Plain text, or with ?follow=1 a text/event-stream: one `data:` event per line,
    a final `event: end` carrying the job's phase, and heartbeat comments while idle."""

    @web.authenticated
    @authorized
    async def get(self, name):
        worker = self.int_argument("worker")
        tail = self.int_argument("tail")
        follow = self.bool_argument("follow")
        mine = self.bool_argument("mine")
        job = await self.backend.get(name)
        check_worker(job, worker)  # 404 and 400 before any streaming starts
        # Pieces of whole lines as bytes: framing and prefixes are added per piece, not per line.
        chunks = self.backend.job_log_chunks(job, worker=worker, tail=tail, follow=follow, mine=mine)
        if follow:
            await self._stream(name, chunks)
        else:
            self.set_header("Content-Type", "text/plain; charset=utf-8")
            try:
                async for chunk in chunks:
                    self.write(chunk)
                    await self.flush()
            except StreamClosedError:
                self.log.debug("Log reader of %s went away", name)
                return
            finally:
                await chunks.aclose()
            self.finish(set_content_type="text/plain; charset=utf-8")

    async def _stream(self, name, chunks):
        """Send the pieces as events. A reader task collects what arrives; each send takes
        all that waits, so a busy job (many workers, many lines a second) costs one write
        per batch, not per piece. At most STREAM_BUFFER pieces wait: then the reader waits."""
        self.set_header("Content-Type", "text/event-stream")
        self.set_header("Cache-Control", "no-cache")
        self.set_header("X-Accel-Buffering", "no")
        waiting: list[bytes] = []
        arrived, room = asyncio.Event(), asyncio.Event()
        room.set()

        async def read():
            try:
                async for chunk in chunks:
                    waiting.append(sse_events(chunk))
                    arrived.set()
                    if len(waiting) >= STREAM_BUFFER:
                        room.clear()
                        await room.wait()
            finally:
                arrived.set()

        reader = asyncio.ensure_future(read())
        try:
            await self.flush()
            while True:
                if not waiting and not reader.done():
                    try:
                        async with asyncio.timeout(HEARTBEAT_SECONDS):  # no task per wait, as wait_for makes
                            await arrived.wait()
                    except TimeoutError:
                        self.write(": keep-alive\n\n")
                        await self.flush()
                        continue
                arrived.clear()
                if waiting:
                    batch = b"".join(waiting)
                    waiting.clear()
                    room.set()
                    self.write(batch)
                    await self.flush()
                elif reader.done():
                    reader.result()  # the log's error, if it ended with one
                    break
            job = await self.backend.get(name)
            end = {"phase": str(job.phase), "reason": str(job.reason), "message": job.message}
            self.write(f"event: end\ndata: {json.dumps(end)}\n\n")
            self.finish(set_content_type="text/event-stream")
        except StreamClosedError:
            self.log.debug("Log follower of %s went away", name)
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
            await chunks.aclose()


def sse_events(chunk: bytes) -> bytes:
    """One `data:` event per line of a piece of whole lines."""
    return b"data: " + chunk[:-1].replace(b"\n", b"\n\ndata: ") + b"\n\n"


class CodeHandler(PaddleHandler):
    """The code the job ran, as the gzipped tar it travelled in."""

    @web.authenticated
    @authorized
    async def get(self, name):
        archive = await self.backend.code_archive(name)
        self.set_header("Content-Disposition", f'attachment; filename="{name}-code.tar.gz"')
        self.finish(archive, set_content_type="application/gzip")


class OptionsHandler(PaddleHandler):
    @web.authenticated
    @authorized
    async def get(self):
        self.write_json(self.backend.options().to_dict())


class QuotaHandler(PaddleHandler):
    @web.authenticated
    @authorized
    async def get(self):
        self.write_json((await self.backend.quota()).to_dict())


class OpenAPIHandler(PaddleHandler):
    """This API's OpenAPI document, with `servers` pointing at where it runs."""

    @web.authenticated
    @authorized
    async def get(self):
        document = {**openapi_document(), "servers": [{"url": url_path_join(self.base_url, API_PREFIX)}]}
        self.write_json(document)


class UnknownPathHandler(PaddleHandler):
    """Anything else under the API: a JSON 404, like every other answer here."""

    @web.authenticated
    @authorized
    async def get(self, path):
        raise NotFound(f"There is no {API_PREFIX}/{path} here; see {API_PREFIX}/openapi.json.")

    post = put = patch = delete = get


_NAME = r"(?P<name>[^/]+)"
HANDLERS = [
    (r"/paddle/api/jobs/?", JobsHandler),
    (rf"/paddle/api/jobs/{_NAME}/logs", LogsHandler),
    (rf"/paddle/api/jobs/{_NAME}/code", CodeHandler),
    (rf"/paddle/api/jobs/{_NAME}/metrics", MetricsHandler),
    (rf"/paddle/api/jobs/{_NAME}/?", JobHandler),
    (r"/paddle/api/options", OptionsHandler),
    (r"/paddle/api/quota", QuotaHandler),
    (r"/paddle/api/openapi.json", OpenAPIHandler),
]
# Registered after HANDLERS (and after any route another part adds to it).
FALLBACK = (rf"{API_PREFIX}/(.*)", UnknownPathHandler)
