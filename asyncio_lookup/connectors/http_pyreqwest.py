"""The ``pyreqwest`` client (extra ``asyncio-lookup[pyreqwest]``): Rust reqwest + hyper on a
tokio thread, HTTP/2 where a TLS server offers it. The body is read in chunks up to
``max_body_size`` and decoded by :mod:`~asyncio_lookup.connectors.http_codings` (reqwest's own
decoding is off), as the other clients do."""

from __future__ import annotations

import re
import socket
import ssl
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from asyncio_lookup.connectors.http_answers import header_values
from asyncio_lookup.connectors.http_asyncio import AsyncioClient
from asyncio_lookup.connectors.http_client import (
    ClientOwner,
    Fetched,
    UnreadableResponse,
    decode_json,
    failure,
)
from asyncio_lookup.connectors.http_codings import decode, with_accept_encoding
from asyncio_lookup.errors import ConfigurationError

_JSON_BODY = {"Content-Type": "application/json"}


def has_dot_segment(url: str) -> bool:
    """Whether the path of ``url`` has a segment that WHATWG URL parsers (reqwest's) take for
    ``.`` or ``..`` and remove: ``%2E`` / ``%2E%2E`` from a key that is only dots."""
    if "%2E" not in url and "%2e" not in url:
        return False
    path = url.split("://", 1)[-1].partition("/")[2]
    path = path.split("?", 1)[0].split("#", 1)[0]
    dots = {"%2e", "%2e%2e", ".%2e", "%2e."}
    return any(segment.lower() in dots for segment in path.split("/"))


def _as_python_error(error: BaseException) -> BaseException:
    """reqwest names its causes in text only: a rejected certificate and an unknown host as
    the Python errors the asyncio client sees, so both are classified alike."""
    text = str(error)
    if "invalid peer certificate" in text or "certificate verify failed" in text:
        found = ssl.SSLCertVerificationError(text)
        reason = text.rpartition("invalid peer certificate: ")[2]
        found.verify_message = re.split(r"['\"]", reason, maxsplit=1)[0]
        return found
    if "Name or service not known" in text or "nodename nor servname" in text:
        return socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    return error


def _over(limit: int) -> UnreadableResponse:
    return UnreadableResponse(f"the body is over max_body_size={limit:,} bytes")


class PyreqwestClient:
    """pyreqwest: one ``Client`` (pool of ``max_connections``), the total per-request timeout
    in Rust, redirects not followed, HTTP/2 where a TLS server offers it, proxies from the
    environment (reqwest's default)."""

    def __init__(self, owner: ClientOwner) -> None:
        try:
            from pyreqwest.client import ClientBuilder
            from pyreqwest.exceptions import JSONDecodeError, PyreqwestError, RequestTimeoutError
        except ImportError as error:
            raise ConfigurationError(
                "client",
                "pyreqwest",
                "'asyncio', or install asyncio-lookup[pyreqwest]",
                f"pyreqwest is not installed here ({error})",
            ) from error

        self.owner = owner
        self._timeout_errors = (RequestTimeoutError,)
        self._errors = (PyreqwestError, OSError, UnreadableResponse)
        self._json_error = JSONDecodeError
        self.client = (
            ClientBuilder()
            .max_connections(owner.max_connections)
            .pool_max_idle_per_host(owner.max_connections)
            .timeout(timedelta(seconds=owner.timeout))
            .follow_redirects(False)
            .http2(True)  # negotiated (ALPN) where a TLS server offers it
            .gzip(False)  # decoded, bounded, by http_codings
            .brotli(False)
            .zstd(False)
            .deflate(False)
            .default_headers(with_accept_encoding(owner.request_headers()))
            .build()
        )
        # a key that is only dots would be removed from the path by reqwest's URL parser:
        # such rare requests go through the asyncio client, which sends the path as it is
        self._dots: AsyncioClient | None = None

    async def fetch(self, method: str, url: str, body: bytes | None) -> Fetched:
        if has_dot_segment(url):
            return await self._dot_client().fetch(method, url, body)
        try:
            builder = self.client.request(method, url)
            if body is not None:
                builder = builder.body_bytes(body).headers(_JSON_BODY)
            return await self._send(builder)
        except self._timeout_errors as error:
            raise failure(self.owner, TimeoutError(), method, url) from error
        except self._errors as error:
            raise failure(self.owner, _as_python_error(error), method, url) from error

    async def get_json(self, url: str) -> tuple[int, Mapping[str, str], Any]:
        if has_dot_segment(url):
            return await self._dot_client().get_json(url)
        try:
            status, headers, body = await self._send(self.client.get(url))
        except self._timeout_errors as error:
            raise failure(self.owner, TimeoutError(), "GET", url) from error
        except self._errors as error:
            raise failure(self.owner, _as_python_error(error), "GET", url) from error
        if 200 <= status < 300 and status != 204:
            return status, headers, decode_json(self.owner, "GET", url, body)
        return status, headers, body

    async def _send(self, builder: Any) -> Fetched:
        """The answer, its body read in chunks up to ``max_body_size`` and then decoded."""
        limit = self.owner.max_body_size
        async with builder.build_streamed() as response:
            length = response.headers.get("Content-Length")
            if length is not None and length.isdigit() and int(length) > limit:
                raise _over(limit)
            chunks, size = [], 0
            while (chunk := await response.body_reader.read_chunk()) is not None:
                size += len(chunk)
                if size > limit:
                    raise _over(limit)
                chunks.append(bytes(chunk))
            codings = ", ".join(header_values(response.headers, "Content-Encoding"))
            return response.status, response.headers, decode(codings, b"".join(chunks), limit)

    def _dot_client(self) -> AsyncioClient:
        if self._dots is None:
            self._dots = AsyncioClient(self.owner)
        return self._dots

    async def close(self) -> None:
        await self.client.close()
        if self._dots is not None:
            await self._dots.close()
