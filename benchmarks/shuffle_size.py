"""SHUFFLE_HASH's default exchange size on a small and a large input (issue 23).

A fixed ``spark.sql.shuffle.partitions`` (200 by default) made a 500-row hash lookup join run
200 tasks: 36x the time of the same join without the shuffle. The default is now one partition
per task slot (docs/semantics.md §2.7). Measured here on
``local[2]`` with Spark's defaults (adaptive execution on, 200 shuffle partitions), an
in-memory dim table of 1,000 keys (no I/O: what is left is Spark's and the library's overhead),
``collect()`` of the joined rows, warm Python workers, medians of interleaved runs:

- ``plain``: ``lookup_join`` without a shuffle;
- ``shuffle_hash``: ``SHUFFLE_HASH`` with its defaults (hot-key sampling on: one small Spark
  job when ``lookup_join`` is called);
- ``shuffle_hash_no_skew``: ``skew=False`` (``LookupSQL``'s default);
- ``fixed_200``: ``shuffle_partitions=200``, what the default used to be.

``python -m benchmarks shuffle-size`` runs it through the harness; ``python -m
benchmarks.shuffle_size [--quick]`` prints the figures.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from typing import Any

from benchmarks.harness import Context, ScenarioResult, Target

VARIANTS: dict[str, dict[str, Any]] = {
    "plain": {},
    "shuffle_hash": {"hints": "SHUFFLE_HASH('Items')"},
    "shuffle_hash_no_skew": {"hints": "SHUFFLE_HASH('Items')", "skew": False},
    "fixed_200": {"hints": "SHUFFLE_HASH('Items')", "skew": False, "shuffle_partitions": 200},
}


def _session() -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("shuffle-size-benchmark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def measure(rows: int, repeats: int, variants: list[str] | None = None) -> dict[str, Any]:
    """Median wall seconds of each variant over ``rows`` rows (a new session, stopped after)."""
    from asyncio_lookup.connectors import InMemoryConnector
    from asyncio_lookup.spark import LookupTable, lookup_join

    spark = _session()
    try:
        dim = [{"id": i, "name": f"item-{i}"} for i in range(1_000)]
        df = spark.range(rows).selectExpr("id AS order_id", "id % 1000 AS item_id")
        names = variants or list(VARIANTS)

        def once(name: str) -> float:
            table = LookupTable(
                "Items", "id BIGINT, name STRING", InMemoryConnector(dim, ["id"]),
                {"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "10000"},
            )
            started = time.perf_counter()
            out = lookup_join(df, table, on=[("item_id", "id")], **VARIANTS[name])
            count = len(out.collect()) if rows <= 100_000 else out.count()
            elapsed = time.perf_counter() - started
            assert count == rows, (name, count)
            return elapsed

        for name in names:  # warm-up: Python workers started, modules imported
            once(name)
        times: dict[str, list[float]] = {name: [] for name in names}
        for _ in range(repeats):
            for name in names:
                times[name].append(once(name))
        result: dict[str, Any] = {"rows": rows, "repeats": repeats}
        for name in names:
            result[name] = round(statistics.median(times[name]), 3)
        return result
    finally:
        spark.stop()


def figures(quick: bool = False) -> dict[str, Any]:
    small = measure(500, 3 if quick else 7)
    large = measure(200_000 if quick else 1_000_000, 1 if quick else 3)
    return {"small": small, "large": large}


def run(ctx: Context) -> ScenarioResult:
    result = ScenarioResult("shuffle-size", "SHUFFLE_HASH's default exchange size")
    ctx.begin("shuffle size", 1)
    ctx.stop_spark()  # its own local[2] sessions with Spark's default conf
    data = figures(ctx.quick)
    ctx.advance("shuffle size")
    for part in ("small", "large"):
        entry = data[part]
        for name in VARIANTS:
            result.add_row(rows=entry["rows"], variant=name, wall_s=entry[name],
                           vs_plain=round(entry[name] / entry["plain"], 2))
    small = data["small"]
    result.targets += [
        Target("SHUFFLE_HASH (skew=False) / plain, 500 rows",
               round(small["shuffle_hash_no_skew"] / small["plain"], 2), maximum=2.0),
    ]
    result.notes.append(
        f"With hot-key sampling (lookup_join's default) 500 rows take "
        f"{small['shuffle_hash'] / small['plain']:.2f}x plain: the sample is one more Spark job."
    )
    result.notes.append(
        "local[2], Spark's defaults (adaptive execution on, 200 shuffle partitions), in-memory dim "
        "table, collect() (count() for 1M rows); fixed_200 is the old default."
    )
    result.data["shuffle_size"] = data
    return result


if __name__ == "__main__":
    print(json.dumps(figures(quick="--quick" in sys.argv), indent=2))
