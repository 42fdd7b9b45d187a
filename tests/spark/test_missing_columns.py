"""A dim column no looked-up row contained is reported: a warning per task, the metric
``numMissingColumns``, an error with ``lookup.fail-on-missing-column`` (docs/semantics.md
§2.11)."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator

import pyarrow as pa
import pytest
import redis
from pyspark.sql import DataFrame, SparkSession

from asyncio_lookup.connectors import HttpConnector, InMemoryConnector, RedisConnector
from asyncio_lookup.errors import ConfigurationError, DataFormatError
from asyncio_lookup.lookup.hint_resolve import resolve_lookup
from asyncio_lookup.lookup.join import JoinSpec, JoinType, KeyBinding
from asyncio_lookup.lookup.options import LookupOptions
from asyncio_lookup.spark import LookupSQL, LookupTable, lookup_join
from asyncio_lookup.spark.advice import summary
from asyncio_lookup.spark.job_metrics import fold
from asyncio_lookup.spark.missing import MissingColumns, describe
from asyncio_lookup.spark.task import DimColumn, LookupJoinTask
from tests.spark.helpers import DimService
from tests.spark.test_partition import split

pytestmark = pytest.mark.spark

FAIL = {"lookup.fail-on-missing-column": "true"}


@pytest.fixture
def redis_customers(redis_url: str) -> Iterator[str]:
    """Customers 1-4 as JSON under ``<prefix>:<id>``: fields id, name, country (customer 3's
    country is null: present, so not missing)."""
    prefix = f"missing:{uuid.uuid4().hex[:10]}"
    client = redis.Redis.from_url(redis_url)
    for cid in range(1, 5):
        country = None if cid == 3 else "NL"
        client.set(
            f"{prefix}:{cid}", json.dumps({"id": cid, "name": f"c{cid}", "country": country})
        )
    yield prefix
    client.delete(*(f"{prefix}:{cid}" for cid in range(1, 5)))
    client.close()


@pytest.fixture
def orders(spark: SparkSession) -> DataFrame:
    # customer 9 is not in Redis: a miss, NULL-padded, not a returned row
    return spark.createDataFrame(
        [(n, n % 4 + 1) for n in range(12)] + [(99, 9)], "oid INT, cid INT"
    )


def test_a_typo_in_a_redis_dim_column_is_counted_and_null(
    orders: DataFrame, redis_url: str, redis_customers: str
) -> None:
    connector = RedisConnector(redis_url, redis_customers + ":{id}")
    table = LookupTable("TypoCustomers", "id INT, nmae STRING, country STRING", connector)
    joined = lookup_join(orders, table, on=[("cid", "id")], how="left")
    got = {(r.oid, r.nmae, r.country) for r in joined.collect()}
    expected_country = {1: "NL", 2: "NL", 3: None, 4: "NL", 9: None}
    assert got == {(n, None, expected_country[n % 4 + 1]) for n in range(12)} | {(99, None, None)}
    metrics = table.metrics()
    assert metrics["numMissingColumns"] == 1  # 'nmae'; 'country' (null for customer 3) is not
    assert type(metrics["numMissingColumns"]) is int
    # the driver's summary of the job's warnings names it too (spark/advice.py)
    assert "the column 'nmae' (did you mean 'name'?)" in summary(table)


def test_every_column_present_reports_none(
    orders: DataFrame, redis_url: str, redis_customers: str
) -> None:
    connector = RedisConnector(redis_url, redis_customers + ":{id}")
    table = LookupTable("GoodCustomers", "id INT, name STRING, country STRING", connector, FAIL)
    joined = lookup_join(orders, table, on=[("cid", "id")], how="left")
    assert joined.count() == 13
    assert table.metrics()["numMissingColumns"] == 0


def test_with_the_option_a_typo_fails_the_job_naming_table_and_column(
    orders: DataFrame, redis_url: str, redis_customers: str
) -> None:
    connector = RedisConnector(redis_url, redis_customers + ":{id}")
    table = LookupTable("StrictCustomers", "id INT, nmae STRING, country STRING", connector, FAIL)
    with pytest.raises(Exception) as error:
        lookup_join(orders, table, on=[("cid", "id")], how="left").collect()
    message = str(error.value)
    assert "DataFormatError: lookup table 'StrictCustomers' (Redis redis://127.0.0.1" in message
    assert "had the column 'nmae' (did you mean 'name'?)" in message
    assert "lookup.fail-on-missing-column=true" in message


def test_http_point_rows_without_key_columns_are_not_missing(
    spark: SparkSession, dim_service: DimService
) -> None:
    dim_service.add(8101, [{"name": "no key in the body"}])
    df = spark.createDataFrame([(8101,)], "k INT")
    connector = HttpConnector(f"{dim_service.url}/customers/{{id}}")
    table = LookupTable("HttpNoKey", "id INT, name STRING", connector, FAIL)
    got = [tuple(r) for r in lookup_join(df, table, on=[("k", "id")]).collect()]
    assert got == [(8101, None, "no key in the body")]
    assert table.metrics()["numMissingColumns"] == 0


def test_the_option_in_sql_ddl(spark: SparkSession, redis_url: str, redis_customers: str) -> None:
    orders = spark.createDataFrame([(1, 1, "2026-01-01")], "oid INT, cid INT, proc_time STRING")
    orders.createOrReplaceTempView("MissingOrders")
    sql = LookupSQL(spark)
    sql.sql(
        "CREATE TEMPORARY TABLE DdlTypo (id INT, nmae STRING) WITH ("
        f"'connector' = 'redis', 'url' = '{redis_url}', "
        f"'key-template' = '{redis_customers}:{{id}}', "
        "'lookup.fail-on-missing-column' = 'true')"
    )
    query = sql.sql(
        "SELECT o.oid, d.nmae FROM MissingOrders o JOIN DdlTypo "
        "FOR SYSTEM_TIME AS OF o.proc_time AS d ON d.id = o.cid"
    )
    with pytest.raises(Exception, match="had the column 'nmae'"):
        query.collect()
    with pytest.raises(ConfigurationError, match=r"did you mean 'lookup\.fail-on-missing-column'"):
        sql.sql(
            "CREATE TEMPORARY TABLE DdlTypo2 (id INT, nmae STRING) WITH ("
            f"'connector' = 'redis', 'url' = '{redis_url}', "
            f"'key-template' = '{redis_customers}:{{id}}', "
            "'lookup.fail-on-missing-columns' = 'true')"
        )


# -- in process: the task itself (the warning goes to the executor's log) -------------------


def task(rows: list[dict[str, object]], options: LookupOptions | None = None) -> LookupJoinTask:
    columns = (
        DimColumn("id", "dim_id", pa.int32()),
        DimColumn("nmae", "nmae", pa.string()),
        DimColumn("zip", "zip", pa.string()),
    )
    return LookupJoinTask(
        table_id=uuid.uuid4().hex,
        table_name="T",
        connector=InMemoryConnector(rows, ["id"]),
        options=options or LookupOptions(),
        hint=resolve_lookup(None, "T"),
        spec=JoinSpec(JoinType.LEFT, (KeyBinding("id", left_column="cid"),)),
        dim_columns=columns,
    )


def probe(*chunks: list[int]) -> Iterator[pa.RecordBatch]:
    return iter([pa.RecordBatch.from_pydict({"cid": pa.array(c, pa.int32())}) for c in chunks])


def test_one_warning_per_task_naming_table_and_column(caplog: pytest.LogCaptureFixture) -> None:
    rows = [{"id": i, "name": f"n{i}", "zip": None} for i in range(5)]
    caplog.set_level(logging.WARNING, logger="asyncio_lookup")
    for _ in range(2):
        data, reports = split(task(rows)(probe([0, 1, 2], [3, 4, 7])))
        assert sum(b.num_rows for b in data) == 6
        assert fold(reports)["numMissingColumns"] == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2  # one per task, not per row or batch
    assert warnings[0].startswith("lookup table 'T' (in-memory rows (5)): ")
    # 'zip' is present (with a null value): only 'nmae' is missing
    assert "had the column 'nmae' (did you mean 'name'?) (a returned row has" in warnings[0]


def test_the_option_fails_the_task() -> None:
    rows = [{"id": 1, "name": "n1", "zip": "z"}]
    strict = LookupOptions.from_dict(FAIL)
    with pytest.raises(DataFormatError, match=r"lookup table 'T' .*'nmae'"):
        list(task(rows, strict)(probe([1])))
    # no row returned at all (every key a miss): nothing can be said, nothing is reported
    _, reports = split(task(rows, strict)(probe([5, 6])))
    assert fold(reports)["numMissingColumns"] == 0


def test_a_task_whose_every_lookup_missed_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    """A wrong key column, type or key text misses on every key: a left join NULLs every row
    and an inner join outputs nothing, silently. A task of 100+ lookups none of which found a
    row says so, once, with its first key (docs/reference.md "Troubleshooting")."""
    rows = [{"id": i, "nmae": f"n{i}", "zip": "z"} for i in range(5)]
    caplog.set_level(logging.WARNING, logger="asyncio_lookup")
    data, reports = split(task(rows)(probe(list(range(1000, 1060)), list(range(1060, 1150)))))
    assert sum(b.num_rows for b in data) == 150
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(
        "lookup table 'T' (in-memory rows (5)): none of this task's 150 lookups found a row, "
    )
    assert warnings[0].endswith("first key looked up: (1000,).")
    (found,) = fold(reports).advice()
    assert found.code == "no-rows" and found.counts == {"missed": 150}
    # one key found among them, or fewer than 100 lookups: no warning
    caplog.clear()
    split(task(rows)(probe([*range(1000, 1149), 3])))
    split(task(rows)(probe(list(range(1000, 1099)))))
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_missing_columns_tracker() -> None:
    seen = MissingColumns(["a", "b", "c"])
    seen.observe([None, None])
    assert seen.missing == []  # nothing returned yet
    seen.observe([None, {"a": 1, "b": None}])
    seen.observe([{"a": 2}])
    assert seen.missing == ["c"]
    seen.observe([{"c": None}])
    assert seen.missing == []
    # with no column to check (every dim column a key), it still tells whether a row came
    keys_only = MissingColumns([])
    keys_only.observe([None, None])
    assert not keys_only.returned
    keys_only.observe([None, {"id": 1}])
    assert keys_only.returned
    failed = MissingColumns(["a"])
    failed.observe([None, "a failure"], failed=[1])  # on_error='keep': a failure, not a row
    assert not failed.returned


def test_a_struct_field_no_value_had_is_missing_once_a_value_came() -> None:
    """A misspelt STRUCT field was NULL in every row, silently (only top-level columns were
    checked)."""
    seen = MissingColumns(["s", "t"], {"s": ["name", "zip"], "t": ["x"]})
    seen.observe([{"s": None, "t": None}])
    assert seen.missing == []  # no struct value yet: nothing can be said of their fields
    seen.observe([{"s": {"nmae": "Ada", "zip": None}, "t": None}])
    assert seen.missing == ["s.name"] and seen.unseen
    assert "'s.name' (did you mean 's.nmae'?)" in describe("T", "x", seen.missing, seen.sample)
    seen.observe([{"s": {"name": "Grace"}, "t": {"x": 1}}])
    assert seen.missing == [] and not seen.unseen


def test_an_async_map_struct_field_no_row_had_is_counted(spark: SparkSession) -> None:
    from asyncio_lookup.spark import async_map, async_map_metrics

    async def nested(row: dict[str, object]) -> list[dict[str, object]]:
        return [{"id": row["id"], "s": {"nmae": "Ada", "age": 3}}]

    metrics_id = f"missing-{uuid.uuid4().hex[:8]}"
    rows = spark.createDataFrame([(n,) for n in range(4)], "id INT").repartition(2)
    schema = "id INT, s STRUCT<name: STRING, age: INT>"
    out = async_map(rows, nested, schema, 30.0, metrics_id=metrics_id)
    assert sorted((r.id, r.s.name, r.s.age) for r in out.collect()) == [
        (n, None, 3) for n in range(4)
    ]
    assert async_map_metrics(metrics_id)["numMissingColumns"] == 1


def test_an_async_map_output_column_no_row_had_is_counted(spark: SparkSession) -> None:
    from asyncio_lookup.spark import async_map, async_map_metrics

    async def misspelt(row: dict[str, object]) -> list[dict[str, object]]:
        return [{"id": row["id"], "nmae": f"n{row['id']}"}]

    metrics_id = f"missing-{uuid.uuid4().hex[:8]}"
    rows = spark.createDataFrame([(n,) for n in range(6)], "id INT").repartition(2)
    out = async_map(rows, misspelt, "id INT, name STRING", 30.0, metrics_id=metrics_id)
    assert sorted((r.id, r.name) for r in out.collect()) == [(n, None) for n in range(6)]
    assert async_map_metrics(metrics_id)["numMissingColumns"] == 1
