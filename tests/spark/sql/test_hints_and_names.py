"""Which lookup join a hint is for, hints sqlglot would drop, CTEs and qualified names on the
lookup side, and the errors for keys that cannot be keys. Most checks parse or plan only; the
ones that change results run a query on the in-memory 'values' connector."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession
from sqlglot import exp

from asyncio_lookup.errors import ConfigurationError, HintError
from asyncio_lookup.lookup import LookupHint
from asyncio_lookup.spark import LookupSQL
from asyncio_lookup.spark.sql import SqlError, SqlParseError
from asyncio_lookup.spark.sql.parse import check_hint_blocks, parse_statement
from asyncio_lookup.spark.sql.select_hints import LookupJoinName, SelectHints
from asyncio_lookup.spark.sql.translate import Translator, select_hints
from tests.spark.conftest import no_spark_job
from tests.spark.sql.conftest import USER_COLUMNS, USER_DATA, register_data

# A aliased b, B aliased a: each alias is the other join's table name.
CROSSED = (
    "FROM T JOIN A FOR SYSTEM_TIME AS OF T.pt AS b ON T.id = b.id "
    "JOIN B FOR SYSTEM_TIME AS OF T.pt AS a ON T.id = a.id"
)
A_AS_B, B_AS_A = LookupJoinName("A", "b"), LookupJoinName("B", "a")


def hints_of(statement: str) -> SelectHints:
    select = parse_statement(statement)
    assert isinstance(select, exp.Select)
    return select_hints(select)


def hint_tables(statement: str, join: LookupJoinName) -> list[str]:
    """The tables named by the hints ``statement``'s SELECT gives ``join``."""
    hints = hints_of(statement)
    found = hints.for_join(join)
    return [h.table if isinstance(h, LookupHint) else h.tables[0] for h in found]


# ----------------------------------------------------------------- which join a hint is for


def test_a_parse_error_never_shows_a_hints_shared_cache_password() -> None:
    statement = (
        "SELECT /*+ LOOKUP('table'='c', 'lookup.shared-cache.url'='redis://:s3cret@h:6379/0') */ "
        "o.x FROM o JOIN c FOR SYSTEM_TIME AS OF o.pt AS c ON o.a = c.b WHERE (("
    )
    with pytest.raises(SqlParseError) as info:
        parse_statement(statement)
    assert "s3cret" not in str(info.value)


def test_a_hint_naming_an_alias_is_for_that_join_only_as_in_flink() -> None:
    statement = f"SELECT /*+ LOOKUP('table'='a', 'on-error'='keep') */ * {CROSSED}"
    assert hint_tables(statement, B_AS_A) == ["a"]
    assert hint_tables(statement, A_AS_B) == []


def test_one_hint_per_alias_with_different_values_is_no_conflict() -> None:
    statement = (
        "SELECT /*+ LOOKUP('table'='a', 'capacity'='10'), LOOKUP('table'='b', 'capacity'='20') */ "
        f"* {CROSSED}"
    )
    hints = hints_of(statement)
    for join, capacity in ((B_AS_A, 10), (A_AS_B, 20)):
        assert [h.capacity for h in hints.for_join(join) if isinstance(h, LookupHint)] == [capacity]


def test_shuffle_hash_matches_joins_as_lookup_hints_do() -> None:
    statement = f"SELECT /*+ SHUFFLE_HASH('a') */ * {CROSSED}"
    assert hint_tables(statement, B_AS_A) == ["a"]
    assert hint_tables(statement, A_AS_B) == []


def test_the_table_name_of_a_single_aliased_join_still_names_it() -> None:
    statement = (
        "SELECT /*+ LOOKUP('table'='A'), SHUFFLE_HASH('A') */ * "
        "FROM T JOIN A FOR SYSTEM_TIME AS OF T.pt AS D ON T.id = D.id"
    )
    assert hint_tables(statement, LookupJoinName("A", "D")) == ["A", "A"]


