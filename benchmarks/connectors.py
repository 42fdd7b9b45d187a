"""Per-key vs batched async lookups through the Redis and PostgreSQL connectors.

``python -m benchmarks.connectors [--keys 100000] [--runs 3] [--uvloop]``

For each store, in one process and one run: load ``--keys`` rows (unique Redis prefix /
PostgreSQL table, removed afterwards), then look every key up

- per key: ``async_lookup(key)``, ``--concurrency`` calls in flight (the operator's capacity);
- batched: ``async_lookup_batch(keys)`` with ``--batch-size`` keys per call and
  ``--batch-concurrency`` calls in flight (Redis ``MGET`` / PostgreSQL: a join against
  ``unnest($1) WITH ORDINALITY``).

Each figure is the median of ``--runs`` passes over all keys; the ratio is batched / per-key
from the same run. Targets on the project machine: Redis >= 4x, PostgreSQL >= 5x.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import psycopg
import redis

from asyncio_lookup.connectors import PostgresConnector, RedisConnector
from asyncio_lookup.lookup.functions import AsyncLookupFunction, Key

REDIS_URL = "redis://127.0.0.1:6379/15"
POSTGRES_DSN = "postgresql://postgres@127.0.0.1:5432/test"
TARGETS = {"redis": 4.0, "postgres": 5.0}


def _row(i: int) -> dict[str, Any]:
    return {"id": i, "name": f"customer-{i}", "country": ("DE", "FR", "US", "JP")[i % 4]}


def load_redis(n: int, prefix: str) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        for start in range(0, n, 10_000):
            pipe = client.pipeline(transaction=False)
            for i in range(start, min(start + 10_000, n)):
                pipe.set(f"{prefix}{i}", json.dumps(_row(i)))
            pipe.execute()
    finally:
        client.close()


def drop_redis(prefix: str) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        batch = []
        for key in client.scan_iter(match=prefix + "*", count=10_000):
            batch.append(key)
            if len(batch) >= 10_000:
                client.unlink(*batch)
                batch.clear()
        if batch:
            client.unlink(*batch)
    finally:
        client.close()


def load_postgres(n: int, table: str) -> None:
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE TABLE "{table}" (id int PRIMARY KEY, name text, country text)')
        with conn.cursor().copy(f'COPY "{table}" (id, name, country) FROM STDIN') as copy:
            for i in range(n):
                r = _row(i)
                copy.write_row((r["id"], r["name"], r["country"]))
        conn.execute(f'ANALYZE "{table}"')


def drop_postgres(table: str) -> None:
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        conn.execute(f'DROP TABLE IF EXISTS "{table}"')


async def _drain(items: Sequence[Any], workers: int, call: Callable[[Any], Awaitable[int]]) -> int:
    """Run ``call`` over ``items`` with ``workers`` in flight; returns the rows found."""
    position = 0
    found = 0

    async def worker() -> None:
        nonlocal position, found
        while position < len(items):
            item = items[position]
            position += 1
            rows = await call(item)  # not `found += await ...`: that loses updates
            found += rows

    await asyncio.gather(*(worker() for _ in range(workers)))
    return found


async def per_key(fn: AsyncLookupFunction, keys: Sequence[Key], concurrency: int) -> int:
    async def one(key: Key) -> int:
        return len(await fn.async_lookup(key))

    return await _drain(keys, concurrency, one)


async def batched(fn: AsyncLookupFunction, keys: Sequence[Key], size: int, concurrency: int) -> int:
    chunks = [keys[i : i + size] for i in range(0, len(keys), size)]

    async def one(chunk: Sequence[Key]) -> int:
        results = await fn.async_lookup_batch(chunk)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return sum(len(r) for r in results if not isinstance(r, BaseException))

    return await _drain(chunks, concurrency, one)


async def measure(
    store: str, fn: AsyncLookupFunction, keys: Sequence[Key], args: argparse.Namespace
) -> dict[str, Any]:
    await fn.open()
    modes: dict[str, list[float]] = {"per-key": [], "batched": []}
    try:
        await per_key(fn, keys[:1000], args.concurrency)  # warm the pool and statement cache
        for run in range(args.runs):
            for mode in ("per-key", "batched"):
                started = time.perf_counter()
                if mode == "per-key":
                    found = await per_key(fn, keys, args.concurrency)
                else:
                    found = await batched(fn, keys, args.batch_size, args.batch_concurrency)
                elapsed = time.perf_counter() - started
                if found != len(keys):
                    raise AssertionError(f"{store} {mode}: {found} rows for {len(keys)} keys")
                modes[mode].append(len(keys) / elapsed)
                print(
                    f"  {store:<9} {mode:<8} run {run + 1}: {len(keys) / elapsed:>10,.0f} keys/s",
                    file=sys.stderr,
                )
    finally:
        await fn.close()
    medians = {mode: statistics.median(v) for mode, v in modes.items()}
    return {
        "store": store,
        "per_key": medians["per-key"],
        "batched": medians["batched"],
        "ratio": medians["batched"] / medians["per-key"],
        "target": TARGETS[store],
        "runs": modes,
    }


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    tag = uuid.uuid4().hex[:8]
    keys: list[Key] = [(i,) for i in range(args.keys)]
    results = []
    if "redis" in args.stores:
        prefix = f"bench:conn:{tag}:"
        load_redis(args.keys, prefix)
        try:
            c = RedisConnector(REDIS_URL, prefix + "{id}", max_connections=args.concurrency)
            results.append(await measure("redis", c.async_lookup_function(), keys, args))
        finally:
            drop_redis(prefix)
    if "postgres" in args.stores:
        table = f"bench_conn_{tag}"
        load_postgres(args.keys, table)
        try:
            c2 = PostgresConnector(POSTGRES_DSN, table, "id", pool_size=args.pg_pool)
            results.append(await measure("postgres", c2.async_lookup_function(), keys, args))
        finally:
            drop_postgres(table)
    return results


def table(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        f"connectors: {args.keys:,} keys, median of {args.runs}; per-key {args.concurrency} in "
        f"flight; batched {args.batch_size} keys/call, {args.batch_concurrency} calls in flight",
        "",
        f"| {'store':<9} | {'per-key keys/s':>14} | {'batched keys/s':>14} | {'ratio':>6} "
        f"| {'target':>6} | {'met':<3} |",
        f"|{'-' * 11}|{'-' * 16}|{'-' * 16}|{'-' * 8}|{'-' * 8}|{'-' * 5}|",
    ]
    for r in results:
        met = "yes" if r["ratio"] >= r["target"] else "NO"
        lines.append(
            f"| {r['store']:<9} | {r['per_key']:>14,.0f} | {r['batched']:>14,.0f} "
            f"| {r['ratio']:>5.1f}x | {r['target']:>5.1f}x | {met:<3} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--batch-concurrency", type=int, default=4)
    parser.add_argument("--pg-pool", type=int, default=10)
    parser.add_argument(
        "--stores", nargs="+", default=["redis", "postgres"], choices=["redis", "postgres"]
    )
    parser.add_argument("--uvloop", action="store_true", help="run on uvloop")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    if args.uvloop:
        import uvloop

        results = uvloop.run(run(args))
    else:
        results = asyncio.run(run(args))
    print(table(results, args))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"args": vars(args), "results": results}, out, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
