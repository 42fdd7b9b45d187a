"""Metrics without accumulators: the same counters on a classic and a Connect session, each
successful task counted once (a failed attempt that Spark runs again is not)."""

from __future__ import annotations

import asyncio
import gc
import json
import re
import time
import uuid
from collections.abc import Collection
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from asyncio_lookup.connectors import InMemoryConnector
from asyncio_lookup.lookup.functions import AsyncLookupFunction, Key, LookupFunction, Row
from asyncio_lookup.spark import LookupSQL, LookupTable, lookup_join
from asyncio_lookup.spark import metrics as spark_metrics
from asyncio_lookup.spark.job_metrics import JobMetrics
from asyncio_lookup.spark.metrics import GAUGES
from tests.spark.conftest import is_connect
from tests.spark.helpers import FailOnceConnector, physical_plan

SCHEMA = "id INT, name STRING"
DIM = {i: [{"id": i, "name": f"c{i}"}] for i in range(0, 60, 2)}

#: What each mode must report for the jobs below (the counters, not the gauges).
EXPECTED = {
    "numLookups": 120,
    "numCompleted": 120,
}
_by_mode: dict[str, dict[str, float]] = {}


def _probe(spark: SparkSession) -> Any:
    return (
        spark.range(120)
        .select(F.col("id").cast("int").alias("n"), (F.col("id") % 60).cast("int").alias("k"))
        .repartition(4)
    )


def _counters(metrics: dict[str, float]) -> dict[str, float]:
    """The counters that do not measure time (those vary from run to run)."""
    return {
        name: value
        for name, value in metrics.items()
        if name not in GAUGES and not name.endswith("Ms")
    }


def test_a_retried_task_counts_once_and_both_modes_report_the_same_counters(
    spark: SparkSession, tmp_path: Path
) -> None:
    marker = str(tmp_path / "failed-once")
    table = LookupTable("Customers", SCHEMA, FailOnceConnector(DIM, marker))
    out = lookup_join(_probe(spark), table, on=[("k", "id")], how="left")
    rows = out.collect()  # one task attempt fails on its first lookup; Spark runs it again
    assert Path(marker).exists(), "no task failed: the test would prove nothing"
    assert len(rows) == 120
    assert sum(1 for r in rows if r.name is not None) == 60
    counters = _counters(table.metrics())
    for name, value in EXPECTED.items():
        assert counters[name] == value, (name, counters)
    assert all(isinstance(v, int) for v in counters.values()), counters
    mode = "connect" if is_connect(spark) else "classic"
    _by_mode[mode] = counters
    if len(_by_mode) == 2:
        assert _by_mode["classic"] == _by_mode["connect"]


def test_metrics_of_the_first_action_and_no_trailer_leaks(spark: SparkSession) -> None:
    table = LookupTable(
        "Customers", SCHEMA, InMemoryConnector([r for rows in DIM.values() for r in rows], ["id"])
    )
    out = lookup_join(_probe(spark), table, on=[("k", "id")])
    assert table.metrics() == {}  # no action yet
    plan = physical_plan(out, extended=True)
    # the trailer filter stays above the observation (not pushed below CollectMetrics)
    optimized = plan[plan.index("== Optimized Logical Plan ==") :]
    assert optimized.index("isnull(__asyncio_lookup_metrics") < optimized.index("CollectMetrics")
    assert "__asyncio_lookup_metrics" not in out.columns
    assert out.count() == 60  # no trailer row among the results
    assert _counters(table.metrics())["numLookups"] == 120
    # filters and projections of the user's apply to the join's rows only
    assert out.where(F.col("name").isNull()).count() == 0


def test_a_partially_read_task_reports_the_batches_spark_read(spark: SparkSession) -> None:
    table = LookupTable(
        "Customers", SCHEMA, InMemoryConnector([r for rows in DIM.values() for r in rows], ["id"])
    )
    out = lookup_join(_probe(spark).coalesce(1), table, on=[("k", "id")])
    assert len(out.limit(5).collect()) == 5
    metrics = table.metrics()
    # the one task stopped before its end; the batch Spark read was reported before it
    assert metrics["numLookups"] > 0 and metrics["numCompleted"] > 0
    assert metrics.tasks == 1
    assert metrics.partial is not None and "stopped before the end" in metrics.partial


