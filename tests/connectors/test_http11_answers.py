"""What the asyncio HTTP/1.1 client reads as RFC 9110/9112 say, against scripted servers on both
loops: interim 1xx answers, one answer per request, HEAD, content codings, limits, request
targets, idle connections. The property above all: a request gets its own answer or an error,
never another request's."""

from __future__ import annotations

import asyncio
import gzip
import logging
import re
import zlib

import pytest

from asyncio_lookup.connectors.http11 import Http11Client, ProtocolViolation
from asyncio_lookup.connectors.http11_connection import Limits
from asyncio_lookup.connectors.http_client import UnreadableResponse
from asyncio_lookup.connectors.http_codings import ACCEPT_ENCODING
from tests.connectors.scripted import R, Scripted, W, answer, client, keep_alive

Policy = asyncio.AbstractEventLoopPolicy
pytestmark = pytest.mark.filterwarnings('ignore:Overriding the "event_loop_policy"')


@pytest.fixture
def event_loop_policy(both_loops: Policy) -> Policy:
    return both_loops


def echo(head: bytes, extra: bytes = b"") -> bytes:
    """An answer whose body names the request's path: a foreign answer shows."""
    path = head.split(b" ", 2)[1]
    return answer(b'{"path": "%s"}' % path, extra)


async def answer_each(reader: R, writer: W, s: Scripted) -> None:
    while (head := await s.read_request(reader)) is not None:
        writer.write(echo(head))
        await writer.drain()


INTERIM = {
    b"100": b"HTTP/1.1 100 Continue\r\n\r\n",
    b"102": b"HTTP/1.1 102 Processing\r\n\r\n",
    b"103": b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n",
}


@pytest.mark.parametrize("interim", sorted(INTERIM))
@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_interim_answers_are_dropped_and_each_request_gets_its_own(
    scripted, interim: bytes, method: str
) -> None:
    async def with_interim(reader: R, writer: W, s: Scripted) -> None:
        while (head := await s.read_request(reader)) is not None:
            if b"Content-Length" in head:
                length = int(re.search(rb"Content-Length: (\d+)", head)[1])  # type: ignore[index]
                await reader.readexactly(length)
            writer.write(INTERIM[interim])  # flushed apart from the answer: two reads
            await writer.drain()
            await asyncio.sleep(0.001 * (hash(head) % 5))
            writer.write(INTERIM[interim] + echo(head))
            await writer.drain()

    server = await scripted(with_interim)
    c = client(max_connections=5)
    try:
        urls = [f"http://127.0.0.1:{server.port}/k/{i}" for i in range(200)]
        body = b"{}" if method == "POST" else None
        answers = await asyncio.gather(*(c.fetch(method, u, body) for u in urls))
    finally:
        await c.close()
    assert [a[0] for a in answers] == [200] * 200
    assert [a[2] for a in answers] == [b'{"path": "/k/%d"}' % i for i in range(200)]
    assert server.connections <= 5


async def test_an_answer_no_request_asked_for_closes_the_idle_connection(scripted) -> None:
    async def chatty(reader: R, writer: W, s: Scripted) -> None:
        head = await s.read_request(reader)
        assert head is not None
        writer.write(echo(head))
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(answer(b'{"path": "/someone-else"}'))  # unasked
        await keep_alive(reader, writer, s)

    server = await scripted(chatty)
    c = client(max_connections=1)
    try:
        first = await c.fetch("GET", f"http://127.0.0.1:{server.port}/a")
        await asyncio.sleep(0.2)
        second = await c.fetch("GET", f"http://127.0.0.1:{server.port}/b")
    finally:
        await c.close()
    assert first[2] == b'{"path": "/a"}'
    assert second[2] == b'{"path": "/b"}', "the unasked answer never reaches a request"
    assert server.connections == 2, "the connection that spoke unasked was dropped"


