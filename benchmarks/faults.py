"""Long-tail latency and transient failures, through ``lookup_join`` over the latency server.

- Long tail: 1% of the calls take 200 ms instead of 1 ms. Ordered output holds every result
  behind the slowest call in the buffer (head-of-line blocking); ``allow_unordered`` emits
  results as they complete. The hand-rolled ``asyncio.gather`` baseline runs alongside.
- Transient failures: 2% of the calls answer 429 (``Retry-After: 0``) or 503. The connector
  raises a transient error and the lookup layer retries it (``lookup.max-retries``, exponential
  backoff from 100 ms): every row must still be joined, at a measured cost in time and calls.
"""

from __future__ import annotations

from typing import Any

from benchmarks import plots
from benchmarks.baselines import JOINED_SCHEMA, hand_rolled_asyncio
from benchmarks.data import distinct_keys
from benchmarks.harness import Context, ScenarioResult, Target, Variant
from benchmarks.servers import Profile
from benchmarks.spark_env import orders_frame, run_to_noop
from benchmarks.tables import http_connector, lookup_hint, lookup_join, lookup_table

LATENCY = 0.001
TAIL = Profile(latency=LATENCY, tail_fraction=0.01, tail_latency=0.200)
FAILING = Profile(latency=LATENCY, throttle_rate=0.01, error_rate=0.01, retry_after=0)
N_CUSTOMERS = 100_000


def run(ctx: Context) -> ScenarioResult:
    result = ScenarioResult("faults", "Long-tail latency and transient failures")
    n_rows = 2_000 if ctx.quick else 8_000
    ctx.begin("faults", 6 * ctx.repeats)
    spark, server = ctx.spark(), ctx.server()
    orders = orders_frame(spark, distinct_keys(n_rows, N_CUSTOMERS, seed=53))
    warm = orders_frame(spark, distinct_keys(200, N_CUSTOMERS, seed=54))
    table = lookup_table("Customers", http_connector(server.base_url),
                         {"lookup.cache": "NONE", "lookup.max-retries": "5"})
    ordered = lookup_hint("Customers", **{"async": "true", "capacity": 100,
                                          "output-mode": "ordered"})
    unordered = lookup_hint("Customers", **{"async": "true", "capacity": 100,
                                            "output-mode": "allow_unordered"})
    gather = hand_rolled_asyncio(server.base_url, 100)

    # count() as the action: the rows joined are checked, not just the calls made.
    def joined(hint: str) -> Any:
        def once() -> dict[str, Any]:
            rows = lookup_join(orders, table, hint=hint).count()
            return {**server.stats(), "rows_out": rows}
        return once

    def hand_rolled() -> dict[str, Any]:
        rows = spark.createDataFrame(orders.rdd.mapPartitions(gather), JOINED_SCHEMA).count()
        return {**server.stats(), "rows_out": rows}

    def on(profile: Profile) -> Any:
        return lambda: server.configure(profile)

    variants = [
        Variant("no tail, ordered", n_rows, joined(ordered), setup=on(Profile(latency=LATENCY)),
                warmup=lambda: run_to_noop(lookup_join(warm, table, hint=ordered))),
        Variant("1% at 200 ms, ordered", n_rows, joined(ordered), setup=on(TAIL)),
        Variant("1% at 200 ms, allow_unordered", n_rows, joined(unordered), setup=on(TAIL)),
        Variant("1% at 200 ms, hand-rolled asyncio", n_rows, hand_rolled, setup=on(TAIL),
                warmup=lambda: run_to_noop(spark.createDataFrame(
                    warm.rdd.mapPartitions(gather), JOINED_SCHEMA))),
        Variant("no failures", n_rows, joined(unordered), setup=on(Profile(latency=LATENCY))),
        Variant("2% 429/503, retried", n_rows, joined(unordered), setup=on(FAILING)),
    ]
    measured = ctx.measure_all(variants)
    by_label = {m.label: m for m in measured}
    for m in measured:
        stats = m.extra
        result.add_row(
            variant=m.label, rows=n_rows, median_s=m.median_s, rows_per_s=m.rate,
            calls_per_row=stats.get("point_calls", 0) / n_rows,
            rows_joined=stats.get("rows_out", 0) / n_rows,
            throttled=stats.get("throttled", 0), errors=stats.get("errors", 0),
        )
    result.measurements += measured
    unordered_m = by_label["1% at 200 ms, allow_unordered"]
    ordered_m = by_label["1% at 200 ms, ordered"]
    failing = by_label["2% 429/503, retried"]
    result.data["unordered_vs_ordered_with_tail"] = unordered_m.rate / ordered_m.rate
    result.targets.append(Target(
        "rows joined with 2% transient failures", failing.extra.get("rows_out", 0) / n_rows,
        minimum=1.0, detail="every row joined through lookup.max-retries",
    ))
    result.notes.append(
        f"{n_rows:,} rows with distinct customers, base latency {LATENCY * 1000:g} ms, async "
        "capacity 100, no cache, "
        "lookup.max-retries 5; calls_per_row > 1 counts the retried calls. The failures "
        "variant runs allow_unordered. Figures are from the last of the repeated runs."
    )
    result.plots.append(plots.grouped_bars(
        ctx.out_dir / "faults.png", "Long-tail latency and transient failures (rows/s)",
        {"rows/s": {m.label: m.rate for m in measured}}, "rows / s",
    ))
    orders.unpersist()
    warm.unpersist()
    return result
