"""A dim value that does not fit its declared type fails the job naming the table, the key,
the column, the value and the type, for every connector (never a truncated value); lossless
widenings pass (docs/semantics.md §2.9)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from decimal import Decimal

import asyncpg
import pytest
import redis
from pyspark.sql import DataFrame, SparkSession

from asyncio_lookup.connectors import HttpConnector, PostgresConnector, RedisConnector
from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.spark import LookupTable, lookup_join
from tests.spark.helpers import DimService

pytestmark = pytest.mark.spark

PG_ROWS = [
    # id, score (double precision), amount (numeric(12,2)), big (bigint), small (int)
    (1, 10.0, Decimal("10.00"), 7, 1),
    (2, 999.75, Decimal("999.75"), 8, 2),
    (3, 3.0, Decimal("3.00"), 5_000_000_000, 3),
]


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.new_event_loop().run_until_complete(coro)


@pytest.fixture(scope="module")
def pg_scores(postgres_dsn: str) -> Iterator[str]:
    name = f"exact_{uuid.uuid4().hex[:10]}"

    async def setup() -> None:
        conn = await asyncpg.connect(postgres_dsn)
        await conn.execute(
            f'CREATE TABLE "{name}" (id int PRIMARY KEY, score double precision, '
            "amount numeric(12,2), big bigint, small int)"
        )
        await conn.executemany(f'INSERT INTO "{name}" VALUES ($1, $2, $3, $4, $5)', PG_ROWS)
        await conn.close()

    async def drop() -> None:
        conn = await asyncpg.connect(postgres_dsn)
        await conn.execute(f'DROP TABLE IF EXISTS "{name}"')
        await conn.close()

    run(setup())
    yield name
    run(drop())


@pytest.fixture
def keys(spark: SparkSession) -> DataFrame:
    return spark.createDataFrame([(1,), (2,), (3,)], "k INT")


def test_postgres_type_mismatches_are_found_on_the_driver(
    spark: SparkSession, keys: DataFrame, postgres_dsn: str, pg_scores: str
) -> None:
    from tests.spark.conftest import no_spark_job

    cases = [
        ("id INT, score INT", ["id", "score"], "score"),
        ("id INT, amount DOUBLE", ["id", "amount"], "amount"),
        ("id INT, amount BIGINT", ["id", "amount"], "amount"),
    ]
    for schema, columns, column in cases:
        connector = PostgresConnector(postgres_dsn, pg_scores, "id", columns=columns)
        table = LookupTable("Checked", schema, connector)
        with no_spark_job(spark), pytest.raises(ConfigurationError) as error:
            lookup_join(keys, table, on=[("k", "id")])
        message = str(error.value)
        assert "lookup table 'Checked'" in message
        assert f"column '{column}'" in message or f"{pg_scores}.{column}" in message, message
    missing = PostgresConnector(postgres_dsn, "no_such_table_x", "id", columns=["id", "score"])
    with no_spark_job(spark), pytest.raises(ConfigurationError) as error:
        lookup_join(keys, LookupTable("Missing", "id INT, score DOUBLE", missing), on=[("k", "id")])
    assert "lookup table 'Missing'" in str(error.value)
    assert "no_such_table_x" in str(error.value)
    unreachable = PostgresConnector("postgresql://u:secret@127.0.0.1:1/db", "t", "id")
    with no_spark_job(spark), pytest.raises(ConfigurationError) as error:
        no_retry = {"lookup.max-retries": "0"}
        lookup_join(keys, LookupTable("Far", "id INT", unreachable, no_retry), on=[("k", "id")])
    assert "verify_target=False" in str(error.value)
    assert "secret" not in str(error.value)
    with no_spark_job(spark):
        lookup_join(
            keys, LookupTable("Far", "id INT", unreachable, verify_target=False), on=[("k", "id")]
        )


def join_error(df: DataFrame, table: LookupTable) -> str:
    with pytest.raises(Exception) as error:
        lookup_join(df, table, on=[("k", "id")]).collect()
    return str(error.value)


def test_postgres_double_into_int_fails(keys: DataFrame, postgres_dsn: str, pg_scores: str) -> None:
    connector = PostgresConnector(postgres_dsn, pg_scores, "id", columns=["id", "score"])
    message = join_error(
        keys, LookupTable("Scores", "id INT, score INT", connector, verify_target=False)
    )
    assert "ResultTypeError" in message
    assert ("lookup table 'Scores' (PostgreSQL ") in message
    assert (
        "key (2,): column 'score' returned float value 999.75, "
        "which does not fit the declared type INT"
    ) in message


def test_postgres_numeric_into_bigint_fails(
    keys: DataFrame, postgres_dsn: str, pg_scores: str
) -> None:
    connector = PostgresConnector(postgres_dsn, pg_scores, "id", columns=["id", "amount"])
    message = join_error(
        keys, LookupTable("Amounts", "id INT, amount BIGINT", connector, verify_target=False)
    )
    assert ("lookup table 'Amounts' (PostgreSQL ") in message
    assert (
        "key (2,): column 'amount' returned Decimal value "
        "Decimal('999.75'), which does not fit the declared type BIGINT"
    ) in message


def test_postgres_out_of_range_names_the_offending_value_and_key(
    keys: DataFrame, postgres_dsn: str, pg_scores: str
) -> None:
    connector = PostgresConnector(postgres_dsn, pg_scores, "id", columns=["id", "big"])
    message = join_error(
        keys, LookupTable("Bigs", "id INT, big INT", connector, verify_target=False)
    )
    assert ("lookup table 'Bigs' (PostgreSQL ") in message
    assert (
        "key (3,): column 'big' returned int value 5000000000, "
        "which does not fit the declared type INT"
    ) in message
    assert "not in range" in message


def test_postgres_lossless_widenings_pass(
    keys: DataFrame, postgres_dsn: str, pg_scores: str
) -> None:
    connector = PostgresConnector(
        postgres_dsn, pg_scores, "id", columns=["id", "small", "amount", "score"]
    )
    table = LookupTable(
        "Wide", "id INT, small BIGINT, amount DECIMAL(14,4), score DOUBLE", connector
    )
    joined = lookup_join(keys, table, on=[("k", "id")], columns=["small", "amount", "score"])
    got = sorted(tuple(r) for r in joined.collect())
    assert got == [
        (1, 1, Decimal("10.0000"), 10.0),
        (2, 2, Decimal("999.7500"), 999.75),
        (3, 3, Decimal("3.0000"), 3.0),
    ]
    small_as_double = LookupTable(
        "SmallAsDouble",
        "id INT, small DOUBLE",
        PostgresConnector(postgres_dsn, pg_scores, "id", columns=["id", "small"]),
    )
    joined = lookup_join(keys, small_as_double, on=[("k", "id")], columns=["small"])
    got = sorted(tuple(r) for r in joined.collect())
    assert got == [(1, 1.0), (2, 2.0), (3, 3.0)]


@pytest.fixture
def redis_scores(redis_url: str) -> Iterator[str]:
    prefix = f"exact:{uuid.uuid4().hex[:10]}:"
    client = redis.Redis.from_url(redis_url)
    client.set(f"{prefix}1", json.dumps({"id": 1, "score": 1, "ratio": 2}))
    client.set(f"{prefix}2", json.dumps({"id": 2, "score": 0.75, "ratio": 0.75}))
    yield prefix
    client.delete(f"{prefix}1", f"{prefix}2")
    client.close()


def test_redis_json_fraction_into_int_fails(
    keys: DataFrame, redis_url: str, redis_scores: str
) -> None:
    connector = RedisConnector(redis_url, redis_scores + "{id}")
    message = join_error(keys, LookupTable("RedisScores", "id INT, score INT", connector))
    assert ("lookup table 'RedisScores' (Redis ") in message
    assert (
        "key (2,): column 'score' returned float value 0.75, "
        "which does not fit the declared type INT"
    ) in message
    widened = LookupTable("RedisRatios", "id INT, ratio DOUBLE, score DECIMAL(5,2)", connector)
    joined = lookup_join(keys, widened, on=[("k", "id")], columns=["ratio", "score"])
    got = sorted(tuple(r) for r in joined.collect())
    assert got == [(1, 2.0, Decimal("1.00")), (2, 0.75, Decimal("0.75"))]


def test_http_json_fraction_into_int_fails(spark: SparkSession, dim_service: DimService) -> None:
    dim_service.add(7001, [{"id": 7001, "score": 4}])
    dim_service.add(7002, [{"id": 7002, "score": 0.75}])
    df = spark.createDataFrame([(7001,), (7002,)], "k INT")
    connector = HttpConnector(f"{dim_service.url}/customers/{{id}}")
    message = join_error(df, LookupTable("HttpScores", "id INT, score INT", connector))
    assert ("lookup table 'HttpScores' (HTTP ") in message
    assert (
        "key (7002,): column 'score' returned float value 0.75, "
        "which does not fit the declared type INT"
    ) in message
    widened = LookupTable("HttpScoresWide", "id INT, score DOUBLE", connector)
    got = sorted(tuple(r) for r in lookup_join(df, widened, on=[("k", "id")]).collect())
    assert got == [(7001, 7001, 4.0), (7002, 7002, 0.75)]


def test_async_map_output_that_does_not_fit_fails(spark: SparkSession) -> None:
    from asyncio_lookup.spark import async_map

    async def halve(row: dict[str, int]) -> list[dict[str, float]]:
        return [{"k": row["k"], "half": row["k"] / 2}]

    df = spark.createDataFrame([(2,), (3,)], "k INT")
    assert sorted(async_map(df, halve, "k INT, half DOUBLE", timeout=10).collect()) == [
        (2, 1.0),
        (3, 1.5),
    ]
    with pytest.raises(Exception) as error:
        async_map(df, halve, "k INT, half INT", timeout=10).collect()
    assert (
        "async_map: output column 'half' got float value 1.5, which does not fit the "
        "schema's type int32"
    ) in str(error.value)
