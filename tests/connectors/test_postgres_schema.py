"""PostgresConnector.check_schema: one catalog query against the real server."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from asyncio_lookup.connectors import PostgresConnector
from asyncio_lookup.connectors.postgres_schema import spark_type_name
from asyncio_lookup.errors import ConfigurationError, TransientError
from tests.connectors.test_postgres import _exec

pytestmark = pytest.mark.postgres


@pytest.fixture
def typed(postgres_dsn: str, pg_table: str) -> str:
    _exec(
        postgres_dsn,
        f'CREATE TABLE "{pg_table}" (id integer, big bigint, small smallint, '
        "price double precision, amount numeric(12,2), ratio numeric, name text, "
        "code varchar(8), ok boolean, day date, at timestamp, atz timestamptz, blob bytea, "
        '"Odd Name" integer, at3 timestamp(3), atz3 timestamptz(3), score real)',
    )
    return pg_table


def connector(dsn: str, table: str, **kw: Any) -> PostgresConnector:
    return PostgresConnector(dsn, table, "id", **kw)


def test_matching_and_lossless_widening_pass(postgres_dsn: str, typed: str) -> None:
    connector(postgres_dsn, typed).check_schema(
        [
            ("id", "bigint"),  # integer -> bigint widens
            ("big", "bigint"),
            ("small", "int"),
            ("price", "double"),
            ("amount", "decimal(14,2)"),  # more integer digits, same scale
            ("ratio", "decimal(38,18)"),
            ("name", "string"),
            ("code", pa.string()),
            ("ok", "boolean"),
            ("day", "date"),
            ("at", "timestamp_ntz"),
            ("atz", "timestamp"),
            ("blob", "binary"),
            ("Odd Name", pa.int64()),
        ]
    )
    connector(postgres_dsn, typed).check_schema({"id": "int", "amount": "decimal(12,2)"})


@pytest.mark.parametrize(
    ("column", "declared", "pg_type", "suggestion"),
    [
        ("price", "int", "double precision", "double"),
        ("amount", "bigint", "numeric(12,2)", "decimal(12,2)"),
        ("amount", "decimal(12,1)", "numeric(12,2)", "decimal(12,2)"),
        ("big", "int", "bigint", "bigint"),
        ("big", "double", "bigint", "bigint"),
        ("ratio", "double", "numeric", "decimal(38,18)"),
        ("name", "int", "text", "string"),
        ("id", "string", "integer", "int"),
    ],
)
def test_lossy_declarations_name_table_column_types_and_the_fix(
    postgres_dsn: str, typed: str, column: str, declared: str, pg_type: str, suggestion: str
) -> None:
    with pytest.raises(ConfigurationError) as info:
        connector(postgres_dsn, typed).check_schema([(column, declared)])
    message = str(info.value)
    assert f"{typed}.{column}" in message and pg_type in message
    assert repr(declared) in message and f"declare {suggestion}" in message
    assert info.value.allowed == suggestion


@pytest.mark.parametrize(
    ("column", "declared", "pg_type", "allowed"),
    [
        ("id", "double", "integer", "an integral type: int, bigint or decimal(p,0) with p >= 10"),
        ("id", "decimal(12,2)", "integer", "an integral type: int, bigint or decimal(p,0)"),
        ("small", "double", "smallint", "an integral type: smallint, int, bigint or decimal(p,0)"),
        ("at", "timestamp", "timestamp without time zone", "timestamp_ntz"),
        ("at3", "timestamp", "timestamp(3) without time zone", "timestamp_ntz"),
        # a double key is rounded to real: 16777217.0 and 0.1000000001 each matched a row
        ("score", "double", "real", "float"),
    ],
)
def test_key_columns_must_match_exactly(
    postgres_dsn: str, typed: str, column: str, declared: str, pg_type: str, allowed: str
) -> None:
    """A key is sent to PostgreSQL: an integral key column takes no key with a fraction (the
    driver truncates 1.5 to 1), a timestamp-without-time-zone one no UTC instant. The same
    declarations pass for a column that is not a key."""
    with pytest.raises(ConfigurationError) as info:
        PostgresConnector(postgres_dsn, typed, column).check_schema([(column, declared)])
    message = str(info.value)
    assert f"key column {typed}.{column} is {pg_type}" in message and repr(declared) in message
    assert info.value.option == f"schema key column {column!r}"
    assert info.value.allowed.startswith(allowed)
    PostgresConnector(postgres_dsn, typed, "name").check_schema([(column, declared)])


def test_exact_key_declarations_pass(postgres_dsn: str, typed: str) -> None:
    for column, declared in [
        ("id", "int"),
        ("id", "bigint"),
        ("id", "decimal(10,0)"),
        ("small", "smallint"),
        ("small", "decimal(5,0)"),
        ("big", "bigint"),
        ("at", "timestamp_ntz"),
        ("at3", "timestamp_ntz"),
        ("atz", "timestamp"),
        ("atz3", "timestamp"),
        ("price", "double"),
        ("score", "float"),
    ]:
        PostgresConnector(postgres_dsn, typed, column).check_schema([(column, declared)])


@pytest.mark.parametrize("key", [True, False])
@pytest.mark.parametrize("column", ["atz", "atz3"])
def test_timestamptz_takes_timestamp_not_ntz(
    postgres_dsn: str, typed: str, column: str, key: bool
) -> None:
    """The converse of a UTC key for a timestamp column: a timestamptz column's values are
    instants, which a timestamp_ntz declaration cannot hold (key or not)."""
    c = PostgresConnector(postgres_dsn, typed, column if key else "id")
    with pytest.raises(ConfigurationError, match=r"declare timestamp; allowed: timestamp$"):
        c.check_schema([(column, "timestamp_ntz")])


def test_missing_relation_and_columns(postgres_dsn: str, typed: str) -> None:
    with pytest.raises(ConfigurationError, match="no such relation") as info:
        connector(postgres_dsn, typed + "_nope").check_schema([("id", "int")])
    assert info.value.option == "table"
    with pytest.raises(ConfigurationError, match="'nope'") as info:
        connector(postgres_dsn, typed).check_schema([("id", "int"), ("nope", "string")])
    assert info.value.option == "columns"
    # a key column or a selected column the declaration leaves out is checked too
    with pytest.raises(ConfigurationError, match="'gone'"):
        PostgresConnector(postgres_dsn, typed, "gone").check_schema([("id", "int")])
    with pytest.raises(ConfigurationError, match="'extra'"):
        connector(postgres_dsn, typed, columns=["id", "extra"]).check_schema([("id", "int")])


def test_schema_qualified_table_and_query_sources(postgres_dsn: str, typed: str) -> None:
    connector(postgres_dsn, f"public.{typed}").check_schema([("id", "int")])
    with pytest.raises(ConfigurationError, match="no such relation"):
        connector(postgres_dsn, f"nope.{typed}").check_schema([("id", "int")])
    q = PostgresConnector(
        postgres_dsn, query=f'SELECT id, price * 2 AS p FROM "{typed}"', key_columns="id"
    )
    q.check_schema([("id", "bigint"), ("p", "double")])
    with pytest.raises(ConfigurationError, match="double precision"):
        q.check_schema([("p", "bigint")])


def test_refused_connection_is_transient() -> None:
    c = PostgresConnector("postgresql://postgres@127.0.0.1:9/test", "t", connect_timeout=2)
    with pytest.raises(TransientError):
        c.check_schema([("id", "int")])


def test_spark_type_names() -> None:
    assert spark_type_name("INTEGER") == "int"
    assert spark_type_name("DECIMAL(10, 2)") == "decimal(10,2)"
    assert spark_type_name(pa.decimal128(12, 2)) == "decimal(12,2)"
    assert spark_type_name(pa.timestamp("us", tz="UTC")) == "timestamp"
    assert spark_type_name(pa.timestamp("us")) == "timestamp_ntz"
    from pyspark.sql.types import DecimalType, LongType

    assert spark_type_name(LongType()) == "bigint"
    assert spark_type_name(DecimalType(12, 2)) == "decimal(12,2)"


@pytest.mark.parametrize(
    "query", ["DELETE FROM no_such_table", "SELECT 1 AS id; SELECT 2", "SELEC 1 AS id"]
)
def test_a_query_that_is_not_one_select_is_a_configuration_error(
    postgres_dsn: str, query: str
) -> None:
    """asyncpg's PostgresSyntaxError named neither the option nor what is allowed."""
    c = PostgresConnector(postgres_dsn, query=query, key_columns="id")
    with pytest.raises(ConfigurationError, match="PostgreSQL refused it: PostgresSyntaxError"):
        c.check_schema([("id", "int")])
    PostgresConnector(postgres_dsn, query="SELECT 1 AS id", key_columns="id").check_schema(
        [("id", "int")]
    )