def test_show_then_metrics_has_real_numbers(spark: SparkSession) -> None:
    """The README's example, ``show()`` then ``metrics()``, on partitions with more rows than
    ``show()`` reads (main reported ``{}`` here: each task's one trailer came after its rows)."""
    orders = (
        spark.range(20_000)
        .select((F.col("id") % 7).cast("int").alias("customer_id"))
        .repartition(3)
    )
    rows = [{"id": 1, "name": "Ann"}, {"id": 2, "name": "Bob"}]
    customers = LookupTable("Customers", SCHEMA, InMemoryConnector(rows, ["id"]))
    enriched = lookup_join(orders, customers, on=[("customer_id", "id")], how="left")
    enriched.show()
    metrics = customers.metrics()
    assert 0 < metrics["numLookups"] < 20_000  # what the tasks Spark read from looked up
    assert metrics["numCompleted"] == metrics["latencyCount"] > 0
    assert 0 < metrics["callLatencyCount"] <= metrics["numExternalCalls"]  # finished calls
    assert metrics.tasks >= 1 and metrics.latency["record"].count == metrics["latencyCount"]
    assert metrics.partial is not None and "stopped before the end" in metrics.partial
    assert type(metrics["numLookups"]) is int
    # no cache (the default): nothing hits or misses, as docs/reference.md says
    assert (metrics["hitCount"], metrics["missCount"], metrics["loadCount"]) == (0, 0, 0)


def test_joining_again_and_again_sums_every_action_and_holds_no_observation_per_join(
    spark: SparkSession,
) -> None:
    """A session that joins in a loop (``foreachBatch``, a driver loop): ``metrics()`` sums
    every action, and the driver folds what is final and lets the observations go (classic:
    after the first action; Connect: once no DataFrame holds the observation), so it holds a
    fold per table, not an observation per join."""
    table = LookupTable(
        "Customers", SCHEMA, InMemoryConnector([r for rows in DIM.values() for r in rows], ["id"])
    )
    never_acted = lookup_join(_probe(spark), table, on=[("k", "id")])
    built = [lookup_join(_probe(spark), table, on=[("k", "id")]) for _ in range(2)]
    assert [df.count() for df in built] == [60, 60]
    assert table.metrics()["numLookups"] == 2 * 120  # several final at one read (classic)
    del built
    kept = lookup_join(_probe(spark), table, on=[("k", "id")])
    assert kept.count() == 60 and kept.count() == 60  # classic counts the first, Connect the last
    for number in range(1, 4):
        session = spark
        if not is_connect(spark):  # a new session object each time, as foreachBatch gives
            session = SparkSession(spark.sparkContext, spark._jsparkSession)  # type: ignore[attr-defined]
        assert lookup_join(_probe(session), table, on=[("k", "id")]).count() == 60
        if number == 2:
            if not is_connect(spark):  # each lookup_join settled what the one before it acted
                held_now = spark_metrics._observations[table.table_id]
                assert len(held_now) == 2  # the one never acted on, and this loop's
            midway = table.metrics()
            assert midway["numLookups"] == 5 * 120 and midway.tasks == 5 * 4
    names = [spark_metrics.observed_by(df)[1] for df in (never_acted, kept)]
    deadline = time.monotonic() + 30
    while True:  # the summary thread (spark/action_summary.py) lets go of an acted observation
        gc.collect()  # within its poll
        metrics = table.metrics()
        held = [o.name for _, o in spark_metrics._observations.get(table.table_id, [])]
        if len(held) <= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert metrics["numLookups"] == 6 * 120 and metrics["numCompleted"] == 6 * 120
    assert metrics.tasks == 6 * 4 and metrics.partial is None
    assert metrics.latency["record"].count == 6 * 120
    # classic: what the DataFrame never acted on observed; Connect: what a held DataFrame did
    assert sorted(held) == sorted(names[:1] if not is_connect(spark) else names)
    assert len(spark_metrics._settled[table.table_id]) == 1
    assert table.metrics() == metrics  # reading again changes nothing
    assert never_acted.count() == 60  # a late first action counts when it comes
    assert table.metrics()["numLookups"] == 7 * 120


def test_no_action_yet_says_so(spark: SparkSession) -> None:
    table = LookupTable("Customers", SCHEMA, InMemoryConnector([], ["id"]))
    lookup_join(_probe(spark), table, on=[("k", "id")])
    metrics = table.metrics()
    assert metrics == {} and metrics.tasks == 0
    assert metrics.partial is not None and "no action" in metrics.partial


