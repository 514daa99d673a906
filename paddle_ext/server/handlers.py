"""REST handlers under /paddle/api (see DESIGN.md, "REST").

Every handler needs an authenticated user allowed to use this server
(`@authorized`); errors are JSON {"error", "message"} from one place, `write_error`.
"""

from __future__ import annotations

import asyncio
import json

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from tornado import web
from tornado.iostream import StreamClosedError

from ..backends.base import JobBackend
from ..errors import InvalidRequest, PaddleCloudError, SpecError
from ..spec import JobSpec

AUTH_RESOURCE = "paddle"
HEARTBEAT_SECONDS = 15.0


class PaddleHandler(ExtensionHandlerMixin, APIHandler):
    auth_resource = AUTH_RESOURCE

    @property
    def backend(self) -> JobBackend:
        return self.settings["paddle_backend"]

    def write_error(self, status_code: int, **kwargs):
        exc = kwargs.get("exc_info", (None, None, None))[1]
        self.set_header("Content-Type", "application/json")
        if isinstance(exc, PaddleCloudError):
            body = exc.to_dict()
        elif isinstance(exc, web.HTTPError):
            body = {"error": {403: "forbidden", 404: "not_found"}.get(status_code, "http_error"),
                    "message": exc.log_message or self._reason}
        else:
            body = {"error": "internal", "message": "The server hit an unexpected error; see the server log."}
        self.finish(json.dumps(body))

    def _handle_request_exception(self, e):
        if isinstance(e, PaddleCloudError):
            self.log.info("%s %s: %s", self.request.method, self.request.path, e.message)
            self.send_error(e.status, exc_info=(type(e), e, e.__traceback__))
            return
        super()._handle_request_exception(e)

    def write_json(self, data, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(data))

    def int_argument(self, name: str) -> int | None:
        value = self.get_argument(name, None)
        if value is None or value == "":
            return None
        try:
            number = int(value)
        except ValueError as exc:
            raise InvalidRequest(f"The '{name}' parameter must be a whole number (got '{value}').") from exc
        if number < 0:
            raise InvalidRequest(f"The '{name}' parameter must not be negative (got {number}).")
        return number


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
        job = await self.backend.submit(JobSpec.from_dict(data))
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
        follow = self.get_argument("follow", "0").lower() in ("1", "true", "yes")
        job = await self.backend.get(name)  # 404 before any streaming starts
        if worker is not None and worker >= job.workers:
            raise InvalidRequest(f"Job '{name}' has workers 0 to {job.workers - 1}; there is no worker {worker}.")
        lines = self.backend.logs(name, worker=worker, tail=tail, follow=follow)
        if follow:
            await self._stream(name, lines)
        else:
            async for line in lines:
                self.write(line + "\n")
            self.finish(set_content_type="text/plain; charset=utf-8")

    async def _stream(self, name, lines):
        self.set_header("Content-Type", "text/event-stream")
        self.set_header("Cache-Control", "no-cache")
        self.set_header("X-Accel-Buffering", "no")
        pending = None
        try:
            await self.flush()
            while True:
                pending = pending or asyncio.ensure_future(lines.__anext__())
                done, _ = await asyncio.wait({pending}, timeout=HEARTBEAT_SECONDS)
                if not done:
                    self.write(": keep-alive\n\n")
                    await self.flush()
                    continue
                try:
                    line = pending.result()
                except StopAsyncIteration:
                    break
                finally:
                    pending = None
                self.write(f"data: {line}\n\n")
                await self.flush()
            job = await self.backend.get(name)
            end = {"phase": job.phase, "reason": job.reason, "message": job.message}
            self.write(f"event: end\ndata: {json.dumps(end)}\n\n")
            self.finish(set_content_type="text/event-stream")
        except StreamClosedError:
            self.log.debug("Log follower of %s went away", name)
        finally:
            if pending is not None:
                pending.cancel()
            await lines.aclose()


class OptionsHandler(PaddleHandler):
    @web.authenticated
    @authorized
    async def get(self):
        self.write_json(self.backend.options())


class QuotaHandler(PaddleHandler):
    @web.authenticated
    @authorized
    async def get(self):
        self.write_json(await self.backend.quota())


_NAME = r"(?P<name>[^/]+)"
HANDLERS = [
    (r"/paddle/api/jobs/?", JobsHandler),
    (rf"/paddle/api/jobs/{_NAME}/logs", LogsHandler),
    (rf"/paddle/api/jobs/{_NAME}/?", JobHandler),
    (r"/paddle/api/options", OptionsHandler),
    (r"/paddle/api/quota", QuotaHandler),
]
