"""Quickstart (``make demo``): enrich orders with customers from an HTTP service, in PySpark.

No external service needed: a "customer service" (the standard library's HTTP server) starts
on 127.0.0.1 in background threads (5 ms per request). Some customers arrive late: the service
only knows them 1.5 s after they are first asked for, so the LOOKUP hint retries a lookup miss
('lookup_miss', fixed delay 1 s, up to 3 retries) and finds them. Customer 999 never exists: the
LEFT join keeps its order with NULL customer columns after the retries run out.

The join runs async (100 lookups in flight per task) with a PARTIAL cache; afterwards the
script prints a sample of the enriched orders and the cache/operator metrics summed over tasks.

Needs ``pip install "asyncio-lookup[spark]"``.  Run:  python examples/quickstart.py
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# Spark's Python workers must run this interpreter (it has pyarrow and asyncio_lookup).
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from asyncio_lookup.connectors import HttpConnector
from asyncio_lookup.spark import LookupTable, lookup_join

CUSTOMERS = 200
LATE = range(201, 206)  # known to the service only 1.5 s after they are first asked for
MISSING = 999


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # 100 connections open at once (the default backlog is 5)


COUNTRIES = ["NL", "DE", "FR", "BE", "PL"]


class CustomerService:
    """``GET /customers/{id}`` -> JSON customer, 404 when unknown (yet)."""

    def __init__(self, latency: float = 0.005, late_after: float = 1.5) -> None:
        self.latency = latency
        self.late_after = late_after
        self.first_asked: dict[int, float] = {}
        self.requests = 0
        self.port = 0

    def customer(self, cid: int) -> dict[str, object] | None:
        if 1 <= cid <= CUSTOMERS:
            return {"id": cid, "name": f"Customer {cid}", "country": COUNTRIES[cid % 5]}
        if cid in LATE:
            first = self.first_asked.setdefault(cid, time.monotonic())
            if time.monotonic() - first >= self.late_after:
                return {"id": cid, "name": f"Late customer {cid}", "country": "NL"}
        return None

    def start(self) -> str:
        """Serve on 127.0.0.1 (a free port) in daemon threads; return the base URL."""
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                service.requests += 1
                time.sleep(service.latency)
                tail = self.path.rsplit("/", 1)[-1]
                row = service.customer(int(tail)) if tail.isdigit() else None
                body = json.dumps(row if row is not None else {"error": "no such customer"})
                self.send_response(200 if row is not None else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args: object) -> None:
                pass

        server = _Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, name="customer-service", daemon=True).start()
        self.port = server.server_port
        return f"http://127.0.0.1:{self.port}"


def main() -> None:
    service = CustomerService()
    base_url = service.start()
    print(f"customer service on {base_url} ({CUSTOMERS} customers, late ones: {list(LATE)})")

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("asyncio-lookup-quickstart")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        rng = random.Random(7)
        orders_data = [
            (order_id, rng.randint(1, CUSTOMERS), round(rng.uniform(5, 500), 2))
            for order_id in range(1, 3001)
        ]
        orders_data += [(3000 + i, cid, 42.0) for i, cid in enumerate([*LATE, MISSING], 1)]
        orders = spark.createDataFrame(
            orders_data, "order_id INT, customer_id INT, total DOUBLE"
        ).repartition(2)

        customers = LookupTable(
            name="Customers",
            schema="id INT, name STRING, country STRING",
            connector=HttpConnector(f"{base_url}/customers/{{id}}", timeout=5),
            options={
                "lookup.cache": "PARTIAL",
                "lookup.partial-cache.max-rows": "10000",
                "lookup.partial-cache.expire-after-write": "10 min",
            },
        )
        enriched = lookup_join(
            orders,
            customers,
            on=[("customer_id", "id")],
            how="left",
            columns=["name", "country"],
            hints="LOOKUP('table'='Customers', 'async'='true', 'capacity'='100', "
            "'timeout'='30s', 'retry-predicate'='lookup_miss', "
            "'retry-strategy'='fixed_delay', 'fixed-delay'='1s', 'max-attempts'='3')",
        )

        started = time.perf_counter()
        # One action (an orderBy would run the join twice: once more to sample the sort keys).
        rows = sorted(enriched.collect(), key=lambda r: r["order_id"])
        elapsed = time.perf_counter() - started
        print(f"\nenriched {len(rows)} orders in {elapsed:.1f} s; a sample:")
        result = spark.createDataFrame(rows, enriched.schema)
        result.show(5)
        print("late customers (found by retry on miss) and the one that never exists:")
        result.where(F.col("customer_id") > CUSTOMERS).show()

        metrics = customers.metrics()
        print("metrics (summed over all tasks):")
        for name in (
            "numLookups",
            "hitCount",
            "missCount",
            "loadCount",
            "numExternalCalls",
            "numLookupMissRetries",
            "numCachedRecords",
            "numCompleted",
            "numTimeouts",
            "latencyP99Ms",
        ):
            print(f"  {name:22} {metrics.get(name, 0):g}")
        print(f"  {'HTTP requests served':22} {service.requests}")
        missing = [r for r in rows if r["customer_id"] in LATE and r["name"] is None]
        if missing:
            raise SystemExit(f"late customers not found: {missing}")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
