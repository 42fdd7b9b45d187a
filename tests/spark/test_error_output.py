"""Error output end to end (docs/semantics.md §2.10): bad keys against a real HTTP service and
the machine's Redis, kept and marked with ``on_error='keep'``, failing the job without it."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from aiohttp import web
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from asyncio_lookup.connectors import HttpConnector, InMemoryConnector, RedisConnector
from asyncio_lookup.errors import ConfigurationError, HintError
from asyncio_lookup.runtime import AsyncFunction, RetryPredicates, RetryStrategies
from asyncio_lookup.spark import (
    LookupTable,
    async_map,
    async_map_metrics,
    lookup_join,
    split_failed,
)
from tests.services import BackgroundService

pytestmark = pytest.mark.spark

REDIS_URL = "redis://127.0.0.1:6379/0"
SERVER_ERROR, MALFORMED, NOT_JSON, MISSING = 13, 17, 31, 99
CUSTOMERS = {i: {"id": i, "name": f"c{i}", "tier": ["gold", "basic"][i % 2]} for i in range(1, 31)}
PRODUCTS = {p: {"sku": p, "title": f"p{p}", "price": p * 1.5} for p in range(1, 31)}
# order_id, customer_id, sku: every bad key several times, a miss, a NULL key
ORDERS = [
    (n, [SERVER_ERROR, MALFORMED, MISSING, None][n % 4] if n % 5 == 0 else 1 + n % 30, 1 + n % 30)
    for n in range(200)
]
ORDERS += [(200 + n, 1 + n % 30, NOT_JSON) for n in range(6)]


class CustomerService(BackgroundService):
    """``GET /customers/{id}``: the customer's row; 500 for one key, a malformed JSON body for
    another, 404 for unknown keys. Its own loop in a thread, on 127.0.0.1."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[int] = Counter()

    async def customer(self, request: web.Request) -> web.Response:
        key = int(request.match_info["id"])
        self.calls[key] += 1
        if key == SERVER_ERROR:
            return web.Response(status=500, text="internal error: shard 3 is corrupt")
        if key == MALFORMED:
            return web.Response(
                status=200, text='[{"id": 17, "name": ', content_type="application/json"
            )
        if key not in CUSTOMERS:
            return web.json_response(None, status=404)
        return web.json_response([CUSTOMERS[key]])

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/customers/{id}", self.customer)


@pytest.fixture(scope="module")
def service() -> Iterator[CustomerService]:
    server = CustomerService()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def products_prefix() -> Iterator[str]:
    prefix = f"eo:{uuid.uuid4().hex[:10]}:"
    client = redis.Redis.from_url(REDIS_URL)
    for sku, row in PRODUCTS.items():
        client.set(f"{prefix}{sku}", json.dumps(row))
    client.set(f"{prefix}{NOT_JSON}", "price=46.5;title=p31")  # not JSON
    yield prefix
    client.delete(*client.keys(prefix + "*"))
    client.close()


def customers(service: CustomerService) -> LookupTable:
    return LookupTable(
        "Customers",
        "id INT, name STRING, tier STRING",
        HttpConnector(f"http://127.0.0.1:{service.port}/customers/{{id}}"),
        # transient errors are retried; these are not: a short backoff keeps the test quick
        {"lookup.max-retry-backoff": "50ms"},
    )


def products(prefix: str) -> LookupTable:
    return LookupTable(
        "Products",
        "sku INT, title STRING, price DOUBLE",
        RedisConnector(REDIS_URL, prefix + "{sku}"),
    )


def orders(spark: SparkSession) -> DataFrame:
    return spark.createDataFrame(ORDERS, "order_id INT, customer_id INT, sku INT").repartition(
        3, "order_id"
    )


def enrich(
    spark: SparkSession, table_c: LookupTable, table_p: LookupTable, keep: bool
) -> DataFrame:
    joined = lookup_join(
        orders(spark),
        table_c,
        on=[("customer_id", "id")],
        how="left",
        columns=["name", "tier"],
        hints="LOOKUP('table'='Customers', 'output-mode'='allow_unordered')",
        **({"on_error": "keep", "error_column": "customer_error"} if keep else {}),
    )
    return lookup_join(
        joined,
        table_p,
        on=[("sku", "sku")],
        how="inner",
        columns=["title", "price"],
        # the hash lookup join too: its routing column is dropped from failed rows as well
        hints="LOOKUP('table'='Products', 'on-error'='keep', 'shuffle'='true')" if keep else None,
        skew=False,
        **({"error_column": "product_error", "shuffle_partitions": 2} if keep else {}),
    )


