"""LookupSQL read as Spark reads it: string literals with doubled quotes, keys through casts under
ANSI mode, plain names also in a Spark source joined after a lookup join, OR conditions in ON,
parenthesised key operands, LOOKUP hints on a table joined twice. Each query is compared with
Spark's own join over the same rows (the dim rows as a temporary view)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from sqlglot import exp

from asyncio_lookup.connectors import InMemoryConnector
from asyncio_lookup.errors import HintError
from asyncio_lookup.spark import LookupSQL, LookupTable
from asyncio_lookup.spark.sql import SqlError
from asyncio_lookup.spark.sql.keys import KeyFinder
from asyncio_lookup.spark.sql.parse import mask_secrets, parse_statement
from asyncio_lookup.spark.sql.scope import Resolver, Source, qualify_struct_paths
from tests.spark.conftest import no_spark_job

pytestmark = pytest.mark.spark

PEOPLE = [("O'Brien", 1), ("OBrien", 2), ("it's", 3), ("'", 4), ("", 5), ('a"b', 6)]
DIM = [(1, None, "a", 10), (2, 5, "b", 20), (3, 9, "c", 30)]
PROBE = [(1, 1, 5, "t", 1), (2, 2, 5, "t", 4294967299), (3, 3, 5, "t", 3)]


def rows(df: DataFrame) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r) for r in df.collect())


@pytest.fixture(scope="module")
def sql(spark: SparkSession) -> LookupSQL:
    """``People`` (keyed by name) and ``Dim`` (keyed by id) as lookup tables, ``people_plain``
    and ``dim_plain`` with the same rows, probe sides ``Who`` and ``O``, and ``T``, a Spark
    source that shares ``id`` and ``x`` with ``Dim``."""
    spark.createDataFrame(PEOPLE, "name STRING, v INT").createOrReplaceTempView("people_plain")
    who = [(i, name, "t") for i, (name, _) in enumerate(PEOPLE)]
    spark.createDataFrame(who, "k INT, who STRING, t STRING").createOrReplaceTempView("Who")
    dim_schema = "id INT, tier INT, v STRING, x INT"
    spark.createDataFrame(DIM, dim_schema).createOrReplaceTempView("dim_plain")
    spark.createDataFrame(
        PROBE, "k INT, id INT, tier INT, t STRING, big BIGINT"
    ).createOrReplaceTempView("O")
    spark.createDataFrame([(1, 99), (2, 5)], "id INT, x INT").createOrReplaceTempView("T")
    spark.createDataFrame([(1, 7), (2, 8)], "id INT, y INT").createOrReplaceTempView("T2")
    lookup = LookupSQL(spark)
    people = [{"name": n, "v": v} for n, v in PEOPLE]
    lookup.register(
        LookupTable("People", "name STRING, v INT", InMemoryConnector(people, ["name"]))
    )
    dims = [dict(zip(("id", "tier", "v", "x"), row, strict=True)) for row in DIM]
    lookup.register(LookupTable("Dim", dim_schema, InMemoryConnector(dims, ["id"])))
    return lookup


def same_as_spark(spark: SparkSession, sql: LookupSQL, query: str) -> Counter[tuple[Any, ...]]:
    """``query`` (``{}`` for the joined table) through LookupSQL and through Spark: equal rows."""
    lookup = {"People": "People FOR SYSTEM_TIME AS OF o.t", "Dim": "Dim FOR SYSTEM_TIME AS OF o.t"}
    ours = rows(sql.sql(query.format(**lookup)))
    plain = rows(spark.sql(query.format(People="people_plain", Dim="dim_plain")))
    assert ours == plain
    return ours


# ---------------------------------------------------------------- 1. '' inside a literal

LITERALS = ["'it''s'", "''", "''''", r"'x\'y'", "'a' 'b'", "'a''' 'b'", '"a""b"', '"it\'s"']


def test_literals_with_doubled_quotes_come_back_as_spark_reads_them(spark: SparkSession) -> None:
    statement = "SELECT " + ", ".join(f"{lit} AS c{i}" for i, lit in enumerate(LITERALS))
    regenerated = parse_statement(statement).sql(dialect="spark")
    assert "CONCAT('it', 's')" not in regenerated
    assert tuple(spark.sql(regenerated).first()) == tuple(spark.sql(statement).first())
    assert spark.sql(statement).first()[0] == "it's"


@pytest.mark.parametrize(
    "query",
    [
        # a constant key
        "SELECT o.k, d.name, d.v FROM Who AS o JOIN {People} AS d ON d.name = 'O''Brien'",
        "SELECT o.k, d.name FROM Who AS o JOIN {People} AS d ON d.name = ''''",
        'SELECT o.k, d.name FROM Who AS o JOIN {People} AS d ON d.name = "a""b"',
        # WHERE on the probe side (pushed before the lookups) and on the dim side
        "SELECT o.k, d.v FROM Who AS o JOIN {People} AS d ON d.name = o.who "
        "WHERE o.who = 'O''Brien' OR o.who = 'it''s'",
        "SELECT o.k, d.v FROM Who AS o LEFT JOIN {People} AS d ON d.name = o.who "
        "WHERE d.name <> 'it''s'",
        # SELECT and a residual ON condition
        "SELECT o.k, 'it''s' AS s, concat(d.name, '''') AS q FROM Who AS o "
        "LEFT JOIN {People} AS d ON d.name = o.who AND d.name <> 'O''Brien'",
    ],
)
def test_doubled_quotes_in_on_where_and_select_match_spark(
    spark: SparkSession, sql: LookupSQL, query: str
) -> None:
    assert same_as_spark(spark, sql, query)


def test_masked_password_hides_the_whole_literal() -> None:
    for value in ("'sec''ret'", "'sec' 'ret'", '"sec""ret"', r"'sec\'ret'"):
        ddl = f"CREATE TABLE t (a INT) WITH ('connector' = 'x', 'password' = {value}, 'b' = 'c')"
        masked = mask_secrets(ddl)
        assert "ret" not in masked and "sec" not in masked, masked
        assert masked.endswith("'password' = '***', 'b' = 'c')"), masked


# ---------------------------------------------------------------- 2. TRY_CAST under ANSI


def test_probe_value_out_of_the_key_range_is_a_miss_with_ansi_on(
    spark: SparkSession, sql: LookupSQL
) -> None:
    dim = Source("d", ("id",))
    finder = KeyFinder(
        "Dim", Resolver([Source("o", ("big",))], dim), dim, ("id",), None,
        {"id": exp.DataType.build("INT")},
    )  # fmt: skip
    statement = parse_statement("SELECT 1 FROM a JOIN b ON CAST(d.id AS BIGINT) = o.big")
    key, _ = finder.find(statement.args["joins"][0].args["on"])
    assert key[0].expression.sql(dialect="spark") == "TRY_CAST(o.big AS INT)"
    before = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", "true")
    try:
        found = same_as_spark(
            spark,
            sql,
            "SELECT o.k, d.v FROM O AS o JOIN {Dim} AS d ON CAST(d.id AS BIGINT) = o.big",
        )
    finally:
        spark.conf.set("spark.sql.ansi.enabled", before)
    assert found == Counter([(1, "a"), (3, "c")])


# ---------------------------------------------------------------- 3. ambiguous plain names


@pytest.mark.parametrize(
    "query",
    [
        "SELECT o.k, x FROM O AS o JOIN {Dim} AS d ON d.id = o.id JOIN T AS t ON t.id = o.id",
        "SELECT o.k FROM O AS o JOIN {Dim} AS d ON d.id = o.id JOIN T AS t ON t.id = o.id "
        "WHERE x > 15",
        # id: o's, d's and t's; the WHERE is not applied to o.id before the lookups
        "SELECT o.k FROM O AS o JOIN {Dim} AS d ON d.id = o.id JOIN T AS t ON t.id = o.id "
        "WHERE id > 1",
    ],
)
def test_a_name_a_later_spark_source_has_too_is_ambiguous_as_in_spark(
    spark: SparkSession, sql: LookupSQL, query: str
) -> None:
    with pytest.raises(Exception, match="AMBIGUOUS_REFERENCE"):
        spark.sql(query.format(Dim="dim_plain"))
    with no_spark_job(spark), pytest.raises(SqlError, match="ambiguous") as error:
        sql.sql(query.format(Dim="Dim FOR SYSTEM_TIME AS OF o.t"))
    name = "id" if "id >" in query else "x"
    assert f"'{name}'" in str(error.value) and f"t.{name}" in str(error.value)


def test_names_only_one_source_has_resolve_as_in_spark(spark: SparkSession, sql: LookupSQL) -> None:
    assert same_as_spark(
        spark,
        sql,
        "SELECT o.k, x, y, v FROM O AS o JOIN {Dim} AS d ON d.id = o.id "
        "JOIN T2 AS t ON t.id = o.id WHERE y > 7 AND k > 0",
    )


CORRELATED = "SELECT o.k, c.v FROM O AS o JOIN {Dim} AS c ON c.id = o.id WHERE "


@pytest.mark.parametrize(
    "query",
    [
        # an outer probe column named plainly in a subquery (Spark: a correlated reference)
        CORRELATED + "EXISTS (SELECT 1 FROM T2 WHERE T2.id = k)",
        CORRELATED + "k IN (SELECT id FROM T2 WHERE y < big)",
        # an outer dim column so
        CORRELATED + "EXISTS (SELECT 1 FROM T2 WHERE T2.id * 10 = x)",
        "SELECT o.k, (SELECT max(y) FROM T2 WHERE T2.id = k) AS m, c.v "
        "FROM O AS o JOIN {Dim} AS c ON c.id = o.id",
        # the subquery's own columns stay its own (T has id and x; o.id = 2 AND c.x = 5: none)
        CORRELATED + "EXISTS (SELECT 1 FROM T WHERE id = 2 AND x = 5)",
        CORRELATED + "EXISTS (SELECT 1 FROM T2 WHERE EXISTS (SELECT 1 FROM T WHERE x = y - 2))",
        CORRELATED + "k IN (SELECT n FROM (SELECT id AS n FROM T2) AS s WHERE n = big)",
        # names a subquery makes of its own beyond its sources' columns stay its own
        CORRELATED + "EXISTS (SELECT 1 FROM T2 LATERAL VIEW explode(array(y, 2)) e AS k "
        "WHERE k = 2)",
        CORRELATED + "EXISTS (SELECT 1 FROM T PIVOT (sum(x) FOR id IN (1 AS a, 2 AS b)) "
        "WHERE b = 5)",
        # outer names in a UNION's branches, beside a LATERAL VIEW's own
        CORRELATED
        + "EXISTS (SELECT 1 FROM T WHERE id = k UNION ALL SELECT 1 FROM T2 WHERE id = k)",
        CORRELATED + "EXISTS (SELECT 1 FROM T2 LATERAL VIEW explode(array(y, 2)) e AS z "
        "WHERE z = k)",
        # a UNION's ORDER BY names its own outputs
        "SELECT o.k, (SELECT x FROM T UNION ALL SELECT y FROM T2 ORDER BY x DESC LIMIT 1) AS m, "
        "c.v FROM O AS o JOIN {Dim} AS c ON c.id = o.id",
    ],
)
def test_outer_names_in_subqueries_resolve_as_in_spark(
    spark: SparkSession, sql: LookupSQL, query: str
) -> None:
    """They failed in Spark ('cannot be resolved') once the probe's columns moved into a
    struct."""
    assert same_as_spark(spark, sql, query)


@pytest.mark.parametrize(
    "query",
    [
        "SELECT DISTINCT c.tier FROM O AS o JOIN {Dim} AS c ON c.id = o.id ORDER BY c.tier DESC",
        "SELECT DISTINCT o.t, c.v FROM O AS o JOIN {Dim} AS c ON c.id = o.id ORDER BY c.v, o.t",
        "SELECT DISTINCT c.tier AS n FROM O AS o JOIN {Dim} AS c ON c.id = o.id ORDER BY n",
    ],
)
def test_distinct_ordered_by_a_qualified_column_reads_as_in_spark(
    spark: SparkSession, sql: LookupSQL, query: str
) -> None:
    """``SELECT DISTINCT c.x ... ORDER BY c.x`` failed ('cannot be resolved'): ``c`` is a struct
    of the view, which Spark cannot read above the DISTINCT."""
    ours = [tuple(r) for r in sql.sql(query.format(Dim="Dim FOR SYSTEM_TIME AS OF o.t")).collect()]
    plain = [tuple(r) for r in spark.sql(query.format(Dim="dim_plain")).collect()]
    assert ours == plain and len(ours) > 1


# ---------------------------------------------------------------- 4. and 5. ON shapes


@pytest.mark.parametrize(
    "on",
    [
        "d.id = o.id AND (d.tier = o.tier OR d.tier IS NULL)",
        "d.id = o.id AND (d.tier IS NULL OR o.tier = d.tier)",
        "d.id = o.id AND (d.tier = o.tier OR (d.tier IS NULL AND o.k IS NULL))",
        "(d.id) = (o.id)",
        "((o.id)) = d.id AND (d.x) > (o.k)",
        "CAST((d.id) AS BIGINT) = (o.big)",
    ],
)
def test_on_conditions_spark_accepts_match_spark(
    spark: SparkSession, sql: LookupSQL, on: str
) -> None:
    for how in ("JOIN", "LEFT JOIN"):
        assert same_as_spark(spark, sql, f"SELECT o.k, d.v FROM O AS o {how} {{Dim}} AS d ON {on}")


@pytest.mark.parametrize(
    "on",
    [
        "d.id = o.id AND (d.tier = o.tier OR (d.tier IS NULL AND o.tier IS NULL))",
        "d.id = o.id AND ((o.tier IS NULL AND d.tier IS NULL) OR (o.tier) = d.tier)",
    ],
)
def test_the_is_not_distinct_from_spelling_is_still_refused(
    spark: SparkSession, sql: LookupSQL, on: str
) -> None:
    with no_spark_job(spark), pytest.raises(SqlError, match="IS NOT DISTINCT FROM"):
        sql.sql(f"SELECT o.k FROM O AS o JOIN Dim FOR SYSTEM_TIME AS OF o.t AS d ON {on}")


# ---------------------------------------------------------------- 6. LOOKUP hints by alias

TWICE = (
    "SELECT /*+ {hints} */ o.k, {fields} FROM O AS o "
    "JOIN Dim FOR SYSTEM_TIME AS OF o.t AS {first} ON {first}.id = o.id "
    "JOIN Dim FOR SYSTEM_TIME AS OF o.t AS c2 ON c2.id = o.k"
)


def test_a_hint_naming_a_table_joined_under_two_aliases_is_refused(
    spark: SparkSession, sql: LookupSQL
) -> None:
    query = TWICE.format(
        hints="LOOKUP('table'='Dim', 'on-error'='keep')", fields="c1.v", first="c1"
    )
    with no_spark_job(spark), pytest.raises(HintError) as error:
        sql.sql(query)
    for text in ("'Dim'", "'c1'", "'c2'", "name the alias"):
        assert text in str(error.value), str(error.value)


def test_hints_naming_the_aliases_apply_to_their_join_only(
    spark: SparkSession, sql: LookupSQL
) -> None:
    keep = "LOOKUP('table'='c1', 'on-error'='keep')"
    found = rows(
        sql.sql(TWICE.format(hints=keep, fields="c1.lookup_error IS NULL, c2.v", first="c1"))
    )
    assert found == Counter([(1, True, "a"), (2, True, "b"), (3, True, "c")])
    with pytest.raises(SqlError, match="lookup_error"):
        sql.sql(TWICE.format(hints=keep, fields="c2.lookup_error", first="c1"))
    # an unaliased join is named by the table's name: the hint is for it alone
    unaliased = TWICE.format(
        hints="LOOKUP('table'='Dim', 'on-error'='keep')", fields="{fields}", first="Dim"
    )
    assert rows(sql.sql(unaliased.format(fields="Dim.lookup_error IS NULL"))) == Counter(
        [(1, True), (2, True), (3, True)]
    )
    with pytest.raises(SqlError, match="lookup_error"):
        sql.sql(unaliased.format(fields="c2.lookup_error"))


# ---------------------------------------------------------------- struct fields, subqueries


@pytest.fixture(scope="module")
def nested(spark: SparkSession, sql: LookupSQL) -> LookupSQL:
    """``N``: a probe side with a struct ``c`` (named like the dim's alias below) and ``addr``;
    ``Tiers``: a Spark table for subqueries."""
    spark.createDataFrame(
        [(1, 1, (1, "in-probe-1"), ("Oslo", 5)), (2, 2, (2, "in-probe-2"), ("Rome", 9))],
        "k INT, id INT, c STRUCT<id: INT, v: STRING>, addr STRUCT<city: STRING, zip: INT>",
    ).withColumn("t", F.lit("t")).createOrReplaceTempView("N")
    spark.createDataFrame([(5,), (7,)], "tier INT").createOrReplaceTempView("Tiers")
    return sql


@pytest.mark.parametrize(
    "query",
    [
        # a probe struct named like the dim alias: o.c.v is the probe's, c.v the dim's
        "SELECT o.k, o.c.v AS in_probe, c.v AS in_dim FROM N AS o JOIN {Dim} AS c ON c.id = o.id",
        "SELECT o.k FROM N AS o JOIN {Dim} AS c ON c.id = o.id WHERE o.c.v = 'a'",
        "SELECT o.k, c.v FROM N AS o JOIN {Dim} AS c ON c.id = o.c.id",
        "SELECT o.k, o.addr.city FROM N AS o JOIN {Dim} AS c ON c.id = o.id WHERE o.addr.zip > 6",
        "SELECT o.k, c.v FROM N AS o LEFT JOIN {Dim} AS c ON c.id = o.id AND o.addr.city = 'Oslo'",
        # a subquery's own names are its own, in the ON conditions as in WHERE
        "SELECT o.k, c.v FROM N AS o JOIN {Dim} AS c ON c.id = o.id "
        "AND c.tier IN (SELECT tier FROM Tiers)",
        "SELECT o.k, c.v FROM N AS o LEFT JOIN {Dim} AS c ON c.id = o.id "
        "AND c.tier IN (SELECT tier FROM Tiers)",
    ],
)
def test_struct_fields_and_subqueries_read_as_spark_reads_them(
    spark: SparkSession, nested: LookupSQL, query: str
) -> None:
    lookup = {"Dim": "Dim FOR SYSTEM_TIME AS OF o.t"}
    ours = rows(nested.sql(query.format(**lookup)))
    assert ours == rows(spark.sql(query.format(Dim="dim_plain")))


def test_a_left_join_condition_beyond_the_key_on_a_stream_is_refused_by_sql(
    spark: SparkSession, sql: LookupSQL
) -> None:
    """It passed .sql() and failed at writeStream.start() (monotonically_increasing_id)."""
    stream = spark.readStream.format("rate").option("rowsPerSecond", 1).load()
    stream.selectExpr("CAST(value % 4 AS INT) AS id", "'t' AS t").createOrReplaceTempView("S")
    on_key = "SELECT o.id, c.v FROM S AS o LEFT JOIN {Dim} AS c ON c.id = o.id"
    lookup = {"Dim": "Dim FOR SYSTEM_TIME AS OF o.t"}
    with no_spark_job(spark):
        assert sql.sql(on_key.format(**lookup)).isStreaming
        assert sql.sql((on_key + " AND o.id > 1").format(**lookup)).isStreaming  # probe alone
        with pytest.raises(SqlError, match="streaming probe side") as info:
            sql.sql((on_key + " AND c.x > 10").format(**lookup))
    assert info.value.option == "ON"


@pytest.mark.parametrize("join", ["JOIN T USING (id)", "NATURAL JOIN T"])
def test_using_and_natural_joins_beside_a_lookup_join_are_refused(
    spark: SparkSession, sql: LookupSQL, join: str
) -> None:
    # SELECT * listed the merged column twice, and a plain name was called ambiguous
    query = f"SELECT * FROM O AS o {join} JOIN Dim FOR SYSTEM_TIME AS OF o.t AS c ON c.id = o.id"
    with no_spark_job(spark), pytest.raises(SqlError, match="USING and NATURAL") as info:
        sql.sql(query)
    assert info.value.option == "JOIN"


@pytest.mark.parametrize(
    ("sql", "names", "out"),
    [
        ("SELECT s.a, s.a.b, S.a FROM t AS o", ["o", "t"], "SELECT `o`.s.a, `o`.s.a.b, `o`.S.a"),
        # a FROM item whose columns are unknown (a view, a LATERAL subquery) keeps its name
        ("SELECT s.a FROM t AS o JOIN v AS s", ["o", "t", "s", "v"], "SELECT s.a"),
        ("SELECT db.t.id FROM db.t", ["t", "t"], "SELECT db.t.id"),  # database.table.column
        (
            "SELECT transform(o.xs, s -> s.a) AS r FROM t AS o",
            ["o", "t"],
            "SELECT TRANSFORM(o.xs, s -> s.a)",
        ),
        ("SELECT (SELECT max(s.a) FROM u) AS m FROM t AS o", ["o", "t"], "SELECT (SELECT MAX(s.a)"),
    ],
)
def test_a_probe_column_s_field_is_qualified_only_where_spark_reads_it_so(
    sql: str, names: list[str], out: str
) -> None:
    from asyncio_lookup.spark.sql.parse import parse_statement, to_spark_sql

    tree = parse_statement(sql)
    qualify_struct_paths(tree, [Source("o", ("id", "s", "xs"))], names)
    assert to_spark_sql(tree).startswith(out)
