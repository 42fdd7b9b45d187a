"""BlockingLookupFunction: an async lookup function as FLIP-234's sync lookup."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Collection

import pytest

from asyncio_lookup.errors import TransientError
from asyncio_lookup.lookup.blocking import BlockingLookupFunction
from asyncio_lookup.lookup.chain import LookupChain
from asyncio_lookup.lookup.functions import AsyncLookupFunction, Key, Row
from asyncio_lookup.lookup.options import LookupOptions
from asyncio_lookup.lookup.providers import AsyncLookupFunctionProvider
from asyncio_lookup.runtime.loop import process_loop


class Probe(AsyncLookupFunction):
    """Records the loop each call runs on and how many calls are in flight at once."""

    def __init__(self, fail_opens: int = 0) -> None:
        self.fail_opens = fail_opens
        self.opens = 0
        self.closed = False
        self.loops: set[asyncio.AbstractEventLoop] = set()
        self.in_flight = 0
        self.most_in_flight = 0
        self.bound: asyncio.AbstractEventLoop | None = None

    async def open(self) -> None:
        self.opens += 1
        if self.opens <= self.fail_opens:
            raise TransientError("refused")
        self.bound = asyncio.get_running_loop()

    async def async_lookup(self, key: Key) -> Collection[Row]:
        loop = asyncio.get_running_loop()
        assert loop is self.bound, "a call ran on another loop than the one it was opened on"
        self.loops.add(loop)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.002)
        finally:
            self.in_flight -= 1
        return [{"id": key[0]}]

    async def close(self) -> None:
        self.closed = True


def test_runs_on_the_process_loop_one_call_at_a_time() -> None:
    probe = Probe()
    fn = BlockingLookupFunction(probe)
    fn.open()
    results: list[Collection[Row]] = []
    threads = [
        threading.Thread(target=lambda i=i: results.append(fn.lookup((i,)))) for i in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r[0]["id"] for r in results) == list(range(8))  # type: ignore[index]
    assert probe.loops == {process_loop()}
    assert probe.most_in_flight == 1  # FLIP-234 sync: one lookup in flight
    fn.close()
    assert probe.closed


async def test_opened_on_a_running_loop_runs_there_from_other_threads() -> None:
    probe = Probe()
    fn = BlockingLookupFunction(probe)
    fn.open()  # on this loop: the async open waits for the first call
    assert probe.opens == 0
    assert await asyncio.to_thread(fn.lookup, (1,)) == [{"id": 1}]
    assert probe.loops == {asyncio.get_running_loop()}
    with pytest.raises(RuntimeError, match="thread running an event loop"):
        fn.lookup((2,))  # blocking the loop it waits for would never return
    fn.close()  # from the loop: scheduled on it
    await asyncio.sleep(0)
    assert probe.closed


async def test_a_refused_open_is_retried_by_the_sync_chain() -> None:
    probe = Probe(fail_opens=2)
    source = AsyncLookupFunctionProvider.of(probe)

    class SyncToo:
        def lookup_function(self) -> BlockingLookupFunction:
            return BlockingLookupFunction(probe)

        def async_lookup_function(self) -> AsyncLookupFunction:
            return source.function

        def scan(self) -> None:
            return None

    chain = LookupChain.create(SyncToo(), LookupOptions(max_retries=3), prefer_async=False)
    assert not chain.is_async
    await chain.open()
    try:
        assert await asyncio.to_thread(chain.lookup, (5,)) == [{"id": 5}]
    finally:
        await chain.close()
    assert probe.opens == 3
    assert chain.metrics.snapshot()["numFailureRetries"] == 2
