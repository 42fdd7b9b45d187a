"""TLS (trustme: a good certificate, the wrong host, expired, self-signed) on aiohttp.web, and
forward proxies (proxy.py: absolute-form HTTP, HTTPS through CONNECT, NO_PROXY, 407), both
clients. A rejected certificate or a proxy's 407 is a permanent error whose message says why.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from asyncio_lookup.errors import AsyncLookupError, TransientError
from tests.connectors.conformance.conftest import Fleet, assert_own_row, lookup, lookup_function
from tests.connectors.conformance.servers import Server

#: what the error of each bad certificate says (OpenSSL's verify message)
REJECTED = {
    "wrong-host": "(?i)hostname mismatch|not valid for 'localhost'",
    "expired": "(?i)certificate has expired",
    "self-signed": "(?i)self[- ]signed certificate",
}


@pytest.fixture
def tls(fleet: Fleet, client: str, monkeypatch: pytest.MonkeyPatch) -> Fleet:
    """The TLS server listening, and the test CA trusted through ``SSL_CERT_FILE``."""
    fleet.get("aiohttp-tls")
    fleet.certificates.trust(monkeypatch)
    return fleet


async def test_ssl_cert_file_is_read_when_the_client_opens(
    fleet: Fleet, client: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """A CA named by ``SSL_CERT_FILE`` after the process started (a second CA, only ever
    trusted this way) is trusted."""
    tls_server = fleet.get("aiohttp-tls")
    fleet.certificates.trust(monkeypatch, fleet.certificates.other_ca_file)
    async with lookup_function(tls_url(fleet, "other-ca"), client) as fn:
        assert_own_row(await lookup(fn, "late"), "late", tls_server)


def tls_url(fleet: Fleet, case: str, host: str = "localhost") -> str:
    return f"https://{host}:{fleet.tls_ports[case]}/item/{{id}}"


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
async def test_tls_with_a_good_certificate(tls: Fleet, client: str, host: str) -> None:
    tls_server = tls.get("aiohttp-tls")
    async with lookup_function(tls_url(tls, "good", host), client) as fn:
        for key in ("t1", "t2", "t1"):
            assert_own_row(await lookup(fn, key), key, tls_server)


@pytest.mark.parametrize("case", sorted(REJECTED))
async def test_a_rejected_certificate_is_a_permanent_error_that_says_why(
    tls: Fleet, client: str, case: str
) -> None:
    async with lookup_function(tls_url(tls, case), client) as fn:
        with pytest.raises(AsyncLookupError) as info:
            await lookup(fn, "t")
    error = info.value
    assert not isinstance(error, TransientError), f"retried: {error!r}"
    assert "certificate" in str(error)
    assert info.match(REJECTED[case])


# -- proxies -----------------------------------------------------------------------------------


async def proxy_logged(proxy: Server, line: str, within: float = 3.0) -> bool:
    """Whether proxy.py's access log shows ``line`` (it logs a connection once it closed)."""
    deadline = time.monotonic() + within
    while line not in proxy.output(tail=None):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


@pytest.fixture
def origin(fleet: Fleet) -> Server:
    return fleet.get("aiohttp")


async def test_http_through_a_proxy(
    fleet: Fleet, origin: Server, client: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = fleet.get("proxy.py")
    monkeypatch.setenv("HTTP_PROXY", proxy.base)
    key = f"via-proxy-{client}"
    async with lookup_function(f"{origin.base}/item/{{id}}", client) as fn:
        for _ in range(2):
            assert_own_row(await lookup(fn, key), key, origin)
    assert await proxy_logged(proxy, f"/item/{key}"), "the request went through the proxy"


async def test_https_through_a_proxys_connect_tunnel(
    tls: Fleet, client: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = tls.get("proxy.py")
    monkeypatch.setenv("HTTPS_PROXY", proxy.base)
    tls_server = tls.get("aiohttp-tls")
    async with lookup_function(tls_url(tls, "good"), client) as fn:
        for key in ("c1", "c2"):
            assert_own_row(await lookup(fn, key), key, tls_server)
    assert await proxy_logged(proxy, f"CONNECT localhost:{tls.tls_ports['good']}")


async def test_no_proxy_bypasses_the_proxy(
    fleet: Fleet, origin: Server, client: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The proxy here would answer 407: NO_PROXY sends the request straight to the origin."""
    monkeypatch.setenv("HTTP_PROXY", fleet.get("proxy.py-auth").base)
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    async with lookup_function(f"{origin.base}/item/{{id}}", client) as fn:
        assert_own_row(await lookup(fn, "direct"), "direct", origin)


@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_a_proxy_asking_for_credentials_is_a_permanent_error(
    tls: Fleet, origin: Server, client: str, scheme: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(f"{scheme.upper()}_PROXY", tls.get("proxy.py-auth").base)
    url = tls_url(tls, "good") if scheme == "https" else f"{origin.base}/item/{{id}}"
    async with lookup_function(url, client) as fn:
        with pytest.raises(AsyncLookupError, match="407") as info:
            await lookup(fn, "k")
    assert not isinstance(info.value, TransientError), f"retried: {info.value!r}"


@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_a_proxy_with_credentials_in_its_url(
    tls: Fleet, origin: Server, client: str, scheme: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = tls.get("proxy.py-auth")
    monkeypatch.setenv(
        f"{scheme.upper()}_PROXY", f"http://{Fleet.PROXY_USER}@127.0.0.1:{proxy.port}"
    )
    target = tls.get("aiohttp-tls") if scheme == "https" else origin
    url = tls_url(tls, "good") if scheme == "https" else f"{origin.base}/item/{{id}}"
    async with lookup_function(url, client) as fn:
        assert_own_row(await lookup(fn, "authorized"), "authorized", target)


# -- framings over TLS -------------------------------------------------------------------------

TLS_SERVERS = ["aiohttp-tls", "uvicorn-h11-tls", "stdlib-1.0-tls", "stdlib-1.1-tls", "node-tls"]
TLS_INTERIM = {"aiohttp-tls", "stdlib-1.1-tls", "node-tls"}


TLS_CASES = [
    (name, route)
    for name in TLS_SERVERS
    for route in ("item", "early", "to-close", "chunked", "close", "gzip", "big")
    if route != "early" or name in TLS_INTERIM
]


AIOHTTP_UVLOOP_TLS_CLOSE = (
    "aiohttp on uvloop, over TLS, loses the end of a 5 MB body when the server closes right "
    "after it (http.server HTTP/1.0): 'Not enough data to satisfy content length header "
    "(received ~4.8 MB of 5 MB)', in some runs; on asyncio's loop it reads it all, and the "
    "asyncio client reads it all on both loops"
)


@pytest.mark.parametrize(("name", "route"), TLS_CASES)
async def test_framings_over_tls(tls: Fleet, client: str, name: str, route: str) -> None:
    """The answers of the plain-text cases over TLS: among them an answer read to the close
    (``http.server`` HTTP/1.0, Node) and 1xx before the answer."""
    server = tls.get(name)
    on_uvloop = type(asyncio.get_running_loop()).__module__.startswith("uvloop")
    async with lookup_function(f"{server.base}/{route}/{{id}}", client) as fn:
        for key in ("s1", "s2"):
            try:
                rows = await lookup(fn, key)
            except TransientError:
                if (client, name, route, on_uvloop) == ("aiohttp", "stdlib-1.0-tls", "big", True):
                    pytest.xfail(AIOHTTP_UVLOOP_TLS_CLOSE)
                raise
            assert_own_row(rows, key, server)
