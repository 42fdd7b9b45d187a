"""The Flink design documents' SQL, run as written on Spark with ``LookupSQL``.

FLIP-234's ``Customers`` DDL (its JDBC 'url' pointed at the machine's PostgreSQL, database
``test``), its lookup join with and without the retry hint, and FLIP-204's ``SHUFFLE_HASH``
form. The retry query starts while customer 9 is still missing; it is inserted 5 s later,
between the first lookups (within a second) and the retries the hint sends 10 s after them,
which join it. The example's PostgreSQL table is dropped at the end.

Needs ``pip install "asyncio-lookup[spark]"`` and the PostgreSQL server (``POSTGRES_DSN``).

    python examples/flink_sql.py
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
import uuid
from urllib.parse import urlsplit

import asyncpg
from pyspark.sql import SparkSession

from asyncio_lookup.spark import LookupSQL

DSN = os.environ.get("POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")

CREATE_CUSTOMERS = """
CREATE TEMPORARY TABLE Customers (
  id INT,
  name STRING,
  country STRING,
  zip STRING
) WITH (
  'connector' = 'jdbc',
  'url' = 'jdbc:postgresql://{host}:{port}/{database}',
  'table-name' = '{table}',
  'username' = '{user}'
);"""

LOOKUP_JOIN = """
-- enrich each order with customer information
SELECT o.order_id, o.total, c.country, c.zip
FROM Orders AS o
  JOIN Customers FOR SYSTEM_TIME AS OF o.proc_time AS c
    ON o.customer_id = c.id;"""

RETRY = """
-- retry triggered by empty result, using 10s fixed-delay strategy, max attempts 3.
SELECT /*+ LOOKUP('table'='Customers', 'retry-predicate'='lookup_miss', 'retry-strategy'='fixed_delay', 'fixed-delay'='10s','max-attempts'='3') */
	o.order_id, o.total, c.country, c.zip
FROM Orders AS o
  JOIN Customers FOR SYSTEM_TIME AS OF o.proc_time AS c
    ON o.customer_id = c.id;"""  # noqa: E501

SHUFFLE_HASH = """
SELECT /*+ SHUFFLE_HASH('Customers') */ o.order_id, o.total, c.country, c.zip
FROM Orders AS o
JOIN Customers FOR SYSTEM_TIME AS OF o.proc_time AS c
ON o.customer_id = c.id;"""

CUSTOMERS = [(i, f"customer {i}", ["NL", "DE", "FR"][i % 3], f"{1000 + i}") for i in range(1, 9)]
LATE = [(9, "customer 9", "BE", "1009")]  # arrives after the first lookup


def spark_session() -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return (
        SparkSession.builder.master("local[2]")
        .appName("flink-sql")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.python.worker.reuse", "true")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )


async def _execute(
    statement: str, *args: object, many: list[tuple[object, ...]] | None = None
) -> object:
    """One statement on a new asyncpg connection (asyncpg is a core dependency)."""
    conn = await asyncpg.connect(DSN)
    try:
        if many is not None:
            return await conn.executemany(statement, many)
        return await conn.fetchval(statement, *args)
    finally:
        await conn.close()


def execute(statement: str, *args: object) -> object:
    return asyncio.run(_execute(statement, *args))


def insert(table: str, rows: list[tuple[object, ...]]) -> None:
    asyncio.run(_execute(f'INSERT INTO "{table}" VALUES ($1, $2, $3, $4)', many=rows))


def insert_late_customer(table: str) -> None:
    """Five seconds into the retry query, add customer 9: after its first lookups (within a
    second), well before their retries (10 s after them)."""
    time.sleep(5)
    insert(table, LATE)
    print(f"  (customer 9 inserted into {table}, 5 s into the query)", flush=True)


def main() -> None:
    table = f"example_customers_{uuid.uuid4().hex[:6]}"
    url = urlsplit(DSN)
    spark = None
    try:
        execute(f'CREATE TABLE "{table}" (id INT, name TEXT, country TEXT, zip TEXT)')
        insert(table, CUSTOMERS)
        spark = spark_session()
        spark.createDataFrame(
            [(n, n % 9 + 1, n * 10.0, "proc") for n in range(1, 19)],
            "order_id INT, customer_id INT, total DOUBLE, proc_time STRING",
        ).createOrReplaceTempView("Orders")
        sql = LookupSQL(spark)
        sql.sql(
            CREATE_CUSTOMERS.format(
                host=url.hostname or "127.0.0.1",
                port=url.port or 5432,
                database=url.path.lstrip("/") or "test",
                table=table,
                user=url.username or "postgres",
            )
        )

        print("FLIP-234, lookup join (customer 9 does not exist yet):", flush=True)
        sql.sql(LOOKUP_JOIN).orderBy("order_id").show()

        print("FLIP-234, lookup join with retry on lookup miss:", flush=True)
        retried = sql.sql(RETRY)
        late = threading.Thread(target=insert_late_customer, args=(table,), daemon=True)
        late.start()
        rows = retried.collect()  # observed (show() on a LookupSQL result is not): metrics below
        late.join()
        spark.createDataFrame(rows, retried.schema).orderBy("order_id").show()
        metrics = sql.table("Customers").metrics()
        print("Customers metrics of the retry query's collect():", metrics, flush=True)

        print("FLIP-204, hash lookup join (SHUFFLE_HASH):", flush=True)
        shuffled = sql.sql(SHUFFLE_HASH)
        shuffled.explain()
        shuffled.orderBy("order_id").show()
    finally:
        if spark is not None:
            spark.stop()
        execute(f'DROP TABLE IF EXISTS "{table}"')


if __name__ == "__main__":
    main()
