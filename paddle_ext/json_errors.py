"""JSON answers and JSON errors for tornado handlers, on both sides of the product
(the notebook server's /paddle/api and the hub's quota service).

A handler raises a `PaddleCloudError`; the client gets its status and
`{"error": code, "message": sentence, ...}`. Tornado's own HTTP errors get the same
shape, and anything unexpected a 500 that says where to look, never a traceback.
"""

from __future__ import annotations

import json
from typing import Any

from tornado import web
from tornado.log import app_log

from .errors import PaddleCloudError

HTTP_ERROR_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
                    405: "method_not_allowed", 409: "conflict"}


class JsonErrorsMixin:
    """Mix into a tornado RequestHandler (before the framework's own base class)."""

    def write_json(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(data))

    def write_error(self, status_code: int, **kwargs) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, PaddleCloudError):
            body = exc.to_dict()
        elif isinstance(exc, web.HTTPError):
            message = exc.log_message % exc.args if exc.log_message and exc.args else exc.log_message
            message = (message or self._reason).rstrip(".")
            body = {"error": HTTP_ERROR_CODES.get(status_code, "http_error"),
                    "message": message[:1].upper() + message[1:] + "."}  # a sentence, as ours are
        else:
            body = {"error": "internal", "message": "The server hit an unexpected error; see its log."}
        if status_code == 405:
            self.set_header("Allow", ", ".join(self.allowed_methods()))
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.finish(json.dumps(body))

    def allowed_methods(self) -> list[str]:
        """The methods this handler implements (for a 405's Allow header)."""
        base = web.RequestHandler
        return [method for method in self.SUPPORTED_METHODS
                if getattr(type(self), method.lower(), None) is not getattr(base, method.lower(), None)]

    def _handle_request_exception(self, e: BaseException) -> None:
        if isinstance(e, PaddleCloudError):  # the request's fault, not the server's: one line
            getattr(self, "log", app_log).info("%s %s: %s", self.request.method, self.request.path, e.message)
            if not self._finished:
                self.send_error(e.status, exc_info=(type(e), e, e.__traceback__))
            return
        super()._handle_request_exception(e)
