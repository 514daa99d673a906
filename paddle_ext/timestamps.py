"""Timestamps as the API and the job folders write them: ISO 8601 UTC with a Z (pure)."""

from __future__ import annotations

import datetime


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def now_iso() -> str:
    return to_iso(now())


def to_iso(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def parse_time(text: str | None) -> datetime.datetime | None:
    """An ISO time (with Z or an offset; naive means UTC), or None for empty input."""
    if not text:
        return None
    value = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc)


def clock(text: str) -> str:
    """An ISO time as a user reads it in a status line: '14:02 UTC' (the text itself if it
    is not a time)."""
    try:
        moment = parse_time(text)
    except ValueError:
        return text
    return moment.astimezone(datetime.timezone.utc).strftime("%H:%M UTC") if moment else text
