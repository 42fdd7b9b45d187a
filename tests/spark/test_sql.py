"""LookupSQL end to end: the seeds' statements, verbatim, against the real PostgreSQL and a local
HTTP service, each compared row for row with plain Spark over the same data."""

from __future__ import annotations

import gc
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from pyspark.sql import DataFrame, SparkSession

from asyncio_lookup.spark import LookupSQL
from asyncio_lookup.spark import metrics as spark_metrics
from tests.spark.conftest import is_connect, no_spark_job
from tests.spark.helpers import DimService

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

# FLIP-234, "Use Case: Lookup Join Without Retry" / "With Retry", verbatim.
FLIP_234 = """SELECT o.order_id, o.total, c.country, c.zip
FROM Orders AS o
  JOIN Customers FOR SYSTEM_TIME AS OF o.proc_time AS c
    ON o.customer_id = c.id;"""
FLIP_234_RETRY = """SELECT /*+ LOOKUP('table'='Customers', 'retry-predicate'='lookup_miss', 'retry-strategy'='fixed_delay', 'fixed-delay'='10s','max-attempts'='3') */
	o.order_id, o.total, c.country, c.zip
FROM Orders AS o
  JOIN Customers FOR SYSTEM_TIME AS OF o.proc_time AS c
    ON o.customer_id = c.id;"""  # noqa: E501
# FLIP-204's SHUFFLE_HASH form, its ",,," filled in.
FLIP_204 = """SELECT /*+ SHUFFLE_HASH('Customers') */ o.order_id, o.total, c.country, c.zip
FROM Orders AS o
JOIN Customers FOR SYSTEM_TIME AS OF o.proc_time AS c
ON o.customer_id = c.id;"""
# The plain Spark join over the same rows (the dim rows as a temporary view).
PLAIN = """SELECT o.order_id, o.total, c.country, c.zip
FROM Orders AS o JOIN customers_plain AS c ON o.customer_id = c.id"""


def customers_ddl(table: str, extra: str = "") -> str:
    """FLIP-234's rejected-alternative DDL, 'url' at the local PostgreSQL, retry options removed
    (plus the user name: the server trusts 'postgres')."""
    return f"""CREATE TEMPORARY TABLE Customers (
  id INT,
  name STRING,
  country STRING,
  zip STRING
) WITH (
  'connector' = 'jdbc',
  'url' = 'jdbc:postgresql://127.0.0.1:5432/test',
  'table-name' = '{table}',
  'username' = 'postgres'{extra}
);"""


CUSTOMERS = [(i, f"name{i}", ["NL", "DE", "FR", None][i % 4], f"{1000 + i}") for i in range(1, 41)]
ORDERS = [(n, (n * 7) % 50 + 1, float(n % 13) * 2.5, "2026-01-01") for n in range(1, 301)]
ORDERS_SCHEMA = "order_id INT, customer_id INT, total DOUBLE, proc_time STRING"


def rows(df: DataFrame) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r) for r in df.collect())


@pytest.fixture(scope="module")
def pg(postgres_dsn: str) -> Iterator[Any]:
    """A helper that creates uniquely named customer tables in PostgreSQL and drops them."""
    created: list[str] = []

    class Tables:
        dsn = postgres_dsn

        def create(self, data: list[tuple[Any, ...]]) -> str:
            name = f"sql_customers_{uuid.uuid4().hex[:10]}"
            with psycopg.connect(postgres_dsn, autocommit=True) as conn:
                conn.execute(f'CREATE TABLE "{name}" (id INT, name TEXT, country TEXT, zip TEXT)')
                self.insert(name, data, conn)
            created.append(name)
            return name

        def insert(self, name: str, data: list[tuple[Any, ...]], conn: Any = None) -> None:
            if not data:
                return
            if conn is None:
                with psycopg.connect(postgres_dsn, autocommit=True) as own:
                    self.insert(name, data, own)
                return
            with conn.cursor() as cursor:
                cursor.executemany(f'INSERT INTO "{name}" VALUES (%s, %s, %s, %s)', data)

    yield Tables()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        for name in created:
            conn.execute(f'DROP TABLE IF EXISTS "{name}"')


