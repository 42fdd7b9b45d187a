"""Batched ``async_map`` (``batch_size=32``) vs per-row ``async_map`` against the local HTTP
service, which answers one customer per ``GET /customers/{id}`` and a list per
``POST /customers:batchGet``. Same rows, same run, same service latency; the results of the two
are compared row for row before timing. Per-row ``async_map`` runs at the default capacity
(100 rows) and at the batched run's rows in flight (8 batches x 32 = 256 rows); the figure is
the rows/s ratio batched / the faster per-row variant.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import aiohttp

from asyncio_lookup import AsyncBatchFunction, AsyncFunction
from benchmarks.data import uniform_keys
from benchmarks.harness import Context, ScenarioResult, Target, Variant
from benchmarks.servers import Profile
from benchmarks.spark_env import orders_frame, run_to_noop

N_CUSTOMERS = 100_000
LATENCY = 0.010
BATCH_SIZE = 32
ROW_CAPACITY = 100  # rows in flight per task, per-row async_map (the default capacity)
BATCH_CAPACITY = 8  # batches in flight per task: 256 rows
# per-row async_map also runs with as many rows in flight as the batched one; the target
# divides by the faster of the two per-row variants
ROW_CAPACITY_MATCHED = BATCH_CAPACITY * BATCH_SIZE
SCHEMA = "order_id BIGINT, customer_id INT, name STRING, country STRING, credit_limit DOUBLE"


def _output(order: dict[str, Any], customer: dict[str, Any]) -> dict[str, Any]:
    return {
        "order_id": order["order_id"],
        "customer_id": order["customer_id"],
        "name": customer["name"],
        "country": customer["country"],
        "credit_limit": customer["credit_limit"],
    }


class _Session:
    base_url: str
    session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=30)
        )

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None


class PerRow(_Session, AsyncFunction[dict[str, Any], dict[str, Any]]):
    """One ``GET /customers/{id}`` per order."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    async def async_invoke(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        assert self.session is not None
        url = f"{self.base_url}/customers/{row['customer_id']}"
        async with self.session.get(url) as response:
            if response.status == 404:
                return []
            response.raise_for_status()
            customer = await response.json()
        return [_output(row, customer)]


class Batched(_Session, AsyncBatchFunction[dict[str, Any], dict[str, Any]]):
    """One ``POST /customers:batchGet`` per batch of orders."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    async def async_invoke_batch(self, rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
        assert self.session is not None
        ids = sorted({row["customer_id"] for row in rows})
        url = f"{self.base_url}/customers:batchGet"
        async with self.session.post(url, json={"ids": ids}) as response:
            response.raise_for_status()
            found = {customer["id"]: customer for customer in await response.json()}
        return [
            [_output(row, found[row["customer_id"]])] if row["customer_id"] in found else []
            for row in rows
        ]


def _mapped(frame: Any, base_url: str, batched: bool, capacity: int = ROW_CAPACITY) -> Any:
    from asyncio_lookup.spark import async_map

    if batched:
        return async_map(
            frame,
            Batched(base_url),
            SCHEMA,
            timeout=30.0,
            capacity=BATCH_CAPACITY,
            batch_size=BATCH_SIZE,
            batch_timeout=0.05,
        )
    return async_map(frame, PerRow(base_url), SCHEMA, timeout=30.0, capacity=capacity)


def run(ctx: Context) -> ScenarioResult:
    result = ScenarioResult("batched-async-map", "Batched async_map vs per-row async_map")
    n_rows = 4_000 if ctx.quick else 40_000
    ctx.begin("batched-async-map", 3 * ctx.repeats)
    spark = ctx.spark()
    server = ctx.server()
    server.configure(Profile(latency=LATENCY))
    orders = orders_frame(spark, uniform_keys(n_rows, N_CUSTOMERS, seed=16))
    warm = orders_frame(spark, uniform_keys(500, N_CUSTOMERS, seed=17))
    base = server.base_url
    columns = ["order_id", "customer_id", "name", "country", "credit_limit"]
    per_row_rows = sorted(tuple(r) for r in _mapped(orders, base, False).select(columns).collect())
    batched_rows = sorted(tuple(r) for r in _mapped(orders, base, True).select(columns).collect())
    equal = per_row_rows == batched_rows
    if not equal:
        raise AssertionError(
            f"batched and per-row async_map disagree: {len(batched_rows)} vs {len(per_row_rows)} "
            "rows or different values"
        )
    server.reset()
    per_row, per_row_matched, batched = ctx.measure_all(
        [
            Variant(
                f"async_map per row (capacity {ROW_CAPACITY})",
                n_rows,
                partial(run_to_noop, _mapped(orders, base, False)),
                warmup=partial(run_to_noop, _mapped(warm, base, False)),
            ),
            Variant(
                f"async_map per row (capacity {ROW_CAPACITY_MATCHED})",
                n_rows,
                partial(run_to_noop, _mapped(orders, base, False, ROW_CAPACITY_MATCHED)),
            ),
            Variant(
                f"async_map batch_size={BATCH_SIZE} (capacity {BATCH_CAPACITY} batches)",
                n_rows,
                partial(run_to_noop, _mapped(orders, base, True)),
                warmup=partial(run_to_noop, _mapped(warm, base, True)),
            ),
        ]
    )
    stats = server.stats()
    orders.unpersist()
    warm.unpersist()
    result.measurements += [per_row, per_row_matched, batched]
    best = max(per_row, per_row_matched, key=lambda m: m.rate)
    for label, m in (
        (f"per row, capacity {ROW_CAPACITY}", per_row),
        (f"per row, capacity {ROW_CAPACITY_MATCHED}", per_row_matched),
        (f"batch_size={BATCH_SIZE}, capacity {BATCH_CAPACITY}", batched),
    ):
        result.add_row(
            variant=label,
            rows=n_rows,
            median_s=m.median_s,
            rows_per_s=m.rate,
            vs_best_per_row=m.rate / best.rate,
        )
    ratio = batched.rate / best.rate
    result.targets.append(
        Target(
            f"batched (batch_size={BATCH_SIZE}) / faster per-row async_map rows/s",
            ratio,
            minimum=5.0,
            detail=f"{batched.rate:,.0f} vs {best.rate:,.0f} rows/s ({best.label}); "
            f"results equal: {equal}",
        )
    )
    result.data.update({"results_equal": equal, "server_counters": stats})
    result.notes.append(
        f"{n_rows:,} orders with uniform customer ids over {N_CUSTOMERS:,}, 2 partitions, service "
        f"latency {LATENCY * 1000:.0f} ms per request (point or batch). Per row: "
        f"GET /customers/{{id}}, capacity {ROW_CAPACITY} and {ROW_CAPACITY_MATCHED} rows; "
        f"batched: POST "
        f"/customers:batchGet with up to {BATCH_SIZE} ids, capacity {BATCH_CAPACITY} batches "
        f"({BATCH_CAPACITY * BATCH_SIZE} rows), batch_timeout 50 ms. Both collected and compared "
        f"row for row before timing: {'equal' if equal else 'DIFFERENT'} ({len(per_row_rows):,} "
        "rows). Timed runs write to the noop sink."
    )
    return result