def test_bad_keys_become_failed_rows_and_good_rows_match_a_plain_join(
    spark: SparkSession, service: CustomerService, products_prefix: str
) -> None:
    table_c, table_p = customers(service), products(products_prefix)
    out = enrich(spark, table_c, table_p, keep=True)
    assert out.schema["customer_error"].dataType.simpleString() == (
        "struct<table:string,key:string,error_class:string,message:string,attempts:int>"
    )
    rows = out.collect()
    by_order = Counter(r.order_id for r in rows)
    assert all(n == 1 for n in by_order.values()), "a row was emitted twice"
    assert set(by_order) == {o for o, _, _ in ORDERS}  # LEFT then INNER, every sku exists

    # Good rows: exactly a plain Spark join of the same data without the bad keys.
    plain = (
        orders(spark)
        .where(~F.col("customer_id").isin(SERVER_ERROR, MALFORMED) | F.col("customer_id").isNull())
        .where(F.col("sku") != NOT_JSON)
        .join(
            spark.createDataFrame(list(CUSTOMERS.values()), "id INT, name STRING, tier STRING"),
            F.col("customer_id") == F.col("id"),
            "left",
        )
        .join(
            spark.createDataFrame(list(PRODUCTS.values()), "sku INT, title STRING, price DOUBLE"),
            "sku",
        )
        .select(*COLUMNS)
    )
    good = [r for r in rows if r.customer_error is None and r.product_error is None]
    assert sorted(tuple(r[c] for c in COLUMNS) for r in good) == sorted(
        tuple(r) for r in plain.collect()
    )

    # Each bad row once, with its reason.
    failed_c = {r.order_id: r for r in rows if r.customer_error is not None}
    expected_c = {o: c for o, c, _ in ORDERS if c in (SERVER_ERROR, MALFORMED)}
    assert set(failed_c) == set(expected_c)
    for order_id, row in failed_c.items():
        error = row.customer_error
        assert row.name is None and row.tier is None
        assert error.table == "Customers" and error.attempts == 1
        assert json.loads(error.key) == [expected_c[order_id]]
        if expected_c[order_id] == SERVER_ERROR:
            assert error.error_class == "HttpStatusError"
            assert "500" in error.message
        else:
            assert error.error_class == "DataFormatError"
            assert "not JSON" in error.message
        assert row.title is not None  # the next join went on with the row
    failed_p = {r.order_id: r for r in rows if r.product_error is not None}
    assert set(failed_p) == {o for o, _, s in ORDERS if s == NOT_JSON}
    for row in failed_p.values():
        error = row.product_error
        assert (error.table, error.key, error.error_class) == (
            "Products",
            f"[{NOT_JSON}]",
            "DataFormatError",
        )
        assert row.title is None and row.price is None and row.name is not None

    # Metrics count the failed rows, as ints.
    assert table_c.metrics()["numFailedRows"] == len(expected_c)
    assert table_p.metrics()["numFailedRows"] == len(failed_p)
    assert isinstance(table_c.metrics()["numFailedRows"], int)


COLUMNS = ["order_id", "customer_id", "sku", "name", "tier", "title", "price"]


def test_without_error_output_the_job_fails_as_before(
    spark: SparkSession, service: CustomerService, products_prefix: str
) -> None:
    out = enrich(spark, customers(service), products(products_prefix), keep=False)
    with pytest.raises(Exception) as error:
        out.collect()
    message = str(error.value)
    assert "HttpStatusError" in message or "DataFormatError" in message