@pytest.mark.parametrize(
    ("column", "refused"),
    [
        ("k text COLLATE {schema}.ci", "nondeterministic"),  # ICU, case-insensitive
        ("k {schema}.code", "a domain over character"),
        ("k jsonb", "jsonb"),
        ("k uuid", "uuid"),  # a STRING key never equals the snapshot's uuid.UUID values
        ("k {schema}.label", None),  # a domain over text: text's =
        ("k {schema}.mood", None),  # an enum: its labels
        ("k text", None),
        ("k numeric(10, 2)", None),
    ],
)
def test_a_full_cache_takes_only_key_types_whose_equality_is_python_s(
    postgres_dsn: str, column: str, refused: str | None
) -> None:
    """A case-insensitive collation, a domain over char(n) or citext, jsonb: FULL's snapshot
    compares with Python's ==, and missed rows that NONE and PARTIAL joined."""
    import uuid

    schema = f"fullkeys_{uuid.uuid4().hex[:8]}"
    _exec(
        postgres_dsn,
        f"CREATE SCHEMA {schema}",
        f"CREATE COLLATION {schema}.ci (provider = icu, locale = 'und-u-ks-level2', "
        "deterministic = false)",
        f"CREATE DOMAIN {schema}.code AS char(5)",
        f"CREATE DOMAIN {schema}.label AS text",
        f"CREATE TYPE {schema}.mood AS ENUM ('ok', 'sad')",
        f"CREATE TABLE {schema}.t ({column.format(schema=schema)}, v int)",
    )
    try:
        sources = (
            {"table": f"{schema}.t"},
            {"query": f"SELECT * FROM {schema}.t -- a query may end in a comment"},
        )
        for source in sources:
            pg = PostgresConnector(postgres_dsn, key_columns="k", **source)
            fields = [("k", "string" if "numeric" not in column else "decimal(10,2)")]
            pg.check_schema([*fields, ("v", "int")])
            if refused is None:
                pg.check_full_cache(fields)
                continue
            with pytest.raises(ConfigurationError, match=refused) as error:
                pg.check_full_cache(fields)
            assert error.value.option == "lookup.cache" and "NONE or PARTIAL" in str(error.value)
    finally:
        _exec(postgres_dsn, f"DROP SCHEMA {schema} CASCADE")
