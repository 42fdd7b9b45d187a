"""HttpConnector, what goes on the wire and comes back, on every client against a real aiohttp
server: scan pages (Link headers, cursors, pages that are not there), content codings (all
clients alike, bounded, never cut short), Retry-After, URL credentials and key encoding."""

from __future__ import annotations

import base64
import gzip
import json
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from decimal import Decimal
from email.utils import formatdate
from typing import Any

import pytest
from aiohttp import web

from asyncio_lookup.connectors import HttpConnector, HttpStatusError
from asyncio_lookup.connectors.http_answers import MAX_RETRY_AFTER, link_next, parse_retry_after
from asyncio_lookup.connectors.http_client import CLIENTS
from asyncio_lookup.connectors.http_codings import DECODERS
from asyncio_lookup.errors import ConfigurationError, DataFormatError, TransientError

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Serve = Callable[[Handler], Awaitable[str]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """``await serve(handler)``: the base URL of a server answering every path with it."""
    runners: list[web.AppRunner] = []

    async def start(handler: Handler) -> str:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        return f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]

    yield start
    for runner in runners:
        await runner.cleanup()


@pytest.fixture(params=CLIENTS)
def client(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def _scan(connector: HttpConnector) -> list[Any]:
    scan = connector.scan()
    assert scan is not None
    return [row async for row in scan]


async def _lookup(connector: HttpConnector, key: tuple) -> Any:
    """The rows of ``key`` (a batch of one with ``batch_url``), or the error raised."""
    fn = connector.async_lookup_function()
    await fn.open()
    try:
        if connector.batch_url is not None:
            (found,) = await fn.async_lookup_batch([key])
            return found
        return list(await fn.async_lookup(key))
    except Exception as error:
        return error
    finally:
        await fn.close()


# -- scans -------------------------------------------------------------------------------


async def test_a_scan_reads_every_link_header_and_rel_lists(serve: Serve, client: str) -> None:
    """Page 1 names its next page in the first of two ``Link`` lines, page 2 in the second
    (with a comma in the target and ``next`` in a list of relations)."""

    async def pages(request: web.Request) -> web.Response:
        page = request.query.get("page", "1")
        response = web.json_response([{"id": page}])
        if page == "1":
            response.headers.add("Link", '</p?page=2>; rel="next"')
            response.headers.add("Link", '</help>; rel="help"')
        elif page == "2":
            response.headers.add("Link", '</p?page=1>; rel="prev", </help>; rel=help')
            response.headers.add("Link", '</p?page=3,4>; title="a, b"; rel="prefetch Next"')
        return response

    base = await serve(pages)
    c = HttpConnector(f"{base}/c/{{id}}", scan_url=f"{base}/p?page=1", client=client)
    assert await _scan(c) == [{"id": "1"}, {"id": "2"}, {"id": "3,4"}]


def test_link_next_follows_rfc_8288() -> None:
    here = "http://h/x"
    assert link_next('</a?ids=2,3>; rel="next"', here) == "http://h/a?ids=2,3"
    assert link_next('</p>; rel="prefetch next"', here) == "http://h/p"
    assert link_next(["</p>; rel=prev", "</n>; REL=Next"], here) == "http://h/n"
    assert link_next('</p>; title="x, rel=next"; rel=prev, </q>;rel=next', here) == "http://h/q"
    assert link_next('</p>; title="a \\" rel=next"; rel=last', here) is None
    assert link_next('</p>; rel="nextpage"', here) is None
    assert link_next('</p>; rel="next"; rel="prev"', here) == "http://h/p"  # the first rel
    assert link_next("", here) is None
    assert link_next("garbage, </n>; rel=next", here) == "http://h/n"


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (404, "gone", HttpStatusError),
        (410, "gone", HttpStatusError),
        (204, "", DataFormatError),
        (200, "", DataFormatError),
        (503, "", TransientError),
    ],
)
async def test_a_scan_page_is_a_2xx_with_a_body_or_the_scan_fails(
    serve: Serve, client: str, status: int, body: str, error: type[Exception]
) -> None:
    """A later page answering a miss status (or no body) is not the end of the table."""

    async def pages(request: web.Request) -> web.Response:
        if request.query.get("page") == "2":
            return web.Response(status=status, text=body)
        return web.json_response({"rows": [{"id": 1}], "next": "/p?page=2"})

    base = await serve(pages)
    c = HttpConnector(
        f"{base}/c/{{id}}",
        scan_url=f"{base}/p?page=1",
        next_field="next",
        scan_rows_field="rows",
        client=client,
    )
    with pytest.raises(error):
        await _scan(c)


