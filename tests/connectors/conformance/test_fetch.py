"""The clients' ``fetch(method, url, body)`` (what batches and scans use) against every
server, both clients: status classes, HEAD, POST (with 1xx before the answer), request targets.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from asyncio_lookup.connectors import HttpConnector
from asyncio_lookup.connectors.http_client import HttpClient
from asyncio_lookup.connectors.http_connector import open_client
from asyncio_lookup.errors import AsyncLookupError, ConfigurationError
from tests.connectors.conformance.servers import GHOST, INTERIM, Server, servers_that


def on(*can: str) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("server", servers_that(*can), indirect=True)


@asynccontextmanager
async def fetching(server: Server, client: str, **options: Any) -> AsyncIterator[HttpClient]:
    """A client of ``HttpConnector(<server>/item/{id}, client=client)``, opened."""
    connector = HttpConnector(f"{server.base}/item/{{id}}", client=client, **options)
    http = open_client(connector)
    try:
        yield http
    finally:
        await http.close()


async def fetch(http: HttpClient, method: str, url: str, body: bytes | None = None) -> Any:
    return await asyncio.wait_for(http.fetch(method, url, body), 10)


def own(body: bytes, key: str, server: Server) -> dict[str, Any]:
    decoded = json.loads(body)
    assert (decoded["id"], decoded["server"]) == (key, server.name), decoded
    return dict(decoded)


STATUSES = (200, 201, 204, 301, 302, 304, 400, 404, 410, 500, 503)


@on()
async def test_status_classes(server: Server, client: str) -> None:
    """2xx, 3xx (not followed), 4xx and 5xx on one client, in a row: every answer is its own
    and a bodiless one (204, 304) leaves the connection ready for the next."""
    async with fetching(server, client) as http:
        for code in STATUSES:
            status, headers, body = await fetch(http, "GET", f"{server.base}/status/{code}")
            assert status == code
            if code in (204, 304):
                assert body == b""
            else:
                assert json.loads(body) == {"status": code}
            if code in (301, 302):
                assert headers["location"] == "/item/redirected", "a redirect is not followed"
        own((await fetch(http, "GET", f"{server.base}/item/after"))[2], "after", server)


@on()
async def test_head_has_no_body_and_the_connection_goes_on(server: Server, client: str) -> None:
    async with fetching(server, client) as http:
        for i in range(3):
            status, headers, body = await fetch(http, "HEAD", f"{server.base}/item/h{i}")
            assert (status, body) == (200, b"")
            assert int(headers["content-length"]) > 0, "the length of the GET's body"
            own((await fetch(http, "GET", f"{server.base}/item/g{i}"))[2], f"g{i}", server)


@on()
async def test_post_with_a_json_body(server: Server, client: str) -> None:
    async with fetching(server, client) as http:
        for i in range(3):
            sent = {"keys": [{"id": i}, {"id": "ключ"}]}
            url = f"{server.base}/echo/p{i}"
            status, _, body = await fetch(http, "POST", url, json.dumps(sent).encode())
            assert status == 200
            assert own(body, f"p{i}", server)["body"] == sent


@on(INTERIM)
async def test_interim_answers_before_a_post_answer(server: Server, client: str) -> None:
    """100, 102 and 103 before every POST's answer, 50 in flight over 10 connections."""
    async with fetching(server, client, max_connections=10) as http:

        async def post(i: int) -> None:
            sent = {"n": i}
            url = f"{server.base}/early/p{i}"
            status, _, body = await fetch(http, "POST", url, json.dumps(sent).encode())
            assert status == 200
            answer = own(body, f"p{i}", server)
            assert (answer["method"], answer["body"]) == ("POST", sent)

        await asyncio.gather(*(post(i) for i in range(50)))


@on()
async def test_a_url_with_a_space_and_unicode_is_percent_encoded(
    server: Server, client: str
) -> None:
    """A URL as a scan's next link may give it: the target is encoded, never sent raw."""
    async with fetching(server, client) as http:
        for key in ("a b", "ключ é", "a%20b"):
            status, _, body = await fetch(http, "GET", f"{server.base}/item/{key}")
            assert status == 200
            own(body, "a b" if key == "a%20b" else key, server)


