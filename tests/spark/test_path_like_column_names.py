"""Column names PySpark reads as paths (``a.b``, a backtick): SHUFFLE_HASH exchanges by such a
key column (spark/shuffle.py), and the joins and async_map run over them
(spark/map_in_arrow.py: PySpark's own classic ``mapInArrow`` fails to resolve them)."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import SparkSession

from asyncio_lookup.connectors import InMemoryConnector
from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.spark import LookupTable, async_map, lookup_join
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


@pytest.mark.parametrize("hints", [None, "SHUFFLE_HASH('D')"])
def test_a_join_keeps_path_like_names_on_both_sides(spark: SparkSession, hints: str | None) -> None:
    dim = LookupTable(
        "D",
        "id INT, `v.w` STRING",
        InMemoryConnector([{"id": 1, "v.w": "one"}, {"id": 2, "v.w": "two"}], ["id"]),
    )
    left = spark.sql("select 1 as `a.b`, 'x' as `c``d`, 5 as e union all select 3, 'z', 7")
    out = lookup_join(left, dim, ("a.b", "id"), how="left", hints=hints)
    assert out.columns == ["a.b", "c`d", "e", "id", "v.w"]
    assert sorted(map(tuple, out.collect())) == [(1, "x", 5, 1, "one"), (3, "z", 7, None, None)]


def test_async_map_sees_path_like_names(spark: SparkSession) -> None:
    async def describe(row: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"s": f"{row['a.b']}-{row['c`d']}"}]

    left = spark.sql("select 1 as `a.b`, 'x' as `c``d` union all select 2, 'y'")
    out = async_map(left, describe, "s STRING", timeout=10, metrics_id="path-like")
    assert sorted(row.s for row in out.collect()) == ["1-x", "2-y"]


def test_names_given_twice_are_refused_on_the_driver(spark: SparkSession) -> None:
    """Renamed by position, ``id`` twice would reach the task, which reads one value for both:
    refused as Spark refuses it without a path-like name (AMBIGUOUS_REFERENCE)."""
    a = spark.sql("select 1 as k, 100 as id, 'p' as `x.y`")
    b = spark.sql("select 1 as k2, 111 as id")
    left = a.join(b, a.k == b.k2)
    assert left.columns == ["k", "id", "x.y", "k2", "id"]
    dim = LookupTable("D", "id INT, v STRING", InMemoryConnector([{"id": 1, "v": "one"}], ["id"]))

    async def echo(row: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"id": row["id"]}]

    for build in (
        lambda: async_map(left, echo, "id INT", timeout=10, metrics_id="dup-names"),
        lambda: lookup_join(left, dim, ("k", "id"), how="left", columns=["v"]),
    ):
        with pytest.raises(ConfigurationError, match=r"\['id'\].*more than once") as info:
            build()
        assert info.value.option == "columns"


def test_a_column_named_star(spark: SparkSession) -> None:
    async def describe(row: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"s": f"{row['*']}"}]

    left = spark.sql("select 1 as `*` union all select 2")
    out = async_map(left, describe, "s STRING", timeout=10, metrics_id="star")
    assert sorted(row.s for row in out.collect()) == ["1", "2"]