async def test_a_first_scan_page_answering_404_fails_and_an_empty_table_is_an_empty_list(
    serve: Serve, client: str
) -> None:
    async def pages(request: web.Request) -> web.Response:
        if request.path == "/empty":
            return web.json_response([])
        return web.Response(status=404)

    base = await serve(pages)
    missing = HttpConnector(f"{base}/c/{{id}}", scan_url=f"{base}/missing", client=client)
    with pytest.raises(HttpStatusError) as info:
        await _scan(missing)
    assert info.value.status == 404
    empty = HttpConnector(f"{base}/c/{{id}}", scan_url=f"{base}/empty", client=client)
    assert await _scan(empty) == []


async def test_a_cursor_scan_keeps_the_scan_urls_blank_query_parameters(
    serve: Serve, client: str
) -> None:
    seen: list[str] = []

    async def pages(request: web.Request) -> web.Response:
        seen.append(request.raw_path)
        if "filter" not in request.query:
            return web.Response(status=400, text="filter missing")
        cursor = int(request.query.get("cursor", "0"))
        return web.json_response(
            {"rows": [{"id": cursor}], "next": cursor + 1 if cursor < 2 else None}
        )

    base = await serve(pages)
    c = HttpConnector(
        f"{base}/c/{{id}}",
        scan_url=f"{base}/p?filter=&q=a%2Bb&cursor=0",
        next_field="next",
        cursor_param="cursor",
        scan_rows_field="rows",
        client=client,
    )
    assert await _scan(c) == [{"id": 0}, {"id": 1}, {"id": 2}]
    assert seen == [
        "/p?filter=&q=a%2Bb&cursor=0",
        "/p?filter=&q=a%2Bb&cursor=1",
        "/p?filter=&q=a%2Bb&cursor=2",
    ]


# -- content codings ---------------------------------------------------------------------

BODY = json.dumps([{"id": "a", "v": "h\u00e9llo"}, {"id": "b"}]).encode()
ROWS = json.loads(BODY)


def _gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def _raw_deflate(data: bytes) -> bytes:
    deflater = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return deflater.compress(data) + deflater.flush()


