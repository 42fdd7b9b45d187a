"""HTTP/1.1 on asyncio protocols: the HTTP connector's default client.

Point lookups are small GETs on kept-alive connections, thousands per second per process; what
a request costs is the Python around it. Here a request is: a connection from the pool (a list
pop), one ``transport.write`` of the request line plus the origin's pre-built header block, and
one future that the connection's protocol
(:class:`~asyncio_lookup.connectors.http11_connection.Http11Connection`: interim answers,
limits, codings, one answer per request) resolves when ``httptools`` (llhttp, in C) has parsed
the response. No task, no stream reader, no timer and no context per request: the timeouts of
all requests run on one loop timer (:class:`~asyncio_lookup.runtime.deadlines.DeadlineQueue`),
which fails the request's future and aborts its connection.

- **Pool:** at most ``max_connections`` connections per client over all origins; a request
  that finds none idle opens one, or waits for one in order of arrival. Idle connections are
  retired after ``idle_timeout`` (15 s, or a second before the server's ``Keep-Alive:
  timeout=``) by one sweep timer; one the server closed is dropped when its close arrives.
- **Closed before the answer:** a request whose connection closes before any byte of the
  answer is sent once more on a new connection when the connection was kept alive (the
  server's idle timeout raced the request; every request of a lookup connector is a read) or
  the method is idempotent (``GET``, ``HEAD``: a server may close a fresh connection it has not
  read in time, as hypercorn does after its keep-alive timeout). aiohttp does the same (RFC 9112
  §9.3.1). Not once the request's deadline has passed: then it is a ``TimeoutError``.
- **Requests:** targets percent-encoded as RFC 3986 allows (what is legal is kept); control
  characters in a URL or a header are refused before anything is sent. ``Accept-Encoding``
  names the codings :mod:`~asyncio_lookup.connectors.http_codings` decodes.
- **TLS** with the default trust store (``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` honoured) and
  ALPN ``http/1.1``; **proxies** from the environment (``HTTP_PROXY``, ``HTTPS_PROXY``,
  ``NO_PROXY``): absolute-form requests for ``http://``, a ``CONNECT`` tunnel for ``https://``,
  ``Proxy-Authorization`` from the proxy URL's credentials.
- Not done: redirects (credentials never go to another host), cookies, HTTP/2, pipelining.
  A response without a length ends at the connection's clean close (a reset fails it:
  :class:`ConnectionClosed`, not resent); ``Connection: close`` is honoured.
"""

from __future__ import annotations

import asyncio
import math
import select
import ssl
import urllib.request
from collections import deque
from collections.abc import Mapping
from typing import Any

from asyncio_lookup.connectors.http11_connection import (
    ConnectionClosed,
    Headers,
    Http11Connection,
    Limits,
    ProtocolViolation,
    UnreadableResponse,
)
from asyncio_lookup.connectors.http11_request import (
    CONTROL,
    PLAIN_TARGET,
    USER_AGENT,
    Origin,
    header_block,
    request_target,
)
from asyncio_lookup.connectors.http_client import Fetched, ProxyRefused
from asyncio_lookup.connectors.http_codings import ACCEPT_ENCODING
from asyncio_lookup.runtime.deadlines import DeadlineQueue

IDLE_TIMEOUT = 15.0  # seconds an idle connection is kept (aiohttp's keep-alive default)
_SWEEP_SLACK = 0.05  # the sweep timer fires this late, to retire several connections at once


class _Exchange:
    """One request's deadline in the client's :class:`DeadlineQueue`."""

    __slots__ = ("armed", "at", "connection", "waiter")

    def __init__(self, at: float) -> None:
        self.at = at
        self.armed = True
        self.connection: Http11Connection | None = None
        self.waiter: asyncio.Future[Any] | None = None

    def expire(self) -> None:
        self.armed = False
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(TimeoutError())
        if self.connection is not None:
            self.connection.abort()