@pytest.fixture
def orders(spark: SparkSession) -> DataFrame:
    df = spark.createDataFrame(ORDERS, ORDERS_SCHEMA).repartition(2, "order_id")
    df.createOrReplaceTempView("Orders")
    return df


def plain_customers(spark: SparkSession, data: list[tuple[Any, ...]]) -> None:
    spark.createDataFrame(
        data, "id INT, name STRING, country STRING, zip STRING"
    ).createOrReplaceTempView("customers_plain")


@pytest.fixture
def sql(spark: SparkSession, pg: Any, orders: DataFrame) -> LookupSQL:
    """A LookupSQL whose Customers is FLIP-234's DDL over a fresh PostgreSQL table."""
    lookup = LookupSQL(spark)
    lookup.sql(customers_ddl(pg.create(CUSTOMERS)))
    plain_customers(spark, CUSTOMERS)
    return lookup


def test_flip_234_lookup_join_verbatim(spark: SparkSession, sql: LookupSQL) -> None:
    with no_spark_job(spark):
        df = sql.sql(FLIP_234)  # lazy: no job until an action
    assert df.columns == ["order_id", "total", "country", "zip"]
    assert rows(df) == rows(spark.sql(PLAIN))
    assert sum(rows(df).values()) > 200


def test_jdbc_names_reach_postgresql_as_flink_sends_them(
    spark: SparkSession, pg: Any, orders: DataFrame
) -> None:
    """Flink's jdbc dialect writes names unquoted, so PostgreSQL folds them: a DDL's
    'table-name'='Customers' and column ID reach customers.id. They were quoted (refused)."""
    table = pg.create(CUSTOMERS)  # sql_customers_<hex>: lower case, as PostgreSQL folds
    upper = customers_ddl(table.upper()).replace("id INT", "ID INT").replace("zip", "Zip")
    lookup = LookupSQL(spark)
    lookup.sql(upper)
    plain_customers(spark, CUSTOMERS)
    df = lookup.sql(FLIP_234.replace("c.zip", "c.Zip"))
    assert df.columns == ["order_id", "total", "country", "Zip"]
    assert rows(df) == rows(spark.sql(PLAIN))
    quoted = customers_ddl(f'"{table.upper()}"')  # double quotes: the name as written
    lookup.sql("DROP TEMPORARY TABLE Customers")
    lookup.sql(quoted)
    with pytest.raises(Exception, match="no such relation"):
        lookup.sql(FLIP_234).collect()


def test_skew_of_the_session_applies_to_shuffled_joins_only(
    spark: SparkSession, pg: Any, orders: DataFrame
) -> None:
    # lookup_join refuses skew options for a join that is not shuffled; LookupSQL's are
    # for its SHUFFLE_HASH joins, so a plain join in the same session still plans.
    lookup = LookupSQL(spark, skew=True)
    lookup.sql(customers_ddl(pg.create(CUSTOMERS)))
    plain_customers(spark, CUSTOMERS)
    with no_spark_job(spark):
        df = lookup.sql(FLIP_234)
    assert rows(df) == rows(spark.sql(PLAIN))
    # a shuffled join in key order never salts a hot key: the session's skew, a default for
    # its SHUFFLE_HASH joins, raised a 'skew' error there, with no per-join way out
    keyed = FLIP_234.replace(
        "SELECT o.", "SELECT /*+ LOOKUP('table'='c', 'output-mode'='key_ordered'), "
        "SHUFFLE_HASH(c) */ o.", 1,
    )  # fmt: skip
    assert rows(lookup.sql(keyed)) == rows(spark.sql(PLAIN))


