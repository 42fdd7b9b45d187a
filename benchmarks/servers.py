"""Local services the harness starts itself.

- :class:`LatencyServer`: a "customer service" on 127.0.0.1 (random port) in a background thread,
  with injected latency (fixed plus an optional long tail), error and 429 rates, customers that
  appear late, and call counters. Endpoints:

  ``GET  /customers/{id}``             one customer as a JSON object, 404 when there is none
  ``GET  /customers?id=1&id=2``        batch: a JSON list of the customers found
  ``GET  /customers?ids=1,2,3``        the same
  ``POST /customers:batchGet``         batch: body ``{"keys": [{"id": 1}, ...]}`` or
                                       ``{"ids": [1, ...]}``, a JSON list of the customers found
  ``GET  /customers?offset=0&limit=N`` scan page: ``{"rows": [...], "next": url-or-null}``
  ``GET  /stats``, ``POST /reset``     the counters

  Any other method or path answers 404 (HEAD included), a malformed request 400 and a close.

- :class:`RedisDataset` and :class:`PostgresDataset`: load generated customers into the machine's
  Redis (a dedicated key prefix) and PostgreSQL (a dedicated table in database ``test``) and remove
  them again on exit.

The latency server stands in for a remote service, whose CPU is not the client's; here it shares
the machine's 2 cores with what is measured, so it is built to cost as little as possible: a raw
``asyncio.Protocol`` on uvloop, requests parsed by ``httptools`` (llhttp, in C: 1.6-2.3 µs per
typical GET against 3.9-5.1 µs for a hand parser built on ``bytes.find`` and ``split``, and it
handles chunked bodies and malformed input), one ``call_later`` per request and no task or
coroutine, every customer's JSON built once at start (~1.5 s for 100,000), responses cached,
counters as plain ints. Most of what is left is the loop and the kernel (a ``read`` and a ``write``
per request on loopback). Server CPU per request (its thread's CPU time; point lookups,
``python -m benchmarks.server_cost``), medians of 3, against the aiohttp application it replaced,
on the shared 2-core machine:

  ===================================  =====================  =====================
  client, in flight, latency           aiohttp app (req/s)    this server (req/s)
  ===================================  =====================  =====================
  aiohttp, 100 connections, 10 ms      208-230 µs (1.8-2.8k)  81-84 µs (2.4-2.8k)
  aiohttp, 1,000 connections, 100 ms   252-267 µs (1.6-1.8k)  90 µs (2.0-2.2k)
  pyreqwest, 100 in flight, 10 ms      188 µs (3.2k)          39 µs (7.5k)
  pyreqwest, 1,000 in flight, 100 ms   206 µs (4.8k)          43 µs (6.8k)
  ===================================  =====================  =====================

The cost per request falls as the rate rises (more requests per loop wake-up): the plain aiohttp
client cannot send more than 2-3,000 requests/s here, the library's pyreqwest client twice that.

Responses on a connection leave in request order (HTTP/1.1 pipelining) whatever their delays: each
connection keeps a queue of response slots, filled when their timers fire, written from its head.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import http.client
import json
import random
import threading
from collections.abc import Callable, Iterator
from typing import Any, cast
from urllib.parse import parse_qsl, unquote

import httptools

from benchmarks.data import customer_row

REDIS_URL = "redis://127.0.0.1:6379/0"
REDIS_PREFIX = "asyncio_lookup_bench:customer:"
POSTGRES_DSN = "postgresql://postgres@127.0.0.1:5432/test"
POSTGRES_TABLE = "asyncio_lookup_bench_customers"


@dataclasses.dataclass(frozen=True)
class Profile:
    """How the server misbehaves. Times in seconds, rates in [0, 1].

    ``late_fraction`` of the customers are "late": their first ``late_misses`` point lookups
    answer 404, later ones find the row (a dim row arriving after the fact row).
    429 answers carry ``Retry-After: retry_after``; errors answer ``error_status`` (503).
    """

    latency: float = 0.0
    tail_latency: float = 0.0
    tail_fraction: float = 0.0
    error_rate: float = 0.0
    throttle_rate: float = 0.0
    retry_after: int = 0
    error_status: int = 503
    late_fraction: float = 0.0
    late_misses: int = 1
    seed: int = 1


@dataclasses.dataclass(slots=True)
class _Counts:
    """The server's counters as plain ints (cheaper than a ``Counter`` on every request)."""

    requests: int = 0
    connections: int = 0
    point_calls: int = 0
    found: int = 0
    misses: int = 0
    batch_calls: int = 0
    batch_keys: int = 0
    scan_calls: int = 0
    throttled: int = 0
    errors: int = 0
    late_misses: int = 0
    max_in_flight: int = 0

    def as_dict(self) -> dict[str, int]:
        """The counters that have counted something (like a ``Counter``'s keys)."""
        return {name: value for name, value in dataclasses.asdict(self).items() if value}


