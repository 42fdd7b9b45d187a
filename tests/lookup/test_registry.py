"""Per-process chain registry: one opened chain per lookup table, shared across tasks."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from asyncio_lookup.errors import CacheLoadError
from asyncio_lookup.lookup import registry
from asyncio_lookup.lookup.chain import LookupChain
from asyncio_lookup.lookup.options import LookupOptions
from asyncio_lookup.lookup.providers import FullCachingLookupProvider
from asyncio_lookup.lookup.registry import acquire_chain, close_all_chains, release_chain
from tests.lookup.support import AsyncFn, Source, Table

PARTIAL = LookupOptions.from_dict(
    {"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "10"}
)

# the scans fail with errors a retry would ride out: these tests are about a load that failed
NO_RETRY = LookupOptions.from_dict({"lookup.max-retries": "0"})


@pytest.fixture(autouse=True)
async def clean_registry() -> AsyncIterator[None]:
    await close_all_chains()
    yield
    await close_all_chains()
    registry.set_idle_timeout(registry.DEFAULT_IDLE_TIMEOUT)


def factory(table: Table, fn: AsyncFn, made: list[LookupChain]) -> Any:
    def make() -> LookupChain:
        chain = LookupChain.create(Source(table, async_=fn), PARTIAL, prefer_async=True)
        made.append(chain)
        return chain

    return make


async def test_tasks_share_one_chain_and_its_cache() -> None:
    table, made = Table({(1,): [{"id": 1}]}), []  # type: ignore[var-annotated]
    fn = AsyncFn(table)
    make = factory(table, fn, made)
    first = await acquire_chain("T", make)
    assert await first.async_lookup((1,)) == [{"id": 1}]
    release_chain("T")
    second = await acquire_chain("T", make)  # the next task of this process
    assert second is first and len(made) == 1 and fn.opened == 1
    assert await second.async_lookup((1,)) == [{"id": 1}]
    assert table.calls == [(1,)]  # served by the surviving cache
    release_chain("T")
    other = await acquire_chain("U", factory(table, AsyncFn(table), made))
    assert other is not first  # a different LookupTable has its own chain
    release_chain("U")


async def test_concurrent_acquirers_wait_for_one_open() -> None:
    table, made = Table(), []  # type: ignore[var-annotated]

    class SlowOpen(AsyncFn):
        async def open(self) -> None:
            await asyncio.sleep(0.01)
            await super().open()

    fn = SlowOpen(table)
    chains = await asyncio.gather(*(acquire_chain("T", factory(table, fn, made)) for _ in range(5)))
    assert all(c is chains[0] for c in chains) and len(made) == 1 and fn.opened == 1
    for _ in chains:
        release_chain("T")


async def test_failed_open_is_not_kept_and_next_acquire_starts_afresh() -> None:
    attempts = [0]

    def scan() -> Iterator[dict[str, Any]]:
        attempts[0] += 1
        if attempts[0] == 1:
            raise ConnectionRefusedError("db down")
        yield {"k": 1}

    def make() -> LookupChain:
        provider = FullCachingLookupProvider.of(scan, None)
        return LookupChain.create(provider, NO_RETRY, prefer_async=True, key_columns=["k"])

    with pytest.raises(CacheLoadError):
        await acquire_chain("F", make)
    assert "F" not in registry.chain_ids()
    chain = await acquire_chain("F", make)
    assert await chain.async_lookup((1,)) == [{"k": 1}]
    release_chain("F")


def second_load_fails() -> Callable[[], LookupChain]:
    """A factory of FULL-cache chains over one scan whose second load (of any chain) fails."""
    loads = [0]

    def scan() -> list[dict[str, Any]]:
        loads[0] += 1
        if loads[0] == 2:
            raise TimeoutError("reload failed")
        return [{"k": 1, "load": loads[0]}]

    def make() -> LookupChain:
        provider = FullCachingLookupProvider.of(scan, None)
        return LookupChain.create(provider, NO_RETRY, prefer_async=True, key_columns=["k"])

    return make


async def test_chain_whose_reload_failed_is_replaced_for_the_next_task() -> None:
    make = second_load_fails()
    first = await acquire_chain("F", make)
    assert first.full_cache is not None
    # simulate a failed scheduled reload of this chain's snapshot
    first.full_cache._load(0.0, initial=False)
    with pytest.raises(CacheLoadError):
        await first.async_lookup((1,))
    release_chain("F")
    second = await acquire_chain("F", make)
    assert second is not first
    assert await second.async_lookup((1,)) == [{"k": 1, "load": 3}]
    release_chain("F")


async def test_the_next_task_reports_what_a_replaced_chain_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A FULL reload that failed between tasks was counted in the chain the next task
    replaced, which no task reports: numLoadFailures missed it (and the job's totals). The
    fresh load says that lookups are served again, as a good reload does."""
    caplog.set_level(logging.WARNING, logger="asyncio_lookup")
    make = second_load_fails()
    first = await acquire_chain("F", make)
    assert first.full_cache is not None
    reported = [first.metrics.take_delta()]  # task 1's report
    release_chain("F")
    first.full_cache._load(0.0, initial=False)  # the scheduled reload fails between tasks
    first.metrics.causes.record("failures", TimeoutError("reload failed"))
    second = await acquire_chain("F", make)
    assert second is not first
    reported.append(second.metrics.take_delta())  # task 2's report
    release_chain("F")
    assert [d["numLoadFailures"] for d in reported] == [0, 1]
    assert [d["loadCount"] for d in reported] == [1, 1]
    assert second.metrics.causes.count("TimeoutError", "failures") == 1
    assert second.metrics.take_delta()["numLoadFailures"] == 0  # reported once
    assert any("served again" in r.getMessage() for r in caplog.records)


