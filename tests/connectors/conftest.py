"""Fixtures for the connector tests: a local aiohttp service, Redis and PostgreSQL helpers."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
import redis
import tenacity
import uvloop
from aiohttp import web

from asyncio_lookup.errors import TransientError
from tests.connectors.scripted import Handler, Scripted

CUSTOMERS = {
    "1": [{"id": 1, "name": "Ada", "country": "UK"}],
    "2": [{"id": 2, "name": "Grace", "country": "US"}],
    "7": [{"id": 7, "name": "Seven-a", "country": None}, {"id": 7, "name": "Seven-b"}],
}


@dataclass
class Recorded:
    method: str
    raw_path: str
    host: str | None
    match: dict[str, str]
    headers: dict[str, str]


@dataclass
class Service:
    """What the test service saw and how it should misbehave."""

    base: str = ""
    requests: list[Recorded] = field(default_factory=list)
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    fail_times: dict[str, int] = field(default_factory=dict)  # key -> 429s still to send
    fail_status: int = 429
    retry_after: str | None = "1"
    pages: list[list[dict[str, Any]]] = field(default_factory=list)

    def reset(self) -> None:
        self.requests.clear()
        self.rows = {k: [dict(r) for r in v] for k, v in CUSTOMERS.items()}
        self.fail_times.clear()
        self.fail_status = 429
        self.retry_after = "1"
        self.pages = []


def _app(service: Service) -> web.Application:
    def record(request: web.Request) -> None:
        service.requests.append(
            Recorded(
                request.method,
                request.raw_path,
                request.headers.get("Host"),
                dict(request.match_info),
                dict(request.headers),
            )
        )

    async def customer(request: web.Request) -> web.Response:
        record(request)
        key = request.match_info["id"]
        if service.fail_times.get(key, 0) > 0:
            service.fail_times[key] -= 1
            headers = {"Retry-After": service.retry_after} if service.retry_after else {}
            return web.Response(status=service.fail_status, headers=headers)
        rows = service.rows.get(key)
        if rows is None:
            return web.Response(status=404)
        return web.json_response(rows[0] if len(rows) == 1 else rows)

    async def collection(request: web.Request) -> web.Response:
        # what a REST service answers at its collection's URL: every row
        record(request)
        return web.json_response([r for rows in service.rows.values() for r in rows])

    async def order(request: web.Request) -> web.Response:
        record(request)
        cid, oid = request.match_info["cid"], request.match_info["oid"]
        rows = service.rows.get(f"{cid}/{oid}")
        if rows is None:
            return web.Response(status=404)
        return web.json_response({"data": {"items": rows}})

    async def batch_post(request: web.Request) -> web.Response:
        record(request)
        body = await request.json()
        out = [r for k in body["keys"] for r in service.rows.get(str(k["id"]), [])]
        return web.json_response({"rows": out})

    async def batch_query(request: web.Request) -> web.Response:
        record(request)
        out = [r for k in request.query.getall("id", []) for r in service.rows.get(k, [])]
        return web.json_response(out)

    async def scan(request: web.Request) -> web.Response:
        record(request)
        page = int(request.query.get("cursor", "0"))
        nxt = page + 1 if page + 1 < len(service.pages) else None
        return web.json_response({"items": service.pages[page], "next": nxt})

    async def scan_links(request: web.Request) -> web.Response:
        record(request)
        page = int(request.query.get("page", "0"))
        headers = {}
        if page + 1 < len(service.pages):
            headers["Link"] = f'</links?page={page + 1}>; rel="next"'
        return web.json_response(service.pages[page], headers=headers)

    async def echo_error(request: web.Request) -> web.Response:
        record(request)
        return web.Response(
            status=500, text="denied for " + request.headers.get("Authorization", "")
        )

    async def slow(request: web.Request) -> web.Response:
        record(request)
        await asyncio.sleep(1)  # the client's timeout is 0.2 s
        return web.json_response({"id": request.match_info["id"]})

    async def elsewhere(request: web.Request) -> web.Response:
        record(request)
        return web.json_response({"items": [{"id": 1}], "next": "http://example.invalid/steal"})

    async def raw(request: web.Request) -> web.Response:
        # /raw/<status>/<body> (or ?body=<body>): answers that status with that body, as it is
        record(request)
        status = int(request.match_info["status"])
        body = request.match_info["body"] or request.query.get("body", "")
        return web.Response(status=status, body=body.encode() or None)

    app = web.Application()
    app.router.add_get("/raw/{status}/{body:.*}", raw)
    app.router.add_get("/slow/{id}", slow)
    app.router.add_get("/elsewhere", elsewhere)
    app.router.add_get("/customers/{id}", customer)
    app.router.add_get("/customers/", collection)
    app.router.add_get("/orders/{cid}/{oid}", order)
    app.router.add_post("/customers:batchGet", batch_post)
    app.router.add_get("/customers", batch_query)
    app.router.add_get("/scan", scan)
    app.router.add_get("/links", scan_links)
    app.router.add_get("/echo/{id}", echo_error)
    return app


@pytest.fixture(scope="session")
def _http_service() -> Iterator[Service]:
    """One aiohttp server on 127.0.0.1 in its own thread, so sync and async tests can use it."""
    service = Service()
    loop = asyncio.new_event_loop()
    started = threading.Event()
    runner = web.AppRunner(_app(service), access_log=None)

    async def start() -> None:
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        service.base = f"http://127.0.0.1:{port}"
        started.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    assert started.is_set()
    yield service
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


@pytest.fixture
def http_service(_http_service: Service) -> Service:
    _http_service.reset()
    return _http_service


# -- Redis ---------------------------------------------------------------------------------


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A unique key prefix; every key under it is deleted afterwards."""
    prefix = f"alt:{uuid.uuid4().hex[:10]}:"
    yield prefix
    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=prefix + "*", count=5000))
    for i in range(0, len(keys), 5000):
        client.delete(*keys[i : i + 5000])
    client.close()


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def kill_redis_clients(redis_url: str, client_name: str) -> int:
    """Close every server-side connection named ``client_name`` (CLIENT KILL ID ...)."""
    admin = redis.Redis.from_url(redis_url)
    try:
        ids = [c["id"] for c in admin.client_list() if c.get("name") == client_name]
        for client_id in ids:
            admin.execute_command("CLIENT", "KILL", "ID", client_id)
        return len(ids)
    finally:
        admin.close()