def _response(status: int, body: bytes, extra_headers: bytes = b"") -> bytes:
    """An HTTP/1.1 response with a JSON body."""
    return (
        b"HTTP/1.1 %d %s\r\nContent-Type: application/json; charset=utf-8\r\n"
        b"Content-Length: %d\r\n%s\r\n%s"
        % (status, http.client.responses.get(status, "Unknown").encode(), len(body), extra_headers,
           body)
    )


def _json_response(value: Any, status: int = 200, extra_headers: bytes = b"") -> bytes:
    return _response(status, json.dumps(value).encode(), extra_headers)


def _without_keep_alive(response: bytes) -> bytes:
    return response.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1)


def _without_body(response: bytes) -> bytes:
    return response[: response.index(b"\r\n\r\n") + 4]


NOT_FOUND = _json_response({"error": "not found"}, 404)
BAD_REQUEST = _json_response({"error": "malformed request"}, 400)
BAD_BODY = _json_response({"error": "the body is not JSON"}, 400)
BAD_PAGE = _json_response({"error": "offset and limit are integers"}, 400)
EMPTY_OBJECT = _json_response({})

# A response being prepared: [bytes once answered, close the connection after it].
Slot = list[Any]
# Computes a response after the injected delay from what the request asked for.
Answer = Callable[[Any], bytes]


