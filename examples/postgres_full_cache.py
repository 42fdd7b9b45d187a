"""A PostgreSQL dim table held whole in each worker: ``lookup.cache``='FULL', periodic reload.

Every Python worker loads the table once with a server-side cursor scan and answers lookups
from memory; a reload every few seconds picks up changes without a restart. Uses the
machine's PostgreSQL (database ``test``); the example's table is dropped at the end.

Needs ``pip install "asyncio-lookup[spark]"`` and the PostgreSQL server (``POSTGRES_DSN``).

    python examples/postgres_full_cache.py
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from decimal import Decimal
from typing import Any

import asyncpg
from pyspark.sql import SparkSession

from asyncio_lookup.connectors import PostgresConnector
from asyncio_lookup.spark import LookupTable, lookup_join

DSN = os.environ.get("POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
RELOAD_SECONDS = 2


def spark_session() -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return (
        SparkSession.builder.master("local[2]")
        .appName("postgres-full-cache")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.python.worker.reuse", "true")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )


def sql(statement: str, table: str | None = None, rows: list[tuple[Any, ...]] = ()) -> None:
    """Run one statement (and copy ``rows`` into ``table``) on a connection of its own."""

    async def run() -> None:
        conn = await asyncpg.connect(DSN)
        try:
            await conn.execute(statement)
            if table is not None:
                await conn.copy_records_to_table(table, records=rows)
        finally:
            await conn.close()

    asyncio.run(run())


def main() -> None:
    table = f"example_products_{uuid.uuid4().hex[:6]}"
    spark = None
    try:
        sql(
            f'CREATE TABLE "{table}" (sku text PRIMARY KEY, title text, price numeric)',
            table,
            [(f"SKU-{i}", f"product {i}", Decimal(f"{i % 100}.99")) for i in range(10_000)],
        )
        spark = spark_session()
        products = LookupTable(
            "Products",
            "sku STRING, title STRING, price DECIMAL(10, 2)",
            PostgresConnector(DSN, table, key_columns="sku", columns=["sku", "title", "price"]),
            {
                "lookup.cache": "FULL",
                "lookup.full-cache.reload-strategy": "PERIODIC",
                "lookup.full-cache.periodic-reload.interval": f"{RELOAD_SECONDS}s",
            },
        )
        orders = spark.createDataFrame(
            [(1, "SKU-1"), (2, "SKU-42"), (3, "SKU-99999"), (4, "SKU-1")],
            "order_id INT, sku STRING",
        )

        def show_joined() -> None:
            # a join per run: on a classic session only a DataFrame's first action is observed
            joined = lookup_join(orders, products, on="sku", how="left", columns=["title", "price"])
            joined.orderBy("order_id").show()

        print("before the price change:", flush=True)
        show_joined()
        print("Products cache metrics, first run:", products.metrics(), flush=True)
        sql(f"UPDATE \"{table}\" SET price = 0.01 WHERE sku = 'SKU-1'")
        time.sleep(RELOAD_SECONDS * 2)  # let every worker's periodic reload run
        print(f"after the price change and a reload (every {RELOAD_SECONDS}s):", flush=True)
        show_joined()
        metrics = products.metrics()
        print("Products cache metrics, both runs and the reloads between:", metrics, flush=True)
    finally:
        if spark is not None:
            spark.stop()
        sql(f'DROP TABLE IF EXISTS "{table}"')


if __name__ == "__main__":
    main()