def test_split_failed_separates_good_and_failed_rows(
    spark: SparkSession, service: CustomerService, tmp_path: Path
) -> None:
    df = spark.createDataFrame([(i,) for i in (1, 2, SERVER_ERROR, 3, MISSING)], "cid INT")
    out = lookup_join(df, customers(service), on=[("cid", "id")], how="left", on_error="keep")
    # written once, then split: the lookups run once
    path = str(tmp_path / "enriched")
    out.write.parquet(path)
    good, failed = split_failed(spark.read.parquet(path))
    assert "lookup_error" not in good.columns
    assert sorted((r.cid, r.name) for r in good.collect()) == [
        (1, "c1"),
        (2, "c2"),
        (3, "c3"),
        (MISSING, None),
    ]
    (bad,) = failed.collect()
    assert bad.cid == SERVER_ERROR and bad.lookup_error.error_class == "HttpStatusError"
    with pytest.raises(ConfigurationError, match=r"'lookup_error'.*no such struct column"):
        split_failed(df)


# ------------------------------------------------------------------ values that do not fit


def test_a_value_that_does_not_fit_its_type_is_a_failed_row(spark: SparkSession) -> None:
    rows = [{"id": i, "score": i * 10} for i in range(1, 9)]
    rows[2] = {"id": 3, "score": 7.5}  # a fraction into INT
    rows.append({"id": 5, "score": 51})  # key 5: two rows, the second fits
    rows.append({"id": 6, "score": 6e12})  # key 6: two rows, the second out of range
    scores = LookupTable("Scores", "id INT, score INT", InMemoryConnector(rows, key_columns=["id"]))
    df = spark.createDataFrame([(i, i) for i in range(1, 10)], "n INT, id_ INT")
    for mode in ("true", "false"):
        out = lookup_join(
            df,
            scores,
            on=[("id_", "id")],
            how="left",
            on_error="keep",
            hints=f"LOOKUP('table'='Scores', 'async'='{mode}')",
        ).collect()
        got = sorted((r.n, r.score, r.lookup_error is not None) for r in out)
        assert got == [
            (1, 10, False),
            (2, 20, False),
            (3, None, True),
            (4, 40, False),
            (5, 50, False),
            (5, 51, False),
            (6, None, True),  # once, though two rows were looked up
            (7, 70, False),
            (8, 80, False),
            (9, None, False),  # a miss, not a failure
        ]
        errors = {r.n: r.lookup_error for r in out if r.lookup_error is not None}
        assert errors[3].error_class == "ResultTypeError" and "7.5" in errors[3].message
        assert errors[6].key == "[6]" and "INT" in errors[6].message
    # each failed row under its cause (they were in none: an empty summary beside them)
    assert scores.metrics()["numFailedRows"] == 4
    assert scores.metrics().causes["ResultTypeError"]["failures"] == 4


# ------------------------------------------------------------------ Spark task retries


