"""The HTTP clients behind :class:`~asyncio_lookup.connectors.HttpConnector`, one interface.

``asyncio`` (the default): HTTP/1.1 on asyncio protocols with llhttp parsing
(:mod:`~asyncio_lookup.connectors.http11`), the least CPU per request of the clients measured
(``benchmarks/http_clients.py``; docs/design.md, "The HTTP client"). ``pyreqwest`` (Rust
reqwest + hyper on a tokio thread; the optional extra ``asyncio-lookup[pyreqwest]``) for
HTTP/2 where a TLS server offers it.

A client answers ``fetch(method, url, body)`` with ``(status, headers, body)``, where headers
are read-only and case-insensitive, and the point lookups' ``get_json(url)`` with ``(status,
headers, payload)``: the decoded JSON body for a 2xx answer with a body (``EMPTY`` for none),
else the raw body. Both enforce the connector's ``timeout`` per request and raise the
connector's :class:`~asyncio_lookup.errors.TransientError` (secrets redacted) for timeouts and
connection errors; a cancelled caller sees ``CancelledError``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from asyncio_lookup.errors import ConfigurationError, DataFormatError, TransientError

if TYPE_CHECKING:
    from asyncio_lookup.connectors.http_connector import HttpConnector

CLIENTS = ("asyncio", "pyreqwest")
DEFAULT_CLIENT = "asyncio"

EMPTY: Any = object()  # get_json's payload for a 2xx answer without a body
Fetched = tuple[int, Mapping[str, str], bytes]
_JSON_BODY = {"Content-Type": "application/json"}


class HttpClient(Protocol):
    """What the connector needs of a client; open on the loop that uses it."""

    async def fetch(self, method: str, url: str, body: bytes | None) -> Fetched: ...

    async def get_json(self, url: str) -> tuple[int, Mapping[str, str], Any]: ...

    async def close(self) -> None: ...


def check_client(client: Any) -> str:
    if client not in CLIENTS:
        raise ConfigurationError("client", client, " | ".join(repr(c) for c in CLIENTS))
    return str(client)


def open_client(c: HttpConnector) -> HttpClient:
    """A new client for ``c`` (its ``client`` option); call on the loop that will use it."""
    if c.client == "pyreqwest":
        return PyreqwestClient(c)
    return AsyncioClient(c)


def timeout_error(c: HttpConnector) -> TimeoutError:
    return TimeoutError(f"no response within {c.timeout:g} s (timeout)")


def decode_json(c: HttpConnector, method: str, url: str, body: bytes) -> Any:
    """The JSON of a 2xx body; ``EMPTY`` for a blank one."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        if not body.strip():
            return EMPTY
    try:  # what orjson refuses and the standard allows: NaN, integers beyond 64 bits
        return json.loads(body)
    except ValueError as error:
        from asyncio_lookup.connectors._secrets import mask_url

        raise DataFormatError(f"HTTP {method} {mask_url(url)}: body is not JSON") from error


def has_dot_segment(url: str) -> bool:
    """Whether the path of ``url`` has a segment that WHATWG URL parsers (reqwest's) take for
    ``.`` or ``..`` and remove: ``%2E`` / ``%2E%2E`` from a key that is only dots."""
    if "%2E" not in url and "%2e" not in url:
        return False
    path = url.split("://", 1)[-1].partition("/")[2]
    path = path.split("?", 1)[0].split("#", 1)[0]
    dots = {"%2e", "%2e%2e", ".%2e", "%2e."}
    return any(segment.lower() in dots for segment in path.split("/"))


