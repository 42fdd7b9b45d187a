"""Batched lookups inside ``lookup_join`` on the machine's Redis and PostgreSQL.

The lookup layer gathers the keys that concurrent lookups ask for in one event-loop iteration
into one ``async_lookup_batch`` call (MGET on Redis, a join against ``unnest($1) WITH
ORDINALITY`` on PostgreSQL), up to ``lookup.batch.max-size`` keys; ``lookup.batch.max-size = 1``
turns batching off. Same rows, same run, no cache; the ratio batched / per-key is the figure.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from benchmarks import plots
from benchmarks.data import uniform_keys
from benchmarks.harness import Context, ScenarioResult, Skipped, Variant
from benchmarks.servers import PostgresDataset, RedisDataset
from benchmarks.spark_env import orders_frame, run_to_noop
from benchmarks.tables import (
    lookup_hint,
    lookup_join,
    lookup_table,
    postgres_connector,
    redis_connector,
)

N_CUSTOMERS = 100_000
BATCH_SIZES = (1, 16, 128)


def _join(frame: Any, table: Any, hint: str) -> None:
    run_to_noop(lookup_join(frame, table, hint=hint))


def run(ctx: Context) -> ScenarioResult:
    result = ScenarioResult("batching", "Batched lookups in lookup_join (Redis, PostgreSQL)")
    n_rows = 5_000 if ctx.quick else 20_000
    n_customers = 10_000 if ctx.quick else N_CUSTOMERS
    sizes = (1, 64) if ctx.quick else BATCH_SIZES
    ctx.begin("batching", 2 * len(sizes) * ctx.repeats)
    spark = ctx.spark()
    keys = uniform_keys(n_rows, n_customers, seed=31)
    orders = orders_frame(spark, keys)
    warm = orders_frame(spark, keys[:200])
    hint = lookup_hint("Customers", **{"async": "true", "capacity": 100})
    rates: dict[str, dict[str, float]] = {}
    skipped: list[str] = []

    stores: list[tuple[str, Callable[[], Any], Callable[[Any], Any]]] = [
        ("redis", lambda: RedisDataset(n_customers),
         lambda d: redis_connector(d.url, d.key_template)),
        ("postgres", lambda: PostgresDataset(n_customers),
         lambda d: postgres_connector(d.dsn, d.table)),
    ]
    for store, dataset, connector in stores:
        try:
            with dataset() as loaded:
                source = connector(loaded)
                variants = []
                for size in sizes:
                    table = lookup_table("Customers", source, {
                        "lookup.cache": "NONE", "lookup.batch.max-size": str(size)})
                    variants.append(Variant(
                        f"{store} batch.max-size={size}", n_rows,
                        partial(_join, orders, table, hint),
                        warmup=partial(_join, warm, table, hint),
                    ))
                measured = ctx.measure_all(variants)
                per_key = measured[0]
                for size, m in zip(sizes, measured, strict=True):
                    result.measurements.append(m)
                    rates.setdefault(store, {})[f"max-size {size}"] = m.rate
                    result.add_row(store=store, batch_max_size=size, rows=n_rows,
                                   median_s=m.median_s, rows_per_s=m.rate,
                                   vs_per_key=m.rate / per_key.rate)
        except Skipped:
            raise
        except Exception as error:  # a store that is down: report, carry on with the other
            skipped.append(f"{store}: {error!r}")
            ctx.log(f"  [yellow]{store} skipped: {error!r}[/]")
    orders.unpersist()
    warm.unpersist()
    if skipped and not result.table:
        raise Skipped("; ".join(skipped))
    result.notes += [f"skipped {s}" for s in skipped]
    result.notes.append(
        f"{n_rows:,} rows with uniform keys over {n_customers:,} customers loaded into Redis "
        "(JSON strings under a dedicated prefix) and PostgreSQL (a dedicated table), async "
        "capacity 100, no cache, 2 partitions; batch.max-size=1 is per-key lookups."
    )
    result.plots.append(plots.grouped_bars(
        ctx.out_dir / "batching.png", "lookup_join with batched lookups (rows/s)", rates,
        "rows / s",
    ))
    return result