def test_the_table_name_of_a_table_joined_twice_is_refused() -> None:
    statement = (
        "SELECT /*+ LOOKUP('table'='A') */ * FROM T JOIN A FOR SYSTEM_TIME AS OF T.pt AS x "
        "ON T.id = x.id JOIN A FOR SYSTEM_TIME AS OF T.pt AS y ON T.id = y.id"
    )
    with pytest.raises(HintError, match="joined more than once"):
        hints_of(statement)


def test_a_name_of_another_source_is_not_the_lookup_joins_table_name() -> None:
    # the probe side is called A too: the hint names it, not the lookup join of table A
    statement = (
        "SELECT /*+ LOOKUP('table'='A') */ * FROM T AS A "
        "JOIN A FOR SYSTEM_TIME AS OF A.pt AS D ON A.id = D.id"
    )
    hints = hints_of(statement)
    assert hints.for_join(LookupJoinName("A", "D")) == []
    with pytest.raises(SqlError, match="another of its sources"):
        hints.check_used(set())


def test_a_quote_inside_a_hint_value_is_read_as_written() -> None:
    statement = (
        "SELECT /*+ LOOKUP('table'='D''x', 'async'='true') */ * "
        "FROM T JOIN A FOR SYSTEM_TIME AS OF T.pt AS `D'x` ON T.id = `D'x`.id"
    )
    assert hint_tables(statement, LookupJoinName("A", "D'x")) == ["D'x"]


# ----------------------------------------------------------------- hints sqlglot would drop


@pytest.mark.parametrize(
    ("statement", "column", "named"),
    [
        pytest.param(
            "SELECT /*+ LOOKUP('table'='D') */ /*+ LOOKUP('table'='D', 'on-error'='keep') */ *",
            35,
            "one hint block, right after SELECT",
            id="second block",
        ),
        pytest.param(
            "SELECT * FROM T JOIN A /*+ LOOKUP('table'='D') */ FOR SYSTEM_TIME",
            24,
            "one hint block, right after SELECT",
            id="after a table",
        ),
        pytest.param(
            "SELECT * FROM T JOIN A /*+ OPTIONS('lookup.cache'='BOGUS') */ FOR SYSTEM_TIME",
            24,
            "dynamic table options",
            id="OPTIONS",
        ),
    ],
)
def test_a_hint_outside_the_block_after_select_is_refused_with_a_caret(
    statement: str, column: int, named: str
) -> None:
    with pytest.raises(SqlParseError) as error:
        check_hint_blocks(statement)
    assert error.value.column == column and named in str(error.value)
    assert str(error.value).splitlines()[-1] == "  " + " " * (column - 1) + "^"


def test_hint_text_in_strings_names_and_comments_is_no_hint() -> None:
    check_hint_blocks(
        "SELECT /*+ LOOKUP('table'='D') */ '/*+ x */', `/*+ y */` /* a /*+ nested */ one */ "
        "FROM T -- /*+ z */\nWHERE 1 = 1"
    )
    check_hint_blocks("WITH c AS (SELECT /*+ X */ 1) SELECT /*+ Y */ * FROM c")


# ----------------------------------------------------------------- names on the lookup side


def translator(*lookup_tables: str) -> Translator:
    """A Translator that knows ``lookup_tables`` (for checks that run before Spark is used)."""
    known = {t.lower() for t in lookup_tables}
    return Translator(None, lambda name: object() if name.lower() in known else None)  # type: ignore[arg-type,return-value]


def test_a_qualified_lookup_table_name_says_so() -> None:
    statement = parse_statement(
        "SELECT * FROM T JOIN default.A FOR SYSTEM_TIME AS OF T.pt AS D ON T.a = D.id"
    )
    with pytest.raises(SqlError) as error:
        translator("A").translate(statement)
    assert "'default.A'" in str(error.value)
    assert "no catalog or database" in str(error.value) and "JOIN A FOR" in str(error.value)


@pytest.mark.parametrize(
    "cte",
    [
        "SELECT id FROM LookupTable",
        "SELECT * FROM LookupTable WHERE id > 1",
        "SELECT * FROM MyTable",
    ],
)
def test_a_cte_other_than_select_star_from_a_lookup_table_is_refused(cte: str) -> None:
    statement = parse_statement(
        f"WITH V AS ({cte}) SELECT * FROM MyTable AS T "
        "JOIN V FOR SYSTEM_TIME AS OF T.pt AS D ON T.a = D.id"
    )
    with pytest.raises(SqlError, match="a CTE cannot be the lookup side of FOR SYSTEM_TIME"):
        translator("LookupTable").translate(statement)