def test_flip_234_retry_joins_rows_that_arrive_after_the_first_lookup(
    spark: SparkSession, pg: Any, orders: DataFrame
) -> None:
    present = [c for c in CUSTOMERS if c[0] % 5 != 0]
    late = [c for c in CUSTOMERS if c[0] % 5 == 0]
    name = pg.create(present)
    lookup = LookupSQL(spark)
    lookup.sql(customers_ddl(name))
    spark.createDataFrame([o for o in ORDERS if o[1] <= 40], ORDERS_SCHEMA).repartition(
        2
    ).createOrReplaceTempView("Orders")
    plain_customers(spark, CUSTOMERS)

    with no_spark_job(spark):
        df = lookup.sql(FLIP_234_RETRY)
    # Hold the lookups' first attempts on a table lock, release it without the late rows (the
    # first attempts miss), then insert them: the retry, 10 s later, joins them.
    inserted = threading.Event()
    locker = psycopg.connect(pg.dsn)
    locker.execute(f'LOCK TABLE "{name}" IN ACCESS EXCLUSIVE MODE')

    def insert_after_first_lookup() -> None:
        deadline = time.monotonic() + 120
        with psycopg.connect(pg.dsn, autocommit=True) as conn:
            while time.monotonic() < deadline:
                waiting = conn.execute(
                    "SELECT count(*) FROM pg_locks WHERE relation = %s::regclass AND NOT granted",
                    (f'"{name}"',),
                ).fetchone()
                if waiting and waiting[0]:
                    break
                time.sleep(0.02)
        locker.commit()  # the blocked first attempts now run, and miss
        time.sleep(1.0)
        pg.insert(name, late)
        inserted.set()

    watcher = threading.Thread(target=insert_after_first_lookup, daemon=True)
    watcher.start()
    try:
        result = rows(df)
    finally:
        watcher.join(130)
        locker.close()
    assert inserted.is_set()
    assert result == rows(spark.sql(PLAIN))
    metrics = lookup.table("Customers").metrics()
    assert metrics["numLookupMissRetries"] > 0


def test_flip_204_shuffle_hash_one_external_call_per_key(
    spark: SparkSession, pg: Any, orders: DataFrame, capsys: pytest.CaptureFixture[str]
) -> None:
    lookup = LookupSQL(spark)
    cache = ",\n  'lookup.cache' = 'PARTIAL',\n  'lookup.partial-cache.max-rows' = '1000'"
    lookup.sql(customers_ddl(pg.create(CUSTOMERS), extra=cache))
    plain_customers(spark, CUSTOMERS)
    with no_spark_job(spark):
        df = lookup.sql(FLIP_204)
    capsys.readouterr()
    df.explain()
    plan = capsys.readouterr().out
    print(plan)
    assert "Exchange" in plan and "REPARTITION_BY_NUM" in plan
    assert rows(df) == rows(spark.sql(PLAIN))
    distinct = len({o[1] for o in ORDERS})
    metrics = lookup.table("Customers").metrics()
    assert metrics["numExternalKeys"] == distinct
    assert metrics["numExternalCalls"] <= distinct
    # the join's own observation (behind a view: it never reports) is not held
    assert not spark_metrics._observations.get(lookup.table("Customers").table_id)


def test_results_run_again_and_again_are_counted_and_let_go(
    spark: SparkSession, sql: LookupSQL
) -> None:
    """A statement run in a loop (a driver loop, ``foreachBatch``): ``metrics()`` sums the
    latest action of every result. On Connect a result no one holds any more is folded and let
    go, by the next ``sql()`` already; on classic its Dataset could still run jobs (its
    ``rdd``, ``toLocalIterator()``), so every result is held until the session stops."""
    connect = is_connect(spark)
    kept = sql.sql(FLIP_234)
    table_id = sql.table("Customers").table_id  # (it exists once a query joins it)
    assert sum(rows(kept).values()) > 200
    for _ in range(2):
        gc.collect()  # the result before is gone (Connect: the next sql() folds it)
        assert sum(rows(sql.sql(FLIP_234)).values()) > 200
    gc.collect()
    held = spark_metrics._results.get(table_id, [])
    assert len(held) == (2 if connect else 3)  # Connect: kept and the last, not yet looked at
    metrics = sql.table("Customers").metrics()
    assert metrics["numLookups"] == 3 * len(ORDERS) and metrics.partial is None
    held = spark_metrics._results.get(table_id, [])
    assert len(held) == (1 if connect else 3)
    assert rows(kept)  # its latest action counts, not both
    del kept, held
    gc.collect()
    assert sql.table("Customers").metrics()["numLookups"] == 3 * len(ORDERS)
    assert len(spark_metrics._results.get(table_id, [])) == (0 if connect else 3)


