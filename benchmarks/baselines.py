"""What users write today without this library, as ``mapPartitions`` (and ``mapInArrow``)
functions.

- :func:`row_by_row_sync`: one blocking HTTP call per row, on a kept-alive connection.
- :func:`thread_pool`: ``ThreadPoolExecutor(100).map`` of blocking calls over the partition.
- :func:`hand_rolled_asyncio`: the usual pattern: materialise the partition, then
  ``asyncio.run`` (the default event loop) + ``asyncio.Semaphore(100)`` + ``asyncio.gather``
  over an aiohttp session with a 100-connection pool.
- :func:`hand_rolled_arrow`: the strongest hand-rolled variant a careful user writes:
  ``mapInArrow``, one aiohttp session per partition on uvloop, ``Semaphore(100)`` + ``gather``
  per Arrow batch, orjson, the results built as Arrow arrays (no ``Row`` objects).
- :func:`hand_rolled_arrow_own_client`: the same with this library's HTTP client (its
  ``HttpConnector`` lookup function) in place of aiohttp: not what a user writes without the
  library, but the least Spark job that uses its client, so a comparison with the lookup join
  isolates what the operator adds.

Both produce the same columns as the lookup join (inner join: customers not found are dropped).
"""

from __future__ import annotations

import asyncio
import http.client
import json
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any
from urllib.parse import urlsplit

JOINED_SCHEMA = (
    "order_id BIGINT, customer_id INT, amount DOUBLE, "
    "id INT, name STRING, country STRING, segment STRING, credit_limit DOUBLE"
)

Joined = tuple[Any, ...]


def _joined(row: Any, customer: dict[str, Any]) -> Joined:
    return (
        row.order_id, row.customer_id, row.amount,
        customer["id"], customer["name"], customer["country"], customer["segment"],
        customer["credit_limit"],
    )


def row_by_row_sync(base_url: str) -> Callable[[Iterable[Any]], Iterator[Joined]]:
    """(a) A blocking GET per row (http.client, one persistent connection per partition)."""
    parts = urlsplit(base_url)
    host = parts.hostname or "127.0.0.1"

    def partition(rows: Iterable[Any]) -> Iterator[Joined]:
        conn = http.client.HTTPConnection(host, parts.port, timeout=60)
        try:
            for row in rows:
                conn.request("GET", f"/customers/{row.customer_id}")
                response = conn.getresponse()
                body = response.read()
                if response.status == 404:
                    continue
                if response.status != 200:
                    raise RuntimeError(f"GET /customers/{row.customer_id}: {response.status}")
                yield _joined(row, json.loads(body))
        finally:
            conn.close()

    return partition


def hand_rolled_asyncio(
    base_url: str, concurrency: int = 100
) -> Callable[[Iterable[Any]], list[Joined]]:
    """(b) ``asyncio.run`` + ``Semaphore(concurrency)`` + ``gather`` over the whole partition."""

    def partition(rows: Iterable[Any]) -> list[Joined]:
        import aiohttp

        materialised = list(rows)

        async def main() -> list[Joined | None]:
            semaphore = asyncio.Semaphore(concurrency)
            connector = aiohttp.TCPConnector(limit=concurrency)
            async with aiohttp.ClientSession(connector=connector) as session:

                async def one(row: Any) -> Joined | None:
                    async with semaphore, session.get(
                        f"{base_url}/customers/{row.customer_id}"
                    ) as response:
                        if response.status == 404:
                            return None
                        response.raise_for_status()
                        return _joined(row, await response.json())

                return await asyncio.gather(*(one(row) for row in materialised))

        return [joined for joined in asyncio.run(main()) if joined is not None]

    return partition


