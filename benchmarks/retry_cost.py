"""The cost of retry on lookup miss (FLIP-234 ``'retry-predicate'='lookup_miss'``).

Against the latency server (1 ms), same rows, same run:

- no retry, every customer present: the baseline;
- retry enabled, every customer present: what merely enabling retry costs (target: ~nothing);
- 10% of the customers arrive late (their first lookup misses): without retry those rows are
  lost (inner join); with retry they are found at the price of one extra call and the
  fixed delay for each late row.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from benchmarks import plots
from benchmarks.data import distinct_keys
from benchmarks.harness import Context, ScenarioResult, Target, Variant
from benchmarks.servers import Profile
from benchmarks.spark_env import orders_frame, run_to_noop
from benchmarks.tables import http_connector, lookup_hint, lookup_join, lookup_table

LATENCY = 0.001
LATE_FRACTION = 0.10
FIXED_DELAY = "10 ms"
N_CUSTOMERS = 100_000


def run(ctx: Context) -> ScenarioResult:
    result = ScenarioResult("retry-on-miss", "Retry-on-miss cost")
    n_rows = 3_000 if ctx.quick else 15_000
    ctx.begin("retry on miss", 4 * ctx.repeats)
    spark, server = ctx.spark(), ctx.server()
    # Distinct keys: every late customer misses exactly once per run.
    keys = distinct_keys(n_rows, N_CUSTOMERS, seed=41)
    orders = orders_frame(spark, keys)
    warm = orders_frame(spark, keys[:200])
    table = lookup_table("Customers", http_connector(server.base_url), {"lookup.cache": "NONE"})
    plain = lookup_hint("Customers", **{"async": "true", "capacity": 100})
    retry = lookup_hint("Customers", **{
        "async": "true", "capacity": 100, "retry-predicate": "lookup_miss",
        "retry-strategy": "fixed_delay", "fixed-delay": FIXED_DELAY, "max-attempts": 3,
    })
    cases = [
        (0.0, plain, "no retry, 0% late"),
        (0.0, retry, "retry, 0% late"),
        (LATE_FRACTION, plain, f"no retry, {LATE_FRACTION:.0%} late"),
        (LATE_FRACTION, retry, f"retry, {LATE_FRACTION:.0%} late"),
    ]

    def once(hint: str) -> dict[str, Any]:
        run_to_noop(lookup_join(orders, table, hint=hint))
        stats = server.stats()
        return {"calls": stats.get("point_calls", 0), "found": stats.get("found", 0)}

    def warmup(hint: str) -> None:
        run_to_noop(lookup_join(warm, table, hint=hint))

    measured = ctx.measure_all([
        Variant(label, n_rows, partial(once, hint), warmup=partial(warmup, hint),
                # a fresh profile per run: counters and the late customers' state reset
                setup=partial(server.configure,
                              Profile(latency=LATENCY, late_fraction=late, late_misses=1)))
        for late, hint, label in cases
    ])
    rates: dict[str, float] = {}
    baseline = measured[0]
    for m in measured:
        result.measurements.append(m)
        rates[m.label] = m.rate
        result.add_row(
            variant=m.label, rows=n_rows, median_s=m.median_s, rows_per_s=m.rate,
            vs_no_retry=m.rate / baseline.rate, calls_per_row=m.extra["calls"] / n_rows,
            rows_found=m.extra["found"] / n_rows,
        )
    late_retried = measured[3]
    result.targets.append(Target(
        f"rows joined with {LATE_FRACTION:.0%} late customers and retry",
        late_retried.extra["found"] / n_rows, minimum=1.0,
        detail="every late customer found by the lookup_miss retry",
    ))
    result.data["retry_overhead_no_misses"] = measured[1].rate / measured[0].rate
    orders.unpersist()
    warm.unpersist()
    result.notes.append(
        f"{n_rows:,} distinct customers, server latency {LATENCY * 1000:g} ms, async capacity 100, "
        f"no cache; retry = lookup_miss, fixed_delay {FIXED_DELAY}, max-attempts 3; a late "
        "customer's first lookup answers 404. rows_found is the fraction of rows joined."
    )
    result.plots.append(plots.grouped_bars(
        ctx.out_dir / "retry_on_miss.png", "Retry on lookup miss: throughput", {"rows/s": rates},
        "rows / s",
    ))
    return result