def test_an_action_whose_query_the_observation_does_not_see_reports_nothing_and_says_so(
    spark: SparkSession,
) -> None:
    """A LookupSQL result's count() runs a query of its own, and on a classic session
    toLocalIterator() completes the observation before its jobs run: the metrics read as an
    empty list, which was taken for a report (no figures, partial None: "complete")."""

    def table() -> LookupTable:
        rows = [row for rows in DIM.values() for row in rows]
        return LookupTable("Customers", SCHEMA, InMemoryConnector(rows, ["id"]))

    _probe(spark).selectExpr("*", "'t' AS pt").createOrReplaceTempView("probe_for_metrics")
    query = (
        "SELECT p.n, c.name FROM probe_for_metrics AS p "
        "JOIN Customers FOR SYSTEM_TIME AS OF p.pt AS c ON p.k = c.id"
    )
    counted = table()
    sql = LookupSQL(spark)
    sql.register(counted)
    assert len(sql.sql(query).collect()) == 60
    assert counted.metrics()["numLookups"] == 120 and counted.metrics().partial is None
    unseen = table()
    sql = LookupSQL(spark)
    sql.register(unseen)
    assert sql.sql(query).count() == 60
    metrics = unseen.metrics()
    assert metrics == {} and metrics.partial is not None and "count" in metrics.partial
    iterated = table()
    assert len(list(lookup_join(_probe(spark), iterated, on=[("k", "id")]).toLocalIterator())) == 60
    metrics = iterated.metrics()
    if is_connect(spark):
        assert metrics["numLookups"] == 120 and metrics.partial is None
    else:
        assert metrics == {} and "toLocalIterator" in (metrics.partial or "")


#: The known service: key k answers after SLOW_MS when k % 20 == 0 (5 % of keys), else FAST_MS.
#: Long enough that the client's overhead stays well inside 4 % on a loaded machine (with 10
#: runnable processes per core the median call ended 14 ms late: 0.7 % of 2 s).
FAST_MS, SLOW_MS = 2000.0, 4000.0
ROWS = 200  # 4 tasks of 50 rows: all in flight at once (capacity 100), few wakeups at once


def _service_ms(key: int) -> float:
    return SLOW_MS if key % 20 == 0 else FAST_MS


class KnownLatency:
    """A dim service whose answer for key k takes :func:`_service_ms` (row: id, name)."""

    def lookup_function(self) -> LookupFunction:
        return _KnownLatencySync()

    def async_lookup_function(self) -> AsyncLookupFunction:
        return _KnownLatencyAsync()

    def scan(self) -> None:
        return None


class _KnownLatencySync(LookupFunction):
    def lookup(self, key: Key) -> Collection[Row]:
        time.sleep(_service_ms(key[0]) / 1000)
        return [{"id": key[0], "name": f"c{key[0]}"}]


class _KnownLatencyAsync(AsyncLookupFunction):
    async def async_lookup(self, key: Key) -> Collection[Row]:
        await asyncio.sleep(_service_ms(key[0]) / 1000)
        return [{"id": key[0], "name": f"c{key[0]}"}]


def _assert_true_percentiles(metrics: JobMetrics, rows: int) -> None:
    """p50 / p99 those of the service (190 of 200 keys fast, 10 slow: p50 is FAST_MS, p99
    SLOW_MS), for records and for calls."""
    assert metrics["latencyCount"] == metrics["callLatencyCount"] == rows, metrics
    # A late loop only adds to a call (59 ms once, on a loaded 2-core machine), so the bound
    # above is 4 %, below 1 % (the sketch's accuracy); the mean (2,100 ms) stays outside.
    for prefix in ("latency", "callLatency"):
        assert FAST_MS * 0.99 <= metrics[f"{prefix}P50Ms"] < FAST_MS * 1.04, metrics
        assert SLOW_MS * 0.99 <= metrics[f"{prefix}P99Ms"] < SLOW_MS * 1.04, metrics
        assert metrics[f"{prefix}MaxMs"] >= SLOW_MS
    assert metrics.latency["record"].count == rows and metrics.latency["call"].count == rows


def test_job_percentiles_are_those_of_the_service(spark: SparkSession) -> None:
    table = LookupTable("Known", SCHEMA, KnownLatency())
    probe = spark.range(ROWS).select(F.col("id").cast("int").alias("k")).repartition(4)
    assert lookup_join(probe, table, on=[("k", "id")]).count() == ROWS
    metrics = table.metrics()
    assert metrics.tasks == 4 and metrics.partial is None
    _assert_true_percentiles(metrics, ROWS)


