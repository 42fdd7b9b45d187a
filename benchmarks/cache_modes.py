"""Cache modes (none / partial / full) on a Zipf key stream, through ``lookup_join`` over HTTP.

Each timed run uses a new ``LookupTable`` (so a new, cold cache in every worker): the partial
cache's misses and the full cache's load (a paginated scan of all customers per worker) are
inside the time. A "warm" run repeats the join on the same table, as a second micro-batch of a
stream would. Throughput is compared with no cache in the same run; hit ratios come from
``LookupTable.metrics()``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from benchmarks import plots
from benchmarks.data import zipf_keys
from benchmarks.harness import Context, Measurement, ScenarioResult, Variant
from benchmarks.servers import Profile
from benchmarks.spark_env import orders_frame, run_to_noop
from benchmarks.tables import http_connector, lookup_hint, lookup_join, lookup_table

LATENCY = 0.002
N_CUSTOMERS = 100_000
ZIPF_EXPONENT = 1.1
PARTIAL_MAX_ROWS = 2_000

MODES: dict[str, dict[str, str]] = {
    "none": {"lookup.cache": "NONE"},
    "partial": {"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": str(PARTIAL_MAX_ROWS)},
    "full": {"lookup.cache": "FULL", "lookup.full-cache.reload-strategy": "PERIODIC",
             "lookup.full-cache.periodic-reload.interval": "1 h"},
}


def run(ctx: Context) -> ScenarioResult:
    result = ScenarioResult("cache-modes", "Cache modes on a Zipf key stream")
    n_rows = 3_000 if ctx.quick else 20_000
    variants = [("none", False, False), ("partial", False, False), ("partial", True, False),
                ("partial", False, True), ("full", False, False), ("full", True, False)]
    ctx.begin("cache modes", len(variants) * ctx.repeats)
    spark, server = ctx.spark(), ctx.server()
    server.configure(Profile(latency=LATENCY))
    keys = zipf_keys(n_rows, N_CUSTOMERS, ZIPF_EXPONENT, seed=5)
    orders = orders_frame(spark, keys)
    warm_frame = orders_frame(spark, keys[:200])
    connector = http_connector(server.base_url, scan=True)
    base_hint = lookup_hint("Customers", **{"async": "true", "capacity": 100})
    shuffle_hint = lookup_hint("Customers", **{"async": "true", "capacity": 100, "shuffle": "true"})
    rates: dict[str, float] = {}
    baseline: Measurement | None = None
    # Untimed: start the Python workers and open their HTTP pools.
    run_to_noop(lookup_join(warm_frame, lookup_table("Customers", connector), hint=base_hint))

    timed: list[Variant] = []
    for mode, warm, shuffled in variants:
        label = f"{mode}{' + shuffle' if shuffled else ''}{' (warm)' if warm else ' (cold)'}"
        hint = shuffle_hint if shuffled else base_hint
        if warm:
            table = lookup_table("Customers", connector, MODES[mode])
            run_to_noop(lookup_join(orders, table, hint=hint))  # fills the cache, untimed
            pick: Callable[[], Any] = partial(_same, table)
        else:
            pick = partial(lookup_table, "Customers", connector, MODES[mode])
        timed.append(Variant(label, n_rows, _counted(ctx, orders, pick, hint)))
    for m in ctx.measure_all(timed):
        baseline = baseline or m
        metrics = m.extra["metrics"]
        hits, misses = metrics.get("hitCount", 0), metrics.get("missCount", 0)
        result.measurements.append(m)
        rates[m.label] = m.rate
        result.add_row(
            cache=m.label, rows=n_rows, median_s=m.median_s, rows_per_s=m.rate,
            vs_no_cache=m.rate / baseline.rate,
            server_calls_per_row=m.extra["server_calls"] / n_rows,
            hit_ratio=hits / (hits + misses) if hits + misses else None,
            loads=metrics.get("loadCount"),
        )
    orders.unpersist()
    warm_frame.unpersist()
    result.data.update(latency_s=LATENCY, zipf_exponent=ZIPF_EXPONENT, n_customers=N_CUSTOMERS,
                       distinct_keys=len(set(keys.tolist())))
    result.notes.append(
        f"{n_rows:,} rows, Zipf(s={ZIPF_EXPONENT}) over {N_CUSTOMERS:,} customers "
        f"({result.data['distinct_keys']:,} distinct keys), server latency "
        f"{LATENCY * 1000:g} ms, async capacity 100; partial cache max-rows {PARTIAL_MAX_ROWS:,} "
        "per worker; the full cache scans all customers (pages of 5,000) in every worker. "
        "hit_ratio and loads are from LookupTable.metrics() of the last timed run (both "
        "workers summed). A cold full cache pays for loading the whole table in each worker "
        "before its first lookup, which a short batch job does not amortise; a warm one "
        "(a long-running stream's next micro-batch) answers everything locally."
    )
    result.plots.append(plots.grouped_bars(
        ctx.out_dir / "cache_modes.png",
        f"Cache modes on a Zipf({ZIPF_EXPONENT}) key stream ({LATENCY * 1000:g} ms latency)",
        {"rows/s": rates}, "rows / s",
    ))
    return result


def _same(table: Any) -> Any:
    return table


def _counted(
    ctx: Context, frame: Any, table: Callable[[], Any], hint: str
) -> Callable[[], dict[str, Any]]:
    server = ctx.server()

    def once() -> dict[str, Any]:
        server.reset()
        chosen = table()
        before = chosen.metrics()
        run_to_noop(lookup_join(frame, chosen, hint=hint))
        return {"server_calls": server.stats().get("requests", 0),
                "metrics": _delta(chosen.metrics(), before)}

    return once


def _delta(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    return {k: v - before.get(k, 0) if isinstance(v, (int, float)) else v for k, v in after.items()}
