"""Every kind of run-time lookup error names the lookup table, its target (secrets masked) and
the key (docs/semantics.md §2.11): the executor's task run in process against the real servers,
and once through Spark, where the failed job shows the library's message without its frames."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import asyncpg
import pyarrow as pa
import pytest
import redis
from pyspark.sql import SparkSession
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from asyncio_lookup.connectors import (
    HttpConnector,
    InMemoryConnector,
    PostgresConnector,
    RedisConnector,
)
from asyncio_lookup.errors import (
    CacheLoadError,
    ConfigurationError,
    DataFormatError,
    LookupFailedError,
    ResultTypeError,
)
from asyncio_lookup.lookup.hint_resolve import resolve_lookup
from asyncio_lookup.lookup.join import JoinSpec, JoinType, KeyBinding
from asyncio_lookup.lookup.options import LookupOptions
from asyncio_lookup.runtime.loop import process_loop
from asyncio_lookup.spark import LookupTable, lookup_join
from asyncio_lookup.spark.task import DimColumn, LookupJoinTask

pytestmark = pytest.mark.spark

NAME = "Errs"
COLUMNS = (DimColumn("id", "dim_id", pa.int32(), "INT"), DimColumn("name", "name", pa.string()))


def task(connector: Any, options: dict[str, str] | None = None, hint: str | None = None) -> Any:
    return LookupJoinTask(
        table_id=uuid.uuid4().hex,
        table_name=NAME,
        connector=connector,
        options=LookupOptions.from_dict(options or {}),
        hint=resolve_lookup(hint, NAME),
        spec=JoinSpec(JoinType.LEFT, (KeyBinding("id", left_column="cid"),)),
        dim_columns=COLUMNS,
    )


def probe(*chunks: list[int]) -> Iterator[pa.RecordBatch]:
    return iter([pa.RecordBatch.from_pydict({"cid": pa.array(c, pa.int32())}) for c in chunks])


def failure(joined: Iterator[Any]) -> BaseException:
    with pytest.raises(Exception) as raised:
        list(joined)
    return raised.value


def run(coro: Any) -> Any:
    return asyncio.new_event_loop().run_until_complete(coro)


@pytest.fixture
def pg_table(postgres_dsn: str) -> Iterator[str]:
    name = f"errs_{uuid.uuid4().hex[:10]}"

    async def sql(statement: str) -> None:
        conn = await asyncpg.connect(postgres_dsn)
        await conn.execute(statement)
        await conn.close()

    run(sql(f'CREATE TABLE "{name}" (id int PRIMARY KEY, name text)'))
    run(sql(f"INSERT INTO \"{name}\" SELECT g, 'n' || g FROM generate_series(1, 20) g"))
    yield name
    run(sql(f'DROP TABLE IF EXISTS "{name}"'))


def pg_dsn(postgres_dsn: str) -> str:
    """The test DSN with a password (trust auth ignores it): errors must mask it."""
    return postgres_dsn.replace("postgres@", "postgres:s3cret@")


@pytest.mark.parametrize(
    ("where", "said"),
    [
        ("/no_such_database_errs", "InvalidCatalogNameError"),
        ("/test?sslmode=sometimes", "sslmode"),
    ],
)
def test_a_target_the_driver_cannot_read_is_a_configuration_error(
    postgres_dsn: str, where: str, said: str
) -> None:
    """asyncpg's own error came out raw, 19 frames deep, naming no table or option."""
    dsn = pg_dsn(postgres_dsn).rsplit("/", 1)[0] + where
    schema = StructType([StructField("id", IntegerType()), StructField("name", StringType())])
    table = LookupTable(NAME, schema, PostgresConnector(dsn, "t", "id"))
    with pytest.raises(ConfigurationError) as raised:
        table.check_target()
    assert raised.value.option == "verify_target" and f"lookup table {NAME!r}" in str(raised.value)
    assert said in str(raised.value) and "s3cret" not in str(raised.value)


def test_non_transient_connector_error(redis_url: str) -> None:
    prefix = f"errs:{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redis_url)
    client.set(f"{prefix}:5", "not json")
    try:
        error = failure(task(RedisConnector(redis_url, prefix + ":{id}"))(probe([5])))
    finally:
        client.delete(f"{prefix}:5")
        client.close()
    assert isinstance(error, DataFormatError)
    assert str(error).startswith(f"lookup table 'Errs' (Redis {redis_url}, keys '{prefix}:{{id}}'")
    assert "key (5,): " in str(error)