class LatencyServer:
    """The latency-injecting customer service, run on its own event loop in a daemon thread.

    Use as a context manager, or call :meth:`start` / :meth:`stop`. Change :attr:`profile`
    between runs with :meth:`configure`; read :meth:`stats` and :meth:`reset` the counters.
    """

    def __init__(self, n_customers: int = 100_000, profile: Profile | None = None) -> None:
        self.n_customers = n_customers
        self.profile = profile or Profile()
        self.host = "127.0.0.1"
        self.port = 0
        self._counts = _Counts()
        self._late_calls: collections.Counter[int] = collections.Counter()
        self._peers: set[Any] = set()  # (host, port) of the clients' connections seen
        self._rng = random.Random(self.profile.seed)
        self._in_flight = 0
        self._rows: list[bytes] = []  # the JSON of each customer, built when the server starts
        self._heads: dict[int, bytes] = {}  # body length -> head of a 200 response
        self._points: list[bytes | None] = [None] * n_customers  # 200 responses, once asked
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[_Connection] = set()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> LatencyServer:
        self._ready.clear()
        self._thread = threading.Thread(target=self._serve, name="latency-server", daemon=True)
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise RuntimeError("the latency server failed to start") from self._error
        if not self.port:
            raise RuntimeError("the latency server did not start within 30 s")
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        self._loop = self._thread = None

    def __enter__(self) -> LatencyServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def configure(self, profile: Profile) -> None:
        """Switch to ``profile`` and reset the counters and the late-customer state."""
        self.profile = profile
        self._rng = random.Random(profile.seed)
        self.reset()

    def reset(self) -> None:
        self._counts = _Counts()
        self._late_calls = collections.Counter()
        self._peers = set()

    def stats(self) -> dict[str, int]:
        return self._counts.as_dict()

    @property
    def counters(self) -> collections.Counter[str]:
        """A snapshot of the counters (the keys of :meth:`stats`)."""
        return collections.Counter(self.stats())

    def _serve(self) -> None:
        try:
            import uvloop

            loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        except ImportError:  # pragma: no cover - uvloop is a dev dependency
            loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            if len(self._rows) != self.n_customers:
                self._rows = [json.dumps(customer_row(i)).encode() for i in range(self.n_customers)]
            self._server = loop.run_until_complete(
                loop.create_server(lambda: _Connection(self), self.host, 0, backlog=4096)
            )
            self.port = self._server.sockets[0].getsockname()[1]
        except BaseException as error:
            self._error = error
            self._ready.set()
            return
        self._ready.set()
        loop.run_forever()
        loop.close()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
            for connection in list(self._connections):
                connection.close()
            await self._server.wait_closed()
            self._server = None

    # -- routing (on the server's loop) --------------------------------------------------------

    def _route(self, connection: _Connection, method: bytes, url: bytes, body: bytes,
               close: bool) -> None:
        """Answer one parsed request (queued on ``connection`` in arrival order)."""
        path, _, query = url.partition(b"?")
        if path.startswith(b"/customers/") and method == b"GET":
            raw_id = path[11:]
            if raw_id and b"/" not in raw_id:
                counts = self._counts
                counts.requests += 1
                peer = connection.peer
                if peer not in self._peers:
                    self._peers.add(peer)
                    counts.connections = len(self._peers)
                counts.point_calls += 1
                self._delay(connection, self._point_answer, raw_id, close)
                return
        elif path == b"/customers" and method == b"GET":
            self._list(connection, query, close)
            return
        elif path == b"/customers:batchGet" and method == b"POST":
            self._batch_post(connection, body, close)
            return
        elif path == b"/stats" and method == b"GET":
            connection.answer_now(_json_response(self.stats()), close)
            return
        elif path == b"/reset" and method == b"POST":
            self.reset()
            connection.answer_now(EMPTY_OBJECT, close)
            return
        connection.answer_now(NOT_FOUND if method != b"HEAD" else _without_body(NOT_FOUND), close)

    def _list(self, connection: _Connection, query: bytes, close: bool) -> None:
        params = parse_qsl(query.decode("latin-1"), keep_blank_values=True, encoding="utf-8")
        names = [name for name, _ in params]
        if "id" in names:
            self._batch(connection, [value for name, value in params if name == "id"], close)
            return
        if "ids" in names:
            raw = next(value for name, value in params if name == "ids")
            self._batch(connection, [part for part in raw.split(",") if part], close)
            return
        counts = self._counts
        counts.requests += 1
        counts.scan_calls += 1
        first = dict(reversed(params))
        try:
            offset = int(first.get("offset", "0"))
            limit = min(int(first.get("limit", "1000")), 10_000)
        except ValueError:
            connection.answer_now(BAD_PAGE, close)
            return
        self._delay(connection, self._scan_answer, (offset, limit), close)

    def _batch_post(self, connection: _Connection, body: bytes, close: bool) -> None:
        try:
            parsed = json.loads(body)
            if isinstance(parsed, dict) and "keys" in parsed:
                ids = [key.get("id") if isinstance(key, dict) else key for key in parsed["keys"]]
            else:
                ids = list(parsed.get("ids", []) if isinstance(parsed, dict) else parsed)
        except (ValueError, TypeError):
            connection.answer_now(BAD_BODY, close)
            return
        self._batch(connection, ids, close)

    def _batch(self, connection: _Connection, ids: list[Any], close: bool) -> None:
        counts = self._counts
        counts.requests += 1
        counts.batch_calls += 1
        counts.batch_keys += len(ids)
        self._delay(connection, self._batch_answer, ids, close)

    # -- behaviour -----------------------------------------------------------------------------

    def _delay(self, connection: _Connection, answer: Answer, asked: Any, close: bool) -> None:
        """Queue the response on ``connection`` and answer it after the injected latency."""
        profile = self.profile
        self._in_flight += 1
        counts = self._counts
        if self._in_flight > counts.max_in_flight:
            counts.max_in_flight = self._in_flight
        delay = profile.latency
        if profile.tail_fraction and self._rng.random() < profile.tail_fraction:
            delay = profile.tail_latency
        slot: Slot = [None, close]
        connection.queue.append(slot)
        if delay > 0:
            assert self._loop is not None
            self._loop.call_later(delay, self._answer, connection, slot, answer, asked)
        else:
            self._answer(connection, slot, answer, asked)

    def _answer(self, connection: _Connection, slot: Slot, answer: Answer, asked: Any) -> None:
        """After the delay: a 429/5xx when the dice say so, else ``answer(asked)``."""
        self._in_flight -= 1
        profile = self.profile
        roll = self._rng.random()
        if roll < profile.throttle_rate:
            self._counts.throttled += 1
            slot[0] = _json_response({"error": "slow down"}, 429,
                                     b"Retry-After: %d\r\n" % profile.retry_after)
        elif roll < profile.throttle_rate + profile.error_rate:
            self._counts.errors += 1
            slot[0] = _json_response({"error": "injected failure"}, profile.error_status)
        else:
            slot[0] = answer(asked)
        connection.flush()

    def _point_answer(self, raw_id: bytes) -> bytes:
        try:
            customer_id = int(unquote(raw_id.decode("latin-1")) if b"%" in raw_id else raw_id)
        except ValueError:
            customer_id = -1
        if not 0 <= customer_id < self.n_customers or (
            self.profile.late_fraction and self._late_miss(customer_id)
        ):
            self._counts.misses += 1
            return NOT_FOUND
        self._counts.found += 1
        response = self._points[customer_id]
        if response is None:
            response = self._points[customer_id] = self._ok(self._rows[customer_id])
        return response

    def _ok(self, body: bytes) -> bytes:
        """A 200 response with ``body``; its head is cached per body length."""
        head = self._heads.get(len(body))
        if head is None:
            head = self._heads[len(body)] = _without_body(_response(200, b" " * len(body)))
        return head + body

    def _batch_answer(self, ids: list[Any]) -> bytes:
        rows = [
            self._row(customer_id) for customer_id in map(self._customer_id, map(str, ids))
            if customer_id is not None
        ]
        counts = self._counts
        counts.found += len(rows)
        counts.misses += len(ids) - len(rows)
        return self._ok(b"[" + b", ".join(rows) + b"]")

    def _scan_answer(self, page: tuple[int, int]) -> bytes:
        offset, limit = page
        end = min(offset + limit, self.n_customers)
        rows = b", ".join(self._row(i) for i in range(offset, end))
        next_url = f"{self.base_url}/customers?offset={end}&limit={limit}"
        more = json.dumps(next_url if end < self.n_customers else None).encode()
        return self._ok(b'{"rows": [' + rows + b'], "next": ' + more + b"}")

    def _customer_id(self, raw: str | bytes) -> int | None:
        try:
            customer_id = int(raw)
        except ValueError:
            return None
        return customer_id if 0 <= customer_id < self.n_customers else None

    def _row(self, customer_id: int) -> bytes:
        """The JSON of a customer (ids outside the range, asked by a scan, are not cached)."""
        if 0 <= customer_id < self.n_customers:
            return self._rows[customer_id]
        return json.dumps(customer_row(customer_id)).encode()

    def _late_miss(self, customer_id: int) -> bool:
        """Whether this point lookup of a late customer answers 404 (and count it)."""
        profile = self.profile
        if not self._is_late(customer_id):
            return False
        self._late_calls[customer_id] += 1
        if self._late_calls[customer_id] <= profile.late_misses:
            self._counts.late_misses += 1
            return True
        return False

    def _is_late(self, customer_id: int) -> bool:
        # A fixed pseudo-random subset of the ids, independent of the request order.
        return ((customer_id * 2654435761) % 2**32) / 2**32 < self.profile.late_fraction


