"""Enrich a stream of customer ids from an HTTP service with the DataStream-style API.

A local service (the standard library's HTTP server, started here on 127.0.0.1 and a random
port) plays a flaky customer API: some ids answer 503 the first time, some are not there yet on
the first call (404 -> empty result) and appear a moment later. ``unordered_wait_with_retry``
retries both within a total timeout per record, with at most 100 requests in flight. The calls
go through ``HttpConnector``'s lookup function (the library's own HTTP client on asyncio).

Needs only the core package, no Spark: ``pip install asyncio-lookup``.
Run:  python examples/datastream_enrich.py
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Collection
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from asyncio_lookup import (
    AsyncDataStream,
    AsyncFunction,
    RetryPredicates,
    RetryStrategies,
    Watermark,
    new_event_loop,
)
from asyncio_lookup.connectors import HttpConnector
from asyncio_lookup.errors import TransientError


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # 100 connections open at once (the default backlog is 5)


COUNTRIES = ["DE", "FR", "NL", "PL", "SE"]


def start_customer_service() -> ThreadingHTTPServer:
    """Customers 1..200; ids divisible by 7 answer 503 once, by 11 are missing once."""
    calls: dict[int, int] = {}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the client reuses its connections

        def do_GET(self) -> None:
            customer_id = int(self.path.rsplit("/", 1)[-1])
            with lock:
                calls[customer_id] = calls.get(customer_id, 0) + 1
                first_call = calls[customer_id] == 1
            time.sleep(0.002 + (customer_id % 5) * 0.002)  # some latency
            status, row = (
                200,
                {
                    "id": customer_id,
                    "name": f"customer-{customer_id}",
                    "country": COUNTRIES[customer_id % len(COUNTRIES)],
                },
            )
            if customer_id % 7 == 0 and first_call:
                status, row = 503, {"error": "overloaded"}
            elif customer_id > 200 or (customer_id % 11 == 0 and first_call):
                status, row = 404, {"error": "no such customer"}
            body = json.dumps(row).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = _Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class CustomerLookup(AsyncFunction[int, dict[str, Any]]):
    """GET /customers/{id}: the row on 200, empty on 404, TransientError on 503."""

    def __init__(self, base_url: str) -> None:
        self.connector = HttpConnector(f"{base_url}/customers/{{id}}", timeout=2.0)
        self.lookup: Any = None

    async def open(self) -> None:
        self.lookup = self.connector.async_lookup_function()
        await self.lookup.open()

    async def async_invoke(self, element: int) -> Collection[dict[str, Any]]:
        return [dict(row) for row in await self.lookup.async_lookup((element,))]

    async def timeout(self, element: int) -> Collection[dict[str, Any]]:
        return [{"id": element, "name": None, "country": None, "timed_out": True}]

    async def close(self) -> None:
        if self.lookup is not None:
            await self.lookup.close()


async def main() -> None:
    service = start_customer_service()
    try:
        ids: list[int | Watermark] = [*range(1, 121), Watermark(1), *range(121, 211)]
        retry = RetryStrategies.fixed_delay(
            max_attempts=3,
            delay=0.05,
            result_predicate=RetryPredicates.EMPTY_RESULT,  # not there yet: ask again
            exception_predicate=RetryPredicates.exception_type(TransientError),  # 503
        )
        base_url = f"http://127.0.0.1:{service.server_port}"
        enriched = AsyncDataStream.unordered_wait_with_retry(
            ids, CustomerLookup(base_url), timeout=5.0, retry_strategy=retry
        )
        by_country: dict[str, int] = {}
        async for item in enriched:
            if isinstance(item, Watermark):
                print(f"-- {item} (every customer before it has been emitted)")
                continue
            by_country[item["country"]] = by_country.get(item["country"], 0) + 1
            if item["id"] % 25 == 0:
                print(f"id={item['id']:>3} name={item['name']} country={item['country']}")
        print(f"customers per country: {dict(sorted(by_country.items()))}")
        print(f"ids 201..210 do not exist: {210 - sum(by_country.values())} missing after retries")
        print("operator metrics:")
        for name, value in enriched.metrics.snapshot().items():
            print(f"  {name:14} {value:g}")
    finally:
        service.shutdown()
        service.server_close()


if __name__ == "__main__":
    loop = new_event_loop()  # uvloop when installed
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
