"""KubeApi's own HTTP/1.1 transport against a scripted local server: bodies by length and
chunked, streams as they arrive, errors, kept-alive connections and their reuse, and a
server that closes an idle connection. (TLS and the real API server: the cluster tier.)"""

from __future__ import annotations

import asyncio
import json

import pytest

from paddle_ext.kubeapi import Credentials, KubeApi, KubeApiError, KubeUnreachable


class Server:
    """Answers each request with the next scripted reply: a callable(writer, request_head)."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.requests: list[bytes] = []
        self.connections = 0
        self.hung_up = asyncio.Event()  # set once the server has closed a connection after a reply
        self.server = None

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc):
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader, writer):
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length) if length else b""
                self.requests.append(head + body)
                keep = await self.replies.pop(0)(writer, head)
                await writer.drain()
                if keep is False:
                    writer.close()
                    await writer.wait_closed()
                    self.hung_up.set()
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


def api(server: Server, path: str = "") -> KubeApi:
    return KubeApi(Credentials(server=f"http://127.0.0.1:{server.port}{path}", token="t0k"))


def by_length(status: int, body: bytes, close: bool = False):
    async def reply(writer, head):
        extra = b"Connection: close\r\n" if close else b""
        writer.write(b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s"
                     % (status, extra, len(body), body))
        return not close
    return reply


def then_hang_up(status: int, body: bytes):
    """A reply whose headers keep the connection alive, after which the server closes it anyway
    (as an API server closes an idle connection)."""
    reply = by_length(status, body)

    async def hang_up(writer, head):
        await reply(writer, head)
        return False
    return hang_up


def chunked(parts: list[bytes], pause: float = 0.0):
    async def reply(writer, head):
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for part in parts:
            writer.write(b"%x\r\n%s\r\n" % (len(part), part))
            await writer.drain()
            if pause:
                await asyncio.sleep(pause)
        writer.write(b"0\r\n\r\n")
        return True
    return reply


async def test_json_by_length_and_chunked_on_one_kept_alive_connection():
    doc = {"items": [{"n": i} for i in range(1000)]}
    text = json.dumps(doc).encode()
    async with Server([by_length(200, text), chunked([text[:7], text[7:5000], text[5000:]])]) as server:
        client = api(server, "/prefix")
        assert await client.get("/api/v1/pods", labelSelector="a=b,c", watch=False) == doc
        assert await client.get("/api/v1/pods") == doc
        await client.close()
    assert server.connections == 1
    first = server.requests[0].decode()
    assert first.startswith("GET /prefix/api/v1/pods?labelSelector=a%3Db%2Cc&watch=false HTTP/1.1\r\n")
    assert "Authorization: Bearer t0k" in first and f"Host: 127.0.0.1:{server.port}" in first


async def test_a_body_is_sent_with_its_length_and_type():
    async with Server([by_length(201, b'{"metadata": {"name": "x"}}'), by_length(200, b"{}")]) as server:
        client = api(server)
        assert (await client.create("/api/v1/namespaces/a/pods", {"a": 1}))["metadata"]["name"] == "x"
        await client.patch("/api/v1/namespaces/a/pods/x", {"b": 2})
        await client.close()
    post, patch = (r.decode() for r in server.requests)
    assert "Content-Type: application/json\r\n" in post and post.endswith('\r\n\r\n{"a": 1}')
    assert "Content-Type: application/merge-patch+json" in patch and "Content-Length: 8\r\n" in patch


async def test_errors_carry_status_message_and_reason():
    status = json.dumps({"kind": "Status", "message": 'jobs.batch "x" not found', "reason": "NotFound"}).encode()
    async with Server([by_length(404, status), by_length(500, b"plain words")]) as server:
        client = api(server)
        with pytest.raises(KubeApiError) as info:
            await client.get("/apis/batch/v1/namespaces/a/jobs/x")
        assert (info.value.status, info.value.reason) == (404, "NotFound") and "not found" in info.value.message
        with pytest.raises(KubeApiError, match="plain words"):
            await client.get("/x")
        await client.close()
    assert server.connections == 1  # an error answer read whole keeps the connection


async def test_a_stream_yields_pieces_as_they_arrive():
    async with Server([chunked([b"one\n", b"two\n", b"three\n"], pause=0.2)]) as server:
        client = api(server)
        loop = asyncio.get_running_loop()
        seen = []
        async for piece in client.stream("/api/v1/namespaces/a/pods/p/log", {"follow": True}):
            seen.append((loop.time(), piece))
        await client.close()
    assert b"".join(piece for _, piece in seen) == b"one\ntwo\nthree\n"
    assert len(seen) == 3 and seen[-1][0] - seen[0][0] > 0.3  # not held back until the end


async def test_leaving_a_stream_early_closes_its_connection():
    async with Server([chunked([b"a\n"] * 3, pause=0.1), by_length(200, b"{}")]) as server:
        client = api(server)
        async for _ in client.stream("/log"):
            break
        assert await client.get("/x") == {}
        await client.close()
    assert server.connections == 2


async def test_an_idle_connection_the_server_closed_is_replaced():
    """The server closed it while it sat in the pool: the next request gets a new one."""
    async with Server([then_hang_up(200, b"{}"), by_length(200, b'{"ok": 1}')]) as server:
        client = api(server)
        await client.get("/x")
        await asyncio.wait_for(server.hung_up.wait(), 5)  # the gate: the kept connection is closed
        assert await client.get("/y") == {"ok": 1}
        await client.close()
    assert server.connections == 2


async def test_a_kept_connection_the_server_closes_as_a_request_arrives_is_tried_once_more_on_a_new_one():
    """The close crosses the request (the client could not see it coming): a GET is sent again."""
    async def hang_up_unanswered(writer, head):
        return False

    async with Server([by_length(200, b"{}"), hang_up_unanswered, by_length(200, b'{"ok": 1}')]) as server:
        client = api(server)
        await client.get("/x")
        assert await client.get("/y") == {"ok": 1}
        await client.close()
    assert server.connections == 2 and [r.split(b" ")[1] for r in server.requests] == [b"/x", b"/y", b"/y"]


async def test_no_server_is_unreachable_not_a_traceback():
    async with Server([]) as server:
        port = server.port
    client = KubeApi(Credentials(server=f"http://127.0.0.1:{port}"))
    with pytest.raises(KubeUnreachable, match="Cannot reach"):
        await client.get("/x")


async def test_a_server_that_cuts_the_answer_short_is_unreachable():
    async def short(writer, head):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"a\"")
        return False
    async with Server([short]) as server:
        client = api(server)
        with pytest.raises(KubeUnreachable):
            await client.get("/x")
        await client.close()


async def test_many_concurrent_requests_share_a_few_connections():
    async with Server([by_length(200, b'{"n": %d}' % i) for i in range(40)]) as server:
        client = api(server)
        answers = await asyncio.gather(*(client.get("/x") for _ in range(20)))
        answers += await asyncio.gather(*(client.get("/x") for _ in range(20)))
        await client.close()
    assert sorted(a["n"] for a in answers) == list(range(40))
    assert server.connections <= 20