def _run_available_now(df: Any, name: str, tmp_path: Path) -> Any:
    """The streaming ``df`` written to a memory sink until its input is read, stopped; the
    finished query (its ``recentProgress`` stays readable)."""
    query = (
        df.writeStream.format("memory")
        .queryName(f"{name}_{uuid.uuid4().hex[:8]}")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(180)
        assert query.exception() is None
    finally:
        query.stop()
    return query


def test_streaming_query_percentiles_are_those_of_the_service(
    spark: SparkSession, tmp_path: Path
) -> None:
    source = tmp_path / "keys"
    source.mkdir()
    half = ROWS // 2
    for part in range(2):  # two micro-batches of ROWS / 2 keys, 4 tasks each
        lines = (json.dumps({"k": k}) for k in range(part * half, (part + 1) * half))
        (source / f"part-{part}.json").write_text("\n".join(lines))
    stream = spark.readStream.schema("k INT").option("maxFilesPerTrigger", 1).json(str(source))
    table = LookupTable("Known", SCHEMA, KnownLatency())
    joined = lookup_join(stream.repartition(4), table, on=[("k", "id")])
    query = _run_available_now(joined, "known", tmp_path)
    metrics = table.query_metrics(query)
    again = table.query_metrics(query)  # each micro-batch is folded once
    assert metrics.tasks == 8 and metrics.partial is None
    assert again == metrics and again.tasks == 8
    _assert_true_percentiles(metrics, ROWS)


def documented_metrics() -> set[str]:
    """The names in the first column of docs/reference.md's "Metrics" table."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "reference.md").read_text()
    section = text[text.index("\n## Metrics\n") :]
    section = section[: section.index("\n## ", 1)]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`(\w+)`", row.split("|")[1])}


def test_the_documented_metrics_are_exactly_those_returned(
    spark: SparkSession, redis_url: str
) -> None:
    """A join with every kind of metric (a PARTIAL cache, a shared cache, the async operator,
    calls): its ``metrics()`` keys and the documented names, both ways."""
    options = {
        "lookup.cache": "PARTIAL",
        "lookup.partial-cache.max-rows": "1000",
        "lookup.shared-cache.url": redis_url,
        "lookup.shared-cache.namespace": f"metrics-doc-{uuid.uuid4().hex}",
    }
    rows = [r for found in DIM.values() for r in found]
    table = LookupTable("Customers", SCHEMA, InMemoryConnector(rows, ["id"]), options)
    try:
        assert lookup_join(_probe(spark), table, on=[("k", "id")]).count() == 60
    finally:
        table.invalidate_shared_cache()
    returned = set(table.metrics())
    documented = documented_metrics()
    assert len(documented) >= 40
    assert returned - documented == set(), "returned but not documented"
    assert documented - returned == set(), "documented but not returned"


def test_a_streaming_query_may_join_one_table_twice(spark: SparkSession, tmp_path: Path) -> None:
    # Spark refuses two observations of one name in a plan ([DUPLICATED_METRICS_NAME]); both
    # joins' metrics reach query_metrics
    source = tmp_path / "keys"
    source.mkdir()
    (source / "part-0.json").write_text("\n".join(json.dumps({"k": k}) for k in range(10)))
    stream = spark.readStream.schema("k INT").json(str(source))
    rows = [{"id": k, "name": f"n{k}"} for k in range(10)]
    table = LookupTable("Twice", "id INT, name STRING", InMemoryConnector(rows, ["id"]))
    first = lookup_join(stream, table, on=[("k", "id")])
    renamed = first.withColumnRenamed("name", "first_name").drop("id")
    second = lookup_join(renamed, table, on=[("k", "id")])
    metrics = table.query_metrics(_run_available_now(second, "twice", tmp_path))
    assert metrics["numLookups"] == 20 and metrics.partial is None


def test_a_stream_static_join_s_static_lookups_reach_query_metrics(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The static side's lookups run again in each micro-batch and were reported under the
    batch observation's name, which query_metrics did not read: empty, with partial None."""
    source = tmp_path / "orders"
    source.mkdir()
    for part in range(2):  # two micro-batches
        lines = (json.dumps({"oid": o, "k": o % 10}) for o in range(part * 50, part * 50 + 50))
        (source / f"part-{part}.json").write_text("\n".join(lines))
    rows = [{"id": k, "name": f"n{k}"} for k in range(10)]
    table = LookupTable("Static", "id INT, name STRING", InMemoryConnector(rows, ["id"]))
    static = lookup_join(spark.range(10).selectExpr("CAST(id AS INT) AS k"), table, [("k", "id")])
    other = LookupTable("Unused", "id INT, name STRING", InMemoryConnector(rows, ["id"]))
    stream = spark.readStream.schema("oid INT, k INT").option("maxFilesPerTrigger", 1)
    query = _run_available_now(stream.json(str(source)).join(static, "k"), "static", tmp_path)
    metrics = table.query_metrics(query)
    assert metrics["numLookups"] == 20 and metrics.partial is None  # 10 keys, 2 micro-batches
    unused = other.query_metrics(query)
    assert not unused and unused.partial is not None and "no progress report" in unused.partial
