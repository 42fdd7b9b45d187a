"""HTTP/1.1 on asyncio protocols: the HTTP connector's default client.

Point lookups are small GETs on kept-alive connections, thousands per second per process; what
a request costs is the Python around it. Here a request is: a connection from the pool (a list
pop), one ``transport.write`` of the request line plus the origin's pre-built header block, and
one future that the connection's protocol resolves when ``httptools`` (llhttp, in C) has parsed
the response. No task, no stream reader, no timer and no context per request: the timeouts of
all requests run on one loop timer (:class:`~asyncio_lookup.runtime.deadlines.DeadlineQueue`),
which fails the request's future and aborts its connection.

- **Pool:** at most ``max_connections`` connections per client over all origins; a request
  that finds none idle opens one, or waits for one in order of arrival. An idle connection the
  server closed is dropped when its close arrives.
- **Kept-alive races:** a reused connection that closes before any byte of the answer (the
  server timed it out as the request left) is retried once on a new connection; every request
  of a lookup connector is a read.
- **TLS** with the default trust store (``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` honoured) and
  ALPN ``http/1.1``; **proxies** from the environment (``HTTP_PROXY``, ``HTTPS_PROXY``,
  ``NO_PROXY``): absolute-form requests for ``http://``, a ``CONNECT`` tunnel for ``https://``,
  ``Proxy-Authorization`` from the proxy URL's credentials.
- Redirects are not followed (credentials never go to another host); a response without a
  length ends at the connection's close; ``Connection: close`` is honoured.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import urllib.request
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import httptools

from asyncio_lookup.connectors.http_client import Fetched
from asyncio_lookup.runtime.deadlines import DeadlineQueue

USER_AGENT = "asyncio-lookup"
_SAFE_TARGET = "/?&=%:@!$'()*+,;~-._[]"


class Headers(Mapping[str, str]):
    """A response's headers, read-only; names are case-insensitive (the last value wins)."""

    __slots__ = ("_by_name", "_raw")

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        self._raw = raw
        self._by_name: dict[str, str] | None = None

    def _index(self) -> dict[str, str]:
        if self._by_name is None:
            self._by_name = {
                k.decode("latin-1").lower(): v.decode("latin-1") for k, v in self._raw
            }
        return self._by_name

    def __getitem__(self, name: str) -> str:
        return self._index()[name.lower()]

    def get(self, name: str, default: Any = None) -> Any:
        return self._index().get(name.lower(), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._index()

    def __iter__(self) -> Iterator[str]:
        return iter(self._index())

    def __len__(self) -> int:
        return len(self._index())

    def __repr__(self) -> str:
        return f"Headers({self._index()!r})"


class ConnectionClosed(ConnectionError):
    """The server closed the connection before the answer was complete."""

    def __init__(self, message: str, *, before_answer: bool) -> None:
        super().__init__(message)
        self.before_answer = before_answer


class ProtocolViolation(ConnectionError):
    """The server's answer is not HTTP/1.1 this client can read."""


class _Origin:
    """Where the requests for one ``scheme://authority`` go, and their pre-built header block."""

    __slots__ = ("absolute", "address", "authority", "host", "port", "proxy", "tail", "tls")

    def __init__(
        self, scheme: str, authority: str, headers: bytes, proxies: Mapping[str, str]
    ) -> None:
        parts = urlsplit(f"{scheme}://{authority}")
        if not parts.hostname:
            raise ValueError(f"no host in {scheme}://{authority}")
        self.host = parts.hostname
        self.port = parts.port or (443 if scheme == "https" else 80)
        self.tls = scheme == "https"
        self.authority = authority.rpartition("@")[2]
        self.proxy: tuple[str, int, bytes] | None = None
        self.absolute = ""  # the prefix of an absolute-form target (http:// through a proxy)
        proxy_headers = b""
        proxy_url = proxies.get(scheme)
        bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
        if proxy_url and not bypass(self.host, proxies):
            proxy = urlsplit(proxy_url if "://" in proxy_url else f"http://{proxy_url}")
            authorization = b""
            if proxy.username is not None:
                credentials = f"{unquote(proxy.username)}:{unquote(proxy.password or '')}"
                token = base64.b64encode(credentials.encode()).decode()
                authorization = f"Proxy-Authorization: Basic {token}\r\n".encode("latin-1")
            self.proxy = (proxy.hostname or "127.0.0.1", proxy.port or 80, authorization)
            if not self.tls:
                self.absolute = f"{scheme}://{self.authority}"
                proxy_headers = authorization
        self.address = (self.proxy[0], self.proxy[1]) if self.proxy else (self.host, self.port)
        self.tail = (
            b"Host: " + self.authority.encode("idna" if not authority.isascii() else "ascii")
            + b"\r\n" + headers + proxy_headers
        )


class _Exchange:
    """One request's deadline in the client's :class:`DeadlineQueue`."""

    __slots__ = ("armed", "at", "connection", "waiter")

    def __init__(self, at: float) -> None:
        self.at = at
        self.armed = True
        self.connection: _Connection | None = None
        self.waiter: asyncio.Future[Any] | None = None

    def expire(self) -> None:
        self.armed = False
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(TimeoutError())
        if self.connection is not None:
            self.connection.abort()


class _Connection(asyncio.Protocol):
    """One kept-alive connection; answers the request in flight through ``waiter``."""

    def __init__(self, origin: _Origin, pool: ConnectionPool) -> None:
        self.origin = origin
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future[Fetched] | None = None
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.received = False  # a byte of the current answer has arrived
        self.headers_done = False
        self.closed = False
        self.idle = False
        self.reused = False
        self.tunnel: asyncio.Future[bytes] | None = None  # a proxy's answer to CONNECT
        self.tunnel_buffer = b""

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.tunnel is not None:
            self._tunnel_data(data)
            return
        self.received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:  # pragma: no cover - we never ask to upgrade
            self._fail(ProtocolViolation("the server switched protocols"))
        except httptools.HttpParserError as error:
            self._fail(ProtocolViolation(f"unreadable HTTP answer: {error}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.idle:
            self.idle = False
            self.pool.lost_idle(self)
        if self.tunnel is not None and not self.tunnel.done():
            self.tunnel.set_exception(ConnectionClosed("the proxy closed", before_answer=True))
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        if self.headers_done and self._reads_to_close():
            self.waiter = None
            waiter.set_result(self._answer())
            return
        reason = f": {exc}" if exc else ""
        waiter.set_exception(ConnectionClosed(
            f"the server closed the connection{reason}", before_answer=not self.received
        ))

    # -- httptools callbacks -----------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.raw_headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.headers_done = True

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        waiter, self.waiter = self.waiter, None
        answer = self._answer()
        if not self.parser.should_keep_alive():
            self.abort()
        if waiter is not None and not waiter.done():
            waiter.set_result(answer)

    # -- requests ----------------------------------------------------------------------------

    def send(self, request: bytes, loop: asyncio.AbstractEventLoop) -> asyncio.Future[Fetched]:
        self.waiter = waiter = loop.create_future()
        self.received = self.headers_done = False
        assert self.transport is not None
        self.transport.write(request)
        return waiter

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _answer(self) -> Fetched:
        body = self.body[0] if len(self.body) == 1 else b"".join(self.body)
        answer = (self.parser.get_status_code(), Headers(self.raw_headers), body)
        self.raw_headers, self.body = [], []
        return answer

    def _reads_to_close(self) -> bool:
        names = {k.lower() for k, _ in self.raw_headers}
        return b"content-length" not in names and b"transfer-encoding" not in names

    def _fail(self, error: BaseException) -> None:
        waiter, self.waiter = self.waiter, None
        self.abort()
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)

    # -- CONNECT through a proxy ---------------------------------------------------------------

    def _tunnel_data(self, data: bytes) -> None:
        assert self.tunnel is not None
        self.tunnel_buffer += data
        if b"\r\n\r\n" in self.tunnel_buffer and not self.tunnel.done():
            self.tunnel.set_result(self.tunnel_buffer)


class ConnectionPool:
    """At most ``limit`` connections over all origins; idle ones kept per origin, reused
    newest first; requests that find none wait in order of arrival."""

    def __init__(self, limit: int, ssl_context: ssl.SSLContext) -> None:
        self.limit = limit
        self.open = 0
        self.idle: dict[_Origin, list[_Connection]] = {}
        self.waiters: deque[asyncio.Future[None]] = deque()
        self.ssl_context = ssl_context

    def take_idle(self, origin: _Origin) -> _Connection | None:
        """An idle connection to ``origin``, if one is kept."""
        idle = self.idle.get(origin)
        while idle:
            connection = idle.pop()
            connection.idle = False
            if not connection.closed:
                return connection
            self.open -= 1  # closing, its connection_lost not yet run
        return None

    async def acquire(self, origin: _Origin) -> _Connection:
        """An idle connection to ``origin``, else a new one, else the next one freed."""
        while True:
            connection = self.take_idle(origin)
            if connection is not None:
                return connection
            if self.open < self.limit or self._close_one_idle():
                self.open += 1
                try:
                    return await _connect(origin, self)
                except BaseException:
                    self.open -= 1
                    self._wake()
                    raise
            waiter = asyncio.get_running_loop().create_future()
            self.waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._wake()  # woken as we were cancelled: pass the turn on
                raise

    def release(self, connection: _Connection) -> None:
        """``connection`` has answered its request: keep it idle for the next one."""
        if connection.closed:
            self.discard(connection)
            return
        connection.idle = connection.reused = True
        self.idle.setdefault(connection.origin, []).append(connection)
        self._wake()

    def discard(self, connection: _Connection) -> None:
        """Close ``connection`` (mid-request or broken) and free its slot."""
        connection.abort()
        self.open -= 1
        self._wake()

    def lost_idle(self, connection: _Connection) -> None:
        """An idle connection closed (the server's keep-alive timeout): free its slot."""
        idle = self.idle.get(connection.origin)
        if idle and connection in idle:
            idle.remove(connection)
            self.open -= 1
            self._wake()

    def _wake(self) -> None:
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _close_one_idle(self) -> bool:
        """Free a slot held by an idle connection to another origin."""
        for connections in self.idle.values():
            if connections:
                connection = connections.pop(0)
                connection.idle = False
                connection.abort()
                self.open -= 1
                return True
        return False

    def close(self) -> None:
        for connections in self.idle.values():
            for connection in connections:
                connection.idle = False
                connection.abort()
        self.idle.clear()
        for waiter in self.waiters:
            waiter.cancel()
        self.waiters.clear()


async def _connect(origin: _Origin, pool: ConnectionPool) -> _Connection:
    loop, ssl_context = asyncio.get_running_loop(), pool.ssl_context
    host, port = origin.address
    if origin.proxy is None or not origin.tls:
        _, protocol = await loop.create_connection(
            lambda: _Connection(origin, pool), host, port,
            ssl=ssl_context if origin.tls else None,
            server_hostname=origin.host if origin.tls else None,
        )
        return protocol
    # https:// through a proxy: CONNECT, then TLS inside the tunnel
    connection = _Connection(origin, pool)
    transport, _ = await loop.create_connection(lambda: connection, host, port)
    try:
        connection.tunnel = loop.create_future()
        target = f"{origin.host}:{origin.port}".encode("idna")
        transport.write(
            b"CONNECT " + target + b" HTTP/1.1\r\nHost: " + target + b"\r\n"
            + origin.proxy[2] + b"\r\n"
        )
        answer = await connection.tunnel
        status_line = answer.split(b"\r\n", 1)[0].split()
        if len(status_line) < 2 or not status_line[1].startswith(b"2"):
            raise ConnectionError(
                f"the proxy refused to CONNECT to {origin.host}:{origin.port}: "
                + answer.split(b"\r\n", 1)[0].decode("latin-1")
            )
        connection.tunnel = None
        tls = await loop.start_tls(
            transport, connection, ssl_context, server_hostname=origin.host
        )
        if tls is None:  # pragma: no cover - asyncio returns None only when closing
            raise ConnectionClosed("the tunnel closed", before_answer=True)
        connection.transport = tls
        return connection
    except BaseException:
        transport.abort()
        raise


def default_ssl_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.set_alpn_protocols(["http/1.1"])
    return context


class Http11Client:
    """``fetch`` and ``get_json`` over :class:`ConnectionPool`; one per connector instance
    and event loop. ``headers`` go with every request."""

    def __init__(
        self,
        max_connections: int,
        timeout: float,
        headers: Mapping[str, str],
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.timeout = timeout
        block = "".join(f"{k}: {v}\r\n" for k, v in {"User-Agent": USER_AGENT, **headers}.items())
        self._headers = block.encode("latin-1")
        self._proxies = urllib.request.getproxies_environment()
        self._origins: dict[str, _Origin] = {}
        self.pool = ConnectionPool(max_connections, ssl_context or default_ssl_context())
        self.deadlines: DeadlineQueue[_Exchange] = DeadlineQueue()
        self._loop: asyncio.AbstractEventLoop | None = None

    def _origin(self, origin_url: str) -> _Origin:
        origin = self._origins.get(origin_url)
        if origin is None:
            scheme, _, authority = origin_url.partition("://")
            if scheme not in ("http", "https"):
                raise ValueError(f"not an http:// or https:// URL: {origin_url}")
            origin = _Origin(scheme, authority, self._headers, self._proxies)
            self._origins[origin_url] = origin
        return origin

    def _split(self, url: str) -> tuple[_Origin, str]:
        start = url.find("://") + 3
        slash = url.find("/", start)
        if slash < 0:
            authority_end = len(url)
            target = "/"
        else:
            authority_end = slash
            target = url[slash:]
        for mark in "?#":
            at = url.find(mark, start, authority_end)
            if at >= 0:  # "http://host?x": a query without a path
                authority_end = at
                target = "/" + url[at:]
        if "#" in target:
            target = target.partition("#")[0]
        if not target.isascii():
            target = quote(target, safe=_SAFE_TARGET)
        return self._origin(url[:authority_end]), target

    async def fetch(self, method: str, url: str, body: bytes | None = None) -> Fetched:
        """``(status, headers, body)`` of one request; raises ``TimeoutError`` past the
        timeout, :class:`ConnectionError` / ``OSError`` when the exchange fails."""
        origin, target = self._split(url)
        head = f"{method} {origin.absolute}{target} HTTP/1.1\r\n".encode("ascii")
        if body is None:
            request = head + origin.tail + b"\r\n"
        else:
            length = f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            request = head + origin.tail + length.encode("ascii") + body
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # first use, or a new loop: the old one's state is gone
            self._reset(loop)
        exchange = _Exchange(loop.time() + self.timeout)
        self.deadlines.trim()
        self.deadlines.add(exchange)
        try:
            for attempt in (1, 2):
                connection = self.pool.take_idle(origin)
                if connection is None:
                    async with asyncio.timeout_at(exchange.at):
                        connection = await self.pool.acquire(origin)
                exchange.connection = connection
                exchange.waiter = waiter = connection.send(request, loop)
                try:
                    answer = await waiter
                except ConnectionClosed as closed:
                    self.pool.discard(connection)
                    exchange.connection = None
                    if attempt == 1 and closed.before_answer and connection.reused:
                        continue  # the server closed the kept-alive connection as we sent
                    raise
                except BaseException:
                    self.pool.discard(connection)
                    exchange.connection = None
                    raise
                exchange.connection = None
                self.pool.release(connection)
                return answer
            raise AssertionError("unreachable")  # pragma: no cover
        finally:
            exchange.armed = False
            exchange.waiter = None

    def _reset(self, loop: asyncio.AbstractEventLoop) -> None:
        self.deadlines.close()
        self.deadlines = DeadlineQueue(loop)
        self.pool.close()
        self.pool = ConnectionPool(self.pool.limit, self.pool.ssl_context)
        self._loop = loop

    async def close(self) -> None:
        self.deadlines.close()
        self.pool.close()


__all__ = ["ConnectionClosed", "ConnectionPool", "Headers", "Http11Client", "ProtocolViolation"]
