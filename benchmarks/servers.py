"""Local services the harness starts itself.

- :class:`LatencyServer`: an aiohttp "customer service" on 127.0.0.1 (random port) in a background
  thread, with injected latency (fixed plus an optional long tail), error and 429 rates, customers
  that appear late, and call counters. Endpoints:

  ``GET  /customers/{id}``             one customer as a JSON object, 404 when there is none
  ``GET  /customers?id=1&id=2``        batch: a JSON list of the customers found
  ``GET  /customers?ids=1,2,3``        the same
  ``POST /customers:batchGet``         batch: body ``{"keys": [{"id": 1}, ...]}`` or
                                       ``{"ids": [1, ...]}``, a JSON list of the customers found
  ``GET  /customers?offset=0&limit=N`` scan page: ``{"rows": [...], "next": url-or-null}``
  ``GET  /stats``, ``POST /reset``     the counters

- :class:`RedisDataset` and :class:`PostgresDataset`: load generated customers into the machine's
  Redis (a dedicated key prefix) and PostgreSQL (a dedicated table in database ``test``) and remove
  them again on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import random
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

from aiohttp import web

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
        self.counters: Counter[str] = Counter()
        self._late_calls: Counter[int] = Counter()
        self._peers: set[Any] = set()  # (host, port) of the clients' connections seen
        self._rng = random.Random(self.profile.seed)
        self._in_flight = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> LatencyServer:
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
        self.counters = Counter()
        self._late_calls = Counter()
        self._peers = set()

    def stats(self) -> dict[str, int]:
        return dict(self.counters)

    def _serve(self) -> None:
        try:
            import uvloop

            loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        except ImportError:  # pragma: no cover - uvloop is a dev dependency
            loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._startup())
        except BaseException as error:
            self._error = error
            self._ready.set()
            return
        self._ready.set()
        loop.run_forever()
        loop.close()

    async def _startup(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.add_routes(
            [
                web.get("/customers/{id}", self._point),
                web.get("/customers", self._list),
                web.post("/customers:batchGet", self._batch_post),
                web.get("/stats", self._stats),
                web.post("/reset", self._reset),
            ]
        )
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0, backlog=4096)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def _shutdown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    # -- behaviour -----------------------------------------------------------------------------

    async def _misbehave(self) -> web.Response | None:
        """Sleep the injected latency; return a 429/500 response when the dice say so."""
        profile = self.profile
        self._in_flight += 1
        self.counters["max_in_flight"] = max(self.counters["max_in_flight"], self._in_flight)
        try:
            delay = profile.latency
            if profile.tail_fraction and self._rng.random() < profile.tail_fraction:
                delay = profile.tail_latency
            if delay > 0:
                await asyncio.sleep(delay)
        finally:
            self._in_flight -= 1
        roll = self._rng.random()
        if roll < profile.throttle_rate:
            self.counters["throttled"] += 1
            return web.json_response(
                {"error": "slow down"},
                status=429,
                headers={"Retry-After": str(profile.retry_after)},
            )
        if roll < profile.throttle_rate + profile.error_rate:
            self.counters["errors"] += 1
            return web.json_response({"error": "injected failure"}, status=profile.error_status)
        return None

    def _find(self, raw: str, point: bool) -> dict[str, Any] | None:
        try:
            customer_id = int(raw)
        except ValueError:
            return None
        if not 0 <= customer_id < self.n_customers:
            return None
        profile = self.profile
        if point and profile.late_fraction and self._is_late(customer_id):
            self._late_calls[customer_id] += 1
            if self._late_calls[customer_id] <= profile.late_misses:
                self.counters["late_misses"] += 1
                return None
        return customer_row(customer_id)

    def _is_late(self, customer_id: int) -> bool:
        # A fixed pseudo-random subset of the ids, independent of the request order.
        return ((customer_id * 2654435761) % 2**32) / 2**32 < self.profile.late_fraction

    async def _point(self, request: web.Request) -> web.Response:
        self.counters["requests"] += 1
        peer = request.transport.get_extra_info("peername") if request.transport else None
        if peer not in self._peers:
            self._peers.add(peer)
            self.counters["connections"] = len(self._peers)
        self.counters["point_calls"] += 1
        failure = await self._misbehave()
        if failure is not None:
            return failure
        row = self._find(request.match_info["id"], point=True)
        if row is None:
            self.counters["misses"] += 1
            return web.json_response({"error": "not found"}, status=404)
        self.counters["found"] += 1
        return web.json_response(row)

    async def _batch(self, ids: list[Any]) -> web.Response:
        self.counters["requests"] += 1
        self.counters["batch_calls"] += 1
        self.counters["batch_keys"] += len(ids)
        failure = await self._misbehave()
        if failure is not None:
            return failure
        rows = [row for row in (self._find(str(i), point=False) for i in ids) if row is not None]
        self.counters["found"] += len(rows)
        self.counters["misses"] += len(ids) - len(rows)
        return web.json_response(rows)

    async def _list(self, request: web.Request) -> web.Response:
        if "id" in request.query:
            return await self._batch(request.query.getall("id"))
        if "ids" in request.query:
            raw = request.query["ids"]
            return await self._batch([part for part in raw.split(",") if part])
        self.counters["requests"] += 1
        self.counters["scan_calls"] += 1
        try:
            offset = int(request.query.get("offset", "0"))
            limit = min(int(request.query.get("limit", "1000")), 10_000)
        except ValueError:
            return web.json_response({"error": "offset and limit are integers"}, status=400)
        failure = await self._misbehave()
        if failure is not None:
            return failure
        end = min(offset + limit, self.n_customers)
        rows = [customer_row(i) for i in range(offset, end)]
        next_url = f"{self.base_url}/customers?offset={end}&limit={limit}"
        more = end < self.n_customers
        return web.json_response({"rows": rows, "next": next_url if more else None})

    async def _batch_post(self, request: web.Request) -> web.Response:
        body = await request.json()
        if isinstance(body, dict) and "keys" in body:
            ids = [key.get("id") if isinstance(key, dict) else key for key in body["keys"]]
        else:
            ids = body.get("ids", []) if isinstance(body, dict) else body
        return await self._batch(list(ids))

    async def _stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats())

    async def _reset(self, request: web.Request) -> web.Response:
        self.reset()
        return web.json_response({})


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