async def test_an_answer_no_request_asked_for_is_logged_once(
    scripted, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under continuous traffic a doubled answer reaches the next request unseen; the client
    learns of it only when an extra answer lands on an idle connection: it says so."""
    from asyncio_lookup.connectors import http11_connection

    async def chatty(reader: R, writer: W, s: Scripted) -> None:
        while (head := await s.read_request(reader)) is not None:
            writer.write(echo(head))
            await writer.drain()
            await asyncio.sleep(0.02)
            writer.write(echo(head))  # unasked, each time
            await writer.drain()

    monkeypatch.setattr(http11_connection, "_stray_answer_logged", [])
    server = await scripted(chatty)
    c = client(max_connections=1)
    caplog.set_level(logging.WARNING, logger="asyncio_lookup")
    try:
        for path in ("/a", "/b"):
            assert (await c.fetch("GET", f"http://127.0.0.1:{server.port}{path}"))[0] == 200
            await asyncio.sleep(0.1)
    finally:
        await c.close()
    logged = [r.getMessage() for r in caplog.records if "no request asked for" in r.getMessage()]
    assert len(logged) == 1, logged
    assert "let the answers carry the key columns" in logged[0]


LENIENT = {
    "obs-fold": b"HTTP/1.1 200 OK\r\nX-Long: a\r\n  b\r\nContent-Length: 2\r\n\r\n{}",
    "bare LF": b"HTTP/1.1 200 OK\nContent-Length: 2\n\n{}",
    "space after chunk size": (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2 \r\n{}\r\n0\r\n\r\n"
    ),
    "tab before a chunk extension": (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\t;x=1\r\n{}\r\n0\r\n\r\n"
    ),
}


@pytest.mark.parametrize("form", sorted(LENIENT))
async def test_answers_aiohttp_reads_leniently_are_read(scripted, form: str) -> None:
    """A folded header line (RFC 9112 §5.2: a client must read it), a bare LF (§2.2: it may)
    and spaces after a chunk's size failed every attempt; aiohttp reads them."""

    async def lenient(reader: R, writer: W, s: Scripted) -> None:
        while await s.read_request(reader) is not None:
            writer.write(LENIENT[form])
            await writer.drain()

    server = await scripted(lenient)
    c = client(max_connections=1)
    try:
        for _ in range(2):
            status, _, body = await c.fetch("GET", f"http://127.0.0.1:{server.port}/x")
            assert (status, body) == (200, b"{}")
    finally:
        await c.close()


async def test_a_second_answer_to_one_request_is_a_protocol_violation(scripted) -> None:
    async def twice(reader: R, writer: W, s: Scripted) -> None:
        head = await s.read_request(reader)
        assert head is not None
        writer.write(echo(head) + answer(b'{"path": "/other"}'))  # in one segment

    server = await scripted(twice)
    c = client()
    try:
        with pytest.raises(ProtocolViolation, match="second answer"):
            await c.fetch("GET", f"http://127.0.0.1:{server.port}/a")
    finally:
        await c.close()


async def test_a_second_answer_split_across_segments_never_reaches_the_next_request(
    scripted,
) -> None:
    """The second answer's first bytes share a segment with the first answer; the rest comes
    after the client sent its next request on the connection."""

    async def split(reader: R, writer: W, s: Scripted) -> None:
        if s.connections > 1:
            await answer_each(reader, writer, s)
            return
        head = await s.read_request(reader)
        assert head is not None
        foreign = answer(b'{"path": "/foreign"}')
        writer.write(echo(head) + foreign[:7])
        await writer.drain()
        head = await s.read_request(reader)
        if head is not None:
            writer.write(foreign[7:])
            await writer.drain()
            await asyncio.sleep(0.2)
            writer.write(echo(head))

    server = await scripted(split)
    c = client(max_connections=1)
    try:
        try:
            first = await c.fetch("GET", f"http://127.0.0.1:{server.port}/a")
        except ProtocolViolation:
            first = None  # refused whole: also right
        second = await c.fetch("GET", f"http://127.0.0.1:{server.port}/b")
    finally:
        await c.close()
    assert first is None or first[2] == b'{"path": "/a"}'
    assert second[2] == b'{"path": "/b"}'


async def test_switching_protocols_unasked_is_a_protocol_violation(scripted) -> None:
    async def upgrade(reader: R, writer: W, s: Scripted) -> None:
        await s.read_request(reader)
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n")
        await asyncio.sleep(1)

    server = await scripted(upgrade)
    c = client()
    try:
        with pytest.raises(ProtocolViolation, match="switched protocols"):
            await c.fetch("GET", f"http://127.0.0.1:{server.port}/a")
    finally:
        await c.close()


async def test_head_ends_with_the_header_block_and_keeps_the_connection(scripted) -> None:
    async def head_then_get(reader: R, writer: W, s: Scripted) -> None:
        while (head := await s.read_request(reader)) is not None:
            if head.startswith(b"HEAD"):
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\nX-A: 1\r\n\r\n")
            else:
                writer.write(echo(head))
            await writer.drain()

    server = await scripted(head_then_get)
    c = client(max_connections=1, timeout=2)
    try:
        status, headers, body = await c.fetch("HEAD", f"http://127.0.0.1:{server.port}/h")
        after = await c.fetch("GET", f"http://127.0.0.1:{server.port}/g")
    finally:
        await c.close()
    assert (status, body, headers["x-a"], headers["content-length"]) == (200, b"", "1", "1234")
    assert after[2] == b'{"path": "/g"}'
    assert server.connections == 1


CODED = {
    b"gzip": gzip.compress(b'{"coded": "gzip"}'),
    b"deflate": zlib.compress(b'{"coded": "deflate"}'),
    b"raw-deflate": zlib.compress(b'{"coded": "raw-deflate"}', wbits=-15),
    b"gzip, gzip": gzip.compress(gzip.compress(b'{"coded": "twice"}')),
    # the same list on two header lines (RFC 9110 §5.3): the first was lost
    b"gzip\r\nContent-Encoding: gzip": gzip.compress(gzip.compress(b'{"coded": "two lines"}')),
}


@pytest.mark.parametrize("coding", sorted(CODED))
async def test_content_codings_are_decoded(scripted, coding: bytes) -> None:
    seen: list[bytes] = []

    async def coded(reader: R, writer: W, s: Scripted) -> None:
        head = await s.read_request(reader)
        assert head is not None
        seen.append(head)
        name = b"deflate" if coding == b"raw-deflate" else coding
        writer.write(answer(CODED[coding], b"Content-Encoding: %s\r\n" % name))

    server = await scripted(coded)
    c = client()
    try:
        status, _, body = await c.fetch("GET", f"http://127.0.0.1:{server.port}/c")
    finally:
        await c.close()
    assert status == 200 and body.startswith(b'{"coded": ')
    assert f"Accept-Encoding: {ACCEPT_ENCODING}".encode() in seen[0]
    assert ACCEPT_ENCODING.startswith("gzip, deflate")


async def test_an_unknown_coding_is_refused_by_name(scripted) -> None:
    async def odd(reader: R, writer: W, s: Scripted) -> None:
        while await s.read_request(reader) is not None:
            writer.write(answer(b"\x00\x01", b"Content-Encoding: compress\r\n"))
            await writer.drain()

    server = await scripted(odd)
    c = client(max_connections=1)
    try:
        with pytest.raises(UnreadableResponse, match="'compress' is not one this client"):
            await c.fetch("GET", f"http://127.0.0.1:{server.port}/c")
        with pytest.raises(UnreadableResponse):  # the connection was fine to reuse
            await c.fetch("GET", f"http://127.0.0.1:{server.port}/c")
    finally:
        await c.close()
    assert server.connections == 1


async def test_accept_encoding_given_by_the_user_replaces_the_default(scripted) -> None:
    seen: list[bytes] = []

    async def record(reader: R, writer: W, s: Scripted) -> None:
        head = await s.read_request(reader)
        assert head is not None
        seen.append(head)
        writer.write(answer())

    server = await scripted(record)
    c = Http11Client(2, 5.0, {"accept-encoding": "identity"})
    try:
        await c.fetch("GET", f"http://127.0.0.1:{server.port}/c")
    finally:
        await c.close()
    assert b"accept-encoding: identity\r\n" in seen[0]
    assert b"Accept-Encoding" not in seen[0]


@pytest.mark.parametrize(
    ("what", "response", "limits"),
    [
        ("header bytes", b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 70_000 + b"\r\n", Limits()),
        ("one endless header", b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 300_000, Limits()),
        ("header count", b"HTTP/1.1 200 OK\r\n" + b"X-A: 1\r\n" * 200 + b"\r\n", Limits()),
        ("body", answer(b"x" * 5000), Limits(max_body_size=4096)),
        (
            "inflated body",
            answer(gzip.compress(b"0" * 100_000), b"Content-Encoding: gzip\r\n"),
            Limits(max_body_size=50_000),
        ),
    ],
)
async def test_answers_over_a_limit_are_refused(scripted, what, response, limits) -> None:
    async def big(reader: R, writer: W, s: Scripted) -> None:
        await s.read_request(reader)
        writer.write(response)
        await writer.drain()
        await asyncio.sleep(1)

    server = await scripted(big)
    c = client(limits=limits, timeout=3)
    try:
        with pytest.raises(UnreadableResponse, match="over"):
            await c.fetch("GET", f"http://127.0.0.1:{server.port}/big")
    finally:
        await c.close()


async def test_a_5_mb_body_within_the_limit_is_read(scripted) -> None:
    payload = b"[" + b"1," * 2_500_000 + b"1]"

    async def large(reader: R, writer: W, s: Scripted) -> None:
        await s.read_request(reader)
        writer.write(answer(payload))
        await writer.drain()

    server = await scripted(large)
    c = client()
    try:
        assert (await c.fetch("GET", f"http://127.0.0.1:{server.port}/l"))[2] == payload
    finally:
        await c.close()


@pytest.mark.parametrize(
    ("path", "sent"),
    [
        ("/a b", b"/a%20b"),
        ("/ok%20already?q=1&r=%2F", b"/ok%20already?q=1&r=%2F"),
        ("/stray%zz%", b"/stray%25zz%25"),
        ('/quote"<>^`{|}', b"/quote%22%3C%3E%5E%60%7B%7C%7D"),
        ("/caf\u00e9", b"/caf%C3%A9"),
        ("/keep/:@!$'()*+,;=~-._", b"/keep/:@!$'()*+,;=~-._"),
    ],
)
async def test_request_targets_are_percent_encoded_as_rfc_3986_allows(
    scripted, path: str, sent: bytes
) -> None:
    server = await scripted(keep_alive)
    c = client()
    try:
        await c.fetch("GET", f"http://127.0.0.1:{server.port}{path}")
    finally:
        await c.close()
    assert server.request_lines == [b"GET " + sent + b" HTTP/1.1"]


@pytest.mark.parametrize("url", ["/a\r\nX-Injected: 1", "/a\nb", "/a\x00", "/a\tb"])
async def test_control_characters_in_a_url_are_refused_before_sending(scripted, url) -> None:
    server = await scripted(keep_alive)
    c = client()
    try:
        with pytest.raises(ValueError, match="control character"):
            await c.fetch("GET", f"http://127.0.0.1:{server.port}{url}")
    finally:
        await c.close()
    assert server.connections == 0


@pytest.mark.parametrize(
    "headers", [{"X-A": "1\r\nX-Injected: 1"}, {"X-A\r\n": "1"}, {"X A": "1"}, {"X-A": "\n"}]
)
def test_header_lines_that_would_inject_are_refused(headers) -> None:
    with pytest.raises(ValueError):
        Http11Client(1, 1.0, headers)


async def test_idle_connections_are_retired_after_the_idle_timeout(scripted) -> None:
    server = await scripted(keep_alive)
    c = client(max_connections=4, idle_timeout=0.2)
    try:
        url = f"http://127.0.0.1:{server.port}/x"
        await asyncio.gather(*(c.fetch("GET", url) for _ in range(4)))
        assert server.open_now == 4
        await asyncio.sleep(0.6)
        assert server.open_now == 0, "the sweep closed every idle connection"
        assert c.pool.open == 0
        assert (await c.fetch("GET", url))[0] == 200
    finally:
        await c.close()
    assert server.connections == 5


async def test_the_servers_keep_alive_timeout_is_honoured(scripted) -> None:
    async def short_lived(reader: R, writer: W, s: Scripted) -> None:
        while await s.read_request(reader) is not None:
            writer.write(answer(extra=b"Keep-Alive: timeout=1, max=100\r\n"))
            await writer.drain()

    server = await scripted(short_lived)
    c = client(max_connections=1)
    try:
        url = f"http://127.0.0.1:{server.port}/x"
        await c.fetch("GET", url)
        await asyncio.sleep(0.6)  # past half the server's timeout: retired, not reused
        await c.fetch("GET", url)
        await c.fetch("GET", url)  # at once: reused
    finally:
        await c.close()
    assert server.connections == 2