def test_left_join_keeps_orders_with_missing_customers(spark: SparkSession, sql: LookupSQL) -> None:
    df = sql.sql(
        "SELECT o.order_id, o.customer_id, c.name, c.zip FROM Orders AS o "
        "LEFT JOIN Customers FOR SYSTEM_TIME AS OF o.proc_time AS c ON o.customer_id = c.id"
    )
    plain = spark.sql(
        "SELECT o.order_id, o.customer_id, c.name, c.zip FROM Orders AS o "
        "LEFT JOIN customers_plain AS c ON o.customer_id = c.id"
    )
    result = rows(df)
    assert result == rows(plain)
    assert any(r[2] is None for r in result)


def test_two_lookup_joins_in_one_query(
    spark: SparkSession, sql: LookupSQL, dim_service: DimService
) -> None:
    tiers = {i: "gold" if i % 3 == 0 else "silver" for i in range(9101, 9141) if i % 7 != 0}
    for key, tier in tiers.items():
        dim_service.add(key, [{"id": key, "tier": tier}])
    sql.sql(
        "CREATE TEMPORARY TABLE Tiers (id INT, tier STRING) WITH ('connector' = 'http', "
        f"'url' = '{dim_service.url}/customers/{{id}}', 'timeout' = '5s')"
    )
    spark.createDataFrame(list(tiers.items()), "id INT, tier STRING").createOrReplaceTempView(
        "tiers_plain"
    )
    df = sql.sql(
        """SELECT o.order_id, c.name, t.tier
        FROM Orders AS o
          JOIN Customers FOR SYSTEM_TIME AS OF o.proc_time AS c ON o.customer_id = c.id
          LEFT JOIN Tiers FOR SYSTEM_TIME AS OF o.proc_time AS t ON t.id = c.id + 9100
        WHERE t.tier IS NULL OR t.tier <> 'gold'"""
    )
    plain = spark.sql(
        """SELECT o.order_id, c.name, t.tier
        FROM Orders AS o JOIN customers_plain AS c ON o.customer_id = c.id
          LEFT JOIN tiers_plain AS t ON t.id = c.id + 9100
        WHERE t.tier IS NULL OR t.tier <> 'gold'"""
    )
    assert rows(df) == rows(plain)


def test_aggregation_and_where_over_joined_columns(spark: SparkSession, sql: LookupSQL) -> None:
    query = """SELECT c.country, count(*) AS n, sum(o.total) AS total
        FROM Orders AS o JOIN {dim} ON o.customer_id = c.id
        WHERE o.total > 5 AND (c.country IS NULL OR c.country <> 'DE')
        GROUP BY c.country HAVING count(*) > 1 ORDER BY n DESC, country"""
    df = sql.sql(query.format(dim="Customers FOR SYSTEM_TIME AS OF o.proc_time AS c"))
    plain = spark.sql(query.format(dim="customers_plain AS c"))
    assert df.collect() == plain.collect()
    assert df.columns == plain.columns


def test_functions_sqlglot_would_rewrite_are_printed_back_as_written(
    spark: SparkSession, sql: LookupSQL
) -> None:
    """The statement of a lookup join is regenerated: to_char lost its format (CAST AS
    STRING), percentile_cont WITHIN GROUP became percentile_approx, silently."""
    query = """SELECT to_char(o.total, '000.00') AS t, to_char(c.id, '0000') AS i,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY o.total) OVER (PARTITION BY c.country) AS m,
        percentile_disc(0.25) WITHIN GROUP (ORDER BY c.id) OVER () AS d,
        levenshtein(c.name, 'name1', 2) AS l, parse_json('{{"z": 1}}') AS j
        FROM Orders AS o JOIN {dim} ON o.customer_id = c.id AND c.id = to_number(
            to_char(o.customer_id, '0000'), '0000')"""
    df = sql.sql(query.format(dim="Customers FOR SYSTEM_TIME AS OF o.proc_time AS c"))
    plain = spark.sql(query.format(dim="customers_plain AS c"))
    assert df.dtypes == plain.dtypes and dict(df.dtypes)["j"] == "variant"
    assert rows(df.drop("j")) == rows(plain.drop("j"))
    assert ("002.50", "0008") in {(r.t, r.i) for r in df.collect()}