class _Connection(asyncio.Protocol):
    """One client connection: ``httptools`` parses, :class:`LatencyServer` routes, responses
    leave in request order from :attr:`queue`."""

    def __init__(self, server: LatencyServer) -> None:
        self.server = server
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.peer: Any = None
        self.queue: collections.deque[Slot] = collections.deque()
        self.url = b""
        self.body = b""
        self.closing = False  # a request asked to close, or was malformed: read no further

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's does not subclass it
        self.peer = transport.get_extra_info("peername")
        self.server._connections.add(self)

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            if not self.closing:
                self.answer_now(BAD_REQUEST, close=True)

    def connection_lost(self, exc: Exception | None) -> None:
        self.queue.clear()
        self.transport = None
        self.server._connections.discard(self)

    # httptools callbacks

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        url, body, self.url, self.body = self.url, self.body, b"", b""
        if self.closing:
            return
        parser = self.parser
        close = not parser.should_keep_alive()
        if close:
            self.closing = True
        self.server._route(self, parser.get_method(), url, body, close)

    # responses

    def answer_now(self, response: bytes, close: bool) -> None:
        """Queue an immediate response (behind any still waiting on this connection)."""
        if close:
            self.closing = True
        self.queue.append([response, close])
        self.flush()

    def flush(self) -> None:
        """Write the answered responses at the head of the queue."""
        queue, transport = self.queue, self.transport
        while queue and queue[0][0] is not None:
            response, close = queue.popleft()
            if transport is None:
                return
            if close:
                transport.write(_without_keep_alive(response))
                self.close()
                return
            transport.write(response)

    def close(self) -> None:
        self.queue.clear()
        if self.transport is not None:
            self.transport.close()
