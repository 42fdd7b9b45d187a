"""The shared cache (L2) against a slow service: job time with the shared cache vs the
per-process cache alone vs SHUFFLE_HASH, in the same run, and the per-row cost of an L2 hit.

The service answers in 200 ms (a slow, metered API: what a shared cache is for). 100k rows
over 10k distinct keys in 8 tasks on the benchmark session (``local[2]``, workers reused: two
Python processes, each with its own L1). Every timed run gets a new ``LookupTable`` (cold L1s)
and, for "shared (cold)", a new namespace (cold L2); "shared (warm)" is the next job over the
same keys, its L2 filled by an untimed run. The per-row cost of an L2 hit is measured in this
process, without Spark: lookups through a chain without L1 whose every key is in Redis,
against the same lookups answered by L1.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import numpy as np

from benchmarks.harness import Context, ScenarioResult, Skipped, Variant
from benchmarks.servers import Profile
from benchmarks.spark_env import orders_frame, run_to_noop
from benchmarks.tables import http_connector, lookup_hint, lookup_join, lookup_table

LATENCY = 0.2
TASKS = 8
CAPACITY = 200
REDIS_URL = "redis://127.0.0.1:6379/14"
L1 = {"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "20000"}


def _shared(namespace: str) -> dict[str, str]:
    return {
        **L1,
        "lookup.shared-cache.url": REDIS_URL,
        "lookup.shared-cache.namespace": namespace,
    }


def _clear(namespace: str) -> None:
    from asyncio_lookup.lookup.l2.settings import namespace_pattern
    from asyncio_lookup.lookup.l2.stores import open_admin

    admin = open_admin(REDIS_URL, 5.0)
    try:
        admin.clear(namespace_pattern(namespace))
    finally:
        admin.close()


def run(ctx: Context) -> ScenarioResult:
    try:
        import redis

        redis.Redis.from_url(REDIS_URL).ping()
    except Exception as error:
        raise Skipped(f"Redis at {REDIS_URL} is needed: {error}") from None
    result = ScenarioResult("shared-cache", "Shared cache (L2) vs L1 only vs SHUFFLE_HASH")
    n_rows, distinct = (10_000, 1_000) if ctx.quick else (100_000, 10_000)
    spark, server = ctx.spark(), ctx.server()
    server.configure(Profile(latency=LATENCY))
    keys = np.random.default_rng(11).permutation(np.arange(n_rows) % distinct)
    orders = orders_frame(spark, keys, partitions=TASKS)
    connector = http_connector(server.base_url, connections=CAPACITY)
    hint = lookup_hint("Customers", **{"async": "true", "capacity": CAPACITY})
    shuffled = lookup_hint(
        "Customers", **{"async": "true", "capacity": CAPACITY, "shuffle": "true"}
    )
    warm_ns = "bench-warm-" + uuid.uuid4().hex[:8]
    cold: list[str] = []

    def job(options: dict[str, str] | None, join_hint: str) -> dict[str, Any]:
        server.reset()
        table = lookup_table("Customers", connector, options or L1)
        run_to_noop(lookup_join(orders, table, hint=join_hint))
        return {"server_calls": server.stats().get("requests", 0), "metrics": table.metrics()}

    def cold_shared() -> dict[str, Any]:
        cold.append("bench-cold-" + uuid.uuid4().hex[:8])
        return job(_shared(cold[-1]), hint)

    variants = [
        Variant("L1 only (per process)", n_rows, lambda: job(None, hint)),
        Variant("L1 + shared cache (cold L2)", n_rows, cold_shared),
        Variant(
            "L1 + shared cache (warm L2: the next job)",
            n_rows,
            lambda: job(_shared(warm_ns), hint),
            warmup=lambda: job(_shared(warm_ns), hint),
        ),
        Variant("SHUFFLE_HASH, L1 only", n_rows, lambda: job(None, shuffled)),
    ]
    ctx.begin("shared cache", len(variants))
    try:
        # One run per variant: four jobs of 8-50 s each; the ratios are large next to the noise
        measured = ctx.measure_all(variants, repeats=1)
    finally:
        for namespace in [warm_ns, *cold]:
            _clear(namespace)
        orders.unpersist()
    baseline = measured[0]
    for m in measured:
        metrics = m.extra["metrics"]
        result.measurements.append(m)
        result.add_row(
            variant=m.label,
            rows=n_rows,
            median_s=m.median_s,
            vs_l1_only=baseline.median_s / m.median_s,
            service_calls=m.extra["server_calls"],
            calls_per_distinct_key=m.extra["server_calls"] / distinct,
            l2_hits=metrics.get("l2HitCount"),
            l2_errors=metrics.get("l2ErrorCount"),
        )
    hit_us, l1_us, miss_ms = asyncio.run(_l2_hit_cost(n=20_000 if not ctx.quick else 2_000))
    result.data.update(
        latency_s=LATENCY,
        rows=n_rows,
        distinct_keys=distinct,
        tasks=TASKS,
        l2_hit_us_per_row=hit_us,
        l1_hit_us_per_row=l1_us,
        l2_added_ms_per_miss=miss_ms,
    )
    result.notes.append(
        f"{n_rows:,} rows over {distinct:,} distinct keys in {TASKS} tasks on local[2] (two "
        f"Python workers, reused), service latency {LATENCY * 1000:g} ms, async capacity "
        f"{CAPACITY}. Per-row cost of an L2 hit (in process, batched reads from the local "
        f"Redis, uvloop if installed): {hit_us:.1f} µs; an L1 hit: {l1_us:.1f} µs. Latency "
        f"the shared cache adds to a miss (one lookup at a time: its read, then its write): "
        f"{miss_ms:.2f} ms."
    )
    return result


async def _l2_hit_cost(n: int) -> tuple[float, float, float]:
    """µs per lookup answered by L2 (no L1) and by L1, ``n`` keys, 200 at a time; and the ms
    the shared cache adds to one miss (lookups one at a time, with vs without it)."""
    from asyncio_lookup.lookup.chain import LookupChain
    from asyncio_lookup.lookup.functions import AsyncLookupFunction
    from asyncio_lookup.lookup.options import LookupOptions

    class Echo(AsyncLookupFunction):
        async def async_lookup(self, key: Any) -> list[dict[str, Any]]:
            return [{"id": key[0], "name": f"customer {key[0]}", "country": "NZ", "zip": "6011"}]

    class Source:
        def lookup_function(self) -> None:
            return None

        def async_lookup_function(self) -> Echo:
            return Echo()

        def scan(self) -> None:
            return None

    namespace = "bench-hit-" + uuid.uuid4().hex[:8]
    shared = LookupOptions.from_dict(
        {
            "lookup.shared-cache.url": REDIS_URL,
            "lookup.shared-cache.namespace": namespace,
            "lookup.shared-cache.timeout": "1 s",  # a cost, not a timeout, is measured here
        }
    )
    local = LookupOptions.from_dict(L1)
    keys = [(i,) for i in range(n)]

    async def timed(chain: LookupChain) -> float:
        started = time.perf_counter()
        for start in range(0, n, CAPACITY):
            await asyncio.gather(*(chain.async_lookup(k) for k in keys[start : start + CAPACITY]))
        return (time.perf_counter() - started) / n * 1e6

    try:
        writer = LookupChain.create(
            Source(), shared, prefer_async=True, name="C", key_columns=("id",)
        )
        await writer.open()
        await timed(writer)  # fills L2
        await writer.close()
        reader = LookupChain.create(
            Source(), shared, prefer_async=True, name="C", key_columns=("id",)
        )
        await reader.open()
        hit = await timed(reader)
        await reader.close()
        cached = LookupChain.create(
            Source(), local, prefer_async=True, name="C", key_columns=("id",)
        )
        await cached.open()
        await timed(cached)
        l1 = await timed(cached)
        await cached.close()
        added = await _miss_latency(Source(), shared, LookupOptions.from_dict({}), n)
    finally:
        _clear(namespace)
    return hit, l1, added


async def _miss_latency(source: Any, shared: Any, plain: Any, offset: int) -> float:
    from asyncio_lookup.lookup.chain import LookupChain

    async def per_lookup(options: Any, first: int) -> float:
        chain = LookupChain.create(
            source, options, prefer_async=True, name="C", key_columns=("id",)
        )
        await chain.open()
        started = time.perf_counter()
        for i in range(first, first + 300):
            await chain.async_lookup((i,))
        elapsed = (time.perf_counter() - started) / 300
        await chain.close()
        return elapsed

    without = await per_lookup(plain, offset)
    with_l2 = await per_lookup(shared, offset + 1000)
    return (with_l2 - without) * 1000