class AsyncioClient:
    """HTTP/1.1 on asyncio protocols (:mod:`~asyncio_lookup.connectors.http11`): a future per
    request, the response parsed by llhttp, every request's timeout on one loop timer."""

    def __init__(self, c: HttpConnector) -> None:
        from asyncio_lookup.connectors.http11 import Http11Client

        self.connector = c
        self.client = Http11Client(c.max_connections, c.timeout, c.request_headers())
        self._errors = OSError  # connection errors and TimeoutError are OSErrors

    async def fetch(self, method: str, url: str, body: bytes | None) -> Fetched:
        try:
            return await self.client.fetch(method, url, body)
        except self._errors as error:
            raise self._failure(error, method, url) from error

    async def get_json(self, url: str) -> tuple[int, Mapping[str, str], Any]:
        try:  # fetch's body inline: one coroutine less per point lookup
            status, headers, body = await self.client.fetch("GET", url, None)
        except self._errors as error:
            raise self._failure(error, "GET", url) from error
        if 200 <= status < 300 and status != 204:
            return status, headers, decode_json(self.connector, "GET", url, body)
        return status, headers, body

    def _failure(self, error: BaseException, method: str, url: str) -> TransientError:
        c = self.connector
        if isinstance(error, TimeoutError):
            error = timeout_error(c)
        return c.failure(error, method, url)

    async def close(self) -> None:
        await self.client.close()


class PyreqwestClient:
    """pyreqwest: one ``Client`` (pool of ``max_connections``), the total per-request timeout
    in Rust, redirects not followed, HTTP/2 where a TLS server offers it, proxies from the
    environment (reqwest's default)."""

    def __init__(self, c: HttpConnector) -> None:
        try:
            from pyreqwest.client import ClientBuilder
            from pyreqwest.exceptions import JSONDecodeError, PyreqwestError, RequestTimeoutError
        except ImportError as error:
            raise ConfigurationError(
                "client", "pyreqwest", "'asyncio', or install asyncio-lookup[pyreqwest]",
                f"pyreqwest is not installed here ({error})",
            ) from error

        self.connector = c
        self._timeout_errors = (RequestTimeoutError,)
        self._errors = (PyreqwestError, OSError)
        self._json_error = JSONDecodeError
        self.client = (
            ClientBuilder()
            .max_connections(c.max_connections)
            .pool_max_idle_per_host(c.max_connections)
            .timeout(timedelta(seconds=c.timeout))
            .follow_redirects(False)
            .http2(True)  # negotiated (ALPN) where a TLS server offers it
            .default_headers(c.request_headers())
            .build()
        )
        # a key that is only dots would be removed from the path by reqwest's URL parser:
        # such rare requests go through the asyncio client, which sends the path as it is
        self._dots: AsyncioClient | None = None

    async def fetch(self, method: str, url: str, body: bytes | None) -> Fetched:
        if has_dot_segment(url):
            return await self._dot_client().fetch(method, url, body)
        c = self.connector
        try:
            builder = self.client.request(method, url)
            if body is not None:
                builder = builder.body_bytes(body).headers(_JSON_BODY)
            response = await builder.build().send()
            return response.status, response.headers, bytes(await response.bytes())
        except self._timeout_errors as error:
            raise c.failure(timeout_error(c), method, url) from error
        except self._errors as error:
            raise c.failure(error, method, url) from error

    async def get_json(self, url: str) -> tuple[int, Mapping[str, str], Any]:
        if has_dot_segment(url):
            return await self._dot_client().get_json(url)
        try:
            response = await self.client.get(url).build().send()
            status = response.status
            if 200 <= status < 300 and status != 204:
                try:
                    return status, response.headers, await response.json()
                except self._json_error:
                    body = bytes(await response.bytes())
                    return status, response.headers, decode_json(self.connector, "GET", url, body)
            return status, response.headers, bytes(await response.bytes())
        except self._timeout_errors as error:
            c = self.connector
            raise c.failure(timeout_error(c), "GET", url) from error
        except self._errors as error:
            raise self.connector.failure(error, "GET", url) from error

    def _dot_client(self) -> AsyncioClient:
        if self._dots is None:
            self._dots = AsyncioClient(self.connector)
        return self._dots

    async def close(self) -> None:
        await self.client.close()
        if self._dots is not None:
            await self._dots.close()