# ----------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def sql(spark: SparkSession) -> Iterator[LookupSQL]:
    spark.createDataFrame([(1, 11), (2, 22), (9, 99)], "id BIGINT, len INT").selectExpr(
        "*", "current_timestamp() AS pt"
    ).createOrReplaceTempView("hints_probe")
    sql = LookupSQL(spark)
    for name in ("A", "B", "LookupTable"):
        data = register_data(USER_DATA, USER_COLUMNS)
        sql.sql(
            f"CREATE TEMPORARY TABLE {name} (age INT, id BIGINT, name STRING) "
            f"WITH ('connector' = 'values', 'data-id' = '{data}')"
        )
    yield sql


@pytest.mark.spark
def test_on_error_keep_named_by_alias_applies_to_that_join_only(
    spark: SparkSession, sql: LookupSQL
) -> None:
    with no_spark_job(spark):
        df = sql.sql(
            "SELECT /*+ LOOKUP('table'='a', 'on-error'='keep') */ b.*, a.* FROM hints_probe AS T "
            "JOIN A FOR SYSTEM_TIME AS OF T.pt AS b ON T.id = b.id "
            "JOIN B FOR SYSTEM_TIME AS OF T.pt AS a ON T.id = a.id"
        )
    assert df.columns == ["age", "id", "name", "age", "id", "name", "lookup_error"]
    assert sorted(r[:3] for r in df.collect()) == [(11, 1, "Julian"), (22, 2, "Jark")]


@pytest.mark.spark
def test_spark_s_own_shuffle_hash_on_an_ordinary_join_is_passed_on(
    spark: SparkSession, sql: LookupSQL
) -> None:
    """``SHUFFLE_HASH(O)`` naming an ordinary join was refused ("names no lookup join"), in a
    statement without lookup tables and on a join before the lookup join; Spark plans it."""
    spark.createDataFrame([(1, "x"), (2, "y")], "k BIGINT, v STRING").createOrReplaceTempView(
        "hints_other"
    )
    plain = sql.sql(
        "SELECT /*+ SHUFFLE_HASH(O) */ T.id, O.v FROM hints_probe T JOIN hints_other O "
        "ON O.k = T.id"
    )
    assert sorted(plain.collect()) == [(1, "x"), (2, "y")]
    before_lookup = sql.sql(
        "SELECT /*+ SHUFFLE_HASH(O) */ T.id, O.v, D.name FROM hints_probe T "
        "JOIN hints_other O ON O.k = T.id "
        "JOIN A FOR SYSTEM_TIME AS OF T.pt AS D ON T.id = D.id"
    )
    assert sorted(before_lookup.collect()) == [(1, "x", "Julian"), (2, "y", "Jark")]
    plan = before_lookup._jdf.queryExecution().analyzed().toString()
    assert "SHUFFLE_HASH" in plan.upper()  # reached the join it names
    with pytest.raises(SqlError, match="names no join of its SELECT"):
        sql.sql(
            "SELECT /*+ SHUFFLE_HASH(Nope) */ T.id FROM hints_probe T "
            "JOIN A FOR SYSTEM_TIME AS OF T.pt AS D ON T.id = D.id"
        )


@pytest.mark.spark
def test_one_hint_per_alias_with_different_values_plans(
    spark: SparkSession, sql: LookupSQL
) -> None:
    with no_spark_job(spark):
        df = sql.sql(
            "SELECT /*+ LOOKUP('table'='a', 'capacity'='10'), LOOKUP('table'='b', "
            "'capacity'='20') */ b.name, a.name FROM hints_probe AS T "
            "JOIN A FOR SYSTEM_TIME AS OF T.pt AS b ON T.id = b.id "
            "JOIN B FOR SYSTEM_TIME AS OF T.pt AS a ON T.id = a.id"
        )
    assert sorted(df.collect()) == [("Jark", "Jark"), ("Julian", "Julian")]


