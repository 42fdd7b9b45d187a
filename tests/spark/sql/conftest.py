"""The tables of Apache Flink's lookup-join tests, on the in-memory connector and on PostgreSQL.

Flink's ``LookupJoinITCase`` / ``AsyncLookupJoinITCase`` (flink-table-planner,
``runtime/stream/sql``) join a ``src`` table to ``user_table`` and friends through its
``'connector' = 'values'`` test source. Here ``'connector' = 'values'`` is a test connector over
the same rows (an :class:`InMemoryConnector`, plus Flink's ``'start-lookup-threshold'``), and the
PostgreSQL variant puts the same rows in tables behind ``'connector' = 'jdbc'``. Every ported
case runs on both and compares with the rows Flink's test expects.

One LookupSQL per (connector, cache) holds the tables; they are made once per module.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark.sql import SparkSession

from asyncio_lookup.connectors import InMemoryConnector, register_connector
from asyncio_lookup.lookup.functions import AsyncLookupFunction, Key, Row
from asyncio_lookup.spark import LookupSQL

LONG_MAX = 9223372036854775807

# LookupJoinITCase's data, verbatim: src (id BIGINT, len INT, content STRING) and the dim rows
# (age INT, id BIGINT, name STRING).
DATA = [(1, 12, "Julian"), (2, 15, "Hello"), (3, 15, "Fabian"), (8, 11, "Hello world"),
        (9, 12, "Hello world!")]  # fmt: skip
DATA_WITH_NULL = [(None, 15, "Hello"), (3, 15, "Fabian"), (None, 11, "Hello world"),
                  (9, 12, "Hello world!")]  # fmt: skip
USER_DATA = [(11, 1, "Julian"), (22, 2, "Jark"), (33, 3, "Fabian"), (11, 4, "Hello world"),
             (11, 5, "Hello world")]  # fmt: skip
USER_DATA_WITH_NULL = [(11, 1, "Julian"), (22, None, "Hello"), (33, 3, "Fabian"),
                       (44, None, "Hello world")]  # fmt: skip
USER_COLUMNS = ("age", "id", "name")
SRC_COLUMNS = ("id", "len", "content")

#: TestValuesTableFactory.registerData: data-id -> rows (as dicts of the dim columns)
VALUES: dict[str, list[dict[str, Any]]] = {}

# LookupJoinITCase.getCacheOptions, per cache type (FULL: a periodic reload every Long.MaxValue ms)
CACHES = {
    "NONE": "",
    "PARTIAL": f"'lookup.cache' = 'PARTIAL', 'lookup.partial-cache.max-rows' = '{LONG_MAX}',",
    "FULL": "'lookup.cache' = 'FULL', 'lookup.full-cache.reload-strategy' = 'PERIODIC', "
    f"'lookup.full-cache.periodic-reload.interval' = '{LONG_MAX}',",
}


def register_data(rows: Sequence[tuple[Any, ...]], columns: Sequence[str] = USER_COLUMNS) -> str:
    data_id = uuid.uuid4().hex[:8]
    VALUES[data_id] = [dict(zip(columns, row, strict=True)) for row in rows]
    return data_id


class _Threshold(AsyncLookupFunction):
    """Flink's 'start-lookup-threshold': a key's first ``threshold - 1`` lookups find nothing."""

    def __init__(self, inner: AsyncLookupFunction, threshold: int) -> None:
        self.inner, self.threshold = inner, threshold
        self.counts: dict[Key, int] = {}

    async def open(self) -> None:
        await self.inner.open()

    async def async_lookup(self, key: Key) -> Collection[Row]:
        self.counts[key] = self.counts.get(key, 0) + 1
        if self.counts[key] < self.threshold:
            return []
        return await self.inner.async_lookup(key)

    async def close(self) -> None:
        await self.inner.close()


class ValuesConnector(InMemoryConnector):
    """Flink's ``'connector' = 'values'`` test source, for lookups."""

    def __init__(self, rows: Any, key_columns: Sequence[str], threshold: int = -1) -> None:
        super().__init__(rows, key_columns)
        self.threshold = threshold

    def async_lookup_function(self) -> AsyncLookupFunction:
        inner = super().async_lookup_function()
        return inner if self.threshold <= 0 else _Threshold(inner, self.threshold)


