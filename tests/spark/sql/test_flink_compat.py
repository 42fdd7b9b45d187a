"""Issue 24 and issue 23 item 5: Flink jobs' DDL and joins as they are written — deprecated JDBC
cache options, other operators' options, computed columns, Long.MAX_VALUE durations, casts on
lookup keys, several LOOKUP hints, PRIMARY KEY NOT ENFORCED, DDL without a connector, syntax
errors. Driver-side checks run no Spark job; the ones that join use the in-memory 'values'
connector of the ported Flink suite or PostgreSQL."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any

import pytest
from pyspark.sql import SparkSession

from asyncio_lookup.connectors import InMemoryConnector, register_connector
from asyncio_lookup.errors import ConfigurationError, HintError
from asyncio_lookup.lookup.functions import AsyncLookupFunction, Key, Row
from asyncio_lookup.spark import LookupSQL
from asyncio_lookup.spark.sql import SqlError, SqlParseError
from asyncio_lookup.spark.sql.primary_key import checked
from tests.spark.conftest import no_spark_job
from tests.spark.sql.conftest import (
    USER_DATA,
    VALUES,
    FlinkTables,
    register_data,
    result,
)

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

LONG_MAX = "9223372036854775807"
JDBC = (
    "'connector' = 'jdbc', 'url' = 'jdbc:postgresql://127.0.0.1:5432/test', "
    "'table-name' = '{table}', 'username' = 'postgres'"
)


@pytest.fixture
def sql(spark: SparkSession) -> Iterator[LookupSQL]:
    yield LookupSQL(spark)


def user_table(options: str, name: str = "U", columns: str = "") -> str:
    return (
        f"CREATE TEMPORARY TABLE {name} (age INT, id BIGINT, name STRING{columns}) WITH ({options})"
    )


def values_options() -> str:
    return f"'connector' = 'values', 'data-id' = '{register_data(USER_DATA)}'"


# ----------------------------------------------------------------- deprecated and foreign options


def test_deprecated_jdbc_cache_options_are_aliases_with_one_warning(
    spark: SparkSession,
    sql: LookupSQL,
    pg_tables: Callable[..., str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    table = pg_tables(USER_DATA)
    options = JDBC.format(table=table) + (
        ", 'lookup.cache.max-rows' = '100', 'lookup.cache.ttl' = '10 min', "
        "'lookup.cache.caching-missing-key' = 'false', 'lookup.max-retries' = '3'"
    )
    with caplog.at_level(logging.WARNING), no_spark_job(spark):
        sql.sql(user_table(options, columns=", PRIMARY KEY (id) NOT ENFORCED"))
    warnings = [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()]
    assert len(warnings) == 1
    for new in ("lookup.partial-cache.max-rows", "lookup.partial-cache.expire-after-write",
                "lookup.partial-cache.cache-missing-key"):  # fmt: skip
        assert new in warnings[0]
    options_now = sql.table("U").options
    assert options_now.cache.name == "PARTIAL" and options_now.partial_max_rows == 100
    assert options_now.partial_expire_after_write == 600.0
    assert options_now.partial_cache_missing_key is False


def test_sink_and_scan_options_are_ignored_with_one_warning_listing_them(
    spark: SparkSession,
    sql: LookupSQL,
    pg_tables: Callable[..., str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    options = JDBC.format(table=pg_tables(USER_DATA)) + (
        ", 'sink.buffer-flush.max-rows' = '500', 'sink.buffer-flush.interval' = '2s', "
        "'sink.max-retries' = '3', 'scan.partition.column' = 'id', 'scan.partition.num' = '4', "
        "'scan.fetch-size' = '100'"
    )
    with caplog.at_level(logging.WARNING), no_spark_job(spark):
        sql.sql(user_table(options))
    warnings = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
    assert len(warnings) == 1
    for name in ("sink.buffer-flush.max-rows", "sink.max-retries", "scan.partition.num"):
        assert name in warnings[0]
    assert "scan.fetch-size" not in warnings[0]  # the jdbc connector reads it


@pytest.mark.parametrize(
    ("option", "suggestion"),
    [
        ("'lookup.cache.max-row' = '10'", "lookup.partial-cache.max-rows"),
        ("'lookup.partial-cache.max-row' = '10'", "lookup.partial-cache.max-rows"),
        ("'lookup.cash' = 'PARTIAL'", "lookup.cache"),
        # a connector's own option misspelt (no suggestion before)
        ("'dataid' = 'x'", "data-id"),
        ("'data-idd' = 'x'", "data-id"),
    ],
)
def test_a_typo_of_a_lookup_option_still_fails_with_did_you_mean(
    spark: SparkSession, sql: LookupSQL, option: str, suggestion: str
) -> None:
    with no_spark_job(spark), pytest.raises(ConfigurationError) as error:
        sql.sql(user_table(values_options() + ", " + option))
    assert "did you mean" in str(error.value) and suggestion in str(error.value)


def test_a_deprecated_option_conflicting_with_its_new_name_is_an_error(sql: LookupSQL) -> None:
    options = values_options() + (
        ", 'lookup.cache.max-rows' = '10', 'lookup.cache.ttl' = '1 min', "
        "'lookup.partial-cache.max-rows' = '20'"
    )
    with pytest.raises(ConfigurationError) as error:
        sql.sql(user_table(options))
    assert error.value.option == "lookup.cache.max-rows"
    assert "lookup.partial-cache.max-rows" in str(error.value)


# ----------------------------------------------------------------- DDL: connector, syntax


@pytest.mark.parametrize(
    ("ddl", "named"),
    [
        (
            "CREATE TEMPORARY TABLE T (id INT) WITH ('url' = 'x')",
            ["'connector'", "'jdbc'", "'values'"],
        ),
        ("CREATE TABLE T (id INT) WITH ('connector' = 'kafka')", ["'kafka'", "'jdbc'", "'redis'"]),
        ("CREATE TEMPORARY TABLE T (id INT) WITH ()", ["'connector'", "'http'"]),
    ],
)
def test_ddl_without_a_known_connector_lists_the_connectors(
    spark: SparkSession, sql: LookupSQL, ddl: str, named: list[str]
) -> None:
    with no_spark_job(spark), pytest.raises(SqlError) as error:
        sql.sql(ddl)
    for text in named:
        assert text in str(error.value)


def test_syntax_errors_show_the_statement_with_a_caret_and_the_expected_token(
    sql: LookupSQL,
) -> None:
    with pytest.raises(SqlParseError) as error:
        sql.sql("SELECT o.id\nFROM Orders o\nWHERE (o.id = 1")
    text = str(error.value)
    assert "expected ')'" in text
    assert "  WHERE (o.id = 1\n" in text and text.rstrip().endswith("^")
    caret = text.splitlines()[-1]
    assert caret.index("^") == "  WHERE (o.id = 1".index("1")
    with pytest.raises(SqlParseError, match="expected a statement such as SELECT"):
        sql.sql("SELEC id FROM Orders")


# ----------------------------------------------------------------- computed columns


def test_computed_column_in_on_and_select(
    flink: Callable[..., FlinkTables],
) -> None:
    tables = flink("memory")
    rows = tables.sql.sql(
        "SELECT T.id, D.nominal_age, D.nominal_age * 2 AS twice FROM src AS T "
        "LEFT JOIN userTableWithComputedColumn FOR SYSTEM_TIME AS OF T.proctime AS D "
        "ON T.id = D.id AND D.nominal_age = T.len"
    )
    assert result(rows) == ["1,12,24", "2,null,null", "3,null,null", "8,null,null", "9,null,null"]


def test_a_computed_column_is_null_where_no_dim_row_joined(
    flink: Callable[..., FlinkTables],
) -> None:
    """A LEFT JOIN miss evaluated the expression on the NULL row: coalesce(...) and constants
    were not NULL, and WHERE on them kept the misses."""
    tables = flink("memory")
    tables.sql.sql(
        user_table(
            values_options(),
            name="WithComputed",
            columns=", name_or_none AS coalesce(name, 'none'), one AS 1, known AS name IS NOT NULL",
        )
    )
    joined = (
        "SELECT T.id, D.name_or_none, D.one, D.known FROM src AS T "
        "LEFT JOIN WithComputed FOR SYSTEM_TIME AS OF T.proctime AS D ON T.id = D.id"
    )
    assert result(tables.sql.sql(joined)) == [
        "1,Julian,1,True",
        "2,Jark,1,True",
        "3,Fabian,1,True",
        "8,null,null,null",
        "9,null,null,null",
    ]
    assert result(tables.sql.sql(joined + " WHERE D.name_or_none = 'none'")) == []


def test_computed_column_over_an_unknown_column_is_an_error(sql: LookupSQL) -> None:
    with pytest.raises(SqlError) as error:
        sql.sql(user_table(values_options(), columns=", bad AS agee + 1"))
    assert error.value.option == "bad" and "'agee'" in str(error.value)


# ----------------------------------------------------------------- durations


def test_full_cache_interval_beyond_long_max_value_fails_before_any_job(
    spark: SparkSession, sql: LookupSQL
) -> None:
    options = values_options() + (
        ", 'lookup.cache' = 'FULL', 'lookup.full-cache.periodic-reload.interval' = "
        "'9300000000000000000'"
    )
    with no_spark_job(spark), pytest.raises(ConfigurationError) as error:
        sql.sql(user_table(options))
    assert error.value.option == "lookup.full-cache.periodic-reload.interval"


# ----------------------------------------------------------------- keys: casts, unsupported


JOIN = "SELECT T.id, D.name FROM src AS T JOIN user_table FOR SYSTEM_TIME AS OF T.proctime AS D "


@pytest.mark.parametrize(
    ("on", "expected"),
    [
        (
            "ON T.content = CAST(D.name AS STRING)",
            ["1,Julian", "3,Fabian", "8,Hello world", "8,Hello world"],
        ),
        ("ON CAST(D.id AS BIGINT) = T.id", ["1,Julian", "2,Jark", "3,Fabian"]),
        (
            "ON CAST(D.age AS BIGINT) = T.len - 1",
            [
                "1,Julian",
                "1,Hello world",
                "1,Hello world",
                "9,Julian",
                "9,Hello world",
                "9,Hello world",
            ],
        ),
        ("ON TRY_CAST(D.age AS DECIMAL(20, 2)) = T.len + 11", ["8,Jark"]),
        # 22.5 is no age: the key 22 (try_cast to INT) finds Jark, the equality drops him
        ("ON CAST(D.age AS DECIMAL(12, 1)) = T.len + 11.5", []),
    ],
)
def test_lookup_keys_through_casts_that_keep_equality(
    flink: Callable[..., FlinkTables], on: str, expected: list[str]
) -> None:
    for kind in ("memory", "postgres"):
        assert result(flink(kind).sql.sql(JOIN + on)) == sorted(expected), kind


@pytest.mark.parametrize(
    ("on", "named"),
    [
        (
            "ON CAST(D.id AS STRING) = T.content",
            ["CAST(D.id AS STRING)", "BIGINT", "cannot change equality"],
        ),
        ("ON CAST(D.id AS INT) = T.len", ["CAST(D.id AS INT)", "BIGINT"]),
        ("ON T.id IS NOT DISTINCT FROM D.id", ["IS NOT DISTINCT FROM"]),
        ("ON T.id <=> D.id", ["IS NOT DISTINCT FROM"]),
        ("ON T.id = D.id OR (T.id IS NULL AND D.id IS NULL)", ["IS NOT DISTINCT FROM"]),
        ("ON T.id = D.id OR T.len = D.age", ["is an OR"]),
        ("ON T.id + 1 = D.id + 2", ["the dim side is an expression"]),
        ("ON D.id IN (1, 2)", ["IN list"]),
        ("ON TRUE", ["no lookup key"]),
    ],
)
def test_unsupported_key_constructs_are_named(
    spark: SparkSession, flink: Callable[..., FlinkTables], on: str, named: list[str]
) -> None:
    with no_spark_job(spark), pytest.raises(SqlError) as error:
        flink("memory").sql.sql(JOIN + on)
    for text in named:
        assert text in str(error.value), str(error.value)


# ----------------------------------------------------------------- several LOOKUP hints


def test_two_lookup_hints_for_one_table_merge_option_by_option(
    flink: Callable[..., FlinkTables],
) -> None:
    """The retry is in the second hint (by table name), async in the first (by alias)."""
    tables = flink("memory")
    tables.create("late_users", USER_DATA, **{"start-lookup-threshold": "2"})
    try:
        rows = tables.sql.sql(
            "SELECT /*+ LOOKUP('table'='D', 'async'='true'), LOOKUP('table'='late_users', "
            "'retry-predicate'='lookup_miss', 'retry-strategy'='fixed_delay', "
            "'fixed-delay'='5 ms', 'max-attempts'='2') */ T.id, D.name FROM src AS T "
            "JOIN late_users FOR SYSTEM_TIME AS OF T.proctime AS D ON T.id = D.id"
        )
        assert result(rows) == ["1,Julian", "2,Jark", "3,Fabian"]
    finally:
        tables.sql.sql("DROP TEMPORARY TABLE late_users")


def test_conflicting_lookup_hints_for_one_table_are_an_error(
    spark: SparkSession, flink: Callable[..., FlinkTables]
) -> None:
    """Flink's LookupJoinTest.testMultipleJoinHintsWithSameTableName: Flink keeps the first
    'output-mode' silently; here the conflict is an error naming both hints."""
    with no_spark_job(spark), pytest.raises(HintError) as error:
        flink("memory").sql.sql(
            "SELECT /*+ LOOKUP('table'='user_table', 'output-mode'='allow_unordered'), "
            "LOOKUP('table'='user_table', 'output-mode'='ordered') */ * FROM src AS T "
            "JOIN user_table FOR SYSTEM_TIME AS OF T.proctime ON T.id = user_table.id"
        )
    assert error.value.option == "output-mode"


# ----------------------------------------------------------------- PRIMARY KEY NOT ENFORCED


def test_a_primary_key_returning_several_rows_joins_them_all_and_warns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rows = [{"len": 15, "content": "Hello"}, {"len": 15, "content": "Fabian"}]
    source = checked(InMemoryConnector(rows, ["len"]), "dim_with_pk", ("len",), ("len",))
    function = source.async_lookup_function()

    async def run() -> list[object]:
        await function.open()
        return [await function.async_lookup((15,)), await function.async_lookup((15,))]

    with caplog.at_level(logging.WARNING):
        first, second = asyncio.run(run())
    assert len(first) == 2 and len(second) == 2  # all rows join
    warnings = [r.getMessage() for r in caplog.records if "PRIMARY KEY" in r.getMessage()]
    assert len(warnings) == 1  # once per table and worker
    assert "dim_with_pk" in warnings[0] and "(15,)" in warnings[0] and "2 rows" in warnings[0]
    assert checked(source, "t", ("id",), ("len",)) is source  # another key: not checked


# ------------------------------------------------------------- ON conditions on the probe alone


class _Refusing(AsyncLookupFunction):
    """Fails the lookup of a refused key: a join that asks for one fails."""

    def __init__(self, inner: AsyncLookupFunction, refused: tuple[int, ...]) -> None:
        self.inner, self.refused = inner, refused

    async def open(self) -> None:
        await self.inner.open()

    async def async_lookup(self, key: Key) -> Collection[Row]:
        if key[0] in self.refused:
            raise ValueError(f"key {key} must not be looked up")
        return await self.inner.async_lookup(key)

    async def close(self) -> None:
        await self.inner.close()


class RefusingConnector(InMemoryConnector):
    def __init__(self, rows: Any, key_columns: Sequence[str], refused: tuple[int, ...]) -> None:
        super().__init__(rows, key_columns)
        self.refused = refused

    def async_lookup_function(self) -> AsyncLookupFunction:
        return _Refusing(super().async_lookup_function(), self.refused)


def refusing(
    data_id: str = "",
    key_columns: tuple[str, ...] = (),
    columns: tuple[str, ...] = (),
    refused: str = "",
) -> RefusingConnector:
    rows = [{c: row.get(c) for c in columns} for row in VALUES[data_id]]
    return RefusingConnector(
        rows, key_columns or columns[:1], tuple(int(k) for k in refused.split(","))
    )


register_connector("refusing", refusing, replace=True)


@pytest.mark.parametrize(
    ("join", "expected"),
    [
        # Flink's LookupJoinRunner: a row failing the pre-filter is not looked up; LEFT pads it
        ("LEFT JOIN", ["1,Julian", "2,null", "3,null", "8,null", "9,null"]),
        ("JOIN", ["1,Julian"]),  # pushed below the join
    ],
)
def test_on_conditions_on_the_probe_alone_decide_before_the_lookup(
    flink: Callable[..., FlinkTables], join: str, expected: list[str]
) -> None:
    """``ON T.id = D.id AND T.len < 15`` looked up every row and filtered after: a failing or
    slow lookup (or a lookup-miss retry) of a row the condition excludes hit the job."""
    tables = flink("memory")
    tables.sql.sql(
        user_table(
            f"'connector' = 'refusing', 'data-id' = '{register_data(USER_DATA)}', "
            "'refused' = '2,3'",
            name=f"Refusing{len(join)}",
        )
    )
    statement = (
        f"SELECT T.id, D.name FROM src AS T {join} Refusing{len(join)} "
        "FOR SYSTEM_TIME AS OF T.proctime AS D ON T.id = D.id AND T.len < 15"
    )
    assert result(tables.sql.sql(statement)) == expected


def test_a_table_comment_in_the_ddl_is_metadata(
    spark: SparkSession, flink: Callable[..., FlinkTables]
) -> None:
    """``COMMENT 'tbl'`` before ``WITH`` crashed with a bare KeyError."""
    tables = flink("memory")
    with no_spark_job(spark):
        tables.sql.sql(
            "CREATE TEMPORARY TABLE Commented (age INT, id BIGINT, name STRING) "
            f"COMMENT 'the users' WITH ({values_options()})"
        )
    joined = tables.sql.sql(
        "SELECT /*+ LOOKUP('table'='default_catalog.default_database.Commented') */ T.id, D.name "
        "FROM src AS T JOIN Commented FOR SYSTEM_TIME AS OF T.proctime AS D ON T.id = D.id"
    )
    assert result(joined) == ["1,Julian", "2,Jark", "3,Fabian"]


def test_a_time_column_is_refused_not_read_as_a_timestamp(
    spark: SparkSession, sql: LookupSQL
) -> None:
    """sqlglot's Spark dialect writes TIME as TIMESTAMP: the first lookup then failed on a
    type the statement never declared."""
    with no_spark_job(spark), pytest.raises(SqlError, match="TIME columns are not supported") as e:
        sql.sql(f"CREATE TEMPORARY TABLE Timed (id BIGINT, t TIME) WITH ({values_options()})")
    assert e.value.option == "t"
