"""Cache scope (docs/semantics.md §2.3): chains of one lookup table in one process share one
cache."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from asyncio_lookup.errors import CacheLoadError
from asyncio_lookup.lookup import registry, scope
from asyncio_lookup.lookup.chain import LookupChain, MissRetry
from asyncio_lookup.lookup.options import LookupOptions
from asyncio_lookup.lookup.providers import FullCachingLookupProvider
from asyncio_lookup.lookup.registry import acquire_chain, close_all_chains, release_chain
from tests.lookup.support import AsyncFn, Source, SyncFn, Table

PARTIAL = LookupOptions.from_dict(
    {"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "10"}
)
ALICE = {"id": 1, "name": "alice"}

# the scans fail with errors a retry would ride out: these tests are about a load that failed
NO_RETRY = LookupOptions.from_dict({"lookup.max-retries": "0"})


@pytest.fixture(autouse=True)
async def no_scopes_left() -> AsyncIterator[None]:
    yield
    await close_all_chains()
    registry.set_idle_timeout(registry.DEFAULT_IDLE_TIMEOUT)
    assert scope.scope_keys() == []  # every chain closed: every scope's cache closed


def partial_chain(table: Table, *, is_async: bool, scope_name: str | None, **kw: Any) -> Any:
    source = (
        Source(table, sync=SyncFn(table)) if not is_async else Source(table, async_=AsyncFn(table))
    )
    return LookupChain.create(
        source, PARTIAL, prefer_async=is_async, key_columns=["id"], cache_scope=scope_name, **kw
    )


async def test_chains_of_one_scope_share_the_cache_whatever_mode_and_retry() -> None:
    table = Table({(1,): [ALICE], (2,): []})
    sync = partial_chain(table, is_async=False, scope_name="T")
    retrying = partial_chain(
        table, is_async=True, scope_name="T", miss_retry=MissRetry(delay=0.001, max_attempts=2)
    )
    await sync.open()
    await retrying.open()
    assert sync.cache is retrying.cache and sync.metrics is retrying.metrics
    assert sync.lookup((1,)) == [ALICE]  # loaded by the sync chain ...
    assert await retrying.async_lookup((1,)) == [ALICE]  # ... a hit for the async one
    assert await retrying.async_lookup((2,)) == []  # a miss, retried, its result cached
    assert sync.lookup((2,)) == []  # a hit: the cached empty result
    assert table.calls == [(1,), (2,), (2,), (2,)]
    snap = sync.metrics.snapshot()
    assert (snap["hitCount"], snap["missCount"], snap["loadCount"]) == (2, 2, 2)
    assert snap["numCachedRecords"] == 2
    await sync.close()
    assert await retrying.async_lookup((1,)) == [ALICE]  # still open for the other chain
    assert table.calls == [(1,), (2,), (2,), (2,)]
    cache = retrying.cache
    await retrying.close()
    assert cache is not None and cache.size() == 0  # the last user closed it


async def test_different_scopes_or_no_scope_keep_separate_caches() -> None:
    table = Table({(1,): [ALICE]})
    chains = [
        partial_chain(table, is_async=True, scope_name="T"),
        partial_chain(table, is_async=True, scope_name="U"),
        partial_chain(table, is_async=True, scope_name=None),
        partial_chain(table, is_async=True, scope_name=None),
    ]
    for chain in chains:
        await chain.open()
        assert await chain.async_lookup((1,)) == [ALICE]
    assert len({id(c.cache) for c in chains}) == 4 and len(table.calls) == 4
    for chain in chains:
        await chain.close()


async def test_same_scope_with_other_key_columns_is_another_cache() -> None:
    # A key tuple means nothing without its columns: (1,) by id is not (1,) by region.
    table = Table({(1,): [ALICE]})
    by_id = partial_chain(table, is_async=True, scope_name="T")
    by_region = LookupChain.create(
        Source(table, async_=AsyncFn(table)),
        PARTIAL,
        prefer_async=True,
        key_columns=["region"],
        cache_scope="T",
    )
    await by_id.open()
    await by_region.open()
    assert by_id.cache is not by_region.cache
    await by_id.close()
    await by_region.close()


class CountingScan:
    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows, self.scans, self.fail = rows, 0, False

    def __call__(self) -> list[dict[str, Any]]:
        self.scans += 1
        if self.fail:
            raise ConnectionError("dim store down")
        return list(self.rows)


def full_chain(scan: CountingScan, *, is_async: bool, retry: MissRetry | None = None) -> Any:
    return LookupChain.create(
        FullCachingLookupProvider.of(scan, None),
        NO_RETRY,
        prefer_async=is_async,
        miss_retry=retry,
        key_columns=["id"],
        cache_scope="T",
    )


async def test_full_cache_of_a_scope_is_loaded_once_for_concurrent_opens() -> None:
    scan = CountingScan([ALICE])
    a = full_chain(scan, is_async=True)
    b = full_chain(scan, is_async=False, retry=MissRetry(delay=1.0, max_attempts=3))
    await asyncio.gather(a.open(), b.open())
    assert scan.scans == 1 and a.full_cache is b.full_cache
    assert await a.async_lookup((1,)) == [ALICE] and b.lookup((1,)) == [ALICE]
    assert a.metrics.snapshot()["hitCount"] == 2
    await a.close()
    await b.close()


async def test_a_failed_full_load_is_not_inherited_by_a_later_chain() -> None:
    scan = CountingScan([ALICE])
    scan.fail = True
    first = full_chain(scan, is_async=True)
    with pytest.raises(CacheLoadError):
        await first.open()
    await first.close()
    scan.fail = False
    second = full_chain(scan, is_async=True)
    await second.open()
    assert await second.async_lookup((1,)) == [ALICE] and scan.scans == 2
    await second.close()


async def test_registry_chains_of_one_table_share_the_scope_until_the_last_closes() -> None:
    table = Table({(1,): [ALICE]})
    made: list[LookupChain] = []

    def factory(is_async: bool, scope_name: str = "T") -> Any:
        def make() -> LookupChain:
            made.append(partial_chain(table, is_async=is_async, scope_name=scope_name))
            return made[-1]

        return make

    async_chain = await acquire_chain("T:id:async", factory(True))
    sync_chain = await acquire_chain("T:id:sync", factory(False))
    assert async_chain is not sync_chain and async_chain.cache is sync_chain.cache
    assert await async_chain.async_lookup((1,)) == [ALICE]
    assert sync_chain.lookup((1,)) == [ALICE] and table.calls == [(1,)]
    release_chain("T:id:async", async_chain)
    release_chain("T:id:sync", sync_chain)
    assert scope.scope_keys() == [("T", ("id",))]  # idle chains keep the cache for the next task
    registry.set_idle_timeout(0)
    other = await acquire_chain("U", factory(True, "U"))  # the sweep closes T's idle chains
    assert scope.scope_keys() == [("U", ("id",))]  # ... and with the last of them, T's cache
    assert async_chain.cache is not None and async_chain.cache.size() == 0
    release_chain("U", other)
