"""The hub's users and groups, for the quota service: its REST API asked with the
service's own token (role with list:users, read:users, list:groups, read:groups)."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import quote

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from ..errors import BackendUnavailable

PAGE_SIZE = 200  # JupyterHub's largest page (its api_page_max_limit) by default


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

    async def _page(self, path: str, offset: int) -> Any:
        return await self._get(f"{path}?offset={offset}&limit={PAGE_SIZE}")

    async def _list(self, path: str) -> list[dict]:
        """Every item. When the hub gives full pages, the first says how many there are and the
        rest are asked for together; then any that are left (a smaller page size of the hub's,
        items added meanwhile) one page after the other."""
        page = await self._page(path, 0)
        if isinstance(page, list):  # a hub without pagination
            return page
        items = list(page["items"])
        total = (page.get("_pagination") or {}).get("total")
        if isinstance(total, int) and len(items) == PAGE_SIZE:
            for page in await asyncio.gather(*(self._page(path, offset) for offset in range(PAGE_SIZE, total, PAGE_SIZE))):
                items.extend(page["items"])
        while following := (page.get("_pagination") or {}).get("next"):
            page = await self._page(path, following["offset"])
            items.extend(page["items"])
        return items

    async def user(self, name: str) -> dict | None:
        return await self._get(f"/users/{quote(name, safe='')}")

    async def group(self, name: str) -> dict | None:
        return await self._get(f"/groups/{quote(name, safe='')}")

    async def users(self) -> list[dict]:
        return await self._list("/users")

    async def groups(self) -> list[dict]:
        return await self._list("/groups")