class ConnectionPool:
    """At most ``limit`` connections over all origins; idle ones kept per origin, reused
    newest first, retired after ``idle_timeout`` seconds (or sooner, by the server's
    ``Keep-Alive: timeout=``) so no request goes out on a connection the server is closing
    and none holds a server's connection slot for long; requests that find none wait in
    order of arrival."""

    def __init__(
        self,
        limit: int,
        ssl_context: ssl.SSLContext,
        limits: Limits | None = None,
        idle_timeout: float = IDLE_TIMEOUT,
    ) -> None:
        self.limit = limit
        self.open = 0
        self.idle: dict[Origin, list[Http11Connection]] = {}
        self.waiters: deque[asyncio.Future[None]] = deque()
        self.ssl_context = ssl_context
        self.limits = limits or Limits()
        self.idle_timeout = idle_timeout
        self._sweep: asyncio.TimerHandle | None = None

    def take_idle(self, origin: Origin, now: float) -> Http11Connection | None:
        """An idle connection to ``origin`` that is not about to expire, if one is kept;
        ``now`` on the loop's clock."""
        idle = self.idle.get(origin)
        while idle:
            connection = idle.pop()
            connection.idle = False
            if (
                not connection.closed
                and connection.expires > now
                and (now - connection.idle_since < _UNREAD_CHECK_AFTER or not _unread(connection))
            ):
                return connection
            if not connection.closed:
                connection.abort()
            self.open -= 1  # closed, or closing: its connection_lost finds it no longer idle
        return None

    async def acquire(self, origin: Origin, fresh: bool = False) -> Http11Connection:
        """An idle connection to ``origin``, else a new one, else the next one freed;
        ``fresh``: a new one (an idle one closed to make room, if need be)."""
        loop = asyncio.get_running_loop()
        while True:
            connection = None if fresh else self.take_idle(origin, loop.time())
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
            waiter = loop.create_future()
            self.waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._wake()  # woken as we were cancelled: pass the turn on
                raise

    def release(self, connection: Http11Connection, since: float, now: float) -> None:
        """``connection`` has answered its request (sent at ``since``; ``now`` on the loop's
        clock): keep it idle for the next one, until ``since`` plus its idle lifetime."""
        if connection.closed:
            self.discard(connection)
            return
        connection.idle_since = now
        lifetime = self.idle_timeout
        if connection.keep_alive is not None:  # retire it a second before the server does
            lifetime = min(lifetime, max(connection.keep_alive - 1.0, connection.keep_alive / 2))
        connection.expires = since + lifetime
        connection.idle = connection.reused = True
        idle = self.idle.get(connection.origin)
        if idle is None:  # (not setdefault: its default list would be built every time)
            idle = self.idle[connection.origin] = []
        idle.append(connection)
        if self._sweep is None:
            loop = asyncio.get_running_loop()
            self._sweep = loop.call_at(connection.expires + _SWEEP_SLACK, self._retire_expired)
        if self.waiters:
            self._wake()

    def discard(self, connection: Http11Connection) -> None:
        """Close ``connection`` (mid-request or broken) and free its slot."""
        connection.abort()
        self.open -= 1
        self._wake()

    def lost_idle(self, connection: Http11Connection) -> None:
        """An idle connection closed (the server's keep-alive timeout): free its slot."""
        idle = self.idle.get(connection.origin)
        if idle and connection in idle:
            idle.remove(connection)
            self.open -= 1
            self._wake()

    def _retire_expired(self) -> None:
        """The sweep timer: close the idle connections past their time, then wait for the next
        one to expire. A list is not in order of expiry (a connection's lifetime counts from
        its request's start, and the server's ``Keep-Alive: timeout=`` shortens it), so every
        connection is looked at: one expired behind a live one would re-arm the timer in the
        past for ever."""
        self._sweep = None
        loop = asyncio.get_running_loop()
        now, next_at = loop.time(), math.inf
        for connections in self.idle.values():
            soonest = math.inf
            expired = 0
            for connection in connections:
                if connection.expires <= now:
                    expired += 1
                elif connection.expires < soonest:
                    soonest = connection.expires
            if expired:
                kept: list[Http11Connection] = []
                for connection in connections:
                    if connection.expires <= now:
                        connection.idle = False
                        connection.abort()
                        self.open -= 1
                        self._wake()
                    else:
                        kept.append(connection)
                connections[:] = kept
            next_at = min(next_at, soonest)
        if next_at < math.inf:
            self._sweep = loop.call_at(next_at + _SWEEP_SLACK, self._retire_expired)

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
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for connections in self.idle.values():
            for connection in connections:
                connection.idle = False
                connection.abort()
        self.idle.clear()
        for waiter in self.waiters:
            waiter.cancel()
        self.waiters.clear()


