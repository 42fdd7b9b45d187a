"""aiohttp behind the HTTP connector's client interface: a candidate of the ``http-clients``
benchmark only (the library's clients are ``asyncio`` and ``pyreqwest``; docs/design.md, "The
HTTP client"). Plug it in with ``function.client = AiohttpClient(connector)`` before ``open()``.
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Mapping
from typing import Any

from asyncio_lookup.connectors.http_client import Fetched, decode_json, timeout_error
from asyncio_lookup.connectors.http_connector import HttpConnector
from asyncio_lookup.runtime.deadlines import Deadlines

_JSON_BODY = {"Content-Type": "application/json"}


class AiohttpClient:
    """aiohttp: one session (pool of ``max_connections``); the timeouts of all requests run on
    one loop timer (:class:`Deadlines`); the URL is sent as given (``encoded=True``)."""

    def __init__(self, c: HttpConnector) -> None:
        import aiohttp
        from yarl import URL

        self.connector = c
        self._url = URL
        self._errors = (aiohttp.ClientError, asyncio.TimeoutError, OSError)
        self.deadlines = Deadlines(c.timeout)
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=c.max_connections),
            timeout=aiohttp.ClientTimeout(total=None),  # the deadlines time each request
            headers=c.request_headers(),  # every request's (not merged per request)
            raise_for_status=False,
            # proxies from HTTP(S)_PROXY / NO_PROXY, as reqwest does; aiohttp then looks them
            # up per request, so only when the environment names one
            trust_env=bool(urllib.request.getproxies()),
        )

    async def fetch(self, method: str, url: str, body: bytes | None) -> Fetched:
        c = self.connector
        deadline = self.deadlines.start()
        try:
            async with self.session.request(
                method,
                self._url(url, encoded=True),
                data=body,
                headers=None if body is None else _JSON_BODY,
                allow_redirects=False,  # not to other hosts with our credentials
            ) as response:
                return response.status, response.headers, await response.read()
        except self._errors as error:
            raise c.failure(error, method, url) from error
        except asyncio.CancelledError:
            if deadline.timed_out():
                timeout = timeout_error(c)
                raise c.failure(timeout, method, url) from timeout
            raise
        finally:
            deadline.finish()

    async def get_json(self, url: str) -> tuple[int, Mapping[str, str], Any]:
        status, headers, body = await self.fetch("GET", url, None)
        if 200 <= status < 300 and status != 204:
            return status, headers, decode_json(self.connector, "GET", url, body)
        return status, headers, body

    async def close(self) -> None:
        self.deadlines.close()
        await self.session.close()