def _zstd(data: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor().compress(data)


def _br(data: bytes) -> bytes:
    brotli = pytest.importorskip("brotli")
    return bytes(brotli.compress(data, quality=1))


needs_zstd = pytest.mark.skipif("zstd" not in DECODERS, reason="zstandard not installed")
needs_br = pytest.mark.skipif("br" not in DECODERS, reason="brotli 1.2+ not installed")
CODED = [
    pytest.param("gzip", _gz, id="gzip"),
    pytest.param("gzip", lambda b: _gz(b[:10]) + _gz(b[10:]), id="gzip-two-members"),
    pytest.param("deflate", zlib.compress, id="deflate"),
    pytest.param("deflate", _raw_deflate, id="deflate-raw"),
    pytest.param("deflate, gzip", lambda b: _gz(zlib.compress(b)), id="deflate-then-gzip"),
    pytest.param("zstd", _zstd, marks=needs_zstd, id="zstd"),
    pytest.param(
        "zstd", lambda b: _zstd(b[:10]) + _zstd(b[10:]), marks=needs_zstd, id="zstd-two-frames"
    ),
    pytest.param("br", _br, marks=needs_br, id="br"),
]


def _coded(coding: str, body: bytes) -> Handler:
    async def answer(request: web.Request) -> web.Response:
        return web.Response(body=body, headers={"Content-Encoding": coding})

    return answer


@pytest.mark.parametrize(("coding", "encode"), CODED)
async def test_every_client_decodes_the_same_codings(
    serve: Serve, client: str, coding: str, encode: Callable[[bytes], bytes]
) -> None:
    base = await serve(_coded(coding, encode(BODY)))
    assert await _lookup(HttpConnector(f"{base}/c/{{key}}", client=client), ("k",)) == ROWS


@pytest.mark.parametrize(
    ("coding", "body"),
    [
        pytest.param("foo", BODY, id="unknown"),  # never passed through
        pytest.param("gzip", _gz(BODY)[:-6], id="gzip-truncated"),
        pytest.param("zstd", b"", marks=needs_zstd, id="zstd-truncated"),  # the body: below
    ],
)
async def test_every_client_refuses_an_unknown_coding_or_a_truncated_body(
    serve: Serve, client: str, coding: str, body: bytes
) -> None:
    if coding == "zstd":
        body = _zstd(BODY * 50)[:-5]
    base = await serve(_coded(coding, body))
    error = await _lookup(HttpConnector(f"{base}/c/{{key}}", client=client), ("k",))
    assert isinstance(error, DataFormatError), error


def _bomb(coding: str, size: int) -> bytes:
    """A body of ``size`` bytes inflated (a JSON string of zeros), compressed small."""
    if coding == "br":
        return _br(b'{"id": "' + b"0" * size + b'"}')
    if coding == "zstd":
        import zstandard

        out = zstandard.ZstdCompressor(level=1).compressobj()
        chunks = [out.compress(b'{"id": "')]
        chunks += [out.compress(b"0" * (1 << 20)) for _ in range(size >> 20)]
        return b"".join(chunks) + out.compress(b'"}') + out.flush()
    deflater = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunks = [deflater.compress(b'{"id": "')]
    chunks += [deflater.compress(b"0" * (1 << 20)) for _ in range(size >> 20)]
    return b"".join(chunks) + deflater.compress(b'"}') + deflater.flush()


@pytest.mark.parametrize(
    "coding", ["gzip", pytest.param("zstd", marks=needs_zstd), pytest.param("br", marks=needs_br)]
)
async def test_a_body_inflating_past_max_body_size_is_refused_without_holding_it(
    serve: Serve, client: str, coding: str
) -> None:
    base = await serve(_coded(coding, _bomb(coding, 64 << 20)))
    c = HttpConnector(f"{base}/c/{{id}}", client=client, max_body_size=1 << 20)
    tracemalloc.start()
    try:
        error = await _lookup(c, ("k",))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(error, DataFormatError), error
    assert "decoded body is over max_body_size=1,048,576" in str(error)
    assert peak < 16 << 20, f"{peak >> 20} MiB held for a 1 MiB limit"


def test_a_gzip_body_over_the_limit_in_a_later_member_is_refused_as_over_it() -> None:
    """Each member was bounded alone: the second one stopped at the limit and the body was
    called truncated instead of too big."""
    body = gzip.compress(b"a" * 60) + gzip.compress(b"b" * 60)
    assert DECODERS["gzip"](body, 120) == b"a" * 60 + b"b" * 60
    with pytest.raises(Exception, match="over max_body_size=100 bytes"):
        DECODERS["gzip"](body, 100)


# -- Retry-After -------------------------------------------------------------------------


def test_retry_after_is_digits_or_an_http_date_and_capped() -> None:
    for odd in ("inf", "-inf", "nan", "1e400", "1e3", "1.5", "-1", "1_0", "Infinity", "+5"):
        assert parse_retry_after(odd) is None, odd
    assert parse_retry_after(" 42 ") == 42.0
    assert parse_retry_after("99999999999") == MAX_RETRY_AFTER
    assert parse_retry_after("9" * 5000) == MAX_RETRY_AFTER
    assert parse_retry_after(formatdate(1000.0 + 10**9, usegmt=True), now=1000.0) == MAX_RETRY_AFTER
    assert parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT") == MAX_RETRY_AFTER
    assert parse_retry_after("Sat, 31 Dec 99999 23:59:59 GMT") is None
    assert 60 <= MAX_RETRY_AFTER <= 3600


@pytest.mark.parametrize(
    ("header", "expected"), [("inf", None), ("1e400", None), ("99999999999", MAX_RETRY_AFTER)]
)
async def test_a_503s_retry_after_is_read_alike_on_every_client(
    serve: Serve, client: str, header: str, expected: float | None
) -> None:
    async def busy(request: web.Request) -> web.Response:
        return web.Response(status=503, headers={"Retry-After": header})

    base = await serve(busy)
    error = await _lookup(HttpConnector(f"{base}/c/{{key}}", client=client), ("k",))
    assert isinstance(error, TransientError) and error.retry_after == expected


# -- credentials in URLs -----------------------------------------------------------------


async def _echo_auth(request: web.Request) -> web.Response:
    auth = request.headers.get("Authorization", "")
    user = base64.b64decode(auth.removeprefix("Basic ")).decode() if auth else None
    return web.json_response([{"id": "k", "user": user}])


async def test_userinfo_of_scan_and_batch_urls_is_basic_auth_on_every_client(
    serve: Serve, client: str
) -> None:
    base = await serve(_echo_auth)
    host = base.removeprefix("http://")
    scan = HttpConnector(
        f"{base}/c/{{id}}", scan_url=f"http://bob:s3cret@{host}/all", client=client
    )
    assert await _scan(scan) == [{"id": "k", "user": "bob:s3cret"}]
    assert "s3cret" not in repr(scan) and scan.scan_url == f"{base}/all"
    batch = HttpConnector(
        f"{base}/c/{{id}}",
        batch_url=f"http://bob:s3cret@{host}/b",
        batch_mode="query",
        client=client,
    )
    assert await _lookup(batch, ("k",)) == [{"id": "k", "user": "bob:s3cret"}]


async def test_percent_encoded_userinfo_is_decoded(serve: Serve, client: str) -> None:
    base = await serve(_echo_auth)
    host = base.removeprefix("http://")
    c = HttpConnector(f"http://al%40ice:p%40ss%2Fw0rd@{host}/c/{{id}}", client=client)
    assert await _lookup(c, ("k",)) == [{"id": "k", "user": "al@ice:p@ss/w0rd"}]


def test_urls_with_different_credentials_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="the same user:password") as info:
        HttpConnector("http://a:pw-1@h/c/{id}", scan_url="http://a:pw-2@h/all")
    assert "pw-1" not in str(info.value) and "pw-2" not in str(info.value)
    same = HttpConnector("http://a:one@h/c/{id}", scan_url="http://a:one@h/all")
    assert same.basic_auth == ("a", "one")


