"""What an HTTP client behind :class:`~asyncio_lookup.connectors.HttpConnector` does, and
what it needs of its connector. This module imports no client.

The clients (``client=``): ``asyncio`` (the default; :mod:`~asyncio_lookup.connectors.http_asyncio`
over the library's own HTTP/1.1 client, the least CPU per request of those measured),
``aiohttp`` (:mod:`~asyncio_lookup.connectors.http_aiohttp`, extra ``[aiohttp]``: the
reference of the conformance suite) and ``pyreqwest``
(:mod:`~asyncio_lookup.connectors.http_pyreqwest`, extra ``[pyreqwest]``: HTTP/2 where a TLS
server offers it).

A client answers ``fetch(method, url, body)`` with ``(status, headers, body)`` (headers
read-only and case-insensitive, the body with its content coding undone), and the point
lookups' ``get_json(url)`` with ``(status, headers, payload)``: the decoded JSON body for a 2xx
answer with a body (``EMPTY`` for none), else the raw body. Both enforce the connector's
``timeout`` per request and raise the library's errors (secrets redacted; :func:`failure`):
:class:`~asyncio_lookup.errors.TransientError` for what a retry may fix, a permanent class for
what it cannot; a cancelled caller sees ``CancelledError``.
"""

from __future__ import annotations

import errno
import json
import re
import socket
import ssl
from collections.abc import Mapping
from typing import Any, Protocol

import orjson

from asyncio_lookup.errors import (
    AsyncLookupError,
    ConfigurationError,
    DataFormatError,
    HttpStatusError,
    PermanentConnectionError,
    TransientError,
)

CLIENTS = ("asyncio", "aiohttp", "pyreqwest")
DEFAULT_CLIENT = "asyncio"

EMPTY: Any = object()  # get_json's payload for a 2xx answer without a body
Fetched = tuple[int, Mapping[str, str], bytes]


class HttpClient(Protocol):
    """What the connector needs of a client; open on the loop that uses it."""

    async def fetch(self, method: str, url: str, body: bytes | None) -> Fetched: ...

    async def get_json(self, url: str) -> tuple[int, Mapping[str, str], Any]: ...

    async def close(self) -> None: ...


class ClientOwner(Protocol):
    """What a client needs of its connector: settings, headers, and its secrets to redact."""

    max_connections: int
    timeout: float
    max_body_size: int

    def request_headers(self) -> dict[str, str]: ...

    def secrets(self) -> list[str]: ...

    def transient(
        self, message: str, retry_after: float | None = None, status: int | None = None
    ) -> TransientError: ...


def check_client(client: Any) -> str:
    if client not in CLIENTS:
        raise ConfigurationError("client", client, " | ".join(repr(c) for c in CLIENTS))
    return str(client)


class UnreadableResponse(ValueError):
    """An answer a client will not read: over a limit (header block, body), or in a content
    coding it does not know. No retry changes it."""


class ProxyRefused(ConnectionError):
    """The proxy answered ``CONNECT`` with ``status`` (not 2xx)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def refused_url(url: str, error: ValueError) -> ConfigurationError:
    """The error for a URL a client will not send (a control character could end the request
    line and start a header)."""
    from asyncio_lookup.connectors._secrets import mask_url

    refused = ConfigurationError("url", mask_url(url), "a URL without control characters")
    refused.__cause__ = error
    return refused


def failure(owner: ClientOwner, error: BaseException, method: str, url: str) -> AsyncLookupError:
    """The library's error for an exchange that failed with ``error``: permanent (no retry) for
    a rejected certificate or TLS handshake, an unknown host, a proxy wanting credentials, an
    answer over a limit or in an unknown coding; :class:`TransientError` for the rest
    (timeouts, refused or reset connections, a server closing mid-answer)."""
    from asyncio_lookup.connectors._secrets import redact, shown_url

    where = f"HTTP {method} {shown_url(url)}"
    if isinstance(error, TimeoutError):
        return owner.transient(f"{where} failed: no response within {owner.timeout:g} s (timeout)")
    for cause in _causes(error):
        permanent = _permanent(cause, where)
        if permanent is not None:
            permanent.args = (redact(str(permanent), owner.secrets()),)
            return permanent
    return owner.transient(f"{where} failed: {type(error).__name__}: {error}")


def _permanent(error: BaseException, where: str) -> AsyncLookupError | None:
    if isinstance(error, ssl.SSLCertVerificationError):
        return PermanentConnectionError(
            f"{where}: the server's TLS certificate was rejected "
            f"({getattr(error, 'verify_message', None) or error}); not retried"
        )
    if isinstance(error, ssl.SSLError):
        return PermanentConnectionError(
            f"{where}: the TLS handshake failed ({error.reason or error}); not retried"
        )
    if isinstance(error, socket.gaierror) and error.errno in _UNKNOWN_HOST:
        return PermanentConnectionError(
            f"{where}: the host name is not known ({error}); not retried"
        )
    if isinstance(error, ProxyRefused) and error.status == 407:
        return HttpStatusError(
            f"{where}: the proxy asks for credentials (407 Proxy Authentication Required); "
            "give them in the proxy URL (http://user:password@proxy:port); not retried",
            407,
        )
    if isinstance(error, UnreadableResponse):
        return DataFormatError(f"{where}: {error}")
    return None


_UNKNOWN_HOST = {
    getattr(socket, name) for name in ("EAI_NONAME", "EAI_NODATA") if hasattr(socket, name)
} | {errno.ENOENT}


def _causes(error: BaseException) -> list[BaseException]:
    """``error`` and what it was raised from (clients wrap the socket's errors)."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and len(chain) < 6:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


#: 20 digits in a row: maybe an integer beyond 64 bits, which orjson reads as a float
#: (10**23 as 1e23, equal to 10**23 - 1 read alike): the standard decoder reads it exactly.
_LONG_DIGITS = re.compile(rb"[0-9]{20}")


def decode_json(owner: ClientOwner, method: str, url: str, body: bytes) -> Any:
    """The JSON of a 2xx body; ``EMPTY`` for a blank one. Integers are exact at any size."""
    try:
        if _LONG_DIGITS.search(body) is None:
            return orjson.loads(body)
    except orjson.JSONDecodeError:
        if not body.strip():
            return EMPTY
    try:  # what orjson refuses or rounds and the standard reads: NaN, integers beyond 64 bits
        return json.loads(body)
    except ValueError as error:
        from asyncio_lookup.connectors._secrets import shown_url

        raise DataFormatError(f"HTTP {method} {shown_url(url)}: body is not JSON") from error


def json_answer(
    owner: ClientOwner, url: str, fetched: Fetched
) -> tuple[int, Mapping[str, str], Any]:
    """``get_json``'s answer from ``fetch``'s: the body decoded for a 2xx with content."""
    status, headers, body = fetched
    if 200 <= status < 300 and status != 204:
        return status, headers, decode_json(owner, "GET", url, body)
    return status, headers, body


__all__ = [
    "CLIENTS",
    "DEFAULT_CLIENT",
    "EMPTY",
    "ClientOwner",
    "Fetched",
    "HttpClient",
    "ProxyRefused",
    "UnreadableResponse",
    "check_client",
    "decode_json",
    "failure",
    "json_answer",
    "refused_url",
]