def test_exhausted_transient_retries() -> None:
    connector = HttpConnector("http://user:s3cret@127.0.0.1:1/customers/{id}")
    options = {"lookup.max-retries": "1", "lookup.max-retry-backoff": "10ms"}
    error = failure(task(connector, options)(probe([7])))
    assert isinstance(error, LookupFailedError)
    message = str(error)
    assert message.startswith(
        "lookup table 'Errs' (HTTP http://127.0.0.1:1/customers/{id}), key (7,): "
        "failed after 2 attempt(s)"
    )
    assert "s3cret" not in message


def test_timeout() -> None:
    slow = InMemoryConnector([{"id": 1, "name": "a"}], "id", latency=0.5)
    error = failure(task(slow, hint="LOOKUP('table'='Errs', 'timeout'='50ms')")(probe([1])))
    # the timed-out row's connector call runs on in the process's loop: let it end
    process_loop().run_until_complete(asyncio.sleep(1.0))
    assert isinstance(error, TimeoutError)
    assert "lookup table 'Errs' (in-memory rows (1)), key (1,): did not finish within 50 ms" in (
        str(error)
    )


def test_missing_relation_mid_job(postgres_dsn: str, pg_table: str) -> None:
    # Sync mode: no lookup is in flight while the task is suspended at its first batch (an
    # in-flight query would hold the lock the DROP waits for).
    connector = PostgresConnector(pg_dsn(postgres_dsn), pg_table, "id")
    joined = task(connector, hint="LOOKUP('table'='Errs', 'async'='false')")(probe([1], [2]))
    assert next(joined).num_rows == 1  # the chain is open, the table is there
    run(_drop(postgres_dsn, pg_table))
    error = failure(joined)
    assert isinstance(error, LookupFailedError)
    message = str(error)
    assert message.startswith(
        f"lookup table 'Errs' (PostgreSQL postgresql://postgres:***@127.0.0.1:5432/test, "
        f"table {pg_table}), key (2,): "
    ), message
    assert f'relation "{pg_table}" does not exist' in message
    assert "s3cret" not in message


async def _drop(dsn: str, table: str) -> None:
    conn = await asyncpg.connect(dsn)
    await conn.execute("SET lock_timeout = '10s'")  # never hang the suite on a held lock
    await conn.execute(f'DROP TABLE "{table}"')
    await conn.close()


def test_missing_relation_at_open(postgres_dsn: str) -> None:
    connector = PostgresConnector(pg_dsn(postgres_dsn), "no_such_errs_table", "id")
    error = failure(task(connector)(probe([1])))
    assert isinstance(error, LookupFailedError)
    assert str(error).startswith("lookup table 'Errs' (PostgreSQL postgresql://postgres:***@")
    assert 'UndefinedTableError: relation "no_such_errs_table" does not exist' in str(error)


def test_bad_value_type() -> None:
    error = failure(task(InMemoryConnector([{"id": 2, "name": 7}], "id"))(probe([2])))
    assert isinstance(error, ResultTypeError)
    assert str(error).startswith(
        "lookup table 'Errs' (in-memory rows (1)), key (2,): column 'name' returned int value 7"
    )


def test_full_cache_load_failure(postgres_dsn: str) -> None:
    connector = PostgresConnector(pg_dsn(postgres_dsn), "no_such_errs_table", "id")
    options = {"lookup.cache": "FULL", "lookup.full-cache.periodic-reload.interval": "1h"}
    error = failure(task(connector, options)(probe([1])))
    assert isinstance(error, CacheLoadError)
    message = str(error)
    assert message.startswith("lookup table 'Errs' (PostgreSQL postgresql://postgres:***@")
    assert "no_such_errs_table" in message and "s3cret" not in message


def test_a_failed_job_shows_the_message_without_library_frames(
    spark: SparkSession, postgres_dsn: str
) -> None:
    connector = PostgresConnector(pg_dsn(postgres_dsn), "no_such_errs_table", "id")
    table = LookupTable(NAME, "id INT, name STRING", connector, verify_target=False)
    df = spark.createDataFrame([(1,), (2,)], "cid INT")
    with pytest.raises(Exception) as raised:
        lookup_join(df, table, on=[("cid", "id")]).collect()
    message = str(raised.value)
    assert (
        "LookupFailedError: lookup table 'Errs' (PostgreSQL postgresql://postgres:***@" in message
    )
    assert message.count('relation "no_such_errs_table" does not exist') == 1, message
    assert "asyncio_lookup/lookup/" not in message and "asyncpg/" not in message, message
