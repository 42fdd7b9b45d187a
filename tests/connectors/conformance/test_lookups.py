"""Point lookups (``HttpConnector.async_lookup_function``) against every server, both clients.

The property every case checks: a lookup returns its own key's row, or raises a clear error;
none hangs (each lookup has 10 s, each test 30 s).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest

from asyncio_lookup.errors import AsyncLookupError, HttpStatusError, TransientError
from tests.connectors.conformance.apps import spec
from tests.connectors.conformance.conftest import (
    CLIENTS,
    Fleet,
    assert_own_row,
    lookup,
    lookup_function,
)
from tests.connectors.conformance.servers import IDLE, INTERIM, Server, servers_that


def on(*can: str) -> pytest.MarkDecorator:
    """Run on every server that can serve the case."""
    return pytest.mark.parametrize("server", servers_that(*can), indirect=True)


AWKWARD_KEYS = [
    "a b",
    "a/b",
    "a?b",
    "a#b",
    "100%",
    "%2F",
    "a+b",
    "a&b=c",
    "a;b",
    "~x",
    "ключ-é-日本",
    "..",
    ".",
    'a"b',
    "-",
    "a\\b",
]


@on()
async def test_own_row_and_miss(server: Server, client: str) -> None:
    async with lookup_function(f"{server.base}/item/{{id}}", client) as fn:
        for key in ("k1", "k2", "k1"):
            assert_own_row(await lookup(fn, key), key, server)
        assert await lookup(fn, "miss-1") == []


@on()
@pytest.mark.parametrize("where", ["path", "query"])
async def test_awkward_keys_are_sent_encoded_and_answered_for_themselves(
    server: Server, client: str, where: str
) -> None:
    template = "/item/{id}" if where == "path" else "/query?key={id}"
    async with lookup_function(server.base + template, client) as fn:
        for key in AWKWARD_KEYS:
            assert_own_row(await lookup(fn, key), key, server)


@on()
async def test_statuses_through_the_connector(server: Server, client: str) -> None:
    async with lookup_function(f"{server.base}/status/{{id}}", client) as fn:
        assert await lookup(fn, 204) == [], "204: no row"
        assert await lookup(fn, 404) == [], "404: a miss"
        for code in (301, 302, 400, 410, 500):
            with pytest.raises(HttpStatusError, match=f"answered {code}") as info:
                await lookup(fn, code)
            assert info.value.status == code
        with pytest.raises(TransientError, match="answered 503"):
            await lookup(fn, 503)
        assert await lookup(fn, 200) == [{"status": 200}], "kept alive after every answer"


@on(INTERIM)
async def test_interim_answers_go_to_the_request_that_asked(server: Server, client: str) -> None:
    """100, 102 and 103 before every answer; 200 lookups in flight over 20 connections (the
    issue's reproduction: the project's client handed each answer to the next request)."""
    async with lookup_function(f"{server.base}/early/{{id}}", client, max_connections=20) as fn:
        keys = [f"e{i}" for i in range(200)]
        results = await asyncio.gather(*(lookup(fn, k) for k in keys), return_exceptions=True)
    wrong = {k: r for k, r in zip(keys, results, strict=True) if not _own(r, k, server)}
    assert not wrong, f"{len(wrong)} of 200 wrong, e.g. {list(wrong.items())[:3]}"[:800]


def _own(result: object, key: str, server: Server) -> bool:
    return (
        isinstance(result, list)
        and len(result) == 1
        and (result[0].get("id"), result[0].get("server")) == (key, server.name)
    )


@on()
@pytest.mark.parametrize("coding", ["gzip", "deflate", "raw-deflate", "negotiate"])
async def test_content_codings(server: Server, client: str, coding: str) -> None:
    """gzip, deflate (zlib-wrapped and raw) sent unasked, and zstd or gzip when the client's
    ``Accept-Encoding`` asks for them (what it asks for, it must decode)."""
    async with lookup_function(f"{server.base}/{coding}/{{id}}", client) as fn:
        for key in ("c1", "c2"):
            assert_own_row(await lookup(fn, key), key, server)


@on()
async def test_an_unknown_coding_is_a_clear_error(server: Server, client: str) -> None:
    """aiohttp alone passes a coding it does not know through; the project's aiohttp client
    refuses it by name, as the asyncio client does."""
    async with lookup_function(f"{server.base}/unknown-coding/{{id}}", client) as fn:
        with pytest.raises(AsyncLookupError, match="x-unknown"):
            await lookup(fn, "u")


@on()
@pytest.mark.parametrize("framing", ["chunked", "trailers", "to-close", "close"])
async def test_framings(server: Server, client: str, framing: str) -> None:
    """Chunked (with a trailer field where the server can), without a length until the close,
    and ``Connection: close``; a lookup after each on the same client."""
    async with lookup_function(f"{server.base}/{framing}/{{id}}", client) as fn:
        for i in range(4):
            assert_own_row(await lookup(fn, f"f{i}"), f"f{i}", server)


BIG_ROUTES = ["big", "big-chunked", "gzip-bomb"]


@on()
@pytest.mark.parametrize("route", BIG_ROUTES)
async def test_a_5_mb_body(server: Server, client: str, route: str) -> None:
    """With a length, in 1 MB chunks without one, and gzip-coded (5 KB on the wire)."""
    async with lookup_function(f"{server.base}/{route}/{{id}}", client) as fn:
        row = assert_own_row(await lookup(fn, "big"), "big", server)
    assert len(row["blob"]) == spec.BIG


@on()
@pytest.mark.parametrize("route", BIG_ROUTES)
async def test_a_body_over_max_body_size_is_refused_clearly(
    server: Server, client: str, route: str
) -> None:
    """Over the limit as sent, as it streams in without a length, and once decoded (300 kB
    bodies, a limit of 100 kB)."""
    url = f"{server.base}/{route}/{{id}}?bytes=300000"
    async with lookup_function(url, client, max_body_size=100_000) as fn:
        with pytest.raises(AsyncLookupError, match="max_body_size"):
            await lookup(fn, "big")
    async with lookup_function(f"{server.base}/item/{{id}}", client, max_body_size=1000) as fn:
        assert_own_row(await lookup(fn, "small"), "small", server)


@on()
@pytest.mark.parametrize("route", ["long-header", "many-headers"])
async def test_long_and_many_headers(server: Server, client: str, route: str) -> None:
    async with lookup_function(f"{server.base}/{route}/{{id}}", client) as fn:
        for key in ("h1", "h2"):
            assert_own_row(await lookup(fn, key), key, server)


@on()
async def test_a_1_mb_header_is_refused_clearly(server: Server, client: str) -> None:
    async with lookup_function(f"{server.base}/huge-header/{{id}}", client) as fn:
        with pytest.raises(AsyncLookupError, match=r"(?i)header") as info:
            await lookup(fn, "huge")
        assert len(str(info.value)) < 2000, "the error does not carry the header"


# The two cases that wait (for a timeout, for the servers' idle close) run on every server and
# both clients at once, in one module fixture: one wait instead of one per server and client.
# Each (server, client) test then reports its own outcome.

Outcome = dict[tuple[str, str], BaseException | None]
Scenario = Callable[[Server, str], Awaitable[None]]


def everywhere(fleet: Fleet, names: list[str], scenario: Scenario) -> Outcome:
    """``scenario`` on each server of ``names`` with each client, all at once; what each raised
    (a scenario still running after 20 s raises ``TimeoutError``: it hung)."""
    servers = [fleet.get(name) for name in names if name in fleet.servers]

    async def one(server: Server, client: str) -> BaseException | None:
        try:
            await asyncio.wait_for(scenario(server, client), 20)
        except Exception as error:
            return error
        return None

    async def run() -> Outcome:
        pairs = [(s, c) for s in servers for c in CLIENTS]
        outcomes = await asyncio.gather(*(one(s, c) for s, c in pairs))
        return {(s.name, c): o for (s, c), o in zip(pairs, outcomes, strict=True)}

    return asyncio.run(run())


def check(outcomes: Outcome, server: Server, client: str) -> None:
    error = outcomes[(server.name, client)]
    if error is not None:
        raise error


async def never_answers(server: Server, client: str) -> None:
    async with lookup_function(f"{server.base}/never/{{id}}", client, timeout=0.5) as fn:
        started = time.monotonic()
        with pytest.raises(TransientError, match=r"(?i)timeout|timed out"):
            await lookup(fn, "n1")
        # well under the default timeout: the 0.5 s one ended it (a loaded machine took 2.1 s)
        assert time.monotonic() - started < 5.0
    # the next lookup is answered: a timeout that only bounds the test (2 s was too short
    # for uvicorn with every server and client at once on a loaded machine)
    async with lookup_function(f"{server.base}/item/{{id}}", client, timeout=10) as fn:
        assert_own_row(await lookup(fn, "after"), "after", server)


async def idle_close(server: Server, client: str) -> None:
    async with lookup_function(f"{server.base}/item/{{id}}", client, max_connections=8) as fn:
        first = await asyncio.gather(*(lookup(fn, f"a{i}") for i in range(8)))
        await asyncio.sleep(IDLE_CLOSE_AFTER.get(server.name, 1.0) + 0.5)
        second = await asyncio.gather(*(lookup(fn, f"b{i}") for i in range(8)))
    for i, rows in enumerate(first):
        assert_own_row(rows, f"a{i}", server)
    for i, rows in enumerate(second):
        assert_own_row(rows, f"b{i}", server)


#: when a server closes an idle connection at the latest (seconds; 1 s for the rest): Node
#: announces ``Keep-Alive: timeout=1`` and closes after 2 s (keepAliveTimeout plus its 1 s
#: buffer); waitress looks for idle connections once a second
IDLE_CLOSE_AFTER = {"node": 2.0, "waitress": 2.0}


@pytest.fixture(scope="module")
def never_outcomes(fleet: Fleet) -> Outcome:
    return everywhere(fleet, servers_that(), never_answers)


@pytest.fixture(scope="module")
def idle_outcomes(fleet: Fleet) -> Outcome:
    return everywhere(fleet, servers_that(IDLE), idle_close)


@on()
def test_a_server_that_never_answers_times_out(
    server: Server, client: str, never_outcomes: Outcome
) -> None:
    """A 0.5 s timeout ends the lookup (a clear transient error); the next one is answered."""
    check(never_outcomes, server, client)


@on(IDLE)
def test_keep_alive_across_the_servers_idle_close(
    server: Server, client: str, idle_outcomes: Outcome
) -> None:
    """Lookups after the server closed the kept-alive connections (idle 0.5 s past its close:
    1 s, Node's 2 s) all succeed."""
    check(idle_outcomes, server, client)


@on()
async def test_500_lookups_in_flight(server: Server, client: str) -> None:
    async with lookup_function(f"{server.base}/item/{{id}}", client) as fn:
        keys = [f"p{i}" for i in range(500)]
        results = await asyncio.gather(*(lookup(fn, k) for k in keys), return_exceptions=True)
    wrong = {k: r for k, r in zip(keys, results, strict=True) if not _own(r, k, server)}
    assert not wrong, f"{len(wrong)} of 500 wrong, e.g. {list(wrong.items())[:3]}"[:800]