# A connection idle this long (s) is checked for bytes the loop has not read yet before reuse:
# an answer nobody asked for (a broken server's duplicate) would be read as the next one's.
# Reused sooner, as under load, it was idle for less than a loop turn and is not checked.
_UNREAD_CHECK_AFTER = 0.001


def _unread(connection: Http11Connection) -> bool:
    """Whether ``connection``'s socket holds bytes (or its end) that arrived while it was
    idle and the loop has not read: it can't be trusted with a request."""
    fileno = connection.fileno
    if fileno < 0:
        return False
    try:
        if _POLL:  # select() refuses descriptors from 1024 on: every such reuse was refused
            poller = select.poll()
            poller.register(fileno, select.POLLIN | select.POLLPRI)
            return bool(poller.poll(0))
        readable, _, _ = select.select([fileno], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


_POLL = hasattr(select, "poll")


async def _connect(origin: Origin, pool: ConnectionPool) -> Http11Connection:
    loop, ssl_context = asyncio.get_running_loop(), pool.ssl_context
    host, port = origin.address
    if origin.proxy is None or not origin.tls:
        _, protocol = await loop.create_connection(
            lambda: Http11Connection(origin, pool, pool.limits),
            host,
            port,
            ssl=ssl_context if origin.tls else None,
            server_hostname=origin.host if origin.tls else None,
        )
        return protocol
    # https:// through a proxy: CONNECT, then TLS inside the tunnel
    connection = Http11Connection(origin, pool, pool.limits)
    transport, _ = await loop.create_connection(lambda: connection, host, port)
    try:
        connection.tunnel = loop.create_future()
        target = f"{origin.host}:{origin.port}".encode("idna")
        transport.write(
            b"CONNECT "
            + target
            + b" HTTP/1.1\r\nHost: "
            + target
            + b"\r\n"
            + origin.proxy[2]
            + b"\r\n"
        )
        answer = await connection.tunnel
        status_line = answer.split(b"\r\n", 1)[0]
        parts = status_line.split()
        status = int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else 0
        if not 200 <= status < 300:
            raise ProxyRefused(
                f"the proxy refused to CONNECT to {origin.host}:{origin.port}: "
                + status_line.decode("latin-1"),
                status,
            )
        connection.tunnel = None
        tls = await loop.start_tls(transport, connection, ssl_context, server_hostname=origin.host)
        if tls is None:  # pragma: no cover - asyncio returns None only when closing
            raise ConnectionClosed("the tunnel closed", before_answer=True)
        connection.transport = tls
        connection.fileno = -1  # TLS in the tunnel: see connection_made
        return connection
    except BaseException:
        transport.abort()
        raise


def default_ssl_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.set_alpn_protocols(["http/1.1"])
    return context


class Http11Client:
    """``fetch`` over :class:`ConnectionPool`; one per connector instance and event loop.
    ``headers`` go with every request, after ``User-Agent`` and ``Accept-Encoding`` (which
    ``headers`` may replace)."""

    def __init__(
        self,
        max_connections: int,
        timeout: float,
        headers: Mapping[str, str],
        ssl_context: ssl.SSLContext | None = None,
        limits: Limits | None = None,
        idle_timeout: float = IDLE_TIMEOUT,
    ) -> None:
        self.timeout = timeout
        given = {name.lower() for name in headers}
        defaults = {"User-Agent": USER_AGENT, "Accept-Encoding": ACCEPT_ENCODING}
        self._headers = header_block(
            {**{k: v for k, v in defaults.items() if k.lower() not in given}, **headers}
        )
        self._proxies = urllib.request.getproxies_environment()
        self._origins: dict[str, Origin] = {}
        self.pool = ConnectionPool(
            max_connections, ssl_context or default_ssl_context(), limits, idle_timeout
        )
        self.deadlines: DeadlineQueue[_Exchange] = DeadlineQueue()
        self._loop: asyncio.AbstractEventLoop | None = None
        # "scheme://authority/" of the last origin and the origin: most URLs repeat it
        self._last: tuple[str, Origin | None] = ("\x00", None)

    def _origin(self, origin_url: str) -> Origin:
        origin = self._origins.get(origin_url)
        if origin is None:
            scheme, _, authority = origin_url.partition("://")
            if scheme not in ("http", "https"):
                raise ValueError(f"not an http:// or https:// URL: {origin_url}")
            if CONTROL.search(authority) or " " in authority:
                raise ValueError(f"a space or control character in the host of {origin_url!r}")
            origin = Origin(scheme, authority, self._headers, self._proxies)
            origin.url_prefix = origin_url + "/"
            self._origins[origin_url] = origin
        return origin

    def _split(self, url: str) -> tuple[Origin, str]:
        prefix, last = self._last
        if (
            last is not None
            and url.startswith(prefix)
            and PLAIN_TARGET.fullmatch(url, len(prefix) - 1)
        ):
            # the last origin again, and a target with nothing to encode or check: the slow
            # path below would find the same authority and keep the target as it is
            return last, url[len(prefix) - 1 :]
        origin, target = self._split_slowly(url)
        if url.startswith(origin.url_prefix):
            self._last = origin.url_prefix, origin
        return origin, target

    def _split_slowly(self, url: str) -> tuple[Origin, str]:
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
        return self._origin(url[:authority_end]), request_target(target)

    async def fetch(self, method: str, url: str, body: bytes | None = None) -> Fetched:
        """``(status, headers, body)`` of one request; raises ``TimeoutError`` past the
        timeout, :class:`ConnectionError` / ``OSError`` when the exchange fails,
        :class:`UnreadableResponse` for an answer over a limit or in an unknown coding, and
        :class:`ValueError` for a URL it will not send."""
        origin, target = self._split(url)
        head = f"{method} {origin.absolute}{target} HTTP/1.1\r\n".encode("ascii")
        if body is None:
            request = head + origin.tail_end
        else:
            length = f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            request = head + origin.tail + length.encode("ascii") + body
        head_only = method == "HEAD"
        idempotent = head_only or method == "GET"
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # first use, or a new loop: the old one's state is gone
            self._reset(loop)
        now = loop.time()
        exchange = _Exchange(now + self.timeout)
        self.deadlines.trim()
        self.deadlines.add(exchange)
        try:
            for attempt in (1, 2):
                if attempt == 2 and not exchange.armed:
                    # the deadline passed as the close came in (expire() found the request
                    # failed already): the resend would run with no deadline
                    raise TimeoutError()
                if attempt == 1:
                    connection = self.pool.take_idle(origin, now)
                else:  # a new connection: another idle one may be closing as well
                    connection, now = None, loop.time()
                if connection is None:
                    async with asyncio.timeout_at(exchange.at):
                        connection = await self.pool.acquire(origin, fresh=attempt == 2)
                exchange.connection = connection
                exchange.waiter = waiter = connection.send(request, loop, head_only)
                try:
                    answer = await waiter
                except ConnectionClosed as closed:
                    self.pool.discard(connection)
                    exchange.connection = None
                    if attempt == 1 and closed.before_answer and (connection.reused or idempotent):
                        continue  # closed as we sent: an idle timeout raced the request
                    raise
                except UnreadableResponse:
                    exchange.connection = None
                    # framing intact unless it was aborted
                    self.pool.release(connection, now, loop.time())
                    raise
                except BaseException:
                    self.pool.discard(connection)
                    exchange.connection = None
                    raise
                exchange.connection = None
                self.pool.release(connection, now, loop.time())
                return answer
            raise AssertionError("unreachable")  # pragma: no cover
        finally:
            exchange.armed = False
            exchange.waiter = None

    def _reset(self, loop: asyncio.AbstractEventLoop) -> None:
        old = self._loop
        if old is None or not old.is_closed():  # a closed loop's transports went with it
            self.deadlines.close()
            self.pool.close()
        self.deadlines = DeadlineQueue(loop)
        pool = self.pool
        self.pool = ConnectionPool(pool.limit, pool.ssl_context, pool.limits, pool.idle_timeout)
        self._loop = loop

    async def close(self) -> None:
        self.deadlines.close()
        self.pool.close()


__all__ = [
    "ConnectionClosed",
    "ConnectionPool",
    "Headers",
    "Http11Client",
    "Limits",
    "ProtocolViolation",
    "ProxyRefused",
    "UnreadableResponse",
]