@on()
async def test_control_characters_in_a_url_are_refused_before_sending(
    server: Server, client: str
) -> None:
    async with fetching(server, client) as http:
        for url in (
            f"{server.base}/item/x\r\nX-Injected: yes",
            f"{server.base}/item/x\nX-Injected: yes",
            f"{server.base}/item/x\x00y",
        ):
            with pytest.raises(ConfigurationError, match="control character"):
                await fetch(http, "GET", url)
        own((await fetch(http, "GET", f"{server.base}/item/clean"))[2], "clean", server)


async def test_control_characters_in_a_header_are_refused(client: str) -> None:
    with pytest.raises(ConfigurationError, match="control character"):
        HttpConnector(
            "http://127.0.0.1:9/item/{id}", client=client, headers={"X-A": "a\r\nX-Injected: 1"}
        )


@on()
async def test_after_an_answer_over_a_limit_the_next_is_its_own(
    server: Server, client: str
) -> None:
    """A body over ``max_body_size`` and a 1 MB header are refused; the answer after each, on
    the same client, is the one asked for (nothing left over on a reused connection)."""
    async with fetching(server, client, max_body_size=100_000, max_connections=1) as http:
        for route in ("big", "huge-header"):
            with pytest.raises(AsyncLookupError):
                await fetch(http, "GET", f"{server.base}/{route}/x?bytes=300000")
            after = await fetch(http, "GET", f"{server.base}/item/a-{route}")
            own(after[2], f"a-{route}", server)


AIOHTTP_WAITRESS_HEAD = (
    "waitress ends a HEAD answer framed as chunked with a stray '0\\r\\n\\r\\n' before it "
    'closes; aiohttp refuses the answer (400, "Data after `Connection: close`") when the '
    "stray bytes come with the headers (so not every run), where the asyncio client reads the "
    "headers and drops the connection"
)


@on()
@pytest.mark.parametrize("route", ["chunked", "to-close", "gzip"])
async def test_head_of_an_answer_framed_otherwise(
    server: Server, client: str, route: str, request: pytest.FixtureRequest
) -> None:
    """HEAD where the GET's answer is chunked, without a length, or gzip-coded: the headers
    only, and the GET after it on the same client is its own."""
    if (client, server.name) == ("aiohttp", "waitress") and route != "gzip":
        request.applymarker(pytest.mark.xfail(reason=AIOHTTP_WAITRESS_HEAD, strict=False))
    async with fetching(server, client, max_connections=1) as http:
        for i in range(2):
            status, _, body = await fetch(http, "HEAD", f"{server.base}/{route}/h{i}")
            assert (status, body) == (200, b"")
            own((await fetch(http, "GET", f"{server.base}/item/g{i}"))[2], f"g{i}", server)


AIOHTTP_UNASKED_ANSWER = (
    "aiohttp keeps bytes that arrive on an idle kept-alive connection and reads them as the "
    "answer to the next request sent on it: the next lookup returns the unasked answer's row "
    "(here {'id': 'ghost'}), silently"
)


@on(GHOST)
async def test_an_answer_nobody_asked_for_is_never_the_next_requests(
    server: Server, client: str, request: pytest.FixtureRequest
) -> None:
    """A broken server writes a second answer 50 ms after the first, onto the idle kept-alive
    connection: the next request gets its own answer or a clear error, never that one.

    (A second answer that arrives after the next request went out cannot be told from that
    request's answer by any HTTP/1.1 client; this case waits 0.2 s so it arrives first.)"""
    if client == "aiohttp":
        request.applymarker(pytest.mark.xfail(reason=AIOHTTP_UNASKED_ANSWER, strict=True))
    async with fetching(server, client, max_connections=1) as http:
        for i in range(3):
            own((await fetch(http, "GET", f"{server.base}/ghost/g{i}"))[2], f"g{i}", server)
            await asyncio.sleep(0.2)
            try:
                _, _, body = await fetch(http, "GET", f"{server.base}/item/n{i}")
            except AsyncLookupError:
                continue  # a clear error (the connection's protocol error) is allowed
            own(body, f"n{i}", server)