def test_an_unqualified_struct_field_of_the_probe(spark: SparkSession, sql: LookupSQL) -> None:
    """``s.cid`` (the field of the probe's column ``s``, as Spark reads it) in ON, SELECT and
    WHERE: the probe's columns move into a struct in the rewrite, where ``s`` did not resolve."""
    query = """SELECT s.cid, c.country FROM (SELECT order_id, proc_time,
        named_struct('cid', customer_id, 'total', total) AS s FROM Orders) AS o
        JOIN {dim} ON c.id = s.cid WHERE s.total > 5"""
    df = sql.sql(query.format(dim="Customers FOR SYSTEM_TIME AS OF o.proc_time AS c"))
    plain = spark.sql(query.format(dim="customers_plain AS c"))
    assert rows(df) == rows(plain) and sum(rows(df).values()) > 100


def test_lookup_join_inside_a_cte_and_a_view(spark: SparkSession, sql: LookupSQL) -> None:
    cte = """WITH enriched AS (
          SELECT o.order_id, o.total, c.country FROM Orders o
          JOIN {dim} ON o.customer_id = c.id)
        SELECT country, max(total) AS top FROM enriched GROUP BY country"""
    df = sql.sql(cte.format(dim="Customers FOR SYSTEM_TIME AS OF o.proc_time c"))
    assert rows(df) == rows(spark.sql(cte.format(dim="customers_plain c")))

    with no_spark_job(spark):
        sql.sql(
            "CREATE TEMPORARY VIEW sql_enriched_orders AS SELECT o.order_id, c.zip "
            "FROM Orders o JOIN Customers FOR SYSTEM_TIME AS OF o.proc_time c "
            "ON o.customer_id = c.id"
        )
    view = spark.sql("SELECT * FROM sql_enriched_orders")
    plain = spark.sql(
        "SELECT o.order_id, c.zip FROM Orders o JOIN customers_plain c ON o.customer_id = c.id"
    )
    assert rows(view) == rows(plain)
    spark.catalog.dropTempView("sql_enriched_orders")


@pytest.mark.parametrize("how", ["JOIN", "LEFT JOIN"])
def test_extra_on_condition_on_a_dim_column(spark: SparkSession, sql: LookupSQL, how: str) -> None:
    query = """SELECT o.order_id, c.id, c.country FROM Orders o {how} {dim}
        ON o.customer_id = c.id AND c.country = 'NL' AND o.total < 20"""
    df = sql.sql(query.format(how=how, dim="Customers FOR SYSTEM_TIME AS OF o.proc_time AS c"))
    plain = spark.sql(query.format(how=how, dim="customers_plain AS c"))
    assert rows(df) == rows(plain)


def test_star_subquery_union_and_unqualified_names(spark: SparkSession, sql: LookupSQL) -> None:
    query = """SELECT * FROM (SELECT order_id, customer_id, proc_time FROM Orders
            WHERE order_id < 50) AS o JOIN {dim} ON customer_id = id
        UNION ALL
        SELECT o.*, c.* FROM Orders o LEFT JOIN {dim} ON o.customer_id = c.id AND zip > '1030'
        WHERE total > 20"""
    dim = "Customers FOR SYSTEM_TIME AS OF o.proc_time c"
    df = sql.sql(
        query.format(dim=dim).replace("SELECT o.*", "SELECT o.order_id, o.customer_id, o.proc_time")
    )
    plain = spark.sql(
        query.format(dim="customers_plain c").replace(
            "SELECT o.*", "SELECT o.order_id, o.customer_id, o.proc_time"
        )
    )
    assert df.columns == plain.columns
    assert rows(df) == rows(plain)


def test_where_on_probe_columns_with_a_later_right_join(
    spark: SparkSession, sql: LookupSQL
) -> None:
    query = """SELECT o.order_id, c.zip, p.name FROM Orders o
        JOIN {dim} ON o.customer_id = c.id
        RIGHT JOIN customers_plain p ON p.id = c.id + 1
        WHERE o.total >= 30 OR o.total IS NULL"""
    df = sql.sql(query.format(dim="Customers FOR SYSTEM_TIME AS OF o.proc_time AS c"))
    plain = spark.sql(query.format(dim="customers_plain AS c"))
    assert rows(df) == rows(plain)