def hand_rolled_arrow(
    base_url: str, concurrency: int = 100
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """(b2) ``mapInArrow``: per partition one uvloop loop and one aiohttp session; per Arrow
    batch ``gather`` under ``Semaphore(concurrency)``; orjson; output columns as Arrow arrays."""

    def partition(batches: Iterator[Any]) -> Iterator[Any]:
        import aiohttp
        import orjson
        import uvloop

        loop = uvloop.new_event_loop()
        state: dict[str, Any] = {}

        async def opened() -> None:
            state["semaphore"] = asyncio.Semaphore(concurrency)
            connector = aiohttp.TCPConnector(limit=concurrency)
            state["session"] = aiohttp.ClientSession(connector=connector)

        async def one(customer_id: int) -> dict[str, Any] | None:
            async with state["semaphore"], state["session"].get(
                f"{base_url}/customers/{customer_id}"
            ) as response:
                if response.status == 404:
                    return None
                response.raise_for_status()
                found: dict[str, Any] = orjson.loads(await response.read())
                return found

        async def closed() -> None:
            if "session" in state:
                await state["session"].close()

        yield from _gathered_batches(batches, loop, one, opened, closed)

    return partition


def hand_rolled_arrow_own_client(
    base_url: str, concurrency: int = 100
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """(b3) :func:`hand_rolled_arrow` with this library's HTTP client: ``HttpConnector``'s
    lookup function (``max_connections=concurrency``, uvloop, orjson) in place of the aiohttp
    session; the same ``gather`` under ``Semaphore(concurrency)`` per Arrow batch."""

    def partition(batches: Iterator[Any]) -> Iterator[Any]:
        from asyncio_lookup.connectors import HttpConnector
        from asyncio_lookup.runtime.loop import new_event_loop

        loop = new_event_loop()  # uvloop, as the library's workers run
        function = HttpConnector(
            f"{base_url}/customers/{{id}}", ["id"], max_connections=concurrency, timeout=60
        ).async_lookup_function()
        state: dict[str, Any] = {}

        async def opened() -> None:
            state["semaphore"] = asyncio.Semaphore(concurrency)
            await function.open()

        async def one(customer_id: int) -> Any:
            async with state["semaphore"]:
                rows = await function.async_lookup((customer_id,))
                return next(iter(rows), None)

        yield from _gathered_batches(batches, loop, one, opened, function.close)

    return partition


def _gathered_batches(
    batches: Iterator[Any],
    loop: asyncio.AbstractEventLoop,
    one: Callable[[int], Awaitable[Any]],
    opened: Callable[[], Awaitable[None]],
    closed: Callable[[], Awaitable[None]],
) -> Iterator[Any]:
    """(b2)'s and (b3)'s partition on ``loop``: ``opened``, then per Arrow batch ``one`` of
    every customer id under ``gather`` and the rows found joined; ``closed`` at the end.

    The partition runs with the garbage collector's young generation as the lookup join's
    partitions run (``asyncio_lookup.spark.worker_gc``: threshold 10,000, the worker's heap
    frozen once), so that (c) against (b2) and (b3) compares like with like."""
    from asyncio_lookup.spark.worker_gc import (
        DEFAULT_GC_YOUNG_THRESHOLD,
        young_generation_threshold,
    )

    async def looked_up(ids: list[int]) -> list[Any]:
        return await asyncio.gather(*(one(i) for i in ids))

    with young_generation_threshold(DEFAULT_GC_YOUNG_THRESHOLD):  # as (c)'s partitions
        try:
            loop.run_until_complete(opened())
            for batch in batches:
                ids = batch.column("customer_id").to_pylist()
                yield _joined_batch(batch, loop.run_until_complete(looked_up(ids)))
        finally:
            loop.run_until_complete(closed())
            loop.close()


def _joined_batch(batch: Any, customers: list[Any]) -> Any:
    """``batch``'s rows whose customer was found, with the customer's columns (Arrow arrays)."""
    import pyarrow as pa

    keep = [i for i, c in enumerate(customers) if c is not None]
    found = [c for c in customers if c is not None]
    taken = batch.take(pa.array(keep, pa.int64()))
    return pa.RecordBatch.from_arrays(
        [
            taken.column("order_id"),
            taken.column("customer_id"),
            taken.column("amount"),
            pa.array([c["id"] for c in found], pa.int32()),
            pa.array([c["name"] for c in found], pa.string()),
            pa.array([c["country"] for c in found], pa.string()),
            pa.array([c["segment"] for c in found], pa.string()),
            pa.array([c["credit_limit"] for c in found], pa.float64()),
        ],
        names=[f.split()[0] for f in JOINED_SCHEMA.split(", ")],
    )


def thread_pool(base_url: str, threads: int = 100) -> Callable[[Iterable[Any]], list[Joined]]:
    """(t) ``ThreadPoolExecutor(threads).map`` of blocking GETs, one connection per thread."""
    parts = urlsplit(base_url)
    host = parts.hostname or "127.0.0.1"

    def partition(rows: Iterable[Any]) -> list[Joined]:
        import threading
        from concurrent.futures import ThreadPoolExecutor

        local = threading.local()
        opened: list[http.client.HTTPConnection] = []

        def one(row: Any) -> Joined | None:
            conn = getattr(local, "conn", None)
            if conn is None:
                conn = http.client.HTTPConnection(host, parts.port, timeout=60)
                local.conn = conn
                opened.append(conn)
            conn.request("GET", f"/customers/{row.customer_id}")
            response = conn.getresponse()
            body = response.read()
            if response.status == 404:
                return None
            if response.status != 200:
                raise RuntimeError(f"GET /customers/{row.customer_id}: {response.status}")
            return _joined(row, json.loads(body))

        try:
            with ThreadPoolExecutor(threads) as pool:
                return [joined for joined in pool.map(one, list(rows)) if joined is not None]
        finally:
            for conn in opened:
                conn.close()

    return partition