# -- keys --------------------------------------------------------------------------------


async def _echo_keys(request: web.Request) -> web.Response:
    """Batch answers: the body or query as the server read it, and a row per key."""
    raw = (await request.read()).decode() if request.method == "POST" else request.raw_path
    if request.method == "POST":
        ids = [k["id"] for k in json.loads(raw)["keys"]]
    else:
        ids = request.query.getall("id", [])
    return web.json_response([{"id": i, "raw": raw} for i in ids])


async def test_a_key_that_is_not_valid_unicode_fails_alone(serve: Serve, client: str) -> None:
    base = await serve(_echo_keys)
    point = HttpConnector(f"{base}/c/{{id}}", client=client)
    assert isinstance(await _lookup(point, ("a\ud800",)), DataFormatError)
    for mode in ("post_json", "query"):
        c = HttpConnector(f"{base}/c/{{id}}", batch_url=f"{base}/b", batch_mode=mode, client=client)
        fn = c.async_lookup_function()
        await fn.open()
        try:
            bad, good = await fn.async_lookup_batch([("a\ud800",), ("ok",)])
        finally:
            await fn.close()
        assert isinstance(bad, DataFormatError) and "not valid Unicode" in str(bad)
        assert [r["id"] for r in good] == ["ok"]


async def test_batches_send_numbers_as_point_lookups_do(serve: Serve, client: str) -> None:
    """-0.0 as 0.0, a Decimal as its JSON number; NaN (no JSON number) fails its key alone."""
    base = await serve(_echo_keys)
    keys = [(-0.0,), (Decimal("1.50"),), (True,), (float("nan"),)]
    post = HttpConnector(f"{base}/c/{{id}}", batch_url=f"{base}/b", client=client)
    fn = post.async_lookup_function()
    await fn.open()
    try:
        zero, decimal, true, nan = await fn.async_lookup_batch(keys)
    finally:
        await fn.close()
    assert [r["raw"] for r in zero] == ['{"keys":[{"id":0.0},{"id":1.50},{"id":true}]}']
    assert [r["id"] for r in zero + list(decimal) + list(true)] == [0.0, 1.5, True]
    assert isinstance(nan, DataFormatError)
    query = HttpConnector(
        f"{base}/c/{{id}}", batch_url=f"{base}/b", batch_mode="query", client=client
    )
    rows = await _lookup(query, (-0.0,))
    assert [r["raw"] for r in rows] == ["/b?id=0%2E0"]
    assert query.point_url((-0.0,)) == f"{base}/c/0%2E0"


async def test_a_header_given_in_lower_case_replaces_the_default(serve: Serve, client: str) -> None:
    # {"accept": ...} was sent beside the default "Accept: application/json"
    seen: list[list[str]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers.getall("Accept"))
        return web.json_response({"v": 1})

    base = await serve(handler)
    c = HttpConnector(f"{base}/c/{{id}}", client=client, headers={"accept": "*/*"})
    assert await _lookup(c, ("k",)) == [{"v": 1}]
    assert seen == [["*/*"]]
