"""The quota service's reads of the hub's users and groups (HubDirectory): every item once, in
the hub's order, whatever its page size, with the pages after the first asked for together."""

from __future__ import annotations

import asyncio
from urllib.parse import parse_qs, urlparse

from paddle_ext.hub.hub_directory import PAGE_SIZE, HubDirectory


class PagedHub(HubDirectory):
    """`count` users served as JupyterHub pages them, at most `max_limit` a page
    (its api_page_max_limit), or as one plain list (`paginated` False)."""

    def __init__(self, count: int, max_limit: int = PAGE_SIZE, paginated: bool = True):
        super().__init__("http://127.0.0.1:1/hub/api", "token")
        self.users_list = [{"name": f"u{i:04d}"} for i in range(count)]
        self.max_limit, self.paginated = max_limit, paginated
        self.asked: list[int] = []
        self.in_flight = self.most_in_flight = 0

    async def _get(self, path: str):
        query = parse_qs(urlparse(path).query)
        offset, limit = int(query["offset"][0]), min(int(query["limit"][0]), self.max_limit)
        self.asked.append(offset)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(0)  # let the other requests start: the hub answers them together
        self.in_flight -= 1
        if not self.paginated:
            return self.users_list
        total = len(self.users_list)
        following = offset + limit
        return {"items": self.users_list[offset:following],
                "_pagination": {"offset": offset, "limit": limit, "total": total,
                                "next": {"offset": following, "limit": limit} if following < total else None}}


async def test_every_user_once_in_order_with_the_pages_after_the_first_asked_together():
    hub = PagedHub(2 * PAGE_SIZE + 50)
    assert [u["name"] for u in await hub.users()] == [u["name"] for u in hub.users_list]
    assert sorted(hub.asked) == [0, PAGE_SIZE, 2 * PAGE_SIZE] and hub.most_in_flight == 2


async def test_a_hub_with_smaller_pages_is_read_page_after_page():
    hub = PagedHub(130, max_limit=50)
    assert [u["name"] for u in await hub.users()] == [u["name"] for u in hub.users_list]
    assert hub.asked == [0, 50, 100] and hub.most_in_flight == 1


async def test_one_page_and_a_hub_without_pagination():
    hub = PagedHub(PAGE_SIZE)
    assert len(await hub.users()) == PAGE_SIZE and hub.asked == [0]
    assert len(await PagedHub(3, paginated=False).users()) == 3