@pytest.mark.redis
def test_redis_ddl_lookup_join(spark: SparkSession, orders: DataFrame, redis_url: str) -> None:
    import json

    import redis

    prefix = f"sqltest:{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redis_url)
    try:
        for cid, name, country, _ in CUSTOMERS[:30]:
            client.set(f"{prefix}:{cid}", json.dumps({"id": cid, "name": name, "country": country}))
        lookup = LookupSQL(spark)
        lookup.sql(
            "CREATE TEMPORARY TABLE RedisCustomers (id BIGINT, name STRING, country STRING) WITH ("
            f"'connector' = 'redis', 'url' = '{redis_url}', 'key-template' = '{prefix}:{{id}}', "
            "'value-format' = 'json', 'lookup.cache' = 'PARTIAL', "
            "'lookup.partial-cache.max-rows' = '100')"
        )
        df = lookup.sql(
            "SELECT o.order_id, r.name FROM Orders o LEFT JOIN RedisCustomers "
            "FOR SYSTEM_TIME AS OF o.proc_time AS r ON r.id = o.customer_id"
        )
        by_id = {c[0]: c[1] for c in CUSTOMERS[:30]}
        assert rows(df) == Counter((o[0], by_id.get(o[1])) for o in ORDERS)
    finally:
        keys = list(client.scan_iter(f"{prefix}:*"))
        if keys:
            client.delete(*keys)
        client.close()


@pytest.mark.redis
@pytest.mark.parametrize(
    "cache",
    [
        "FULL', 'lookup.full-cache.periodic-reload.interval' = '1h",
        "PARTIAL', 'lookup.partial-cache.max-rows' = '9",
    ],
)
def test_redis_ddl_keys_of_other_types_than_text_and_numbers(
    spark: SparkSession, redis_url: str, cache: str
) -> None:
    """A FULL cache over a DATE, DECIMAL, TIMESTAMP or BOOLEAN key was refused at sql(), naming
    RedisConnector's key_types, which a DDL cannot set; it reads such keys back from the scanned
    names, and joins the rows a point lookup (PARTIAL) joins: not ``1.5`` for a DECIMAL(4, 2)
    key, whose lookups read ``1.50``."""
    import datetime as dt
    import json
    from decimal import Decimal

    import redis

    prefix = f"sqltypes:{uuid.uuid4().hex[:8]}"
    names = {
        "1": "2024-01-05|1.50|2024-01-05 10:30:00|True",
        "2": "2024-01-06|2.00|2024-01-05 10:30:00.250000|False",
        "stray": "2024-1-7|1.5|2024-01-05T10:30:00|true",  # no lookup reads these names
    }
    client = redis.Redis.from_url(redis_url)
    try:
        for value, name in names.items():
            client.set(f"{prefix}:{name}", json.dumps({"v": value}))
        lookup = LookupSQL(spark)
        lookup.sql(
            "CREATE TEMPORARY TABLE Typed (d DATE, n DECIMAL(4, 2), t TIMESTAMP(6), b BOOLEAN, "
            f"v STRING) WITH ('connector' = 'redis', 'url' = '{redis_url}', "
            f"'key-template' = '{prefix}:{{d}}|{{n}}|{{t}}|{{b}}', 'lookup.cache' = '{cache}')"
        )
        probe = [
            (dt.date(2024, 1, 5), Decimal("1.50"), dt.datetime(2024, 1, 5, 10, 30), True),
            (
                dt.date(2024, 1, 6),
                Decimal("2.00"),
                dt.datetime(2024, 1, 5, 10, 30, 0, 250000),
                False,
            ),
            (dt.date(2024, 1, 7), Decimal("1.50"), dt.datetime(2024, 1, 5, 10, 30), True),
        ]
        spark.createDataFrame(
            probe, "d DATE, n DECIMAL(4, 2), t TIMESTAMP_NTZ, b BOOLEAN"
        ).selectExpr("*", "current_timestamp() AS pt").createOrReplaceTempView("TypedProbe")
        df = lookup.sql(
            "SELECT p.d, x.v FROM TypedProbe p LEFT JOIN Typed FOR SYSTEM_TIME AS OF p.pt "
            "AS x ON x.d = p.d AND x.n = p.n AND x.t = p.t AND x.b = p.b"
        )
        assert rows(df) == Counter(
            [(dt.date(2024, 1, 5), "1"), (dt.date(2024, 1, 6), "2"), (dt.date(2024, 1, 7), None)]
        )
    finally:
        keys = list(client.scan_iter(f"{prefix}:*"))
        if keys:
            client.delete(*keys)
        client.close()
