"""Hash lookup join (issue 6): what shuffling, salting and partitioned FULL caches buy.

Local Spark, 16 partitions, the harness's latency server on 127.0.0.1 with no latency as the
dim service (batched lookups; it counts the keys looked up). Scenario 1 runs with 16 task
slots so that each task has its own Python worker and cache (per-task partial caches); 2 and 3
with 2 slots (the machine's cores), so task times are not inflated by oversubscription. Every
join uses a new ``LookupTable``, hence empty caches.

1. Zipf(1.1) keys over 100k distinct values, PARTIAL cache: external calls and cache hit ratio
   without vs with SHUFFLE_HASH (counts; the calls are counted by the server). Without shuffle
   a key costs one call per task that sees it, with shuffle one call, so the ratio is the mean
   number of tasks a distinct key reaches: it grows with rows per key and with partitions.
   Expected values (a simulation of the same draw): 2.05 at 400k rows and 8 partitions, 2.8 at
   1.6M and 8, 3.55 at 1.6M and 16; 1.6M rows over 16 partitions are measured here.
2. One very hot key (half of the rows): the slowest lookup task's time with salting vs without
   (median of 3 each; task times from Spark's status store).
3. FULL cache of a 100k-row table: the largest per-task snapshot with partitioned loading vs
   whole-table loading (``numCachedRecords`` / ``numCachedBytes``, max over tasks).

``run(quick=False) -> dict`` returns the figures; ``python -m benchmarks.hash_lookup_join``
prints them.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import uuid
from typing import Any

import numpy as np

from benchmarks.servers import LatencyServer
from benchmarks.tables import http_connector, lookup_table

PARTITIONS = 16
DISTINCT = 100_000


def _keys_looked_up(service: LatencyServer) -> int:
    """Keys the service was asked for so far (point lookups plus the keys of batches)."""
    stats = service.stats()
    return stats.get("point_calls", 0) + stats.get("batch_keys", 0)


def _session(slots: int) -> Any:
    """A local session with ``slots`` task slots. With ``PARTITIONS`` slots the tasks of a stage
    run at once, each in its own (reused) Python worker: per-task caches, as Flink's subtasks
    have."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(f"local[{slots}]")
        .appName("hash-lookup-join-benchmark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(PARTITIONS))
        .config("spark.default.parallelism", str(PARTITIONS))
        .config("spark.sql.adaptive.enabled", "false")  # one job, stages in plan order
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _warm_up(spark: Any, slots: int) -> None:
    """Start the Python workers and import the package in them before anything is timed."""
    from asyncio_lookup.connectors import InMemoryConnector
    from asyncio_lookup.spark import LookupTable, lookup_join

    table = LookupTable("Warm", "id BIGINT", InMemoryConnector([{"id": 1}], ["id"]))
    df = spark.range(0, slots * 100, numPartitions=slots)
    for _ in range(2):
        lookup_join(df, table, on=[("id", "id")], rename={"id": "dim_id"}).write.format(
            "noop"
        ).mode("overwrite").save()


def zipf_keys(rows: int, seed: int = 7) -> np.ndarray:
    """``rows`` keys drawn from Zipf(1.1) truncated to 100k distinct values (ranks shuffled)."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, DISTINCT + 1) ** 1.1
    ranks = rng.choice(DISTINCT, size=rows, p=weights / weights.sum())
    return rng.permutation(DISTINCT)[ranks]


def _input(spark: Any, keys: np.ndarray) -> Any:
    import pandas as pd

    frame = pd.DataFrame({"order_id": np.arange(len(keys)), "item_id": keys.astype("int64")})
    df = spark.createDataFrame(frame).repartition(PARTITIONS).cache()
    df.count()
    return df


def _run_job(spark: Any, df: Any) -> tuple[float, list[float]]:
    """Run ``df`` to a no-op sink; wall seconds and the durations (s) of the last stage's tasks."""
    sc = spark.sparkContext
    group = f"hlj-{uuid.uuid4().hex}"
    sc.setJobGroup(group, "hash lookup join benchmark")
    started = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    wall = time.perf_counter() - started
    tracker = sc.statusTracker()
    stages: list[int] = []
    for job in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job)
        if info is not None:
            stages.extend(info.stageIds)
    store = spark._jsc.sc().statusStore()
    tasks = store.taskList(max(stages), 0, 100_000)
    durations = []
    for i in range(tasks.size()):
        task = tasks.apply(i)
        if task.duration().isDefined():
            durations.append(task.duration().get() / 1000.0)
    return wall, durations


def _http_table(service: LatencyServer, options: dict[str, str]) -> Any:
    """The service's customers as table ``Items`` keyed by a BIGINT ``id`` (batched lookups)."""
    return lookup_table(
        "Items",
        http_connector(service.base_url, batch=True, connections=8),
        options,
        schema="id BIGINT, name STRING",
    )