def values(
    data_id: str = "",
    key_columns: tuple[str, ...] = (),
    columns: tuple[str, ...] = (),
    start_lookup_threshold: int = -1,
    latest_per_key: str = "",
) -> ValuesConnector:
    """``'data-id'``, ``'start-lookup-threshold'`` as in Flink; ``'latest-per-key'`` (a column):
    keep the last row of each value, as Flink's values source does for a declared primary key."""
    rows = [{c: row.get(c) for c in columns} for row in VALUES[data_id]]
    if latest_per_key:
        rows = list({row[latest_per_key]: row for row in rows}.values())
    return ValuesConnector(rows, key_columns or columns[:1], start_lookup_threshold)


register_connector("values", values, replace=True)


def user_ddl(
    name: str, connector: str, cache: str, extra_columns: str = "", extra: str = ""
) -> str:
    """LookupJoinITCase.createLookupTable's DDL; ``connector``: the WITH options that say where
    the rows are."""
    return f"""CREATE TABLE {name} (
  `age` INT,
  `id` BIGINT,
  `name` STRING{extra_columns}
) WITH (
  {CACHES[cache]}
  {extra}
  {connector}
)"""


class FlinkTables:
    """The dim tables of one (connector, cache) variant in one LookupSQL."""

    def __init__(self, spark: SparkSession, kind: str, cache: str, pg: Callable[..., str]) -> None:
        self.spark, self.kind, self.cache, self.pg = spark, kind, cache, pg
        self.sql = LookupSQL(spark)
        self.create("user_table", USER_DATA)
        self.create("nullable_user_table", USER_DATA_WITH_NULL)
        self.create(
            "userTableWithComputedColumn", USER_DATA, columns=",\n  `nominal_age` as age + 1"
        )

    def where(self, rows: Sequence[tuple[Any, ...]], **options: str) -> str:
        """The WITH options pointing at ``rows``: a data-id, or a new PostgreSQL table."""
        if self.kind == "memory":
            more = "".join(f", '{k}' = '{v}'" for k, v in options.items())
            return f"'connector' = 'values', 'data-id' = '{register_data(rows)}'{more}"
        return (
            "'connector' = 'jdbc', 'url' = 'jdbc:postgresql://127.0.0.1:5432/test', "
            f"'table-name' = '{self.pg(rows)}', 'username' = 'postgres'"
        )

    def create(
        self, name: str, rows: Sequence[tuple[Any, ...]], columns: str = "", **options: str
    ) -> None:
        self.sql.sql(user_ddl(name, self.where(rows, **options), self.cache, columns))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The ported Flink cases and this package's tests run on the classic session only
    (LookupSQL on Connect: tests/spark/test_sql*.py): their Connect variants are deselected."""
    here = Path(__file__).parent
    chosen, dropped = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        connect = callspec is not None and callspec.params.get("spark") == "connect"
        (dropped if connect and item.path.is_relative_to(here) else chosen).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = chosen


@pytest.fixture(scope="module")
def pg_tables(postgres_dsn: str) -> Iterator[Callable[..., str]]:
    """Creates PostgreSQL tables of dim rows (age INT, id BIGINT, name TEXT); drops them after."""
    created: list[str] = []

    def create(rows: Sequence[tuple[Any, ...]]) -> str:
        name = f"flink_user_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE TABLE "{name}" (age INT, id BIGINT, name TEXT)')
            with conn.cursor() as cursor:
                cursor.executemany(f'INSERT INTO "{name}" VALUES (%s, %s, %s)', list(rows))
        created.append(name)
        return name

    yield create
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        for name in created:
            conn.execute(f'DROP TABLE IF EXISTS "{name}"')


@pytest.fixture(scope="module")
def flink(spark: SparkSession, pg_tables: Callable[..., str]) -> Callable[[str, str], FlinkTables]:
    """``flink(kind, cache)``: that variant's tables (made once per module), and the probe views
    ``src`` and ``nullable_src`` (LookupJoinITCase.createScanTable: ``proctime AS PROCTIME()``)."""
    for view, rows in (("src", DATA), ("nullable_src", DATA_WITH_NULL)):
        spark.createDataFrame(list(rows), "id BIGINT, len INT, content STRING").selectExpr(
            "*", "current_timestamp() AS proctime"
        ).repartition(2).createOrReplaceTempView(view)
    made: dict[tuple[str, str], FlinkTables] = {}

    def get(kind: str, cache: str = "NONE") -> FlinkTables:
        if (kind, cache) not in made:
            made[(kind, cache)] = FlinkTables(spark, kind, cache, pg_tables)
        return made[(kind, cache)]

    return get


def result(df: Any) -> list[str]:
    """Rows as Flink's tests write them: ``"1,12,Julian,Julian"``, NULL as ``null``."""
    return sorted(",".join("null" if v is None else str(v) for v in row) for row in df.collect())
