"""A spark-submit job: enrich orders from an HTTP customer service with ``lookup_join``.

Submit it to a cluster whose executors get ``asyncio_lookup`` from what ``spark-submit`` ships
(see README, "Running on a Spark cluster"; ``make cluster-demo`` does it on a local standalone
cluster). The job starts the customer service itself, on the driver (``--host``, default
127.0.0.1: the executors must reach it there), joins 10,000 orders against it and checks the
result against a plain Spark join of the same customers. Exit status 0 only when both agree.

    spark-submit --master spark://HOST:7077 --py-files dist/asyncio_lookup.zip \\
        examples/cluster/enrich_job.py [--host DRIVER-HOST]

The driver needs ``asyncio-lookup[spark]``; the service is the standard library's.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pyspark.sql import SparkSession

from asyncio_lookup.connectors import HttpConnector
from asyncio_lookup.spark import LookupTable, lookup_join

CUSTOMERS = 300
ORDERS = 10_000


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # 100 connections open at once (the default backlog is 5)


COUNTRIES = ["NL", "DE", "FR", "BE", "PL"]


def customer(cid: int) -> dict[str, Any]:
    return {"id": cid, "name": f"Customer {cid}", "country": COUNTRIES[cid % len(COUNTRIES)]}


class CustomerService(BaseHTTPRequestHandler):
    """``GET /customers/{id}`` -> JSON customer, 404 when unknown."""

    def do_GET(self) -> None:
        cid = self.path.rsplit("/", 1)[-1]
        known = cid.isdigit() and 1 <= int(cid) <= CUSTOMERS
        body = json.dumps(customer(int(cid)) if known else {"error": "no such customer"})
        self.send_response(200 if known else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: Any) -> None:
        pass


def start_service(host: str) -> tuple[str, Callable[[], None]]:
    """Serve on ``host`` (a free port) in a daemon thread; return the base URL and a stop."""
    server = _Server((host, 0), CustomerService)
    threading.Thread(target=server.serve_forever, name="customer-service", daemon=True).start()

    def stop() -> None:
        server.shutdown()
        server.server_close()

    return f"http://{host}:{server.server_port}", stop


def executor_import_origin(spark: SparkSession) -> str:
    """Where the executors' Python found asyncio_lookup (the shipped zip, a packed env, ...)."""

    def origin(_: Any) -> str:
        import asyncio_lookup

        return str(asyncio_lookup.__file__)

    return str(spark.sparkContext.parallelize([0], 1).map(origin).first())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="address the service listens on")
    args = parser.parse_args()

    base_url, stop_service = start_service(args.host)
    spark = SparkSession.builder.appName("asyncio-lookup-cluster-enrich").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        # Customer ids 1..CUSTOMERS+20: the last 20 are unknown to the service (LEFT join NULLs).
        orders = spark.range(ORDERS, numPartitions=4).selectExpr(
            "CAST(id AS INT) AS order_id",
            f"CAST(id % {CUSTOMERS + 20} + 1 AS INT) AS customer_id",
        )
        customers = LookupTable(
            name="Customers",
            schema="id INT, name STRING, country STRING",
            connector=HttpConnector(f"{base_url}/customers/{{id}}", timeout=10),
            options={"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "10000"},
        )
        enriched = lookup_join(
            orders,
            customers,
            on=[("customer_id", "id")],
            how="left",
            columns=["name", "country"],
            hints="LOOKUP('table'='Customers', 'async'='true', 'capacity'='50')",
        )
        started = time.perf_counter()
        got = sorted(tuple(row) for row in enriched.collect())
        elapsed = time.perf_counter() - started

        dim = spark.createDataFrame(
            [customer(cid) for cid in range(1, CUSTOMERS + 1)],
            "id INT, name STRING, country STRING",
        )
        plain = orders.join(dim, orders.customer_id == dim.id, "left").select(
            "order_id", "customer_id", "name", "country"
        )
        want = sorted(tuple(row) for row in plain.collect())

        print(f"master: {spark.sparkContext.master}")
        print(f"executors imported asyncio_lookup from: {executor_import_origin(spark)}")
        print(f"lookup_join: {len(got)} rows in {elapsed:.1f} s; plain join: {len(want)} rows")
        if got != want:
            diff = sorted(set(got) ^ set(want))[:5]
            print(f"MISMATCH: lookup_join differs from the plain join, e.g. {diff}")
            return 1
        print(f"OK: lookup_join equals the plain Spark join ({len(got)} rows)")
        return 0
    finally:
        spark.stop()
        stop_service()


if __name__ == "__main__":
    sys.exit(main())