def cache_hit_scenario(spark: Any, service: LatencyServer, rows: int) -> dict[str, Any]:
    from asyncio_lookup.spark import lookup_join

    df = _input(spark, zipf_keys(rows))
    options = {"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "100000"}
    result: dict[str, Any] = {
        "rows": rows,
        "distinct_keys": int(df.select("item_id").distinct().count()),
    }
    for name, hints in (("plain", None), ("shuffled", "SHUFFLE_HASH('Items')")):
        table = _http_table(service, options)
        calls, keys = service.stats().get("requests", 0), _keys_looked_up(service)
        out = lookup_join(df, table, on=[("item_id", "id")], hints=hints)
        wall, _ = _run_job(spark, out)
        metrics = table.metrics()
        lookups = metrics["numLookups"]
        result[name] = {
            "external_calls": _keys_looked_up(service) - keys,  # keys looked up in the store
            "http_requests": service.stats()["requests"] - calls,  # several keys per request
            "hit_ratio": round(metrics["hitCount"] / lookups, 4) if lookups else 0.0,
            "wall_s": round(wall, 2),
        }
    result["calls_ratio"] = round(
        result["plain"]["external_calls"] / max(1, result["shuffled"]["external_calls"]), 2
    )
    # Calls beyond the one each distinct key needs anyway: what routing can remove. Zipf(1.1)
    # over 100k values leaves most distinct keys seen once or twice, which bounds calls_ratio.
    for name in ("plain", "shuffled"):
        result[name]["redundant_calls"] = result[name]["external_calls"] - result["distinct_keys"]
    df.unpersist()
    return result


def hot_key_scenario(
    spark: Any, service: LatencyServer, rows: int, repeats: int
) -> dict[str, Any]:
    from asyncio_lookup.spark import lookup_join

    rng = np.random.default_rng(11)
    keys = rng.integers(0, 2_000, size=rows)  # few distinct keys: row work, not calls, dominates
    keys[rng.random(rows) < 0.5] = DISTINCT + 42  # one key in half of the rows
    df = _input(spark, keys)
    options = {"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "100000"}
    runs: dict[str, list[tuple[float, float]]] = {"unsalted": [], "salted": []}
    calls: dict[str, int] = {}
    salted: dict[str, bool] = {}
    for _ in range(repeats):
        for name, skew in (("unsalted", False), ("salted", True)):
            table = _http_table(service, options)
            out = lookup_join(
                df, table, on=[("item_id", "id")], hints="SHUFFLE_HASH('Items')", skew=skew
            )
            salted[name] = "CASE WHEN" in out._jdf.queryExecution().executedPlan().toString()
            before = _keys_looked_up(service)
            wall, durations = _run_job(spark, out)
            calls[name] = _keys_looked_up(service) - before
            runs[name].append((max(durations), wall))
    result: dict[str, Any] = {"rows": rows, "hot_share": 0.5}
    for name, values in runs.items():
        result[name] = {
            "slowest_task_s": round(statistics.median(v[0] for v in values), 2),
            "wall_s": round(statistics.median(v[1] for v in values), 2),
            "external_calls": calls[name],
            "hot_key_salted": salted[name],
        }
    result["slowest_task_ratio"] = round(
        result["unsalted"]["slowest_task_s"] / result["salted"]["slowest_task_s"], 2
    )
    df.unpersist()
    return result


def full_cache_scenario(spark: Any, rows: int) -> dict[str, Any]:
    from asyncio_lookup.connectors import InMemoryConnector
    from asyncio_lookup.spark import LookupTable, lookup_join

    dim = [{"id": i, "name": f"item-{i}", "price": i * 0.5} for i in range(DISTINCT)]
    df = _input(spark, zipf_keys(rows, seed=3))
    options = {"lookup.cache": "FULL", "lookup.full-cache.periodic-reload.interval": "1h"}
    result: dict[str, Any] = {"table_rows": DISTINCT, "partitions": PARTITIONS}
    for name, hints in (("whole_table", None), ("partitioned", "SHUFFLE_HASH('Items')")):
        table = LookupTable(
            "Items", "id BIGINT, name STRING, price DOUBLE", InMemoryConnector(dim, ["id"]), options
        )
        out = lookup_join(df, table, on=[("item_id", "id")], hints=hints)
        _run_job(spark, out)
        metrics = table.metrics()
        result[name] = {
            "max_records_per_task": int(metrics["numCachedRecords"]),
            "max_bytes_per_task": int(metrics["numCachedBytes"]),
        }
    result["bytes_share"] = round(
        result["partitioned"]["max_bytes_per_task"] / result["whole_table"]["max_bytes_per_task"], 4
    )
    result["target_share"] = round(1 / PARTITIONS * 1.1, 4)
    df.unpersist()
    return result


def run(quick: bool = False) -> dict[str, Any]:
    """All three scenarios; ``quick`` shrinks the inputs and runs each timing once."""
    # every item id, the hot key DISTINCT + 42 included, exists
    service = LatencyServer(n_customers=DISTINCT + 100).start()
    results: dict[str, Any] = {}
    try:
        spark = _session(PARTITIONS)
        try:
            _warm_up(spark, PARTITIONS)
            results["cache_hits"] = cache_hit_scenario(
                spark, service, 100_000 if quick else 1_600_000
            )
        finally:
            spark.stop()
        spark = _session(2)
        try:
            _warm_up(spark, 2)
            results["hot_key"] = hot_key_scenario(
                spark, service, 60_000 if quick else 240_000, 1 if quick else 3
            )
            results["full_cache"] = full_cache_scenario(spark, 20_000 if quick else 50_000)
        finally:
            spark.stop()
    finally:
        service.stop()
    return results


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
