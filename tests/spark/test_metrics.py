"""Metrics without accumulators: the same counters on a classic and a Connect session, each
successful task counted once (a failed attempt that Spark runs again is not)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from asyncio_lookup.connectors import InMemoryConnector
from asyncio_lookup.spark import LookupTable, lookup_join
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
    """The README's example: ``show()``, then ``metrics()``."""
    orders = spark.createDataFrame([(1, 10), (2, 11), (3, None)], "order_id INT, customer_id INT")
    rows = [{"id": 10, "name": "Ann"}, {"id": 11, "name": "Bob"}]
    customers = LookupTable("Customers", SCHEMA, InMemoryConnector(rows, ["id"]))
    enriched = lookup_join(orders, customers, on=[("customer_id", "id")], how="left")
    assert customers.metrics() == {}
    assert customers.metrics().partial is not None  # says why it is empty
    enriched.show()
    metrics = customers.metrics()
    assert metrics["numLookups"] == 2  # the NULL key is no lookup
    assert metrics["numExternalCalls"] == 2
    assert metrics["callLatencyCount"] == 2 and metrics["latencyCount"] == 3
    assert metrics.tasks >= 1
    assert type(metrics["numLookups"]) is int


def test_no_action_yet_says_so(spark: SparkSession) -> None:
    table = LookupTable("Customers", SCHEMA, InMemoryConnector([], ["id"]))
    lookup_join(_probe(spark), table, on=[("k", "id")])
    metrics = table.metrics()
    assert metrics == {} and metrics.tasks == 0
    assert metrics.partial is not None and "no action" in metrics.partial
