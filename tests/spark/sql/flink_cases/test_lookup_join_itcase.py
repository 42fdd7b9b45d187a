"""Flink's ``LookupJoinITCase`` and ``AsyncLookupJoinITCase`` (flink-table-planner,
``src/test/scala/org/apache/flink/table/planner/runtime/stream/sql/``), ported: each case's SQL
(``for system_time as of`` kept as Flink writes it) and the rows Flink's test expects, run on the
in-memory ``'values'`` connector and on PostgreSQL (``'jdbc'``). The ids are Flink's test names.

Changes to a statement are said at the case: Flink's test UDFs are Spark SQL expressions here
(``add(a, b)`` is ``a + b``), and the async suite's ``'time-out'`` hint option, which Flink
silently ignores (its option is ``'timeout'``), is spelled ``'timeout'`` (an unknown option is an
error here).

Flink's LookupJoinITCase joins through a sync lookup function and AsyncLookupJoinITCase through
an async one; here both run on the same connector, async (the default) unless a hint says
``'async'='false'``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.spark.sql.conftest import USER_DATA, FlinkTables, register_data, result

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

KINDS = ("memory", "postgres")
JOIN = "FROM src AS T JOIN user_table for system_time as of T.proctime AS D "


def retry_hint(table: str, max_attempts: int) -> str:
    """LookupJoinITCase.getRetryLookupHint."""
    return (
        f"/*+ LOOKUP('table'='{table}', 'retry-predicate'='lookup_miss', "
        f"'retry-strategy'='fixed_delay', 'fixed-delay'='5 ms', 'max-attempts'='{max_attempts}') */"
    )


# (Flink test name, SQL, Flink's expected rows)
CASES: list[tuple[str, str, list[str]]] = [
    (
        "LookupJoinITCase.testJoinTemporalTable",
        "SELECT T.id, T.len, T.content, D.name " + JOIN + "ON T.id = D.id",
        ["1,12,Julian,Julian", "2,15,Hello,Jark", "3,15,Fabian,Fabian"],
    ),
    (
        # add(x, y) (TestAddWithOpen) is x + y
        "LookupJoinITCase.testJoinTemporalTableWithUdfFilter",
        "SELECT T.id, T.len, T.content, D.name " + JOIN + "ON T.id = D.id "
        "WHERE (T.id + D.id) > 3 AND (T.id + 2) > 3 AND (D.id + 2) > 3",
        ["2,15,Hello,Jark", "3,15,Fabian,Fabian"],
    ),
    (
        "LookupJoinITCase.testJoinTemporalTableWithUdfEqualFilter",
        "SELECT T.id, T.len, T.content, D.name FROM src AS T JOIN user_table "
        "for system_time as of T.proctime AS D ON T.id = D.id "
        "WHERE CONCAT('Hello-', D.name) = 'Hello-Jark'",
        ["2,15,Hello,Jark"],
    ),
    (
        "LookupJoinITCase.testJoinTemporalTableOnConstantKey",
        "SELECT T.id, T.len, T.content, D.name " + JOIN + "ON D.id = 1",
        [
            "1,12,Julian,Julian",
            "2,15,Hello,Julian",
            "3,15,Fabian,Julian",
            "8,11,Hello world,Julian",
            "9,12,Hello world!,Julian",
        ],
    ),
    (
        "LookupJoinITCase.testJoinTemporalTableOnNullableKey",
        "SELECT T.id, T.len, D.name FROM nullable_src AS T JOIN user_table "
        "for system_time as of T.proctime AS D ON T.id = D.id",
        ["3,15,Fabian"],
    ),
    (
        "LookupJoinITCase.testJoinTemporalTableWithPushDown",
        "SELECT T.id, T.len, T.content, D.name " + JOIN + "ON T.id = D.id AND D.age > 20",
        ["2,15,Hello,Jark", "3,15,Fabian,Fabian"],
    ),
    (
        "LookupJoinITCase.testJoinTemporalTableWithNonEqualFilter",
        "SELECT T.id, T.len, T.content, D.name, D.age " + JOIN + "ON T.id = D.id "
        "WHERE T.len <= D.age",
        ["2,15,Hello,Jark,22", "3,15,Fabian,Fabian,33"],
    ),
    (
        "LookupJoinITCase.testJoinTemporalTableOnMultiFields",
        "SELECT T.id, T.len, D.name " + JOIN + "ON T.id = D.id AND T.content = D.name",
        ["1,12,Julian", "3,15,Fabian"],
    ),
    (
        "LookupJoinITCase.testJoinTemporalTableOnMultiKeyFields",
        "SELECT T.id, T.len, D.name " + JOIN + "ON T.content = D.name AND T.id = D.id",
        ["1,12,Julian", "3,15,Fabian"],
    ),
    (
        "LookupJoinITCase.testJoinTemporalTableOnMultiKeyFields2",
        "SELECT t1.id, t1.len, D.name FROM (select proctime, content, id, len FROM src) t1 "
        "JOIN user_table for system_time as of t1.proctime AS D "
        "ON t1.content = D.name AND t1.id = D.id",
        ["1,12,Julian", "3,15,Fabian"],
    ),
    (
        "LookupJoinITCase.testJoinTemporalTableOnMultiKeyFieldsWithConstantKey",
        "SELECT T.id, T.len, D.name " + JOIN + "ON T.content = D.name AND 3 = D.id",
        ["3,15,Fabian"],
    ),
    (
        "LookupJoinITCase.testJoinTemporalTableOnMultiKeyFieldsWithStringConstantKey",
        "SELECT T.id, T.len, D.name " + JOIN + "ON D.name = 'Fabian' AND T.id = D.id",
        ["3,15,Fabian"],
    ),
    (
        "LookupJoinITCase.testJoinTemporalTableOnMultiConstantKey",
        "SELECT T.id, T.len, D.name " + JOIN + "ON D.name = 'Fabian' AND 3 = D.id",
        ["1,12,Fabian", "2,15,Fabian", "3,15,Fabian", "8,11,Fabian", "9,12,Fabian"],
    ),
    (
        "LookupJoinITCase.testLeftJoinTemporalTable",
        "SELECT T.id, T.len, D.name, D.age FROM src AS T LEFT JOIN user_table "
        "for system_time as of T.proctime AS D ON T.id = D.id",
        ["1,12,Julian,11", "2,15,Jark,22", "3,15,Fabian,33", "8,11,null,null", "9,12,null,null"],
    ),
    (
        "LookupJoinITCase.testLeftJoinTemporalTableWithPreFilter",
        "SELECT T.id, T.len, D.name, D.age FROM src AS T LEFT JOIN user_table "
        "for system_time as of T.proctime AS D ON T.id = D.id AND T.len < 15",
        ["1,12,Julian,11", "2,15,null,null", "3,15,null,null", "8,11,null,null", "9,12,null,null"],
    ),
    (
        # add(T.id, 2) > 4 is T.id + 2 > 4
        "LookupJoinITCase.testLeftJoinTemporalTableWithUdfPreFilter",
        "SELECT T.id, T.len, T.content, D.name FROM src AS T LEFT JOIN user_table "
        "for system_time as of T.proctime AS D ON T.id = D.id AND (T.id + 2) > 4",
        [
            "1,12,Julian,null",
            "2,15,Hello,null",
            "3,15,Fabian,Fabian",
            "8,11,Hello world,null",
            "9,12,Hello world!,null",
        ],
    ),
    (
        "LookupJoinITCase.testLeftJoinTemporalTableOnNullableKey",
        "SELECT T.id, T.len, D.name FROM nullable_src AS T LEFT OUTER JOIN user_table "
        "for system_time as of T.proctime AS D ON T.id = D.id",
        ["null,15,null", "3,15,Fabian", "null,11,null", "9,12,null"],
    ),
    (
        "LookupJoinITCase.testLeftJoinTemporalTableOnMultKeyFields",
        "SELECT T.id, T.len, D.name, D.age FROM src AS T LEFT JOIN user_table "
        "for system_time as of T.proctime AS D ON T.id = D.id and T.content = D.name",
        ["1,12,Julian,11", "2,15,null,null", "3,15,Fabian,33", "8,11,null,null", "9,12,null,null"],
    ),
    (
        "LookupJoinITCase.testJoinTemporalTableOnMultiKeyFieldsWithNullData",
        "SELECT T.id, T.len, D.name FROM nullable_src AS T JOIN nullable_user_table "
        "for system_time as of T.proctime AS D ON T.content = D.name AND T.id = D.id",
        ["3,15,Fabian"],
    ),
    (
        "LookupJoinITCase.testLeftJoinTemporalTableOnMultiKeyFieldsWithNullData",
        "SELECT D.id, T.len, D.name FROM nullable_src AS T LEFT JOIN nullable_user_table "
        "for system_time as of T.proctime AS D ON T.content = D.name AND T.id = D.id",
        ["null,15,null", "3,15,Fabian", "null,11,null", "null,12,null"],
    ),
    (
        "LookupJoinITCase.testJoinTemporalTableOnNullConstantKey",
        "SELECT T.id, T.len, T.content FROM nullable_src AS T JOIN nullable_user_table "
        "for system_time as of T.proctime AS D ON D.id = null",
        [],
    ),
    (
        "LookupJoinITCase.testJoinTemporalTableOnMultiKeyFieldsWithNullConstantKey",
        "SELECT T.id, T.len, D.name " + JOIN + "ON T.content = D.name AND null = D.id",
        [],
    ),
    (
        "LookupJoinITCase.testJoinTemporalTableOnMultiKeyFieldsWithUDF",
        "SELECT T.id, T.content, D.age, D.id "
        + JOIN
        + "ON T.id = D.id + 4 AND T.content = concat(D.name, '!') AND D.age = 11",
        ["9,Hello world!,11,5"],
    ),
    (
        "LookupJoinITCase.testJoinTemporalTableWithComputedColumn",
        "SELECT T.id, T.len, T.content, D.name, D.age, D.nominal_age FROM src AS T JOIN "
        "userTableWithComputedColumn for system_time as of T.proctime AS D ON T.id = D.id",
        ["1,12,Julian,Julian,11,12", "2,15,Hello,Jark,22,23", "3,15,Fabian,Fabian,33,34"],
    ),
    (
        "LookupJoinITCase.testJoinTemporalTableWithComputedColumnAndPushDown",
        "SELECT T.id, T.len, T.content, D.name, D.age, D.nominal_age FROM src AS T JOIN "
        "userTableWithComputedColumn for system_time as of T.proctime AS D "
        "ON T.id = D.id and D.nominal_age > 12",
        ["2,15,Hello,Jark,22,23", "3,15,Fabian,Fabian,33,34"],
    ),
    (
        # t1: SELECT max(id) as id, PROCTIME() as proctime FROM src AS T group by len
        "LookupJoinITCase.testAggAndLeftJoinWithTryResolveMode",
        "SELECT t1.id, D.name, D.age FROM t1 LEFT JOIN user_table "
        "for system_time as of t1.proctime AS D ON t1.id = D.id",
        ["3,Fabian,33", "8,null,null", "9,null,null"],
    ),
    (
        "LookupJoinITCase.testAggAndLeftJoinAllConstantKeyWithTryResolveMode",
        "SELECT t1.id, D.name, D.age FROM t1 LEFT JOIN user_table "
        "for system_time as of t1.proctime AS D ON D.id = 3",
        ["3,Fabian,33", "8,Fabian,33", "9,Fabian,33"],
    ),
    (
        "LookupJoinITCase.testAggAndJoinAllConstantKeyWithTryResolveMode",
        "SELECT t1.id FROM t1 LEFT JOIN user_table "
        "for system_time as of t1.proctime AS D ON D.id = 3",
        ["3", "8", "9"],
    ),
    (
        "LookupJoinITCase.testJoinTemporalTableWithRetry",
        f"SELECT {retry_hint('D', 2)} T.id, T.len, T.content, D.name FROM src AS T "
        "JOIN user_table for system_time as of T.proctime AS D ON T.id = D.id",
        ["1,12,Julian,Julian", "2,15,Hello,Jark", "3,15,Fabian,Fabian"],
    ),
    (
        "LookupJoinITCase.testJoinTemporalTableWithLookupHintEnableShuffleOnNormalSource",
        "SELECT /*+ LOOKUP('table'='D', 'shuffle'='true') */ T.id, D.name FROM src "
        "AS T JOIN user_table for system_time as of T.proctime AS D ON T.id = D.id",
        ["1,Julian", "2,Jark", "3,Fabian"],
    ),
    (
        "AsyncLookupJoinITCase.testAsyncJoinTemporalTable",
        "SELECT T.id, T.len, T.content, D.name " + JOIN + "ON T.id = D.id",
        ["1,12,Julian,Julian", "2,15,Hello,Jark", "3,15,Fabian,Fabian"],
    ),
    (
        "AsyncLookupJoinITCase.testAsyncJoinTemporalTableWithPushDown",
        "SELECT T.id, T.len, T.content, D.name " + JOIN + "ON T.id = D.id AND D.age > 20",
        ["2,15,Hello,Jark", "3,15,Fabian,Fabian"],
    ),
    (
        "AsyncLookupJoinITCase.testAsyncJoinTemporalTableWithNonEqualFilter",
        "SELECT T.id, T.len, T.content, D.name, D.age " + JOIN + "ON T.id = D.id "
        "WHERE T.len <= D.age",
        ["2,15,Hello,Jark,22", "3,15,Fabian,Fabian,33"],
    ),
    (
        "AsyncLookupJoinITCase.testAsyncJoinTemporalTableOnMultiFields",
        "SELECT T.id, T.len, D.name " + JOIN + "ON T.id = D.id AND T.content = D.name",
        ["1,12,Julian", "3,15,Fabian"],
    ),
    (
        # add(x, y) (TestAddWithOpen) is x + y
        "AsyncLookupJoinITCase.testAsyncJoinTemporalTableWithUdfFilter",
        "SELECT T.id, T.len, T.content, D.name " + JOIN + "ON T.id = D.id "
        "WHERE (T.id + D.id) > 3 AND (T.id + 2) > 3 AND (D.id + 2) > 3",
        ["2,15,Hello,Jark", "3,15,Fabian,Fabian"],
    ),
    (
        "AsyncLookupJoinITCase.testAggAndAsyncLeftJoinTemporalTable",
        "SELECT t1.id, D.name, D.age FROM t1 LEFT JOIN user_table "
        "for system_time as of t1.proctime AS D ON t1.id = D.id",
        ["3,Fabian,33", "8,null,null", "9,null,null"],
    ),
    (
        "AsyncLookupJoinITCase.testAsyncLeftJoinTemporalTable",
        "SELECT T.id, T.len, D.name, D.age FROM src AS T LEFT JOIN user_table "
        "for system_time as of T.proctime AS D ON T.id = D.id",
        ["1,12,Julian,11", "2,15,Jark,22", "3,15,Fabian,33", "8,11,null,null", "9,12,null,null"],
    ),
    (
        "AsyncLookupJoinITCase.testAsyncJoinTemporalTableOnMultiKeyFields",
        "SELECT t1.id, t1.len, D.name FROM (select content, id, len, proctime FROM src AS T) t1 "
        "JOIN user_table for system_time as of t1.proctime AS D "
        "ON t1.content = D.name AND t1.id = D.id",
        ["1,12,Julian", "3,15,Fabian"],
    ),
    (
        "AsyncLookupJoinITCase.testAsyncLeftJoinTemporalTableWithLocalPredicate",
        "SELECT T.id, T.len, T.content, D.name, D.age FROM src AS T LEFT JOIN user_table "
        "for system_time as of T.proctime AS D ON T.id = D.id "
        "AND T.len > 1 AND D.age > 20 AND D.name = 'Fabian' WHERE T.id > 1",
        [
            "2,15,Hello,null,null",
            "3,15,Fabian,Fabian,33",
            "8,11,Hello world,null,null",
            "9,12,Hello world!,null,null",
        ],
    ),
    (
        # mod1(T.id, 4) (TestMod) is T.id % 4; wrapper1 (TestWrapperUdf) returns its argument
        "AsyncLookupJoinITCase.testAsyncJoinTemporalTableOnMultiFieldsWithUdf",
        "SELECT T.id, T.len, D.name as name FROM src AS T JOIN user_table "
        "for system_time as of T.proctime AS D ON T.id % 4 = D.id AND T.content = D.name",
        ["1,12,Julian", "3,15,Fabian"],
    ),
    (
        # 'time-out' (ignored by Flink: not an option) spelled 'timeout'
        "AsyncLookupJoinITCase.testAsyncJoinTemporalTableWithRetry",
        "SELECT /*+ LOOKUP('table'='D', 'async'='true', 'timeout'='300s', "
        "'retry-predicate'='lookup_miss', 'retry-strategy'='fixed_delay', 'fixed-delay'='1 ms', "
        "'max-attempts'='2') */ T.id, T.len, T.content, D.name FROM src AS T "
        "JOIN user_table for system_time as of T.proctime AS D ON T.id = D.id",
        ["1,12,Julian,Julian", "2,15,Hello,Jark", "3,15,Fabian,Fabian"],
    ),
    (
        # the suite's AsyncOutputMode=ALLOW_UNORDERED parameter, as the hint's 'output-mode'
        "AsyncLookupJoinITCase.testAsyncJoinTemporalTable[ALLOW_UNORDERED]",
        "SELECT /*+ LOOKUP('table'='D', 'output-mode'='allow_unordered', 'capacity'='300') */ "
        "T.id, T.len, T.content, D.name " + JOIN + "ON T.id = D.id",
        ["1,12,Julian,Julian", "2,15,Hello,Jark", "3,15,Fabian,Fabian"],
    ),
]

#: the cases LookupJoinITCase runs with each cache type (every case runs with NONE)
CACHED = {
    "LookupJoinITCase.testJoinTemporalTable",
    "LookupJoinITCase.testLeftJoinTemporalTableOnMultKeyFields",
    "LookupJoinITCase.testJoinTemporalTableWithComputedColumnAndPushDown",
}
PARAMS = [
    pytest.param(kind, "NONE", sql, expected, id=f"{name}[{kind}]")
    for name, sql, expected in CASES
    for kind in KINDS
] + [
    pytest.param(kind, cache, sql, expected, id=f"{name}[{kind},CacheType={cache}]")
    for name, sql, expected in CASES
    if name in CACHED
    for kind in KINDS
    for cache in ("PARTIAL", "FULL")
]


@pytest.fixture(scope="module")
def t1(flink: Callable[..., FlinkTables]) -> None:
    """The view ``t1`` of the TryResolveMode cases."""
    flink("memory").spark.sql(
        "SELECT max(id) as id, current_timestamp() as proctime FROM src AS T group by len"
    ).createOrReplaceTempView("t1")


@pytest.mark.parametrize(("kind", "cache", "sql", "expected"), PARAMS)
def test_flink_case(
    flink: Callable[..., FlinkTables],
    t1: None,
    kind: str,
    cache: str,
    sql: str,
    expected: list[str],
) -> None:
    assert result(flink(kind, cache).sql.sql(sql)) == sorted(expected)


@pytest.mark.parametrize(
    ("threshold", "attempts", "cache", "expected"),
    [
        pytest.param(
            3, 1, "NONE", [], id="testJoinTemporalTableWithLookupThresholdWithInsufficientRetry"
        ),
        # FULL: "full caching lookup do not support retry" (and needs none: the snapshot has all)
        pytest.param(
            3,
            1,
            "FULL",
            ["1,12,Julian,Julian", "2,15,Hello,Jark", "3,15,Fabian,Fabian"],
            id="testJoinTemporalTableWithLookupThresholdWithInsufficientRetry[FULL]",
        ),
        pytest.param(
            2,
            2,
            "NONE",
            ["1,12,Julian,Julian", "2,15,Hello,Jark", "3,15,Fabian,Fabian"],
            id="testJoinTemporalTableWithLookupThresholdWithSufficientRetry",
        ),
        pytest.param(
            2,
            2,
            "PARTIAL",
            ["1,12,Julian,Julian", "2,15,Hello,Jark", "3,15,Fabian,Fabian"],
            id="testJoinTemporalTableWithLookupThresholdWithSufficientRetry[PARTIAL]",
        ),
        pytest.param(
            2,
            10,
            "NONE",
            ["1,12,Julian,Julian", "2,15,Hello,Jark", "3,15,Fabian,Fabian"],
            id="testJoinTemporalTableWithLookupThresholdWithLargerRetry",
        ),
    ],
)
def test_lookup_threshold(
    flink: Callable[..., FlinkTables],
    threshold: int,
    attempts: int,
    cache: str,
    expected: list[str],
) -> None:
    """LookupJoinITCase's 'start-lookup-threshold' cases (the values connector only: a key's
    first lookups find nothing). Each gets its own table: the counts live in the worker."""
    tables = flink("memory", cache)
    tables.create("user_table_with_lookup_threshold", USER_DATA, **{
        "start-lookup-threshold": str(threshold)})  # fmt: skip
    statement = (
        f"SELECT {retry_hint('D', attempts)} T.id, T.len, T.content, D.name FROM src AS T "
        "JOIN user_table_with_lookup_threshold for system_time as of T.proctime AS D "
        "ON T.id = D.id"
    )
    try:
        assert result(tables.sql.sql(statement)) == sorted(expected)
    finally:
        tables.sql.sql("DROP TEMPORARY TABLE user_table_with_lookup_threshold")


@pytest.mark.parametrize("kind", KINDS)
def test_join_temporal_table_with_latest_data(
    flink: Callable[..., FlinkTables], postgres_dsn: str, kind: str
) -> None:
    """LookupJoinITCase.testJoinTemporalTableWithLatestData: ``len`` is a PRIMARY KEY NOT
    ENFORCED that the data repeats. Flink's values source keeps the latest row per key, which
    the values connector here does with 'latest-per-key' (Flink's rows); Flink's JDBC connector
    returns every row of the key, as PostgreSQL does here (docs/semantics.md §2.13)."""
    import psycopg

    from tests.spark.sql.conftest import DATA, SRC_COLUMNS

    tables = flink(kind)
    if kind == "memory":
        data_id = register_data(DATA, ("num", "len", "content"))
        where = f"'connector' = 'values', 'data-id' = '{data_id}', 'latest-per-key' = 'len'"
        expected = ["3,15,Fabian", "3,15,Fabian", "8,11,Hello world", "9,12,Hello world!",
                    "9,12,Hello world!"]  # fmt: skip
    else:
        table = f"flink_dim_with_pk_{id(tables) % 100000}"
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f'DROP TABLE IF EXISTS "{table}"')
            conn.execute(f'CREATE TABLE "{table}" (num BIGINT, len INT, content TEXT)')
            with conn.cursor() as cursor:
                cursor.executemany(f'INSERT INTO "{table}" VALUES (%s, %s, %s)', DATA)
        where = (
            "'connector' = 'jdbc', 'url' = 'jdbc:postgresql://127.0.0.1:5432/test', "
            f"'table-name' = '{table}', 'username' = 'postgres'"
        )
        expected = ["1,12,Julian", "1,12,Julian", "9,12,Hello world!", "9,12,Hello world!",
                    "2,15,Hello", "2,15,Hello", "3,15,Fabian", "3,15,Fabian",
                    "8,11,Hello world"]  # fmt: skip
    assert SRC_COLUMNS == ("id", "len", "content")
    tables.sql.sql(
        "CREATE TABLE dim_with_pk (`num` BIGINT, `len` INT PRIMARY KEY NOT ENFORCED, "
        f"`content` STRING) WITH ({where})"
    )
    try:
        rows = tables.sql.sql(
            "SELECT dim_with_pk.* FROM src JOIN dim_with_pk "
            "FOR SYSTEM_TIME AS OF src.proctime ON src.len = dim_with_pk.len"
        )
        assert result(rows) == sorted(expected)
    finally:
        tables.sql.sql("DROP TEMPORARY TABLE dim_with_pk")
        if kind == "postgres":
            with psycopg.connect(postgres_dsn, autocommit=True) as conn:
                conn.execute(f'DROP TABLE IF EXISTS "{table}"')
