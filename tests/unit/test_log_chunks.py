"""Logs as pieces of whole lines (bytes): cutting a stream into lines, cleaning, prefixes per
piece, skipping and tailing, the merged log read ahead in worker order, and SSE framing.
Each is checked against doing the same line by line."""

from __future__ import annotations

import asyncio
import random

import pytest

from paddle_ext.backends.base import merge_streams, users_only
from paddle_ext.errors import BackendUnavailable
from paddle_ext.loglines import (FrameworkFilter, LineSplitter, chunk_lines, clean_chunk, last_lines, lines_chunk,
                                 prefix_chunk, prefix_line, split_chunk)
from paddle_ext.server.handlers import sse_events

TEXT = "step 1 loss 0.5\r\nünïcode line\n\nbad \xff byte\r\r\nLAUNCH INFO 2026 noise\nlast without newline"


def line_by_line(data: bytes) -> list[str]:
    """What reading the stream line by line gave before (decode each line, drop its CRs)."""
    return [part.decode("utf-8", errors="replace").rstrip("\r") for part in data.split(b"\n")]


@pytest.mark.parametrize("seed", range(20))
def test_a_stream_cut_anywhere_gives_the_same_lines(seed):
    data = TEXT.encode("utf-8", errors="surrogateescape").replace(b"\xc3\xbf", b"\xff")
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(data)), 6))
    pieces = [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]
    splitter = LineSplitter()
    chunks = [splitter.feed(piece) for piece in pieces] + [splitter.end()]
    assert all(c == b"" or c.endswith(b"\n") for c in chunks)
    assert [line for c in chunks for line in chunk_lines(c)] == line_by_line(data)


def test_cleaning_replaces_what_is_not_utf8_and_drops_carriage_returns_before_newlines():
    assert clean_chunk(b"a\r\nb\r\r\nc\rd\n") == b"a\nb\nc\rd\n"
    assert clean_chunk(b"ok \xff\n") == "ok \ufffd\n".encode()
    same = "ünïcode\n".encode()
    assert clean_chunk(same) is same


def test_prefix_split_tail_and_join_agree_with_line_by_line():
    chunk = b"one\ntwo\nthree\n"
    assert chunk_lines(prefix_chunk(3, chunk)) == [prefix_line(3, line) for line in ("one", "two", "three")]
    assert [split_chunk(chunk, n) for n in range(5)] == [chunk, b"two\nthree\n", b"three\n", b"", b""]
    assert [last_lines(chunk, n) for n in range(5)] == [b"", b"three\n", b"two\nthree\n", chunk, chunk]
    assert lines_chunk(["a", "b"]) == b"a\nb\n" and lines_chunk([]) == b""


def test_sse_has_one_data_event_per_line():
    assert sse_events(b"[worker-0] a\n[worker-0] \n") == b"data: [worker-0] a\n\ndata: [worker-0] \n\n"


async def chunks_of(*items, pause=0.0):
    for item in items:
        if pause:
            await asyncio.sleep(pause)
        if isinstance(item, Exception):
            raise item
        yield item


async def test_reading_ahead_keeps_worker_order_and_reads_later_workers_meanwhile():
    started = []

    async def slow(index, count):
        started.append(index)
        for i in range(count):
            await asyncio.sleep(0.01)
            yield f"{index}:{i}\n".encode()

    streams = {i: slow(i, 5) for i in range(4)}
    got = []
    async for index, chunk in merge_streams(streams, interleave=False, read_ahead=2):
        got.append((index, chunk))
        if len(got) == 1:
            await asyncio.sleep(0)
            assert started == [0, 1, 2]  # workers 1 and 2 are read while worker 0 is printed
    assert got == [(i, f"{i}:{k}\n".encode()) for i in range(4) for k in range(5)]


async def test_a_later_workers_error_comes_in_its_turn():
    streams = {0: chunks_of(b"a\n", b"b\n", pause=0.02), 1: chunks_of(BackendUnavailable("worker 1 gone"))}
    got = []
    with pytest.raises(BackendUnavailable, match="worker 1 gone"):
        async for pair in merge_streams(streams, interleave=False, read_ahead=4):
            got.append(pair)
    assert got == [(0, b"a\n"), (0, b"b\n")]


@pytest.mark.parametrize("interleave", [True, False])
async def test_a_worker_stream_broken_by_any_error_ends_the_merge_with_it_not_quietly(interleave):
    """A follow whose worker streams died of an unexpected error once ended as if every log
    had; the error must reach the reader of the merge."""
    streams = {0: chunks_of(b"a\n", RuntimeError("worker 0 broke")), 1: chunks_of(RuntimeError("worker 1 broke"))}
    with pytest.raises(RuntimeError, match="broke"):
        async for _ in merge_streams(streams, interleave=interleave, read_ahead=1):
            pass


async def test_my_output_only_per_piece_keeps_state_across_pieces():
    lines = ["LAUNCH INFO 2026-11-30 09:33:28,711 start", "==== Modified FLAGS detected ====",
             "FLAGS(name='x')", "=====", "mine 1", "PADDLECLOUD_METRIC {}", "mine 2"]
    pieces = [lines_chunk(lines[:2]), lines_chunk(lines[2:5]), lines_chunk(lines[5:])]
    kept = [line for chunk in [c async for c in users_only(chunks_of(*pieces))] for line in chunk_lines(chunk)]
    noise = FrameworkFilter()
    assert kept == [line for line in lines if not noise.hides(line)] == ["mine 1", "mine 2"]
