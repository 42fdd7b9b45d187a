"""Enrich a stream of customer ids from an HTTP service with the DataStream-style API.

A local aiohttp service (started here, on 127.0.0.1 and a random port) plays a flaky
customer API: some ids answer 503 the first time, some are not there yet on the first call
(404 -> empty result) and appear a moment later. ``unordered_wait_with_retry`` retries both
within a total timeout per record, with at most 100 requests in flight.

Run:  .venv/bin/python examples/datastream_enrich.py
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any

from aiohttp import ClientSession, ClientTimeout, web

from asyncio_lookup import (
    AsyncDataStream,
    AsyncFunction,
    RetryPredicates,
    RetryStrategies,
    Watermark,
    new_event_loop,
)
from asyncio_lookup.errors import TransientError

COUNTRIES = ["DE", "FR", "NL", "PL", "SE"]


def customer_service() -> web.Application:
    """Customers 1..200; ids divisible by 7 answer 503 once, by 11 are missing once."""
    calls: dict[int, int] = {}

    async def get_customer(request: web.Request) -> web.Response:
        customer_id = int(request.match_info["id"])
        calls[customer_id] = calls.get(customer_id, 0) + 1
        await asyncio.sleep(0.002 + (customer_id % 5) * 0.002)  # some latency
        first_call = calls[customer_id] == 1
        if customer_id % 7 == 0 and first_call:
            return web.json_response({"error": "overloaded"}, status=503)
        if customer_id > 200 or (customer_id % 11 == 0 and first_call):
            return web.json_response([], status=404)
        row = {
            "id": customer_id,
            "name": f"customer-{customer_id}",
            "country": COUNTRIES[customer_id % len(COUNTRIES)],
        }
        return web.json_response([row])

    app = web.Application()
    app.router.add_get("/customers/{id}", get_customer)
    return app


class CustomerLookup(AsyncFunction[int, dict[str, Any]]):
    """GET /customers/{id}: rows on 200, empty on 404, TransientError on 5xx."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.session: ClientSession | None = None

    async def open(self) -> None:
        self.session = ClientSession(timeout=ClientTimeout(total=2.0))

    async def async_invoke(self, element: int) -> Collection[dict[str, Any]]:
        assert self.session is not None
        async with self.session.get(f"{self.base_url}/customers/{element}") as response:
            if response.status >= 500:
                raise TransientError(f"HTTP {response.status} for customer {element}")
            rows: list[dict[str, Any]] = await response.json()
            return rows

    async def timeout(self, element: int) -> Collection[dict[str, Any]]:
        return [{"id": element, "name": None, "country": None, "timed_out": True}]

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()


async def main() -> None:
    runner = web.AppRunner(customer_service())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        ids: list[int | Watermark] = [*range(1, 121), Watermark(1), *range(121, 211)]
        retry = RetryStrategies.fixed_delay(
            max_attempts=3,
            delay=0.05,
            result_predicate=RetryPredicates.EMPTY_RESULT,  # not there yet: ask again
            exception_predicate=RetryPredicates.exception_type(TransientError),  # 503
        )
        enriched = AsyncDataStream.unordered_wait_with_retry(
            ids, CustomerLookup(f"http://127.0.0.1:{port}"), timeout=5.0, retry_strategy=retry
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
        await runner.cleanup()


if __name__ == "__main__":
    loop = new_event_loop()  # uvloop when installed
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