async def test_idle_chains_are_closed_after_the_idle_timeout() -> None:
    table, made = Table(), []  # type: ignore[var-annotated]
    fn = AsyncFn(table)
    await acquire_chain("T", factory(table, fn, made))
    release_chain("T")
    registry.set_idle_timeout(0.0)
    await acquire_chain("U", factory(table, AsyncFn(table), made))  # sweeps idle ones
    assert "T" not in registry.chain_ids() and fn.closed == 1
    release_chain("U")


async def test_a_chain_in_use_is_never_swept() -> None:
    table, made = Table(), []  # type: ignore[var-annotated]
    fn = AsyncFn(table)
    await acquire_chain("T", factory(table, fn, made))
    registry.set_idle_timeout(0.0)
    await acquire_chain("U", factory(table, AsyncFn(table), made))
    assert "T" in registry.chain_ids() and fn.closed == 0
    release_chain("T")
    release_chain("U")


def test_a_chain_of_another_loop_is_replaced() -> None:
    table, made = Table(), []  # type: ignore[var-annotated]

    async def use() -> LookupChain:
        chain = await acquire_chain("L", factory(table, AsyncFn(table), made))
        release_chain("L")
        return chain

    first = asyncio.run(use())
    second = asyncio.run(use())  # a new loop: pools bound to the old one are unusable
    assert second is not first and len(made) == 2
    asyncio.run(close_all_chains())


async def test_release_of_a_replaced_chain_leaves_its_successor_in_use() -> None:
    make = second_load_fails()
    registry.set_idle_timeout(0.0)
    first = await acquire_chain("F", make)
    assert first.full_cache is not None
    first.full_cache._load(0.0, initial=False)  # its reload fails while a task still uses it
    second = await acquire_chain("F", make)  # the next task gets a fresh chain
    assert second is not first
    release_chain("F", first)  # the first task ends: that must not release the second's use
    await acquire_chain("G", factory(Table(), AsyncFn(Table()), []))  # sweeps idle chains
    assert "F" in registry.chain_ids()
    assert await second.async_lookup((1,)) == [{"k": 1, "load": 3}]
    release_chain("F", second)
    release_chain("G")


async def test_idle_chains_beyond_the_cap_are_closed_least_recently_used_first() -> None:
    """A LookupTable per micro-batch left a chain (and its pools) per table open for 600 s."""
    table = Table({(1,): [{"id": 1}]})
    fns = [AsyncFn(table) for _ in range(registry.MAX_IDLE_CHAINS + 3)]
    made: list[LookupChain] = []
    for n, fn in enumerate(fns):
        await acquire_chain(f"T{n}", factory(table, fn, made))
        release_chain(f"T{n}")
    held = await acquire_chain("in-use", factory(table, AsyncFn(table), made))
    # the sweep of the last acquire left at most the cap idle, the oldest ones closed
    assert [fn.closed for fn in fns[:3]] == [1, 1, 1]
    assert sum(1 for fn in fns if fn.closed == 0) == registry.MAX_IDLE_CHAINS
    assert all(fn.closed == 0 for fn in fns[-registry.MAX_IDLE_CHAINS :])
    assert "in-use" in registry.chain_ids()
    release_chain("in-use", held)


async def test_tables_used_in_turn_up_to_the_cap_keep_their_chains() -> None:
    """The sweep of an acquire closed the very chain it was about to take (the least recently
    used one, in a cycle): every table reopened on every task."""
    table = Table({(1,): [{"id": 1}]})
    made: list[LookupChain] = []
    fns = [AsyncFn(table) for _ in range(registry.MAX_IDLE_CHAINS + 1)]
    for _ in range(3):
        for n, fn in enumerate(fns):
            await acquire_chain(f"T{n}", factory(table, fn, made))
            release_chain(f"T{n}")
    assert len(made) == len(fns) and all(fn.closed == 0 for fn in fns)
