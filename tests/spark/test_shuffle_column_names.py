"""SHUFFLE_HASH exchanges by a left key column whose name holds a dot (spark/shuffle.py): the
name is one column, not a struct field."""

from __future__ import annotations

from pyspark.sql import SparkSession

from asyncio_lookup.connectors import InMemoryConnector
from asyncio_lookup.spark import LookupTable
from asyncio_lookup.spark.join import LookupJoinArgs, hash_partition, plan_lookup_join
from asyncio_lookup.spark.shuffle import PARTITION_COLUMN


def test_a_dotted_left_key_column_is_exchanged(spark: SparkSession) -> None:
    dim = LookupTable("D", "id INT, v STRING", InMemoryConnector([{"id": 1, "v": "one"}], ["id"]))
    left = spark.sql("select 1 as `a.b`, 'L' as s union all select 2, 'M'")
    args = LookupJoinArgs(("a.b", "id"), hints="SHUFFLE_HASH('D')")
    task, _ = plan_lookup_join(left, dim, args)
    routed, routed_task = hash_partition(left, task, dim, 2, args.skew_options)
    rows = routed.select(f"`{PARTITION_COLUMN}`", "`a.b`").collect()
    assert sorted(row[1] for row in rows) == [1, 2]
    assert all(0 <= row[0] < 2 for row in rows)
    assert routed_task.partition_column == PARTITION_COLUMN
