"""Enrich orders from an HTTP customer service that lags behind: retry on lookup miss.

A new customer reaches the (local, example) service's replica a moment after its first order,
so the first lookup misses. The LOOKUP hint ``'retry-predicate'='lookup_miss'`` retries it
after ``fixed-delay``; a ``429 Too Many Requests`` with ``Retry-After`` goes through the
connector's failure retry (``lookup.max-retries``) instead. Batches use ``POST :batchGet``.

Needs ``pip install "asyncio-lookup[spark]"`` (the service is the standard library's).

    python examples/http_retry_on_miss.py
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from pyspark.sql import SparkSession

from asyncio_lookup.connectors import HttpConnector
from asyncio_lookup.spark import LookupTable, lookup_join

CUSTOMERS = {
    str(i): {"id": i, "name": f"customer {i}", "tier": "gold" if i % 3 else "std"}
    for i in range(1, 50)
}
LAGGING = {"7": 1.5}  # customer 7 becomes visible 1.5 s after it is first asked for
THROTTLED = {"3": 1}  # customer 3's first request is answered 429, Retry-After: 1


def start_service() -> str:
    """The service on 127.0.0.1 (a free port), the standard library's HTTP server in threads."""
    first_asked: dict[str, float] = {}
    lock = threading.Lock()

    def visible(key: str) -> dict | None:
        with lock:
            asked = first_asked.setdefault(key, time.monotonic())
        if time.monotonic() - asked < LAGGING.get(key, 0.0):
            return None
        return CUSTOMERS.get(key)

    def throttled(keys: list[str]) -> bool:
        with lock:
            if not any(THROTTLED.get(k, 0) > 0 for k in keys):
                return False
            for k in keys:
                THROTTLED[k] = max(0, THROTTLED.get(k, 0) - 1)
            return True

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def answer(self, status: int, payload: object | None = None) -> None:
            body = b"" if payload is None else json.dumps(payload).encode()
            self.send_response(status)
            if status == 429:
                self.send_header("Retry-After", "1")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # GET /customers/{id}
            key = self.path.rsplit("/", 1)[-1]
            if throttled([key]):
                return self.answer(429)
            row = visible(key)
            self.answer(200, row) if row else self.answer(404)

        def do_POST(self) -> None:  # POST /customers:batchGet {"keys": [{"id": ...}, ...]}
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            keys = [str(k["id"]) for k in request["keys"]]
            if throttled(keys):
                return self.answer(429)
            self.answer(200, {"customers": [r for k in keys if (r := visible(k))]})

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_port}"


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
