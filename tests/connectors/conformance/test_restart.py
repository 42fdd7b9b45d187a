"""A server stopped and started again on the same port while lookups run, both clients: every
lookup returns its own row or a clear (transient) error, none hangs, and once the server is
back every lookup succeeds."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from asyncio_lookup.errors import TransientError
from tests.connectors.conformance.conftest import assert_own_row, lookup, lookup_function
from tests.connectors.conformance.servers import Server

WORKERS = 40


@pytest.mark.parametrize("server", ["uvicorn-h11", "node"], indirect=True)
async def test_restart_mid_run(server: Server, client: str) -> None:
    results: dict[str, Any] = {}
    restarted = asyncio.Event()

    async def worker(w: int) -> None:
        n = 0
        while not restarted.is_set():
            key = f"r{w}-{n}"
            n += 1
            try:
                results[key] = await lookup(fn, key)
            except TransientError as error:
                results[key] = error
                await asyncio.sleep(0.01)

    url = f"{server.base}/item/{{id}}"
    async with lookup_function(url, client, timeout=2, max_connections=20) as fn:
        workers = [asyncio.ensure_future(worker(w)) for w in range(WORKERS)]
        await asyncio.sleep(0.2)  # lookups in flight on kept-alive connections
        await asyncio.to_thread(server.restart)
        await asyncio.sleep(0.2)
        restarted.set()
        await asyncio.gather(*workers)
        after = await asyncio.gather(*(lookup(fn, f"after{i}") for i in range(50)))
    answered = {k: r for k, r in results.items() if not isinstance(r, BaseException)}
    for key, rows in answered.items():
        assert_own_row(rows, key, server)
    failed = {k: r for k, r in results.items() if isinstance(r, BaseException)}
    assert len(answered) > WORKERS, f"{len(answered)} answered, {len(failed)} failed"
    for i, rows in enumerate(after):
        assert_own_row(rows, f"after{i}", server)
