"""No row lost or duplicated: lookup_join equals a plain Spark join of the same data (multisets)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from asyncio_lookup.connectors import InMemoryConnector
from asyncio_lookup.spark import LookupTable, lookup_join

pytestmark = pytest.mark.spark

left_rows = st.lists(
    st.tuples(st.one_of(st.none(), st.integers(0, 14)), st.integers(-5, 5)),
    min_size=0,
    max_size=60,
)
dim_rows = st.lists(
    st.tuples(st.integers(0, 10), st.text("abc", max_size=3)), min_size=0, max_size=25
)

MODES = [
    ("inner", "LOOKUP('table'='Dim', 'capacity'='3')"),
    ("left", "LOOKUP('table'='Dim', 'output-mode'='allow_unordered', 'capacity'='5')"),
    ("inner", "LOOKUP('table'='Dim', 'output-mode'='allow_unordered')"),
    ("left", "LOOKUP('table'='Dim', 'async'='false')"),
    ("left", "LOOKUP('table'='Dim')"),
]


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(left=left_rows, dim=dim_rows, partitions=st.integers(1, 3))
def test_lookup_join_equals_a_plain_join(
    spark: SparkSession, left: list[tuple[Any, int]], dim: list[tuple[int, str]], partitions: int
) -> None:
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "7")
    try:
        orders = spark.createDataFrame(
            [(n, c, v) for n, (c, v) in enumerate(left)], "order_id INT, cid INT, v INT"
        ).repartition(partitions)
        dim_dicts = [{"id": i, "label": s} for i, s in dim]
        table = LookupTable(
            "Dim", "id INT, label STRING", InMemoryConnector(dim_dicts, ["id"], latency=0.0005)
        )
        dim_df = spark.createDataFrame(dim, "id INT, label STRING")
        for how, hint in MODES:
            plain = orders.join(dim_df, orders.cid == dim_df.id, how).select(
                "order_id", "cid", "v", "id", "label"
            )
            looked_up = lookup_join(orders, table, on=[("cid", "id")], how=how, hints=hint)
            want = Counter(tuple(r) for r in plain.collect())
            got = Counter(tuple(r) for r in looked_up.collect())
            assert got == want, (how, hint)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
