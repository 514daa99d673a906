"""The hub's users and groups, for the quota service: its REST API asked with the
service's own token (role with list:users, read:users, list:groups, read:groups)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from ..errors import BackendUnavailable


class HubDirectory:
    """Users and groups from the hub's REST API, asked with the service's own token."""

    def __init__(self, api_url: str, token: str):
        self.api_url = api_url.rstrip("/")
        self.token = token
        self.http = AsyncHTTPClient()

    async def _get(self, path: str) -> Any:
        request = HTTPRequest(self.api_url + path, headers={
            "Authorization": f"token {self.token}", "Accept": "application/jupyterhub-pagination+json"},
            request_timeout=30)
        try:
            response = await self.http.fetch(request)
        except HTTPClientError as exc:
            if exc.code == 404:
                return None
            raise BackendUnavailable(f"The hub refused to list users and groups (HTTP {exc.code}); "
                                     "check the quota service's role.") from exc
        except OSError as exc:
            raise BackendUnavailable(f"Cannot reach the hub API at {self.api_url}: {exc}.") from exc
        return json.loads(response.body)

    async def _list(self, path: str) -> list[dict]:
        items, offset = [], 0
        while True:
            page = await self._get(f"{path}?offset={offset}&limit=200")
            if isinstance(page, list):  # a hub without pagination
                return page
            items.extend(page["items"])
            following = (page.get("_pagination") or {}).get("next")
            if not following:
                return items
            offset = following["offset"]

    async def user(self, name: str) -> dict | None:
        return await self._get(f"/users/{quote(name, safe='')}")

    async def group(self, name: str) -> dict | None:
        return await self._get(f"/groups/{quote(name, safe='')}")

    async def users(self) -> list[dict]:
        return await self._list("/users")

    async def groups(self) -> list[dict]:
        return await self._list("/groups")
