"""Flink's ``LookupJoinTest`` (flink-table-planner, ``src/test/scala/org/apache/flink/table/
planner/plan/stream/sql/join/LookupJoinTest.scala``), ported: its statements over ``MyTable``
and ``LookupTable`` / ``AsyncLookupTable``. Flink checks plans; here a statement Flink accepts
must plan on the driver without a Spark job and join the rows a plain Spark join gives, and a
statement Flink refuses must be refused before any job, naming the same construct.

Deviations, at their case: ``'time-out'`` (ignored by Flink, not an option) is ``'timeout'``;
two LOOKUP hints giving one option different values are an error here (Flink keeps the first).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pyspark.sql import SparkSession

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.spark import LookupSQL
from tests.spark.conftest import no_spark_job
from tests.spark.sql.conftest import register_data

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

KINDS = ("memory", "postgres")
MY_TABLE = [(1, "a", 2000), (2, "b", 500), (3, "c", 3000), (None, "d", 1500)]
LOOKUP_ROWS = [(1, "AAA", 10), (2, "BBB", 20), (3, "CCC", 10), (3, "CCC2", 30)]


@pytest.fixture(scope="module")
def plan(
    spark: SparkSession, pg_tables: Callable[..., str], postgres_dsn: str
) -> Iterator[Callable[[str], LookupSQL]]:
    """``plan(kind)``: a LookupSQL with LookupTable, AsyncLookupTable (the same rows, Flink's
    'async' = 'true' being this library's default) and LookupTableWithComputedColumn."""
    import psycopg

    spark.createDataFrame(MY_TABLE, "a INT, b STRING, c BIGINT").selectExpr(
        "*", "current_timestamp() AS proctime", "current_timestamp() AS rowtime"
    ).createOrReplaceTempView("MyTable")
    spark.createDataFrame(LOOKUP_ROWS, "id INT, name STRING, age INT").createOrReplaceTempView(
        "lookup_plain"
    )
    made: dict[str, LookupSQL] = {}
    tables: list[str] = []

    def get(kind: str) -> LookupSQL:
        if kind in made:
            return made[kind]
        sql = LookupSQL(spark)
        for name, computed in TABLES:
            if kind == "memory":
                rows = register_data(LOOKUP_ROWS, ("id", "name", "age"))
                where = f"'connector' = 'values', 'data-id' = '{rows}'"
            else:
                table = f"flink_lookup_{len(tables)}_{id(sql) % 100000}"
                with psycopg.connect(postgres_dsn, autocommit=True) as conn:
                    conn.execute(f'DROP TABLE IF EXISTS "{table}"')
                    conn.execute(f'CREATE TABLE "{table}" (id INT, name TEXT, age INT)')
                    with conn.cursor() as cursor:
                        cursor.executemany(
                            f'INSERT INTO "{table}" VALUES (%s, %s, %s)', LOOKUP_ROWS
                        )
                tables.append(table)
                where = (
                    "'connector' = 'jdbc', 'url' = 'jdbc:postgresql://127.0.0.1:5432/test', "
                    f"'table-name' = '{table}', 'username' = 'postgres'"
                )
            sql.sql(
                f"CREATE TABLE {name} (`id` INT, `name` STRING, `age` INT{computed}) WITH ({where})"
            )
        made[kind] = sql
        return sql

    yield get
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        for table in tables:
            conn.execute(f'DROP TABLE IF EXISTS "{table}"')


TABLES = (
    ("LookupTable", ""),
    ("AsyncLookupTable", ""),
    ("LookupTableWithComputedColumn", ", `nominal_age` as age + 1"),
)
JOIN = "FROM MyTable AS T JOIN LookupTable FOR SYSTEM_TIME AS OF T.proctime AS D "
PLAIN = "FROM MyTable AS T JOIN lookup_plain AS D "

# (Flink test name, statement, the same over a plain Spark join or None to only plan it)
ACCEPTED = [
    ("testJoinTemporalTable",
     "SELECT * " + JOIN + "ON T.a = D.id", "SELECT * " + PLAIN + "ON T.a = D.id"),
    ("testLeftJoinTemporalTable",
     "SELECT * FROM MyTable AS T LEFT JOIN LookupTable FOR SYSTEM_TIME AS OF T.proctime AS D "
     "ON T.a = D.id",
     "SELECT * FROM MyTable AS T LEFT JOIN lookup_plain AS D ON T.a = D.id"),
    ("testJoinTemporalTableWithNestedQuery",
     "SELECT * FROM (SELECT a, b, proctime FROM MyTable WHERE c > 1000) AS T JOIN LookupTable "
     "FOR SYSTEM_TIME AS OF T.proctime AS D ON T.a = D.id",
     "SELECT * FROM (SELECT a, b, proctime FROM MyTable WHERE c > 1000) AS T JOIN lookup_plain "
     "AS D ON T.a = D.id"),
    ("testJoinTemporalTableWithCTE",
     "WITH MyLookupTable AS (SELECT * FROM MyTable), OtherLookupTable AS (SELECT * FROM "
     "LookupTable) SELECT MyLookupTable.b FROM MyLookupTable JOIN OtherLookupTable FOR "
     "SYSTEM_TIME AS OF MyLookupTable.proctime AS D ON MyLookupTable.a = D.id AND D.age = 10",
     "WITH MyLookupTable AS (SELECT * FROM MyTable) SELECT MyLookupTable.b FROM MyLookupTable "
     "JOIN lookup_plain AS D ON MyLookupTable.a = D.id AND D.age = 10"),
    ("testJoinTemporalTableWithProjectionPushDown",
     "SELECT T.*, D.id " + JOIN + "ON T.a = D.id", "SELECT T.*, D.id " + PLAIN + "ON T.a = D.id"),
    ("testJoinTemporalTableWithFilterPushDown",
     "SELECT * " + JOIN + "ON T.a = D.id AND D.age = 10 WHERE T.c > 1000",
     "SELECT * " + PLAIN + "ON T.a = D.id AND D.age = 10 WHERE T.c > 1000"),
    ("testJoinTemporalTableWithCalcPushDown",  # planned only: the names are no numbers
     "SELECT * " + JOIN + "ON T.a = D.id AND D.age = 10 WHERE cast(D.name as bigint) > 1000",
     None),
    ("testJoinTemporalTableWithMultiIndexColumn",
     "SELECT * " + JOIN + "ON T.a = D.id AND D.age = 10 AND D.name = 'AAA' WHERE T.c > 1000",
     "SELECT * " + PLAIN + "ON T.a = D.id AND D.age = 10 AND D.name = 'AAA' WHERE T.c > 1000"),
    ("testJoinHintWithTableAlias",
     "SELECT /*+ LOOKUP('table'='D', 'retry-predicate'='lookup_miss', 'retry-strategy'="
     "'fixed_delay', 'fixed-delay'='10ms', 'max-attempts'='3') */ * " + JOIN + "ON T.a = D.id",
     None),
    ("testJoinHintWithTableNameOnly",
     "SELECT /*+ LOOKUP('table'='LookupTable') */ * FROM MyTable AS T JOIN LookupTable "
     "FOR SYSTEM_TIME AS OF T.proctime ON T.a = LookupTable.id",
     "SELECT * FROM MyTable AS T JOIN lookup_plain AS LookupTable ON T.a = LookupTable.id"),
    ("testMultipleJoinHintsWithDifferentTableName",
     "SELECT /*+ LOOKUP('table'='AsyncLookupTable', 'output-mode'='allow_unordered'), "
     "LOOKUP('table'='LookupTable', 'retry-predicate'='lookup_miss', 'retry-strategy'="
     "'fixed_delay', 'fixed-delay'='10ms', 'max-attempts'='3') */ * FROM MyTable AS T "
     "JOIN AsyncLookupTable FOR SYSTEM_TIME AS OF T.proctime ON T.a = AsyncLookupTable.id "
     "JOIN LookupTable FOR SYSTEM_TIME AS OF T.proctime ON T.a = LookupTable.id", None),
    ("testMultipleJoinHintsWithDifferentTableAlias",
     "SELECT /*+ LOOKUP('table'='D', 'output-mode'='allow_unordered'), LOOKUP('table'='D1', "
     "'retry-predicate'='lookup_miss', 'retry-strategy'='fixed_delay', 'fixed-delay'='10ms', "
     "'max-attempts'='3') */ * FROM MyTable AS T JOIN AsyncLookupTable FOR SYSTEM_TIME AS OF "
     "T.proctime AS D ON T.a = D.id JOIN LookupTable FOR SYSTEM_TIME AS OF T.proctime AS D1 "
     "ON T.a = D1.id",
     "SELECT * FROM MyTable AS T JOIN lookup_plain AS D ON T.a = D.id JOIN lookup_plain AS D1 "
     "ON T.a = D1.id"),
    ("testMultipleJoinHintsWithSameTableAlias[same values]",  # Flink's has two output-modes
     "SELECT /*+ LOOKUP('table'='D', 'output-mode'='allow_unordered'), LOOKUP('table'='D', "
     "'capacity'='10') */ * FROM MyTable AS T JOIN AsyncLookupTable FOR SYSTEM_TIME AS OF "
     "T.proctime AS D ON T.a = D.id", "SELECT * " + PLAIN + "ON T.a = D.id"),
    ("testJoinSyncTableWithAsyncHint",
     "SELECT /*+ LOOKUP('table'='D', 'async'='true') */ * " + JOIN + "ON T.a = D.id", None),
    ("testJoinAsyncTableWithSyncHint",
     "SELECT /*+ LOOKUP('table'='D', 'async'='false') */ * FROM MyTable AS T JOIN "
     "AsyncLookupTable FOR SYSTEM_TIME AS OF T.proctime AS D ON T.a = D.id",
     "SELECT * " + PLAIN + "ON T.a = D.id"),
    ("testJoinWithMixedCaseJoinHint",  # 'time-out' -> 'timeout'
     "SELECT /*+ LookuP('table'='D', 'retry-predicate'='lookup_miss', 'retry-strategy'="
     "'fixed_delay', 'fixed-delay'='155 ms', 'max-attempts'='10', 'async'='true', "
     "'output-mode'='allow_unordered','capacity'='1000', 'timeout'='300 s') */ T.a " + JOIN
     + "ON T.a = D.id", "SELECT T.a " + PLAIN + "ON T.a = D.id"),
    ("testJoinHintWithNoPropagatingToSubQuery",
     "SELECT /*+ LOOKUP('table'='D', 'output-mode'='ordered','capacity'='200') */ T1.a FROM ("
     "SELECT /*+ LOOKUP('table'='D', 'output-mode'='allow_unordered', 'capacity'='1000') */ "
     "T.a a, T.proctime FROM MyTable AS T JOIN AsyncLookupTable FOR SYSTEM_TIME AS OF "
     "T.proctime AS D ON T.a = D.id) T1 JOIN AsyncLookupTable FOR SYSTEM_TIME AS OF "
     "T1.proctime AS D ON T1.a=D.id",
     "SELECT T1.a FROM (SELECT T.a a FROM MyTable AS T JOIN lookup_plain AS D ON T.a = D.id) T1 "
     "JOIN lookup_plain AS D ON T1.a = D.id"),
    ("testAvoidAggregatePushDown",
     "SELECT b, count(a), sum(c) FROM (SELECT T.* FROM (SELECT b, a, sum(c) c, "
     "current_timestamp() as proc FROM MyTable GROUP BY a, b) AS T JOIN LookupTable "
     "FOR SYSTEM_TIME AS OF T.proc AS D ON T.a = D.id WHERE D.age > 10) AS T GROUP BY b",
     "SELECT b, count(a), sum(c) FROM (SELECT T.* FROM (SELECT b, a, sum(c) c FROM MyTable "
     "GROUP BY a, b) AS T JOIN lookup_plain AS D ON T.a = D.id WHERE D.age > 10) AS T GROUP BY b"),
    ("testJoinAsyncTableWithAsyncHint",
     "SELECT /*+ LOOKUP('table'='D', 'async'='true') */ * FROM MyTable AS T JOIN "
     "AsyncLookupTable FOR SYSTEM_TIME AS OF T.proctime AS D ON T.a = D.id",
     "SELECT * " + PLAIN + "ON T.a = D.id"),
    # the INSERT INTO Sink1 cases: their SELECT ('time-out' -> 'timeout')
    ("testAsyncJoinWithDefaultParams",
     "SELECT T.a, D.name, D.age FROM MyTable T JOIN AsyncLookupTable "
     "FOR SYSTEM_TIME AS OF T.proctime AS D ON T.a = D.id",
     "SELECT T.a, D.name, D.age " + PLAIN + "ON T.a = D.id"),
    ("testJoinWithAsyncHint",
     "SELECT /*+ LOOKUP('table'='D', 'output-mode'='allow_unordered', 'timeout'='600s', "
     "'capacity'='300') */ T.a, D.name, D.age FROM MyTable T JOIN AsyncLookupTable "
     "FOR SYSTEM_TIME AS OF T.proctime AS D ON T.a = D.id",
     "SELECT T.a, D.name, D.age " + PLAIN + "ON T.a = D.id"),
    ("testJoinWithRetryHint",
     "SELECT /*+ LOOKUP('table'='D', 'retry-predicate'='lookup_miss', 'retry-strategy'="
     "'fixed_delay', 'fixed-delay'='10ms', 'max-attempts'='3') */ T.a, D.name, D.age "
     "FROM MyTable T JOIN LookupTable FOR SYSTEM_TIME AS OF T.proctime AS D ON T.a = D.id",
     None),
    ("testJoinWithAsyncAndRetryHint",
     "SELECT /*+ LOOKUP('table'='D', 'output-mode'='allow_unordered', 'timeout'='600s', "
     "'capacity'='300', 'retry-predicate'='lookup_miss', 'retry-strategy'='fixed_delay', "
     "'fixed-delay'='10ms', 'max-attempts'='3') */ T.a, D.name, D.age FROM MyTable T "
     "JOIN AsyncLookupTable FOR SYSTEM_TIME AS OF T.proctime AS D ON T.a = D.id", None),
    ("testAggAndLeftJoinAllowUnordered",
     "SELECT /*+ LOOKUP('table'='D', 'output-mode'='allow_unordered') */ T.a, D.name, D.age "
     "FROM (SELECT max(a) a, count(c) c, current_timestamp() proctime FROM MyTable GROUP BY b) "
     "T LEFT JOIN AsyncLookupTable FOR SYSTEM_TIME AS OF T.proctime AS D ON T.a = D.id",
     "SELECT T.a, D.name, D.age FROM (SELECT max(a) a FROM MyTable GROUP BY b) T "
     "LEFT JOIN lookup_plain AS D ON T.a = D.id"),
    ("LookupTableWithComputedColumn",  # the table LookupJoinTest declares
     "SELECT T.a, D.nominal_age FROM MyTable AS T JOIN LookupTableWithComputedColumn "
     "FOR SYSTEM_TIME AS OF T.proctime AS D ON T.a = D.id",
     "SELECT T.a, D.age + 1 " + PLAIN + "ON T.a = D.id"),
]  # fmt: skip

# (Flink test name, statement, what the error names — Flink's message words where they apply)
REFUSED = [
    ("testJoinInvalidJoinTemporalTable[period]",
     "SELECT * FROM MyTable AS T JOIN LookupTable T.proctime AS D ON T.a = D.id", ["sql"]),
    ("testJoinInvalidJoinTemporalTable[direct]",
     "SELECT * FROM LookupTable FOR SYSTEM_TIME AS OF TIMESTAMP '2017-08-09 14:36:11'",
     ["FOR SYSTEM_TIME AS OF"]),
    ("testJoinInvalidJoinTemporalTable[right join]",
     "SELECT * FROM MyTable AS T RIGHT JOIN LookupTable FOR SYSTEM_TIME AS OF T.proctime AS D "
     "ON T.a = D.id", ["RIGHT"]),
    ("testJoinInvalidJoinTemporalTable[no raw key]",
     "SELECT * FROM MyTable AS T LEFT JOIN LookupTable FOR SYSTEM_TIME AS OF T.proctime AS D "
     "ON T.a + 1 = D.id + 2", ["no lookup key", "the dim side is an expression"]),
    ("testJoinInvalidJoinTemporalTable[proctime call]",
     "SELECT * FROM MyTable AS T LEFT JOIN LookupTable FOR SYSTEM_TIME AS OF PROCTIME() AS D "
     "ON T.a = D.id", ["FOR SYSTEM_TIME AS OF", "a column of the probe side"]),
    ("testNotDistinctFromInJoinCondition[is not distinct]",
     "SELECT * FROM MyTable AS T LEFT JOIN LookupTable FOR SYSTEM_TIME AS OF T.proctime AS D "
     "ON T.a IS NOT  DISTINCT FROM D.id", ["IS NOT DISTINCT FROM", "(a = b) OR (a IS NULL"]),
    ("testNotDistinctFromInJoinCondition[or null]",
     "SELECT * FROM MyTable AS T LEFT JOIN LookupTable FOR SYSTEM_TIME AS OF T.proctime AS D "
     "ON T.a = D.id OR (T.a IS NULL AND D.id IS NULL)", ["IS NOT DISTINCT FROM"]),
    ("testJoinOnDifferentKeyTypes",
     "SELECT * FROM MyTable AS T JOIN LookupTable FOR SYSTEM_TIME AS OF T.proctime AS D "
     "ON T.b = D.id", ["'T.b'", "compatible types"]),
    ("testJoinTemporalTableWithTrueCondition",
     "SELECT * FROM MyTable AS T JOIN LookupTable FOR SYSTEM_TIME AS OF T.proctime AS D "
     "ON true WHERE T.c > 1000", ["no lookup key"]),
    ("testMultipleJoinHintsWithSameTableName",  # Flink: the first 'output-mode' wins
     "SELECT /*+ LOOKUP('table'='AsyncLookupTable', 'output-mode'='allow_unordered'), "
     "LOOKUP('table'='AsyncLookupTable', 'output-mode'='ordered') */ * FROM MyTable AS T "
     "JOIN AsyncLookupTable FOR SYSTEM_TIME AS OF T.proctime ON T.a = AsyncLookupTable.id",
     ["'output-mode'", "disagree"]),
] + [
    # testInvalidJoinHint: each of its statements; Flink's message names the key and the value
    (f"testInvalidJoinHint[{i}]", f"SELECT /*+ LOOKUP({hint}) */ * {JOIN}ON T.a = D.id", named)
    for i, (hint, named) in enumerate([
        ("'tableName'='LookupTable'", ["'tablename'", "'table'"]),  # names are lowercased
        ("'table'='LookupTable', 'async'='yes'", ["'yes'", "'async'"]),
        ("'table'='LookupTable', 'async'='true', 'output-mode'='allow-unordered'",
         ["'allow-unordered'", "'output-mode'"]),
        ("'table'='LookupTable', 'async'='true', 'timeout'='300 si'", ["'300 si'", "'timeout'"]),
        ("'table'='LookupTable', 'retry-strategy'='fixed-delay'",
         ["'fixed-delay'", "'retry-strategy'"]),
        ("'table'='LookupTable', 'fixed-delay'='100 nano sec'",
         ["'100 nano sec'", "'fixed-delay'"]),
        ("'table'='LookupTable', 'max-attempts'='100.0'", ["'100.0'", "'max-attempts'"]),
        ("'table'='LookupTable', 'max-attempts'='100'", ["'retry-predicate'", "all four"]),
        ("'table'='LookupTable', 'retry-predicate'='exception', 'retry-strategy'='fixed_delay', "
         "'fixed-delay'='10s', 'max-attempts'='-3'", ["'exception'", "lookup_miss"]),
        ("'table'='LookupTable', 'retry-predicate'='lookup_miss', 'retry-strategy'='fixed_delay', "
         "'fixed-delay'='10s', 'max-attempts'='-3'", ["'-3'", "'max-attempts'"]),
        ("'table'='LookupTable', 'retry-predicate'='lookup_miss', 'retry-strategy'='fixed_delay', "
         "'fixed-delay'='-10s', 'max-attempts'='3'", ["'-10s'", "'fixed-delay'"]),
        ("'table'='LookupTable', 'retry-predicate'='lookup-miss', 'retry-strategy'='fixed_delay', "
         "'fixed-delay'='10s', 'max-attempts'='3'", ["'lookup-miss'", "lookup_miss"]),
        ("'table'='LookupTable', 'retry-predicate'='lookup_miss', 'retry-strategy'='fixed-delay', "
         "'fixed-delay'='10s', 'max-attempts'='3'", ["'fixed-delay'", "'retry-strategy'"]),
    ])
]  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("statement", "plain"), [pytest.param(s, p, id=n) for n, s, p in ACCEPTED])
def test_accepted(
    spark: SparkSession, plan: Callable[[str], LookupSQL], kind: str, statement: str,
    plain: str | None,
) -> None:  # fmt: skip
    with no_spark_job(spark):
        df = plan(kind).sql(statement)
    if plain is not None:
        assert untimed(df) == untimed(spark.sql(plain))


def untimed(df: Any) -> list[str]:
    """The rows without their timestamp columns (``proctime`` is the time of the query)."""
    keep = [i for i, (_, kind) in enumerate(df.dtypes) if not kind.startswith("timestamp")]
    return sorted(",".join(str(row[i]) for i in keep) for row in df.collect())


@pytest.mark.parametrize(("statement", "named"), [pytest.param(s, n, id=t) for t, s, n in REFUSED])
def test_refused(
    spark: SparkSession, plan: Callable[[str], LookupSQL], statement: str, named: list[str]
) -> None:
    with no_spark_job(spark), pytest.raises(ConfigurationError) as error:
        plan("memory").sql(statement)
    for text in named:
        assert text in str(error.value), str(error.value)
