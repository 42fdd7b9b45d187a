"""Throughput of ``lookup_join`` vs capacity, against Little's law and the measured CPU ceiling.

The latency server answers after a fixed latency L. With P partitions each keeping ``capacity``
lookups in flight, Little's law bounds throughput at P x capacity / L; the CPU bounds it at the
rate the whole pipeline (Spark, the Python workers, the server) reaches when concurrency is never
the limit, measured in the same run: L = 1 ms at capacity 100 and 200 (Little's bound 200k-400k
rows/s). Not L = 0: answered at once, responses reach the event loop one per iteration and the
pipeline runs slower than with some latency (seen here: 2.5k vs 4.4k rows/s at 10 ms).
Target: at capacity 100, throughput >= 80% of min(Little, CPU ceiling).
"""

from __future__ import annotations

from typing import Any

from benchmarks import plots
from benchmarks.data import uniform_keys
from benchmarks.harness import Context, ScenarioResult, Target, Variant
from benchmarks.servers import Profile
from benchmarks.spark_env import PARTITIONS, orders_frame, run_to_noop
from benchmarks.tables import http_connector, lookup_hint, lookup_join, lookup_table

LATENCY = 0.010
CEILING_LATENCY = 0.001
N_CUSTOMERS = 100_000
TARGET_CAPACITY = 100


def _plan(ctx: Context) -> tuple[list[int], int, float]:
    """(capacities, rows for CPU-bound runs, seconds a latency-bound run should take)."""
    if ctx.quick:
        return [1, 10, 100], 3_000, 1.0
    return [1, 3, 10, 30, 100, 200], 10_000, 4.0


def run(ctx: Context) -> ScenarioResult:
    result = ScenarioResult("capacity-sweep", "Capacity sweep vs Little's law and the CPU ceiling")
    capacities, cpu_rows, seconds = _plan(ctx)
    ceiling_capacities = sorted({TARGET_CAPACITY, max(capacities)})
    ctx.begin("capacity sweep", (len(capacities) + len(ceiling_capacities)) * ctx.repeats)
    spark, server = ctx.spark(), ctx.server()
    keys = uniform_keys(cpu_rows, N_CUSTOMERS, seed=23)
    warm = orders_frame(spark, keys[:200])
    table = lookup_table("Customers", http_connector(server.base_url, connections=200),
                         {"lookup.cache": "NONE"})
    frames: dict[int, Any] = {}

    def variant(label: str, capacity: int, rows: int, latency: float) -> Variant:
        frame = frames.get(rows)
        if frame is None:
            frame = frames[rows] = orders_frame(spark, keys[:rows])
        hint = lookup_hint("Customers", **{"async": "true", "capacity": capacity})

        def once() -> dict[str, Any]:
            server.reset()
            run_to_noop(lookup_join(frame, table, hint=hint))
            return {"max_in_flight": server.stats().get("max_in_flight", 0)}

        return Variant(label, rows, once,
                       warmup=lambda: run_to_noop(lookup_join(warm, table, hint=hint)),
                       setup=lambda: server.configure(Profile(latency=latency)))

    # The CPU ceiling: latency negligible next to what the capacity can hide.
    variants = [variant(f"CPU ceiling ({CEILING_LATENCY * 1000:g} ms, capacity {c})", c,
                        cpu_rows, CEILING_LATENCY)
                for c in ceiling_capacities]
    # Latency-bound points get enough rows for about `seconds` of work; CPU-bound points get
    # as many rows as the ceiling runs, so Spark's fixed per-job cost weighs the same on both.
    for capacity in capacities:
        bound = PARTITIONS * capacity / LATENCY
        rows = int(min(cpu_rows, max(400, bound * seconds)))
        variants.append(variant(f"capacity {capacity} @ {LATENCY * 1000:g} ms", capacity, rows,
                                LATENCY))
    measured = ctx.measure_all(variants)
    ceilings, points = measured[: len(ceiling_capacities)], measured[len(ceiling_capacities):]
    cpu_ceiling = max(m.rate for m in ceilings)
    result.measurements += measured
    throughput: list[float] = []
    little: list[float] = []
    for capacity, m in zip(capacities, points, strict=True):
        bound = PARTITIONS * capacity / LATENCY
        throughput.append(m.rate)
        little.append(bound)
        expected = min(bound, cpu_ceiling)
        result.add_row(
            capacity=capacity, rows=m.rows, median_s=m.median_s, rows_per_s=m.rate,
            little_rows_per_s=bound, cpu_ceiling_rows_per_s=cpu_ceiling,
            of_min_little_cpu=m.rate / expected,
            max_in_flight_at_server=m.extra.get("max_in_flight", 0),
        )
        if capacity == TARGET_CAPACITY:
            result.targets.append(Target(
                f"throughput / min(Little, CPU) at capacity {capacity}", m.rate / expected,
                minimum=0.8,
                detail=f"{m.rate:,.0f} rows/s vs min({bound:,.0f}, {cpu_ceiling:,.0f})",
            ))
    for frame in frames.values():
        frame.unpersist()
    warm.unpersist()
    effective = PARTITIONS / throughput[0] if capacities[0] == 1 else None
    result.data.update(latency_s=LATENCY, partitions=PARTITIONS, cpu_ceiling=cpu_ceiling,
                       effective_latency_s_at_capacity_1=effective)
    result.data["ceiling_runs"] = [m.to_json() for m in ceilings]
    result.notes.append(
        f"CPU ceiling: the same join at {CEILING_LATENCY * 1000:g} ms server latency, capacity "
        f"{' and '.join(map(str, ceiling_capacities))} (best median {cpu_ceiling:,.0f} rows/s); "
        "all runs are timed interleaved."
    )
    result.notes.append(
        f"local[{PARTITIONS}], {PARTITIONS} partitions, server latency {LATENCY * 1000:g} ms, "
        "point lookups (no batch endpoint), no cache; the HTTP pool has 200 connections per "
        "worker so the pool never caps concurrency below the capacity."
    )
    if effective:
        result.notes.append(
            f"Effective per-lookup time at capacity 1: {effective * 1000:.1f} ms (the nominal "
            f"{LATENCY * 1000:g} ms plus the event loop's timer granularity and the call itself)."
        )
    result.plots.append(plots.capacity_sweep(
        ctx.out_dir / "capacity_sweep.png",
        f"lookup_join throughput vs capacity ({LATENCY * 1000:g} ms latency, "
        f"{PARTITIONS} partitions)",
        capacities, throughput, little, cpu_ceiling,
    ))
    return result
