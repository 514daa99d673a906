"""The quota service asks the hub who the caller is without blocking its event loop (never
through HubAuth's synchronous path, whose thread keeps an event loop it never closes), and a
method's own scope still decides who may call it."""

from __future__ import annotations

import asyncio
import json

from jupyterhub.services.auth import HubOAuth
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from paddle_ext.hub.quota_handlers import ADMIN_SCOPE, routes
from paddle_ext.ports import free_port

PREFIX = "/services/quota/"
CALLERS = {
    "alice-token": {"kind": "user", "name": "alice", "scopes": [ADMIN_SCOPE]},
    "bob-token": {"kind": "user", "name": "bob", "scopes": []},
}


class AsyncOnlyHubOAuth(HubOAuth):
    """A HubOAuth that knows two tokens and fails the test if its synchronous path is taken."""

    async def _get_user(self, handler):
        header = handler.request.headers.get("Authorization", "")
        return CALLERS.get(header.removeprefix("token "))

    def _synchronize(self, async_f, *args, **kwargs):
        raise AssertionError("the quota service took HubAuth's blocking path")


class Views:
    prefix = PREFIX

    async def user_view(self, name: str) -> dict:
        return {"user": name}

    async def update(self, kind: str, name: str | None, patch) -> dict:
        return {"updated": name}


async def calls(requests: list[tuple[str, str, str | None]]) -> list[tuple[int, dict]]:
    port = free_port()
    hub_auth = AsyncOnlyHubOAuth(api_token="service-token", api_url="http://127.0.0.1:9/hub/api")
    app = web.Application(routes(PREFIX), hub_auth=hub_auth, quota_service=Views(), cookie_secret=b"x" * 32)
    server = app.listen(port, "127.0.0.1")
    client = AsyncHTTPClient(force_instance=True)
    answers = []
    try:
        for method, path, token in requests:
            headers = {"Authorization": f"token {token}"} if token else {}
            response = await client.fetch(HTTPRequest(
                f"http://127.0.0.1:{port}{PREFIX}api/quotas/{path}", method=method, headers=headers,
                body=json.dumps({"gpus": 1}) if method == "PUT" else None), raise_error=False)
            answers.append((response.code, json.loads(response.body or b"{}")))
    finally:
        client.close()
        server.stop()
    assert "_pool" not in hub_auth._trait_values, "HubAuth's background thread was started"
    return answers


def test_callers_are_identified_without_the_blocking_path_and_scopes_still_decide():
    answers = asyncio.run(calls([
        ("GET", "users/bob", "bob-token"),
        ("PUT", "users/bob", "bob-token"),
        ("PUT", "users/bob", "alice-token"),
        ("GET", "users/bob", None),
    ]))
    assert answers[0] == (200, {"user": "bob"})
    assert answers[1][0] == 403 and ADMIN_SCOPE in answers[1][1]["message"], answers[1]
    assert answers[2] == (200, {"updated": "bob"})
    assert answers[3][0] == 401, answers[3]