# -- Redis and PostgreSQL ------------------------------------------------------------------------


class RedisDataset:
    """``n_customers`` JSON strings under ``prefix{id}`` in the machine's Redis; deleted on exit."""

    def __init__(
        self, n_customers: int, url: str = REDIS_URL, prefix: str = REDIS_PREFIX
    ) -> None:
        self.n_customers = n_customers
        self.url = url
        self.prefix = prefix

    @property
    def key_template(self) -> str:
        return self.prefix + "{id}"

    def __enter__(self) -> RedisDataset:
        import redis

        self.cleanup()
        client = redis.Redis.from_url(self.url)
        try:
            for start in range(0, self.n_customers, 5000):
                pipe = client.pipeline(transaction=False)
                for i in range(start, min(start + 5000, self.n_customers)):
                    pipe.set(f"{self.prefix}{i}", json.dumps(customer_row(i)))
                pipe.execute()
        finally:
            client.close()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def cleanup(self) -> None:
        import redis

        client = redis.Redis.from_url(self.url)
        try:
            batch: list[bytes] = []
            for key in client.scan_iter(match=self.prefix + "*", count=5000):
                batch.append(key)
                if len(batch) >= 5000:
                    client.unlink(*batch)
                    batch.clear()
            if batch:
                client.unlink(*batch)
        finally:
            client.close()


class PostgresDataset:
    """``n_customers`` rows in table ``table`` of database ``test``; dropped on exit."""

    def __init__(
        self, n_customers: int, dsn: str = POSTGRES_DSN, table: str = POSTGRES_TABLE
    ) -> None:
        self.n_customers = n_customers
        self.dsn = dsn
        self.table = table

    def __enter__(self) -> PostgresDataset:
        import psycopg
        from psycopg import sql

        table = sql.Identifier(self.table)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
            conn.execute(
                sql.SQL(
                    "CREATE TABLE {} (id INT PRIMARY KEY, name TEXT, country TEXT, "
                    "segment TEXT, credit_limit DOUBLE PRECISION)"
                ).format(table)
            )
            with conn.cursor() as cur, cur.copy(
                sql.SQL("COPY {} (id, name, country, segment, credit_limit) FROM STDIN").format(
                    table
                )
            ) as copy:
                for i in range(self.n_customers):
                    row = customer_row(i)
                    copy.write_row(
                        (row["id"], row["name"], row["country"], row["segment"],
                         row["credit_limit"])
                    )
            conn.execute(sql.SQL("ANALYZE {}").format(table))
        return self

    def __exit__(self, *exc: object) -> None:
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(self.table)))


@contextlib.contextmanager
def latency_server(n_customers: int = 100_000, profile: Profile | None = None) -> Iterator[
    LatencyServer
]:
    """Start a :class:`LatencyServer` for the duration of a ``with`` block."""
    server = LatencyServer(n_customers, profile)
    server.start()
    try:
        yield server
    finally:
        server.stop()
