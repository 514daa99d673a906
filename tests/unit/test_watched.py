"""The quota pages' watched copies (paddle_ext.hub.watched): watch events applied as the API
server means them, and a copy that says it may be behind (None) from the moment its watch
breaks until it has listed again, so a page never reads a stale copy the watch knows of.
The API double serves lists and hands each watch the lines a test puts in its queue; the
gates are the double's own records (a watch asked for, a list begun)."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from serverutil import wait_for_async

from paddle_ext.hub.watched import HistoryGone, WatchedCopy, WatchedList, apply_event
from paddle_ext.kubeapi import KubeApiError, KubeUnreachable


def pod(name: str, version: str, phase: str = "Running") -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": version,
                         "managedFields": [{"manager": "kubelet"}]}, "status": {"phase": phase}}


def event(kind: str, obj: dict) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


def test_events_add_change_and_delete_by_uid_and_bring_their_version():
    objects: dict[str, dict] = {}
    assert apply_event(objects, {"type": "ADDED", "object": pod("a", "5")}) == "5"
    assert objects["uid-a"]["metadata"].get("managedFields") is None  # as a list leaves them out
    assert apply_event(objects, {"type": "MODIFIED", "object": pod("a", "6", "Pending")}) == "6"
    assert objects["uid-a"]["status"]["phase"] == "Pending"
    assert apply_event(objects, {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}) == "9"
    assert list(objects) == ["uid-a"]
    assert apply_event(objects, {"type": "DELETED", "object": pod("a", "10")}) == "10"
    assert objects == {}


def test_a_410_error_event_means_list_again_and_any_other_error_is_raised():
    with pytest.raises(HistoryGone):
        apply_event({}, {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}})
    with pytest.raises(KubeApiError) as raised:
        apply_event({}, {"type": "ERROR", "object": {"kind": "Status", "code": 500, "message": "boom"}})
    assert raised.value.status == 500 and raised.value.message == "boom"


class WatchApi:
    """Lists answer the next of `lists` (a dict, or an exception to raise), after the test
    opens the gate `list_gate` where one is set; each watch yields what the test puts in its
    queue: bytes, an exception to raise, or None to end the watch as the API server does."""

    def __init__(self, lists: list):
        self.lists = list(lists)
        self.list_calls = 0
        self.list_gate: asyncio.Event | None = None
        self.watches: list[tuple[dict, asyncio.Queue]] = []

    async def list(self, path: str, **params) -> dict:
        self.list_calls += 1
        if self.list_gate is not None:
            await self.list_gate.wait()
        answer = self.lists.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def stream(self, path: str, params=None):
        queue: asyncio.Queue = asyncio.Queue()
        self.watches.append((dict(params or {}), queue))
        while (item := await queue.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item


def listed(version: str, *pods: dict) -> dict:
    return {"metadata": {"resourceVersion": version}, "items": list(pods)}


def names(copy: WatchedCopy) -> list[str] | None:
    items = copy.items()
    return None if items is None else sorted(obj["metadata"]["name"] for obj in items)


async def watches(api: WatchApi, count: int) -> tuple[dict, asyncio.Queue]:
    await wait_for_async(lambda: len(api.watches) >= count, timeout=10, what=f"watch {count} asked for")
    return api.watches[count - 1]


async def applied(copy: WatchedCopy, wanted: list[str]) -> None:
    await wait_for_async(lambda: names(copy) == wanted, timeout=10, what=f"the copy to read {wanted}")


WATCHED = WatchedList("/api/v1/pods", "status.phase!=Succeeded", "live pods")


async def test_the_copy_follows_the_watch_and_each_watch_resumes_from_the_last_version_seen():
    api = WatchApi([listed("10", pod("a", "7"))])
    copy = WatchedCopy(api, WATCHED)
    assert copy.items() is None  # nothing listed yet: the page lists
    copy.start()
    try:
        params, queue = await watches(api, 1)
        assert names(copy) == ["a"]
        assert params == {"fieldSelector": "status.phase!=Succeeded", "watch": "true", "resourceVersion": "10",
                          "allowWatchBookmarks": "true", "timeoutSeconds": "60"}
        queue.put_nowait(event("ADDED", pod("b", "11")))
        queue.put_nowait(event("DELETED", pod("a", "12")))
        await applied(copy, ["b"])
        queue.put_nowait(event("BOOKMARK", {"metadata": {"resourceVersion": "15"}}))
        queue.put_nowait(None)  # the API server ends the watch after its timeout
        params, queue = await watches(api, 2)
        assert params["resourceVersion"] == "15" and api.list_calls == 1  # resumed, not listed again
        assert names(copy) == ["b"]
    finally:
        await copy.stop()
    assert copy.items() is None


@pytest.mark.parametrize("breaks", ["unreachable", "not an event"])
async def test_a_broken_watch_makes_the_copy_say_so_until_it_has_listed_again(breaks):
    api = WatchApi([listed("10", pod("a", "7")), listed("20", pod("c", "19"))])
    copy = WatchedCopy(api, WATCHED)
    copy.start()
    try:
        _, queue = await watches(api, 1)
        api.list_gate = asyncio.Event()  # the next list waits for the test
        queue.put_nowait(KubeUnreachable("Cannot reach the Kubernetes API server: connection reset")
                         if breaks == "unreachable" else b"[1, 2]\n")
        await wait_for_async(lambda: api.list_calls == 2, timeout=10, what="the list after the broken watch")
        assert copy.items() is None  # not the old copy: it may have missed changes
        api.list_gate.set()
        params, _ = await watches(api, 2)
        assert names(copy) == ["c"] and params["resourceVersion"] == "20"
    finally:
        await copy.stop()


async def test_history_gone_lists_again_at_once():
    api = WatchApi([listed("10", pod("a", "7")), listed("30", pod("a", "29"), pod("d", "28"))])
    copy = WatchedCopy(api, WATCHED)
    copy.start()
    try:
        _, queue = await watches(api, 1)
        queue.put_nowait(event("ERROR", {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}))
        params, _ = await watches(api, 2)
        assert names(copy) == ["a", "d"] and params["resourceVersion"] == "30" and api.list_calls == 2
    finally:
        await copy.stop()


async def test_an_account_that_may_not_watch_stops_watching_and_says_so_once(caplog):
    forbidden = KubeApiError(403, 'pods is forbidden: cannot list resource "pods" at the cluster scope', "Forbidden")
    api = WatchApi([forbidden])
    copy = WatchedCopy(api, WATCHED)
    with caplog.at_level(logging.WARNING, logger="paddle_ext.hub.watched"):
        copy.start()
        await wait_for_async(lambda: copy._task is not None and copy._task.done(), timeout=10,
                             what="the watch to give up")
    assert copy.items() is None and api.list_calls == 1
    (told,) = [r.getMessage() for r in caplog.records if r.name == "paddle_ext.hub.watched"]
    assert told.startswith("Cannot watch live pods (pods is forbidden") and "list them each time" in told
    await copy.stop()
