"""Enrich orders from an HTTP customer service that lags behind: retry on lookup miss.

A new customer reaches the (local, example) service's replica a moment after its first order,
so the first lookup misses. The LOOKUP hint ``'retry-predicate'='lookup_miss'`` retries it
after ``fixed-delay``; a ``429 Too Many Requests`` with ``Retry-After`` goes through the
connector's failure retry (``lookup.max-retries``) instead. Batches use ``POST :batchGet``.

    .venv/bin/python examples/http_retry_on_miss.py
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time

from aiohttp import web
from pyspark.sql import SparkSession

from asyncio_lookup.connectors import HttpConnector
from asyncio_lookup.spark import LookupTable, lookup_join

CUSTOMERS = {
    str(i): {"id": i, "name": f"customer {i}", "tier": "gold" if i % 3 else "std"}
    for i in range(1, 50)
}
LAGGING = {"7": 1.5}  # customer 7 becomes visible 1.5 s after it is first asked for
THROTTLED = {"3": 1}  # customer 3's first request is answered 429, Retry-After: 1


def service_app() -> web.Application:
    first_asked: dict[str, float] = {}

    def visible(key: str) -> dict | None:
        asked = first_asked.setdefault(key, time.monotonic())
        if time.monotonic() - asked < LAGGING.get(key, 0.0):
            return None
        return CUSTOMERS.get(key)

    async def one(request: web.Request) -> web.Response:
        key = request.match_info["id"]
        if THROTTLED.get(key, 0) > 0:
            THROTTLED[key] -= 1
            return web.Response(status=429, headers={"Retry-After": "1"})
        row = visible(key)
        return web.json_response(row) if row else web.Response(status=404)

    async def batch(request: web.Request) -> web.Response:
        keys = [str(k["id"]) for k in (await request.json())["keys"]]
        if any(THROTTLED.get(k, 0) > 0 for k in keys):
            for k in keys:
                THROTTLED[k] = max(0, THROTTLED.get(k, 0) - 1)
            return web.Response(status=429, headers={"Retry-After": "1"})
        return web.json_response({"customers": [r for k in keys if (r := visible(k))]})

    app = web.Application()
    app.router.add_get("/customers/{id}", one)
    app.router.add_post("/customers:batchGet", batch)
    return app


def start_service() -> str:
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    async def start() -> str:
        runner = web.AppRunner(service_app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]

    return asyncio.run_coroutine_threadsafe(start(), loop).result(10)


def main() -> None:
    base = start_service()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("http-retry-on-miss")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    try:
        customers = LookupTable(
            "Customers",
            "id INT, name STRING, tier STRING",
            HttpConnector(
                f"{base}/customers/{{id}}",
                batch_url=f"{base}/customers:batchGet",
                batch_rows_field="customers",
                timeout=5,
            ),
            {"lookup.max-retries": "3"},
        )
        orders = spark.createDataFrame(
            [(100, 1), (101, 3), (102, 7), (103, 99)], "order_id INT, customer_id INT"
        )
        out = lookup_join(
            orders,
            customers,
            on=("customer_id", "id"),
            how="left",
            columns=["name", "tier"],
            hints="LOOKUP('table'='Customers', 'retry-predicate'='lookup_miss', "
            "'retry-strategy'='fixed_delay', 'fixed-delay'='1s', 'max-attempts'='3')",
        )
        print("customer 7 found after retries on miss; 3 after a 429; 99 never exists:")
        out.orderBy("order_id").show()
        m = customers.metrics()
        print({k: m[k] for k in ("numLookupMissRetries", "numFailureRetries", "numLookups")})
        # 99: 3 miss retries; 7: 1-2 miss retries; the 429'd batch: one failure retry per key
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
