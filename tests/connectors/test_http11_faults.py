"""The asyncio HTTP/1.1 client against servers that fail it at the worst moment, on both loops:
a reset that cuts an answer without a length, a close that races the request's deadline, idle
connections whose expiry is out of list order, trailers that would change the answer."""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Any

import pytest

from asyncio_lookup.connectors.http11 import ConnectionClosed, _Exchange
from asyncio_lookup.connectors.http11_connection import Limits
from asyncio_lookup.connectors.http_client import UnreadableResponse
from asyncio_lookup.errors import TransientError
from tests.connectors.scripted import R, Scripted, W, answer, client

Policy = asyncio.AbstractEventLoopPolicy
pytestmark = pytest.mark.filterwarnings('ignore:Overriding the "event_loop_policy"')


@pytest.fixture
def event_loop_policy(both_loops: Policy) -> Policy:
    return both_loops


def reset(writer: W) -> None:
    """Close with a TCP RST (SO_LINGER 0), not a FIN."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def reset_after(head: bytes) -> Any:
    """A server that answers ``head`` (an answer without a length) and then resets."""

    async def handler(reader: R, writer: W, s: Scripted) -> None:
        await s.read_request(reader)
        writer.write(head)
        await writer.drain()
        await asyncio.sleep(0.05)
        reset(writer)

    return handler


CUT = {
    "no body yet": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n",
    "half a body": b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{"id": 1, "na',
}


# -- a reset is not the end of an answer without a length ---------------------------------------


@pytest.mark.parametrize("cut", sorted(CUT))
async def test_a_reset_fails_an_answer_read_to_the_close(scripted, cut: str) -> None:
    server = await scripted(reset_after(CUT[cut]))
    c = client()
    try:
        with pytest.raises(ConnectionClosed) as raised:
            await c.fetch("GET", f"http://127.0.0.1:{server.port}/c/1")
    finally:
        await c.close()
    assert raised.value.before_answer is False, "an answer had begun: not resent"
    assert server.connections == 1


async def test_a_clean_close_still_ends_an_answer_read_to_the_close(scripted) -> None:
    async def to_close(reader: R, writer: W, s: Scripted) -> None:
        await s.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"the whole body")  # then the handler's close: a FIN

    server = await scripted(to_close)
    c = client()
    try:
        assert (await c.fetch("GET", f"http://127.0.0.1:{server.port}/c/1"))[2] == b"the whole body"
    finally:
        await c.close()


class Owner:
    """What AiohttpClient needs of its connector."""

    max_connections = 4
    timeout = 5.0
    max_body_size = 1 << 20

    def request_headers(self) -> dict[str, str]:
        return {}

    def secrets(self) -> list[str]:
        return []

    def transient(
        self, message: str, retry_after: float | None = None, status: int | None = None
    ) -> TransientError:
        return TransientError(message, retry_after, status)


@pytest.mark.parametrize("cut", sorted(CUT))
async def test_aiohttp_fails_an_answer_a_reset_cut_too(scripted, cut: str) -> None:
    from asyncio_lookup.connectors.http_aiohttp import AiohttpClient

    server = await scripted(reset_after(CUT[cut]))
    c = AiohttpClient(Owner())
    try:
        with pytest.raises(TransientError, match="ClientPayloadError"):
            await c.fetch("GET", f"http://127.0.0.1:{server.port}/c/1", None)
    finally:
        await c.close()


async def test_aiohttp_still_reads_an_answer_to_a_clean_close(scripted) -> None:
    from asyncio_lookup.connectors.http_aiohttp import AiohttpClient

    async def to_close(reader: R, writer: W, s: Scripted) -> None:
        await s.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\n\r\nthe whole body")

    server = await scripted(to_close)
    c = AiohttpClient(Owner())
    try:
        assert (await c.fetch("GET", f"http://127.0.0.1:{server.port}/c", None))[2] == (
            b"the whole body"
        )
    finally:
        await c.close()


# -- a close and the deadline in one loop iteration ---------------------------------------------


async def test_a_close_that_comes_with_the_deadline_is_not_resent_untimed(scripted) -> None:
    asked = asyncio.Event()

    async def never_answers(reader: R, writer: W, s: Scripted) -> None:
        await s.read_request(reader)
        asked.set()
        await asyncio.sleep(5)

    server = await scripted(never_answers)
    c = client(timeout=5.0)
    loop = asyncio.get_running_loop()
    try:
        fetch = asyncio.ensure_future(c.fetch("GET", f"http://127.0.0.1:{server.port}/x"))
        await asyncio.wait_for(asked.wait(), 2)
        [exchange] = [e for e in c.deadlines if e.armed]
        assert isinstance(exchange, _Exchange) and exchange.connection is not None
        # what a busy loop does (a callback blocking past the deadline): the close is read and
        # the deadline's timer runs in the same iteration, before the request's task resumes
        exchange.connection.connection_lost(None)  # fails the request: ConnectionClosed
        assert exchange.waiter is not None and exchange.waiter.done()
        exchange.expire()
        started = loop.time()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(fetch, 1.0)
        assert loop.time() - started < 0.5, "the request's own timeout, not the test's"
    finally:
        await c.close()
    assert len(server.request_lines) == 1, "not resent once the deadline had passed"


async def test_a_close_before_the_deadline_is_resent_with_the_deadline(scripted) -> None:
    async def hang_up_then_silent(reader: R, writer: W, s: Scripted) -> None:
        await s.read_request(reader)
        if s.connections > 1:
            await asyncio.sleep(5)  # the resend: never answered

    server = await scripted(hang_up_then_silent)
    c = client(timeout=0.3)
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(c.fetch("GET", f"http://127.0.0.1:{server.port}/x"), 2.0)
    finally:
        await c.close()
    assert loop.time() - started < 1.0
    assert server.connections == 2


# -- the idle sweep --------------------------------------------------------------------------------


async def test_an_idle_connection_expired_behind_a_live_one_is_retired(scripted) -> None:
    # lifetimes: /a 0.2 s (Keep-Alive: timeout=0.4), /b 3 s (idle_timeout), /c 0.5 s
    # (Keep-Alive: timeout=1), released in that order: /c expires behind /b in the idle list
    plan = {
        b"/a": (0.0, b"Keep-Alive: timeout=0.4\r\n"),
        b"/b": (0.03, b""),
        b"/c": (0.06, b"Keep-Alive: timeout=1\r\n"),
    }

    async def staggered(reader: R, writer: W, s: Scripted) -> None:
        while (head := await s.read_request(reader)) is not None:
            delay, extra = plan[head.split(b" ", 2)[1]]
            await asyncio.sleep(delay)
            writer.write(answer(extra=extra))
            await writer.drain()

    server = await scripted(staggered)
    c = client(max_connections=3, idle_timeout=3.0)
    loop = asyncio.get_running_loop()
    try:
        base = f"http://127.0.0.1:{server.port}"
        await asyncio.gather(*(c.fetch("GET", base + p) for p in ("/a", "/b", "/c")))
        [idle] = c.pool.idle.values()
        a, b, c_ = (x.expires for x in idle)
        assert a < c_ < b, "in the idle list, /c (expiring second) is behind /b (last)"
        await asyncio.sleep(0.8)
        assert server.open_now == 1 and c.pool.open == 1, "/a and /c retired, /b kept"
        sweep = c.pool._sweep
        assert sweep is not None and sweep.when() > loop.time() + 1, "the timer waits for /b"
    finally:
        await c.close()


# -- trailers --------------------------------------------------------------------------------------


def chunked(body: bytes, trailers: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n%s\r\n" % (
        len(body),
        body,
        trailers,
    )


async def test_trailers_change_neither_the_body_nor_the_connection(scripted) -> None:
    # (a trailer Content-Length llhttp refuses itself: a ProtocolViolation)
    trailers = b"Content-Encoding: gzip\r\nKeep-Alive: timeout=0\r\nX-Checksum: 1\r\n"

    async def with_trailers(reader: R, writer: W, s: Scripted) -> None:
        while await s.read_request(reader) is not None:
            writer.write(chunked(b'{"ok": 1}', trailers))
            await writer.drain()

    server = await scripted(with_trailers)
    c = client()
    try:
        url = f"http://127.0.0.1:{server.port}/t"
        for _ in range(2):
            status, headers, body = await c.fetch("GET", url)
            assert (status, body) == (200, b'{"ok": 1}')
            assert "content-encoding" not in headers and "x-checksum" not in headers
    finally:
        await c.close()
    assert server.connections == 1, "kept alive: the trailer Keep-Alive is not the server's"


@pytest.mark.parametrize(
    ("what", "trailers"),
    [
        ("count", b"".join(b"X-T%d: 1\r\n" % i for i in range(200))),
        ("bytes", b"X-Big: " + b"v" * 5000 + b"\r\n"),
        ("bytes over lines", b"".join(b"X-T%d: %s\r\n" % (i, b"v" * 100) for i in range(100))),
    ],
)
async def test_trailers_over_the_header_limits_are_refused(scripted, what, trailers) -> None:
    async def many(reader: R, writer: W, s: Scripted) -> None:
        await s.read_request(reader)
        writer.write(chunked(b"{}", trailers))
        await writer.drain()
        await asyncio.sleep(1)

    server = await scripted(many)
    c = client(limits=Limits(max_header_bytes=4096, max_headers=128), timeout=3)
    try:
        with pytest.raises(UnreadableResponse, match="trailer section is over"):
            await c.fetch("GET", f"http://127.0.0.1:{server.port}/t")
    finally:
        await c.close()


async def test_trailers_within_the_limits_are_read_past(scripted) -> None:
    trailers = b"".join(b"X-T%d: %s\r\n" % (i, b"v" * 20) for i in range(100))

    async def some(reader: R, writer: W, s: Scripted) -> None:
        while await s.read_request(reader) is not None:
            writer.write(chunked(b"{}", trailers))
            await writer.drain()

    server = await scripted(some)
    c = client(limits=Limits(max_header_bytes=4096, max_headers=128))
    try:
        for _ in range(3):  # the count starts over with each answer
            assert (await c.fetch("GET", f"http://127.0.0.1:{server.port}/t"))[2] == b"{}"
    finally:
        await c.close()
    assert server.connections == 1