# -- PostgreSQL ----------------------------------------------------------------------------


@pytest.fixture
def pg_table(postgres_dsn: str) -> Iterator[str]:
    """A unique table name; the table is dropped afterwards."""
    name = f"alt_{uuid.uuid4().hex[:10]}"
    yield name
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f'DROP TABLE IF EXISTS "{name}"')


def kill_postgres_backends(postgres_dsn: str, application_name: str) -> int:
    """pg_terminate_backend on every session with this application_name; returns how many."""
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = %s AND pid <> pg_backend_pid()",
            (application_name,),
        ).fetchall()
    return len(rows)


# -- failure retry (what `lookup.max-retries` does, with tenacity) ------------------------


class RetryRecorder:
    """Retries TransientError like the lookup layer (``lookup.max-retries``, tenacity); records
    each wait (at least ``Retry-After``) but really sleeps at most ``real_sleep_cap``."""

    def __init__(self, max_retries: int = 5, real_sleep_cap: float = 0.05) -> None:
        self.max_retries = max_retries
        self.real_sleep_cap = real_sleep_cap
        self.waits: list[float] = []
        self.errors: list[BaseException] = []

    def _wait(self, state: tenacity.RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome else None
        self.errors.append(error)  # type: ignore[arg-type]
        base = 0.01 * 2 ** (state.attempt_number - 1)
        if isinstance(error, TransientError) and error.retry_after is not None:
            return max(base, error.retry_after)
        return base

    def _settings(self) -> dict[str, Any]:
        return {
            "stop": tenacity.stop_after_attempt(self.max_retries + 1),
            "wait": self._wait,
            "retry": tenacity.retry_if_exception_type(TransientError),
            "reraise": True,
        }

    async def call_async(self, attempt: Callable[[], Awaitable[Any]]) -> Any:
        async def sleep(seconds: float) -> None:
            self.waits.append(seconds)
            await asyncio.sleep(min(seconds, self.real_sleep_cap))

        async def call() -> Any:
            return await attempt()

        return await tenacity.AsyncRetrying(sleep=sleep, **self._settings())(call)

    def call(self, attempt: Callable[[], Any]) -> Any:
        def sleep(seconds: float) -> None:
            self.waits.append(seconds)
            time.sleep(min(seconds, self.real_sleep_cap))

        return tenacity.Retrying(sleep=sleep, **self._settings())(attempt)


async def lookups_across_restart(
    fn: Any,
    retry: RetryRecorder,
    restart: Callable[[], None],
    n: int,
    batch: int,
    point_every: int,
    settle: float,
) -> dict[int, list[Any]]:
    """Keys ``0..n-1`` in two waves of concurrent chunks (a chunk starting at a multiple of
    ``point_every`` as point lookups, the others batched); ``settle`` seconds into each wave
    ``restart()`` runs in a thread. Every key's rows, each key answered exactly once."""
    results: dict[int, list[Any]] = {}

    async def run(chunk: list[tuple[int]]) -> None:
        if chunk[0][0] % point_every == 0:
            found = [await retry.call_async(lambda k=k: fn.async_lookup(k)) for k in chunk]
        else:
            found = await retry.call_async(lambda: fn.async_lookup_batch(chunk))
        for (k,), rows in zip(chunk, found, strict=True):
            assert k not in results
            results[k] = list(rows)

    for wave in range(2):
        keys = [(k,) for k in range(wave * n // 2, (wave + 1) * n // 2)]
        tasks = [
            asyncio.ensure_future(run(keys[i : i + batch])) for i in range(0, len(keys), batch)
        ]
        await asyncio.sleep(settle)  # some calls in flight, some done
        await asyncio.to_thread(restart)
        await asyncio.gather(*tasks)
    return results


def json_dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


async def blocking(call: Callable[..., Any], *args: Any) -> Any:
    """A sync-mode call from an async test: on another thread, as Spark's task thread makes it
    (a blocking lookup on the thread running the loop it waits for is refused)."""
    return await asyncio.to_thread(call, *args)


@pytest.fixture(params=["asyncio", "uvloop"])
def both_loops(request: pytest.FixtureRequest) -> asyncio.AbstractEventLoopPolicy:
    """A module runs each test on both loops with ``event_loop_policy = both_loops``'s twin
    (Spark's Python workers run uvloop when it is installed)."""
    if request.param == "uvloop":
        return uvloop.EventLoopPolicy()
    return asyncio.DefaultEventLoopPolicy()


@pytest.fixture
async def scripted() -> AsyncIterator[Callable[[Handler], Awaitable[Scripted]]]:
    started: list[Scripted] = []

    async def start(handler: Handler) -> Scripted:
        server = await Scripted(handler).start()
        started.append(server)
        return server

    yield start
    for server in started:
        await server.close()
