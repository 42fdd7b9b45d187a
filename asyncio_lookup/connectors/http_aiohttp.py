"""The ``aiohttp`` client (extra ``asyncio-lookup[aiohttp]``): for users who need what the
asyncio client leaves out (cookies, auth flows), and the reference the conformance suite holds
the asyncio client against. Redirects are not followed here either (credentials never go to
another host). Content codings are decoded by :mod:`~asyncio_lookup.connectors.http_codings`,
as the other clients do (aiohttp's own decoding is off)."""

from __future__ import annotations

import asyncio
import functools
import ssl
import urllib.request
from collections.abc import Mapping
from typing import Any

from asyncio_lookup.connectors.http11_request import request_target
from asyncio_lookup.connectors.http_answers import header_values
from asyncio_lookup.connectors.http_client import (
    ClientOwner,
    Fetched,
    ProxyRefused,
    UnreadableResponse,
    failure,
    json_answer,
    refused_url,
)
from asyncio_lookup.connectors.http_codings import decode, with_accept_encoding
from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.runtime.deadlines import Deadlines

_JSON_BODY = {"Content-Type": "application/json"}


class AiohttpClient:
    """One ``aiohttp.ClientSession`` (pool of ``max_connections``); the timeouts of all
    requests run on one loop timer (:class:`Deadlines`); the URL is percent-encoded as the
    asyncio client does, then sent as it is (``encoded=True``: yarl would decode ``%2E``)."""

    def __init__(self, owner: ClientOwner) -> None:
        try:
            import aiohttp
            from yarl import URL
        except ImportError as error:
            raise ConfigurationError(
                "client",
                "aiohttp",
                "'asyncio', or install asyncio-lookup[aiohttp]",
                f"aiohttp is not installed here ({error})",
            ) from error
        self.owner = owner
        self._url = URL
        self._aiohttp = aiohttp
        self._errors = (aiohttp.ClientError, OSError, UnreadableResponse)
        self.deadlines = Deadlines(owner.timeout)
        # a verifying context of this client's own: the trust store as SSL_CERT_FILE /
        # SSL_CERT_DIR name it now (aiohttp's shared one is read when aiohttp is imported)
        connector = aiohttp.TCPConnector(
            limit=owner.max_connections, ssl=ssl.create_default_context()
        )
        _fail_cut_bodies(connector)
        self.session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None),  # the deadlines time each request
            headers=with_accept_encoding(owner.request_headers()),
            auto_decompress=False,  # decoded (bounded) by http_codings, as the other clients
            raise_for_status=False,
            # proxies from HTTP(S)_PROXY / NO_PROXY; aiohttp then looks them up per request,
            # so only when the environment names one
            trust_env=bool(urllib.request.getproxies()),
        )

    async def fetch(self, method: str, url: str, body: bytes | None) -> Fetched:
        deadline = self.deadlines.start()
        try:
            address = self._address(url)
            async with self.session.request(
                method,
                address,
                data=body,
                headers=None if body is None else _JSON_BODY,
                allow_redirects=False,
            ) as response:
                return response.status, response.headers, await self._read(response)
        except self._aiohttp.ClientHttpProxyError as error:
            refused = ProxyRefused(f"the proxy answered {error.status}", error.status)
            raise failure(self.owner, refused, method, url) from error
        except self._errors as error:
            raise failure(self.owner, error, method, url) from error
        except asyncio.CancelledError:
            if deadline.timed_out():
                timeout = TimeoutError()
                raise failure(self.owner, timeout, method, url) from timeout
            raise
        finally:
            deadline.finish()

    async def get_json(self, url: str) -> tuple[int, Mapping[str, str], Any]:
        return json_answer(self.owner, url, await self.fetch("GET", url, None))

    def _address(self, url: str) -> Any:
        scheme, sep, rest = url.partition("://")
        slash = rest.find("/")
        if slash >= 0:
            try:
                target = request_target(rest[slash:].partition("#")[0])
            except ValueError as error:
                raise refused_url(url, error) from error
            url = f"{scheme}{sep}{rest[:slash]}{target}"
        return self._url(url, encoded=True)

    async def _read(self, response: Any) -> bytes:
        """The body, at most ``max_body_size`` bytes as sent and as decoded."""
        limit = self.owner.max_body_size
        if response.content_length is not None and response.content_length > limit:
            raise UnreadableResponse(f"the body is over max_body_size={limit:,} bytes")
        chunks, size = [], 0
        async for chunk in response.content.iter_any():
            size += len(chunk)
            if size > limit:
                raise UnreadableResponse(f"the body is over max_body_size={limit:,} bytes")
            chunks.append(chunk)
        codings = header_values(response.headers, "Content-Encoding")
        return decode(", ".join(codings), b"".join(chunks), limit)

    async def close(self) -> None:
        self.deadlines.close()
        await self.session.close()


def _fail_cut_bodies(connector: Any) -> None:
    """Make ``connector``'s connections fail a body that a reset (any close but a clean EOF)
    cut. aiohttp ends an answer without a length (no ``Content-Length``, not chunked) at the
    close of its connection however it closed: a body cut by a reset would pass for the whole
    one (an empty one for no answer at all). With this, reading it raises
    ``ClientPayloadError`` (a :class:`TransientError`, retried), as the asyncio client's
    ``ConnectionClosed`` does. It replaces the connector's protocol factory (``_factory``, a
    private attribute of aiohttp's ``BaseConnector``); an aiohttp without one keeps its own
    behaviour (the tests hold the installed one to this)."""
    factory = getattr(connector, "_factory", None)
    if isinstance(factory, functools.partial) and factory.func is _base_handler():
        connector._factory = functools.partial(
            _cut_body_handler(), *factory.args, **factory.keywords
        )


@functools.cache
def _base_handler() -> Any:
    from aiohttp.client_proto import ResponseHandler

    return ResponseHandler


@functools.cache
def _cut_body_handler() -> Any:
    from aiohttp import ClientPayloadError

    class CutBodyHandler(_base_handler()):  # type: ignore[misc]
        """aiohttp's ``ResponseHandler``; a body still being read fails when the connection
        is lost with an error."""

        def connection_lost(self, exc: BaseException | None) -> None:
            payload = self._payload
            if exc is not None and payload is not None and not payload.is_eof():
                payload.set_exception(
                    ClientPayloadError(f"Response payload is not completed: {exc!r}")
                )
            super().connection_lost(exc)

    return CutBodyHandler
