"""Looked-up and mapped values end to end (docs/semantics.md §2.9), classic and Spark Connect:
naive datetimes in the session time zone, NOT NULL struct fields and VARIANT columns (never
a JVM error), nested maps; rows of a lookup that are no mappings (lookup/results.py); a LOOKUP
hint's shared-cache namespace."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from types import MappingProxyType
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from asyncio_lookup.connectors import InMemoryConnector
from asyncio_lookup.errors import ConfigurationError, ResultTypeError
from asyncio_lookup.lookup.functions import AsyncLookupFunction, LookupFunction
from asyncio_lookup.lookup.results import as_rows
from asyncio_lookup.spark import LookupTable, async_map, lookup_join, split_failed
from tests.spark.conftest import no_spark_job

TIME_ZONE = "spark.sql.session.timeZone"
NOON = dt.datetime(2024, 1, 1, 12, 0)
NOON_IN_NEW_YORK = 1704128400  # 2024-01-01 17:00 UTC


@pytest.fixture
def new_york(spark: SparkSession) -> Iterator[None]:
    before = spark.conf.get(TIME_ZONE)
    spark.conf.set(TIME_ZONE, "America/New_York")
    try:
        yield
    finally:
        spark.conf.set(TIME_ZONE, before)


def test_naive_datetimes_into_timestamp_are_read_in_the_session_time_zone(
    spark: SparkSession, new_york: None
) -> None:
    rows = [
        {"id": 1, "at": NOON, "ntz": NOON},
        {"id": 2, "at": dt.date(2024, 1, 2), "ntz": dt.date(2024, 1, 2)},
    ]
    table = LookupTable(
        "Times", "id INT, at TIMESTAMP, ntz TIMESTAMP_NTZ", InMemoryConnector(rows, ["id"])
    )
    joined = lookup_join(spark.createDataFrame([(1,), (2,)], "id INT"), table, "id")
    got = joined.select(
        "id", F.col("at").cast("long").alias("epoch"), F.col("at").cast("string"), "ntz"
    ).orderBy("id")
    assert [tuple(r) for r in got.collect()] == [
        (1, NOON_IN_NEW_YORK, "2024-01-01 12:00:00", NOON),
        (2, NOON_IN_NEW_YORK + 12 * 3600, "2024-01-02 00:00:00", dt.datetime(2024, 1, 2)),
    ]

    async def noon(row: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"at": NOON}]

    mapped = async_map(spark.createDataFrame([(1,)], "id INT"), noon, "at TIMESTAMP", timeout=30)
    assert mapped.select(F.col("at").cast("long")).first()[0] == NOON_IN_NEW_YORK


def test_a_null_in_a_not_null_struct_field_is_a_failed_row_under_keep(
    spark: SparkSession,
) -> None:
    rows = [
        {"id": 1, "s": {"b": "no a"}},
        {"id": 2, "s": {"a": None, "b": "a is null"}},
        {"id": 3, "s": {"a": 7, "b": "a is 7"}},
        {"id": 4, "s": None},
    ]
    table = LookupTable(
        "NotNull", "id INT, s STRUCT<a: INT NOT NULL, b: STRING>", InMemoryConnector(rows, ["id"])
    )
    left = spark.createDataFrame([(i,) for i in range(1, 5)], "id INT").coalesce(1)
    good, failed = split_failed(lookup_join(left, table, "id", on_error="keep"))
    assert sorted((r.id, r.s and r.s.asDict()) for r in good.collect()) == [
        (3, {"a": 7, "b": "a is 7"}),
        (4, None),
    ]
    failures = sorted((r.id, r.lookup_error.message) for r in failed.collect())
    assert [i for i, _ in failures] == [1, 2]
    assert all("NOT NULL field 'a'" in message for _, message in failures)


def test_variant_columns_are_refused_on_the_driver(spark: SparkSession) -> None:
    table = LookupTable("V", "id INT, x VARIANT", InMemoryConnector([{"id": 1, "x": 1}], ["id"]))
    left = spark.createDataFrame([(1,)], "id INT")

    async def fn(row: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"x": 1}]

    with no_spark_job(spark):
        with pytest.raises(ConfigurationError, match=r"'x'.*VARIANT"):
            lookup_join(left, table, "id", on_error="keep")
        with pytest.raises(ConfigurationError, match=r"'x'.*VARIANT"):
            async_map(left, fn, "x ARRAY<VARIANT>", timeout=30)
    keyed = spark.createDataFrame([(1,)], "k INT")
    assert lookup_join(keyed, table, ("k", "id"), columns=["id"]).count() == 1  # not selected


def test_maps_nested_in_arrays_and_structs_are_filled(spark: SparkSession) -> None:
    rows = [{"id": 1, "tags": [{"a": 1}, {"b": 2}], "s": {"m": {"k": 3}}}]
    table = LookupTable(
        "Nested",
        "id INT, tags ARRAY<MAP<STRING, INT>>, s STRUCT<m: MAP<STRING, INT>>",
        InMemoryConnector(rows, ["id"]),
    )
    (row,) = lookup_join(spark.createDataFrame([(1,)], "id INT"), table, "id").collect()
    assert row.tags == [{"a": 1}, {"b": 2}]
    assert row.s.m == {"k": 3}


# -- rows of a lookup that are no mappings ----------------------------------------------------


class _Store(LookupFunction):
    """``[row or None]``, as ``[store.get(key)]`` returns; key 3 a tuple row."""

    def lookup(self, key: tuple[Any, ...]) -> list[Any]:
        if key == (3,):
            return [(3, "three")]
        return [{1: {"id": 1, "v": "one"}}.get(key[0])]


class _StoreConnector:
    key_columns = ("id",)

    def lookup_function(self) -> LookupFunction:
        return _Store()

    def async_lookup_function(self) -> None:
        return None

    def scan(self) -> None:
        return None


def test_a_row_that_is_no_mapping_is_refused_naming_the_function_and_key() -> None:
    function = _Store()
    with pytest.raises(ResultTypeError, match=r"_Store returned NoneType None .* key \(2,\)"):
        as_rows([{"id": 1}, None], (2,), function)
    with pytest.raises(ResultTypeError, match=r"_Store returned tuple \(3, 'three'\)"):
        as_rows(((3, "three"),), (3,), function)
    with pytest.raises(ResultTypeError, match="returned str 'x'"):
        as_rows(iter(["x"]), (4,), function)
    proxy = MappingProxyType({"id": 1})
    assert as_rows([{"id": 1}, proxy], (1,), function) == [{"id": 1}, proxy]
    assert as_rows(({"id": 1},), (1,), function) == [{"id": 1}]


def test_a_none_row_is_no_left_join_padding(spark: SparkSession) -> None:
    table = LookupTable("Store", "id INT, v STRING", _StoreConnector())
    left = spark.createDataFrame([(1, "a"), (2, "b"), (3, "c")], "k INT, s STRING").coalesce(1)
    good, failed = split_failed(lookup_join(left, table, ("k", "id"), "inner", on_error="keep"))
    assert [(r.k, r.v) for r in good.collect()] == [(1, "one")]
    failures = sorted((r.k, r.lookup_error.error_class) for r in failed.collect())
    assert failures == [(2, "ResultTypeError"), (3, "ResultTypeError")]


def test_a_lookup_hint_s_shared_cache_namespace_serves_a_connector_without_identity(
    spark: SparkSession,
) -> None:
    class Rows(AsyncLookupFunction):
        async def async_lookup(self, key: tuple[Any, ...]) -> list[dict[str, Any]]:
            return [{"id": key[0], "v": "x"}]

    class NoIdentity(_StoreConnector):
        def async_lookup_function(self) -> AsyncLookupFunction:  # type: ignore[override]
            return Rows()

    table = LookupTable(
        "NoIdentity",
        "id INT, v STRING",
        NoIdentity(),
        {"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "10"},
    )
    url = "LOOKUP('table'='NoIdentity', 'lookup.shared-cache.url'='redis://127.0.0.1:6379/13'"
    left = spark.createDataFrame([(1,)], "id INT")
    with no_spark_job(spark):
        named = url + ", 'lookup.shared-cache.namespace'='review_hint_namespace')"
        lookup_join(left, table, "id", hints=named)  # planned: the hint names the namespace
        with pytest.raises(ConfigurationError, match="cache_identity"):
            lookup_join(left, table, "id", hints=url + ")")


def test_left_keys_are_looked_up_as_the_dim_key_type_holds_them(
    spark: SparkSession, new_york: None, redis_url: str
) -> None:
    # a key's text (Redis, HTTP) must not depend on the left column's scale or the session's
    # time zone: the cache took 1.00 and 1 (and one instant in two zones) for one key, so
    # which text reached the store first decided every later join's answer
    import json
    import uuid
    from decimal import Decimal

    import redis

    from asyncio_lookup.connectors import RedisConnector

    prefix = f"keytype:{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redis_url)
    client.set(f"{prefix}:n:1", json.dumps({"v": "one"}))
    client.set(f"{prefix}:t:2024-01-01 17:00:00+00:00", json.dumps({"v": "noon in New York"}))
    try:
        numbers = LookupTable(
            "Numbers",
            "id DECIMAL(10,0), v STRING",
            RedisConnector(redis_url, prefix + ":n:{id}", ["id"]),
            verify_target=False,
        )
        left = spark.createDataFrame([(Decimal("1.00"),), (Decimal("1.50"),)], "id DECIMAL(10,2)")
        got = lookup_join(left, numbers, "id", "left").orderBy("id").collect()
        assert [(r.id, r.v) for r in got] == [(Decimal("1.00"), "one"), (Decimal("1.50"), None)]
        times = LookupTable(
            "Times",
            "at TIMESTAMP, v STRING",
            RedisConnector(redis_url, prefix + ":t:{at}", ["at"]),
            verify_target=False,
        )
        noon = spark.sql("SELECT TIMESTAMP'2024-01-01 12:00:00' AS at")  # New York's wall clock
        assert [r.v for r in lookup_join(noon, times, "at", "left").collect()] == [
            "noon in New York"
        ]
    finally:
        client.delete(f"{prefix}:n:1", f"{prefix}:t:2024-01-01 17:00:00+00:00")
        client.close()


def test_a_left_key_beyond_the_dim_key_s_decimal_is_no_other_key(spark: SparkSession) -> None:
    # Arrow's decimal128 rescale wrapped 12345678901234567890123 into DECIMAL(38, 18) as
    # 95513692080783205441.514...: the row of that key was joined to it
    from decimal import Decimal

    wrapped = Decimal("95513692080783205441.514132456344387584")
    dim = [{"id": wrapped, "v": "another key's row"}, {"id": Decimal(5), "v": "five"}]
    table = LookupTable("Wide", "id DECIMAL(38,18), v STRING", InMemoryConnector(dim, ["id"]))
    left = spark.createDataFrame(
        [(Decimal("12345678901234567890123"),), (Decimal(5),)], "id DECIMAL(38,0)"
    )
    got = lookup_join(left, table, "id", "left").collect()
    assert sorted((str(r.id), r.v) for r in got) == [
        ("12345678901234567890123", None),
        ("5", "five"),
    ]