class FailTaskOnce:
    """A left_condition that fails its task (not a row: it runs before the lookups) the
    first time it sees row 150, across processes (a marker file)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __call__(self, row: dict[str, Any]) -> bool:
        if row["order_id"] == 150:
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return True
            raise RuntimeError("the task fails once")
        return True


def test_a_retried_task_emits_each_row_once_failed_rows_included(
    spark: SparkSession, service: CustomerService, tmp_path: Path
) -> None:
    marker = str(tmp_path / "failed-once")
    table_c = customers(service)
    out = lookup_join(
        orders(spark).coalesce(1),
        table_c,
        on=[("customer_id", "id")],
        how="left",
        left_condition=FailTaskOnce(marker),
        on_error="keep",
    )
    rows = out.collect()
    assert Path(marker).exists(), "no task failed: the test would prove nothing"
    assert sorted(r.order_id for r in rows) == sorted(o for o, _, _ in ORDERS)
    failed = sorted(r.order_id for r in rows if r.lookup_error is not None)
    assert failed == sorted(o for o, c, _ in ORDERS if c in (SERVER_ERROR, MALFORMED))
    assert table_c.metrics()["numFailedRows"] == len(failed)  # the failed attempt not counted


# ------------------------------------------------------------------ async_map


class Enrich(AsyncFunction[dict[str, Any], dict[str, Any]]):
    """n % 10 == 3 raises, == 5 hangs (times out), == 7 returns a value that does not fit,
    == 9 returns a string instead of a dict; others return two rows."""

    async def async_invoke(self, row: dict[str, Any]) -> list[Any]:
        n = row["n"]
        if n % 10 == 3:
            raise ValueError(f"no score for {n}")
        if n % 10 == 5:
            await asyncio.sleep(3600)
        if n % 10 == 7:
            return [{"n": n, "score": 1}, {"n": n, "score": 2.5}]
        if n % 10 == 9:
            return ["oops"]
        return [{"n": n, "score": n}, {"n": n, "score": -n}]


def test_async_map_keeps_failed_rows(spark: SparkSession) -> None:
    df = spark.createDataFrame([(n,) for n in range(40)], "n INT").repartition(2)
    out = async_map(
        df,
        Enrich(),
        "n INT, score INT",
        timeout=1.0,
        capacity=8,
        output_mode="allow_unordered",
        retry_strategy=RetryStrategies.fixed_delay(
            2, 0.01, exception_predicate=RetryPredicates.exception_type(ValueError)
        ),
        metrics_id="error-output-map",
        on_error="keep",
    )
    rows = out.collect()
    good, bad = Counter(), {}
    for r in rows:
        if r.lookup_error is None:
            good[(r.n, r.score)] += 1
        else:
            assert r.n is None and r.score is None
            key = json.loads(r.lookup_error.key)
            assert key["n"] not in bad
            bad[key["n"]] = r.lookup_error
    ok = [n for n in range(40) if n % 10 not in (3, 5, 7, 9)]
    assert good == Counter([(n, n) for n in ok] + [(n, -n) for n in ok])
    assert sorted(bad) == [n for n in range(40) if n % 10 in (3, 5, 7, 9)]
    for n, error in bad.items():
        assert error.table == "error-output-map"
        kind, attempts = {3: ("ValueError", 3), 5: ("TimeoutError", 1)}.get(
            n % 10, ("ResultTypeError", 1)
        )
        assert (error.error_class, error.attempts) == (kind, attempts), (n, error)
    metrics = async_map_metrics("error-output-map")
    assert metrics["numFailedRows"] == len(bad) and isinstance(metrics["numFailedRows"], int)
    # every failed row under its cause: outputs that are no dict or do not fit counted too
    failures = {cause: entry.get("failures", 0) for cause, entry in metrics.causes.items()}
    assert failures == {"ValueError": 4, "TimeoutError": 4, "ResultTypeError": 8}, failures
    assert "ResultTypeError: 8 failures" in metrics.summary()


def test_async_map_with_not_null_columns_reports_its_metrics(spark: SparkSession) -> None:
    """The metrics trailer was NULL in every column: Spark failed every task reading it."""

    async def double(row: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"n": row["n"], "twice": 2 * row["n"], "label": f"n{row['n']}"}]

    df = spark.createDataFrame([(n,) for n in range(50)], "n INT").repartition(2)
    out = async_map(
        df,
        double,
        "n INT NOT NULL, twice INT, label STRING NOT NULL",
        timeout=5.0,
        metrics_id="not-null-map",
    )
    assert sorted((r.n, r.twice, r.label) for r in out.collect()) == [
        (n, 2 * n, f"n{n}") for n in range(50)
    ]
    assert async_map_metrics("not-null-map")["numCompleted"] == 50


# ------------------------------------------------------------------ validation


def test_arguments_are_checked_on_the_driver(
    spark: SparkSession, service: CustomerService, no_job: Any
) -> None:
    df = spark.createDataFrame([(1, "x")], "cid INT, lookup_error STRING")
    table = customers(service)
    with no_job():
        with pytest.raises(ConfigurationError, match=r"'skip' for 'on_error'.*'fail'.*'keep'"):
            lookup_join(df, table, on=[("cid", "id")], on_error="skip")
        with pytest.raises(ConfigurationError, match=r"'error_column'.*already has a column"):
            lookup_join(df, table, on=[("cid", "id")], on_error="keep")
        with pytest.raises(ConfigurationError, match=r"'error_column'.*already has a column"):
            lookup_join(df, table, on=[("cid", "id")], on_error="keep", error_column="NAME")
        with pytest.raises(ConfigurationError, match="the argument and the hint disagree"):
            lookup_join(
                df,
                table,
                on=[("cid", "id")],
                on_error="fail",
                hints="LOOKUP('table'='Customers', 'on-error'='keep')",
            )
        with pytest.raises(HintError, match=r"'maybe' for 'on-error'"):
            lookup_join(
                df, table, on=[("cid", "id")], hints={"table": "Customers", "on-error": "maybe"}
            )
        with pytest.raises(ConfigurationError, match="error_column"):
            lookup_join(df, table, on=[("cid", "id")], on_error="keep", error_column="")
        # no error column without the error output: the name is free then
        assert (
            "lookup_error" in lookup_join(df, table, on=[("cid", "id")], columns=["name"]).columns
        )
        fine = lookup_join(df, table, on=[("cid", "id")], on_error="KEEP", error_column="why")
        assert fine.columns[-1] == "why"
        # an error column named without the error output would do nothing
        with pytest.raises(ConfigurationError, match=r"'why' for 'error_column'.*would do"):
            lookup_join(df, table, on=[("cid", "id")], columns=["name"], error_column="why")
        with pytest.raises(ConfigurationError, match=r"'why' for 'error_column'.*would do"):
            lookup_join(df, table, on=[("cid", "id")], on_error="fail", error_column="why")
        hinted = lookup_join(
            df,
            table,
            on=[("cid", "id")],
            columns=["name"],
            hints="LOOKUP('table'='Customers', 'on-error'='keep')",
            error_column="why",
        )
        assert hinted.columns[-1] == "why"
        with pytest.raises(ConfigurationError, match=r"'why' for 'error_column'.*would do"):
            async_map(df, Enrich(), "n INT", timeout=1.0, error_column="why")
        with pytest.raises(ConfigurationError, match=r"'on_error'"):
            async_map(df, Enrich(), "n INT", timeout=1.0, on_error="ignore")
        with pytest.raises(ConfigurationError, match=r"'error_column'.*schema already has"):
            async_map(df, Enrich(), "n INT, lookup_error INT", timeout=1.0, on_error="keep")
        # a failed row has NULL in every schema column: NOT NULL ones failed the whole job
        with pytest.raises(ConfigurationError, match=r"\['n'\].*nullable columns") as info:
            async_map(df, Enrich(), "n INT NOT NULL, score INT", timeout=1.0, on_error="keep")
        assert info.value.option == "schema"


# ------------------------------------------------------------------ SQL


def test_sql_hint_on_error_keep_exposes_the_failure_as_a_dim_field(
    spark: SparkSession, service: CustomerService
) -> None:
    from asyncio_lookup.spark import LookupSQL

    sql = LookupSQL(spark)
    sql.sql(
        "CREATE TEMPORARY TABLE Customers (id INT, name STRING, tier STRING) WITH ("
        f"'connector' = 'http', 'url' = 'http://127.0.0.1:{service.port}/customers/{{id}}')"
    )
    orders_sql = [(n, c) for n, c in enumerate([1, SERVER_ERROR, 2, MALFORMED, MISSING, 3, 4])]
    spark.createDataFrame(orders_sql, "order_id INT, customer_id INT").withColumn(
        "proc_time", F.current_timestamp()
    ).createOrReplaceTempView("eo_orders")
    statement = """SELECT /*+ LOOKUP('table'='Customers', 'on-error'='keep') */
        o.order_id, c.name, c.lookup_error.error_class AS failure
    FROM eo_orders AS o
    JOIN Customers FOR SYSTEM_TIME AS OF o.proc_time AS c
      ON o.customer_id = c.id AND c.tier <> 'platinum'"""
    got = sorted(tuple(r) for r in sql.sql(statement).collect())
    assert got == [
        (0, "c1", None),
        (1, None, "HttpStatusError"),
        (2, "c2", None),
        (3, None, "DataFormatError"),
        (5, "c3", None),
        (6, "c4", None),
    ]
    assert sql.table("Customers").metrics()["numFailedRows"] == 2
    left = statement.replace("JOIN Customers", "LEFT JOIN Customers").replace(
        "o.order_id, c.name, c.lookup_error.error_class AS failure", "o.order_id, c.*"
    )
    rows = {r.order_id: r for r in sql.sql(left).collect()}
    assert rows[4].name is None and rows[4].lookup_error is None  # a miss
    assert rows[1].lookup_error.key == f"[{SERVER_ERROR}]" and rows[1].name is None
    with pytest.raises(Exception, match="lookup_error"):  # no such field without 'keep'
        sql.sql(statement.replace("'on-error'='keep'", "'on-error'='fail'"))