@pytest.mark.spark
@pytest.mark.parametrize(
    ("hints", "after_table", "named"),
    [
        (
            "/*+ LOOKUP('table'='D') */ /*+ LOOKUP('table'='D', 'on-error'='keep') */",
            "",
            "one hint",
        ),
        ("", "/*+ OPTIONS('lookup.cache'='BOGUS') */", "dynamic table options"),
    ],
)
def test_a_hint_sqlglot_would_drop_is_refused_by_lookup_sql(
    spark: SparkSession, sql: LookupSQL, hints: str, after_table: str, named: str
) -> None:
    with no_spark_job(spark), pytest.raises(SqlParseError, match=named):
        sql.sql(
            f"SELECT {hints} * FROM hints_probe AS T "
            f"JOIN A {after_table} FOR SYSTEM_TIME AS OF T.pt AS D ON T.id = D.id"
        )


@pytest.mark.spark
def test_a_cte_that_is_a_lookup_table_joins_it(spark: SparkSession, sql: LookupSQL) -> None:
    # Flink's LookupJoinTest.testJoinTemporalTableWithCTE; with and without an alias
    with no_spark_job(spark):
        aliased = sql.sql(
            "WITH P AS (SELECT * FROM hints_probe), V AS (SELECT * FROM LookupTable) "
            "SELECT P.len, D.name FROM P JOIN V FOR SYSTEM_TIME AS OF P.pt AS D "
            "ON P.id = D.id AND D.age = 11"
        )
        bare = sql.sql(
            "WITH V AS (SELECT * FROM LookupTable) SELECT T.len, V.name FROM hints_probe AS T "
            "JOIN V FOR SYSTEM_TIME AS OF T.pt ON T.id = V.id"
        )
    assert sorted(aliased.collect()) == [(11, "Julian")]
    assert sorted(bare.collect()) == [(11, "Julian"), (22, "Jark")]


@pytest.mark.spark
def test_a_cte_used_as_a_plain_source_too_is_still_refused(sql: LookupSQL) -> None:
    with pytest.raises(ConfigurationError, match="only be joined with FOR SYSTEM_TIME"):
        sql.sql(
            "WITH V AS (SELECT * FROM LookupTable) SELECT * FROM hints_probe AS T "
            "JOIN V FOR SYSTEM_TIME AS OF T.pt AS D ON T.id = D.id JOIN V AS W ON W.id = T.id"
        )


@pytest.mark.spark
@pytest.mark.parametrize(
    ("on", "named"),
    [
        ("D.id = (SELECT max(id) FROM hints_probe)", "the value is a subquery"),
        ("T.id = A.id", "the table is aliased as D, so its columns are D.<column>"),
    ],
)
def test_keys_that_cannot_be_keys_say_why(
    spark: SparkSession, sql: LookupSQL, on: str, named: str
) -> None:
    with no_spark_job(spark), pytest.raises(SqlError) as error:
        sql.sql(f"SELECT T.id FROM hints_probe AS T JOIN A FOR SYSTEM_TIME AS OF T.pt AS D ON {on}")
    assert named in str(error.value)
    assert "computed column" not in str(error.value)


@pytest.mark.spark
def test_a_quote_inside_a_hint_value_names_the_alias_as_written(
    spark: SparkSession, sql: LookupSQL
) -> None:
    with no_spark_job(spark):
        df = sql.sql(
            "SELECT /*+ LOOKUP('table'='D''x', 'on-error'='keep') */ `D'x`.name "
            "FROM hints_probe AS T JOIN A FOR SYSTEM_TIME AS OF T.pt AS `D'x` ON T.id = `D'x`.id "
            "WHERE `D'x`.lookup_error IS NULL"
        )
    assert sorted(df.collect()) == [("Jark",), ("Julian",)]


@pytest.mark.spark
def test_a_qualified_name_is_refused_by_lookup_sql_too(sql: LookupSQL) -> None:
    with pytest.raises(SqlError, match="no catalog or database"):
        sql.sql("SELECT * FROM hints_probe AS T JOIN default.A FOR SYSTEM_TIME AS OF T.pt ON 1 = 1")
