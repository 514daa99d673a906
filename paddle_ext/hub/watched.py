"""A copy of one cluster-wide list kept up to date by a watch, for the quota service's pages
about every user: the live pods, the nodes and the ResourceQuotas, which on a big cluster are
most of what a page reads (1,000 notebooks and 1,600 workers are ~10 MB of JSON to serialize,
send and parse on every page; the watch sends only what changes).

The pattern is an informer's, as kubespawner's reflector and client-go do it: list, then
watch from the list's resourceVersion (with bookmarks, so a quiet watch stays resumable),
resume each ended watch from the last version seen, list again when that history is gone
(410) or the watch broke. `items()` says None whenever the copy may be behind for a reason
the watch knows of (before the first list, after an error, until the next list): the page
then lists, as it did without a copy. Like every informer's, the copy trails the API server
by the watch's delivery time (milliseconds)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass

from ..kubeapi import KubeApi
from ..kubeapi.client import KubeApiError, split_lines

log = logging.getLogger(__name__)

# The API server ends each watch after this long (it then resumes from the last version, no
# list); a watch still open STALL_SECONDS after that is taken as a dead connection (the API
# server would have ended it) and started again with a list.
WATCH_SECONDS = 60
STALL_SECONDS = 30
FIRST_RETRY_SECONDS = 0.5
MAX_RETRY_SECONDS = 30.0


class HistoryGone(Exception):
    """The API server no longer has the changes since our version (410 Gone): list again."""


@dataclass(frozen=True)
class WatchedList:
    """What to keep a copy of: the collection at `path` (api_path(...) of every namespace)
    with an optional field selector."""

    path: str
    field_selector: str = ""
    what: str = "objects"  # for the log: "live pods", "nodes"

    def params(self, **more: str) -> dict[str, str]:
        return {**({"fieldSelector": self.field_selector} if self.field_selector else {}), **more}


def object_key(obj: dict) -> str:
    metadata = obj.get("metadata") or {}
    return metadata.get("uid") or f"{metadata.get('namespace')}/{metadata.get('name')}"


def apply_event(objects: dict[str, dict], event: dict) -> str | None:
    """One watch event applied to `objects` (by object_key); returns the resourceVersion it
    brings (None: none). An object that stops matching the field selector arrives DELETED.
    Raises HistoryGone for the 410 error event and KubeApiError for any other."""
    kind, obj = event.get("type"), event.get("object") or {}
    if kind == "ERROR":
        code = int(obj.get("code") or 500)
        if code == 410:
            raise HistoryGone(obj.get("message") or "410 Gone")
        raise KubeApiError(code, obj.get("message") or "watch error", obj.get("reason") or "")
    metadata = obj.get("metadata") or {}
    if kind in ("ADDED", "MODIFIED"):
        metadata.pop("managedFields", None)  # as KubeApi.list leaves them out
        objects[object_key(obj)] = obj
    elif kind == "DELETED":
        objects.pop(object_key(obj), None)
    return metadata.get("resourceVersion")


class WatchedCopy:
    """The copy of one WatchedList, kept by a task from start() to stop()."""

    def __init__(self, api: KubeApi, watched: WatchedList):
        self.api = api
        self.watched = watched
        self._objects: dict[str, dict] = {}
        self._in_step = False
        self._task: asyncio.Task | None = None

    def items(self) -> list[dict] | None:
        """The objects as the watch last said (not to be changed), or None while the copy may
        be behind: the caller lists instead."""
        return list(self._objects.values()) if self._in_step else None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._keep(), name=f"watch {self.watched.what}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        self._in_step = False
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _keep(self) -> None:
        delay = FIRST_RETRY_SECONDS
        while True:
            try:
                version = await self._list()
                delay = FIRST_RETRY_SECONDS
                while True:  # each watch resumes where the last one ended
                    version = await self._watch(version)
            except HistoryGone:
                self._in_step = False
                log.info("Watching %s: the API server's history moved on; listing them again", self.watched.what)
            except Exception as exc:  # whatever broke the watch, the copy must not pass for current
                self._in_step = False
                if isinstance(exc, KubeApiError) and exc.status == 403:
                    log.warning("Cannot watch %s (%s); the pages list them each time", self.watched.what, exc.message)
                    return
                log.warning("Watching %s failed (%s); the pages list them until the watch is back in %gs",
                            self.watched.what, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_RETRY_SECONDS)

    async def _list(self) -> str:
        listed = await self.api.list(self.watched.path, **self.watched.params())
        self._objects = {object_key(obj): obj for obj in listed.get("items", [])}
        self._in_step = True
        return (listed.get("metadata") or {}).get("resourceVersion") or ""

    async def _watch(self, version: str) -> str:
        """One watch from `version` until the API server ends it; returns the last version seen."""
        params = self.watched.params(watch="true", resourceVersion=version, allowWatchBookmarks="true",
                                     timeoutSeconds=str(WATCH_SECONDS))
        try:
            async with asyncio.timeout(WATCH_SECONDS + STALL_SECONDS):
                async for line in split_lines(self.api.stream(self.watched.path, params)):
                    if line.strip():
                        version = apply_event(self._objects, json.loads(line)) or version
        except KubeApiError as exc:
            if exc.status == 410:
                raise HistoryGone(exc.message) from exc
            raise
        return version
