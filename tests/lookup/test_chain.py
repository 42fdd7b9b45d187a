"""LookupChain: cache -> lookup-miss retry -> failure retry -> connector (docs/semantics.md
§2.2-2.4)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection
from typing import Any

import pytest

from asyncio_lookup.connectors.memory import InMemoryConnector
from asyncio_lookup.errors import (
    CacheLoadError,
    ConfigurationError,
    LookupFailedError,
    ResultTypeError,
    TransientError,
)
from asyncio_lookup.lookup.cache import DefaultLookupCache
from asyncio_lookup.lookup.chain import LookupChain, MissRetry
from asyncio_lookup.lookup.functions import AsyncLookupFunction, Key, Row
from asyncio_lookup.lookup.options import LookupOptions
from asyncio_lookup.lookup.providers import (
    AsyncLookupFunctionProvider,
    FullCachingLookupProvider,
    LookupFunctionProvider,
    PartialCachingAsyncLookupProvider,
    PartialCachingLookupProvider,
)
from tests.lookup.support import AsyncFn, BatchFn, ManualClock, Source, SyncFn, Table

ALICE = {"id": 1, "name": "alice"}
PARTIAL = {"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "100"}


def options(extra: dict[str, str] | None = None, **base: str) -> LookupOptions:
    return LookupOptions.from_dict({**PARTIAL, **(extra or {})})


class Sleeps:
    """An async sleep that records and advances a manual clock instead of waiting."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock, self.calls = clock, []  # type: ignore[var-annotated]

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)
        self.clock.advance(seconds)
        await asyncio.sleep(0)


async def sync_chain(
    table: Table,
    opts: LookupOptions,
    clock: ManualClock,
    miss: MissRetry | None = None,
    cost: float = 0,
) -> LookupChain:
    chain = LookupChain.create(
        Source(table, sync=SyncFn(table, clock, cost)),
        opts,
        prefer_async=False,
        miss_retry=miss,
        clock=clock,
    )
    await chain.open()
    assert not chain.is_async
    return chain


async def async_chain(
    table: Table, opts: LookupOptions, clock: ManualClock, miss: MissRetry | None = None
) -> tuple[LookupChain, Sleeps]:
    sleeps = Sleeps(clock)
    chain = LookupChain.create(
        Source(table, async_=AsyncFn(table)),
        opts,
        prefer_async=True,
        miss_retry=miss,
        clock=clock,
        async_sleep=sleeps,
    )
    await chain.open()
    assert chain.is_async
    return chain, sleeps


# -- partial cache through the chain -----------------------------------------------------------


async def test_hit_miss_and_cached_empty_result_sync() -> None:
    table, clock = Table({(1,): [ALICE]}), ManualClock()
    chain = await sync_chain(table, options(), clock, cost=0.25)
    assert chain.lookup((1,)) == [ALICE]
    assert chain.lookup((1,)) == [ALICE]
    assert chain.lookup((9,)) == []
    assert chain.lookup((9,)) == []  # the empty result was cached
    assert table.calls == [(1,), (9,)]
    snap = chain.metrics.snapshot()
    assert (snap["hitCount"], snap["missCount"], snap["loadCount"]) == (2, 2, 2)
    assert snap["latestLoadTime"] == 250
    assert (snap["numLookups"], snap["numExternalCalls"], snap["numCachedRecords"]) == (4, 2, 2)
    await chain.close()


async def test_no_cache_calls_every_time() -> None:
    table, clock = Table({(1,): [ALICE]}), ManualClock()
    chain = await sync_chain(table, LookupOptions(), clock)
    assert chain.lookup((1,)) == chain.lookup((1,)) == [ALICE]
    assert len(table.calls) == 2
    snap = chain.metrics.snapshot()  # no cache, no cache metrics (docs/semantics.md §2.6)
    assert (snap["hitCount"], snap["missCount"], snap["loadCount"]) == (0, 0, 0)
    assert snap["numLookups"] == 2


async def test_miss_retry_below_the_cache_sync() -> None:
    table, clock = Table(), ManualClock()
    chain = await sync_chain(
        table, options(), clock, MissRetry(delay=1.0, max_attempts=3), cost=0.5
    )
    assert chain.lookup((7,)) == []
    assert len(table.calls) == 4  # max-attempts + 1 connector calls
    assert clock.sleeps == [1.0, 1.0, 1.0]  # the sync retry sleeps
    snap = chain.metrics.snapshot()
    assert (snap["missCount"], snap["loadCount"]) == (1, 1)  # one miss is one load
    assert snap["latestLoadTime"] == 4 * 500 + 3 * 1000  # retry sleeps included
    assert snap["numLookupMissRetries"] == 3
    # the final (empty) result was cached: no retry again
    assert chain.lookup((7,)) == []
    assert len(table.calls) == 4 and len(clock.sleeps) == 3


class LateRow(SyncFn):
    """The row for key 1 appears in the store after ``late`` calls."""

    def __init__(self, table: Table, late: int) -> None:
        super().__init__(table)
        self.late = late

    def lookup(self, key: Key) -> Collection[Row]:
        self.table.calls.append(key)
        return [ALICE] if len(self.table.calls) > self.late else []


async def test_miss_retry_with_cache_missing_key_false_finds_late_row() -> None:
    table, clock = Table(), ManualClock()
    opts = options({"lookup.partial-cache.cache-missing-key": "false"})
    chain = LookupChain.create(
        Source(table, sync=LateRow(table, late=2)),
        opts,
        prefer_async=False,
        miss_retry=MissRetry(delay=2.0, max_attempts=5),
        clock=clock,
    )
    await chain.open()
    assert chain.lookup((1,)) == [ALICE]
    assert len(table.calls) == 3 and clock.sleeps == [2.0, 2.0]
    assert chain.lookup((1,)) == [ALICE]  # found row is cached
    assert len(table.calls) == 3


async def test_cache_missing_key_false_looks_up_a_miss_again() -> None:
    table, clock = Table(), ManualClock()
    opts = options({"lookup.partial-cache.cache-missing-key": "false"})
    chain = await sync_chain(table, opts, clock, MissRetry(delay=1.0, max_attempts=1))
    assert chain.lookup((5,)) == [] and chain.lookup((5,)) == []
    assert len(table.calls) == 4  # 2 logical lookups x 2 attempts
    snap = chain.metrics.snapshot()
    assert (snap["missCount"], snap["loadCount"], snap["hitCount"]) == (2, 2, 0)


async def test_miss_retry_async_waits_on_loop_and_caches_final_result() -> None:
    table, clock = Table(), ManualClock()
    chain, sleeps = await async_chain(table, options(), clock, MissRetry(delay=0.5, max_attempts=2))
    assert await chain.async_lookup((3,)) == []
    assert sleeps.calls == [0.5, 0.5] and len(table.calls) == 3
    assert await chain.async_lookup((3,)) == []
    assert len(table.calls) == 3
    snap = chain.metrics.snapshot()
    assert (snap["missCount"], snap["loadCount"], snap["hitCount"]) == (1, 1, 1)
    assert snap["latestLoadTime"] == 1000
    await chain.close()


async def test_async_miss_retry_counts_against_a_timeout() -> None:
    table = Table()
    chain = LookupChain.create(
        Source(table, async_=AsyncFn(table)),
        options(),
        prefer_async=True,
        miss_retry=MissRetry(delay=30.0, max_attempts=3),
    )
    await chain.open()
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(chain.async_lookup((1,)), timeout=0.05)
    assert len(table.calls) == 1  # cancelled during the first retry wait
    snap = chain.metrics.snapshot()
    assert (snap["loadCount"], snap["numLoadFailures"]) == (0, 0)
    await chain.close()


# -- failure retries -----------------------------------------------------------------------------


async def test_transient_failures_are_retried_with_backoff_and_retry_after() -> None:
    table, clock = Table({(1,): [ALICE]}), ManualClock()
    table.errors[(1,)] = [TransientError("503", retry_after=7.0), ConnectionResetError("reset")]
    chain = await sync_chain(table, options(), clock)
    assert chain.lookup((1,)) == [ALICE]
    assert len(table.calls) == 3
    assert clock.sleeps[0] >= 7.0  # retry_after is the minimum wait
    assert 0 < clock.sleeps[1] < 7.0
    snap = chain.metrics.snapshot()
    assert (snap["numFailureRetries"], snap["loadCount"], snap["numLoadFailures"]) == (2, 1, 0)


async def test_exhausted_retries_raise_lookup_failed_naming_key() -> None:
    table, clock = Table({(1,): [ALICE]}), ManualClock()
    table.errors[(1,)] = [OSError(f"down {n}") for n in range(5)]
    chain = await sync_chain(table, options({"lookup.max-retries": "2"}), clock)
    with pytest.raises(LookupFailedError, match=r"\(1,\).*3 attempt") as raised:
        chain.lookup((1,))
    assert str(raised.value.__cause__) == "down 2"
    assert len(table.calls) == 3
    snap = chain.metrics.snapshot()
    assert (snap["missCount"], snap["loadCount"], snap["numLoadFailures"]) == (1, 0, 1)
    assert chain.lookup((1,)) == [ALICE]  # nothing was cached by the failure


async def test_non_transient_error_propagates_at_once() -> None:
    table, clock = Table(), ManualClock()
    table.errors[(1,)] = [KeyError("bug")]
    chain = await sync_chain(table, options(), clock)
    with pytest.raises(LookupFailedError, match=r"key \(1,\): KeyError: 'bug'") as raised:
        chain.lookup((1,))
    assert isinstance(raised.value.__cause__, KeyError)
    assert len(table.calls) == 1 and clock.sleeps == []


async def test_max_retries_zero_does_not_retry() -> None:
    table, clock = Table(), ManualClock()
    table.errors[(1,)] = [TransientError("busy")]
    chain = await sync_chain(table, options({"lookup.max-retries": "0"}), clock)
    with pytest.raises(LookupFailedError):
        chain.lookup((1,))
    assert len(table.calls) == 1


async def test_async_failure_retry_then_success() -> None:
    table, clock = Table({(1,): [ALICE]}), ManualClock()
    table.errors[(1,)] = [TransientError("429", retry_after=3.0)]
    chain, sleeps = await async_chain(table, options(), clock)
    assert await chain.async_lookup((1,)) == [ALICE]
    assert len(sleeps.calls) == 1 and sleeps.calls[0] >= 3.0
    await chain.close()


async def test_a_call_that_succeeds_at_once_never_builds_tenacity_machinery(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The hot path: tenacity's per-call set-up cost ~250 us per lookup (vs ~10 us for the call).
    import tenacity

    built: list[str] = []
    for name in ("Retrying", "AsyncRetrying"):
        real = getattr(tenacity, name)
        monkeypatch.setattr(
            tenacity, name, lambda *a, _real=real, _n=name, **k: built.append(_n) or _real(*a, **k)
        )
    table, clock = Table({(1,): [ALICE], (2,): [ALICE]}), ManualClock()
    sync = await sync_chain(table, options(), clock)
    chain, sleeps = await async_chain(table, options(), clock)
    assert sync.lookup((1,)) == [ALICE] and await chain.async_lookup((1,)) == [ALICE]
    assert built == []
    table.errors[(2,)] = [TransientError("503", retry_after=2.0)]
    assert await chain.async_lookup((2,)) == [ALICE]  # a failure hands over to tenacity
    assert built == ["AsyncRetrying"] and sleeps.calls[0] >= 2.0
    assert chain.metrics.snapshot()["numFailureRetries"] == 1
    await chain.close()


async def test_async_exhausted_retries_raise_lookup_failed_naming_key_with_last_cause() -> None:
    table, clock = Table({(4,): [ALICE]}), ManualClock()
    table.errors[(4,)] = [TransientError(f"busy {n}", retry_after=1.5) for n in range(5)]
    chain, sleeps = await async_chain(table, options({"lookup.max-retries": "2"}), clock)
    with pytest.raises(LookupFailedError, match=r"\(4,\).*3 attempt") as raised:
        await chain.async_lookup((4,))
    assert str(raised.value.__cause__) == "busy 2"
    assert len(table.calls) == 3 and len(sleeps.calls) == 2
    assert all(s >= 1.5 for s in sleeps.calls)
    snap = chain.metrics.snapshot()
    assert (snap["missCount"], snap["loadCount"], snap["numLoadFailures"]) == (1, 0, 1)
    assert snap["numFailureRetries"] == 2
    await chain.close()


async def test_metric_invariant_miss_equals_loads_plus_failures() -> None:
    table, clock = Table({(k,): [ALICE] for k in range(0, 20, 2)}), ManualClock()
    for k in range(0, 20, 5):
        table.errors[(k,)] = [TransientError("x")] * 10
    chain = await sync_chain(table, options({"lookup.max-retries": "1"}), clock)
    for k in list(range(20)) * 2:
        with contextlib.suppress(LookupFailedError):
            chain.lookup((k,))
    snap = chain.metrics.snapshot()
    assert snap["missCount"] == snap["loadCount"] + snap["numLoadFailures"]
    assert snap["hitCount"] + snap["missCount"] == snap["numLookups"] == 40


async def test_result_that_is_not_a_collection_is_an_error() -> None:
    class Bad(SyncFn):
        def lookup(self, key: Key) -> Any:
            return None

    chain = LookupChain.create(Source(Table(), sync=Bad(Table())), options(), prefer_async=False)
    await chain.open()
    with pytest.raises(ResultTypeError, match="Bad returned NoneType"):
        chain.lookup((1,))


# -- modes and sources ---------------------------------------------------------------------------


def test_mode_selection() -> None:
    table = Table()
    both = Source(table, sync=SyncFn(table), async_=AsyncFn(table))
    assert LookupChain.create(both, options(), prefer_async=True).is_async
    assert not LookupChain.create(both, options(), prefer_async=False).is_async
    sync_only = Source(table, sync=SyncFn(table))
    assert not LookupChain.create(sync_only, options(), prefer_async=True).is_async
    async_only = Source(table, async_=AsyncFn(table))
    assert LookupChain.create(async_only, options(), prefer_async=False).is_async
    with pytest.raises(ConfigurationError, match=r"connector.*neither"):
        LookupChain.create(Source(table), options(), prefer_async=True)


def test_full_cache_configuration_errors() -> None:
    table = Table()
    full = LookupOptions.from_dict(
        {"lookup.cache": "FULL", "lookup.full-cache.periodic-reload.interval": "1h"}
    )
    with pytest.raises(ConfigurationError, match="key_columns"):
        LookupChain.create(Source(table, rows=[]), full, prefer_async=True)
    with pytest.raises(ConfigurationError, match=r"'lookup.cache'.*scan"):
        LookupChain.create(
            Source(table, sync=SyncFn(table)), full, prefer_async=True, key_columns=["id"]
        )
    provider = PartialCachingLookupProvider.of(
        SyncFn(table), DefaultLookupCache.new_builder().maximum_size(1).build()
    )
    with pytest.raises(ConfigurationError, match=r"'lookup.cache'.*brings its own cache"):
        LookupChain.create(provider, options(), prefer_async=False)


@pytest.mark.parametrize("prefer_async", [True, False])
async def test_full_cache_answers_every_lookup_without_point_lookups(prefer_async: bool) -> None:
    rows = [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}, {"id": 2, "name": "c"}]
    table = Table()
    sync_fn, async_fn = SyncFn(table), AsyncFn(table)
    full = LookupOptions.from_dict(
        {"lookup.cache": "FULL", "lookup.full-cache.periodic-reload.interval": "1h"}
    )
    chain = LookupChain.create(
        Source(table, sync=sync_fn, async_=async_fn, rows=rows),
        full,
        prefer_async=prefer_async,
        miss_retry=MissRetry(delay=10.0, max_attempts=3),
        key_columns=["id"],
        name="T",
    )
    assert chain.is_async is prefer_async
    await chain.open()
    assert chain.lookup((2,)) == rows[1:]
    assert await chain.async_lookup((3,)) == []  # a miss in the snapshot: no retry
    assert table.calls == [] and sync_fn.opened == async_fn.opened == 0
    snap = chain.metrics.snapshot()
    assert (snap["hitCount"], snap["missCount"], snap["loadCount"]) == (2, 0, 1)
    await chain.close()


async def test_full_caching_provider_with_async_scan_and_connector_scan() -> None:
    async def scan() -> Any:
        for k in range(3):
            yield {"k": k, "v": k * 10}

    chain = LookupChain.create(
        FullCachingLookupProvider.of(scan, None),
        LookupOptions(),
        prefer_async=True,
        key_columns=["k"],
    )
    await chain.open()
    assert await chain.async_lookup((2,)) == [{"k": 2, "v": 20}]
    await chain.close()
    connector = InMemoryConnector([{"id": 5, "x": 1}], key_columns=["id"])
    chain = LookupChain.create(
        FullCachingLookupProvider.of(connector, None),
        LookupOptions(),
        prefer_async=False,
        key_columns=["id"],
    )
    await chain.open()
    assert chain.lookup((5,)) == [{"id": 5, "x": 1}]
    await chain.close()


async def test_full_cache_failed_load_raises_cache_load_error_on_open() -> None:
    def scan() -> Any:
        raise ConnectionRefusedError("nope")

    chain = LookupChain.create(
        FullCachingLookupProvider.of(scan, None),
        LookupOptions(),
        prefer_async=True,
        key_columns=["k"],
    )
    with pytest.raises(CacheLoadError):
        await chain.open()
    assert chain.failed


async def test_providers_carry_function_and_cache() -> None:
    table = Table({(1,): [ALICE]})
    cache = DefaultLookupCache.new_builder().maximum_size(10).build()
    sync_provider = PartialCachingLookupProvider.of(SyncFn(table), cache)
    chain = LookupChain.create(sync_provider, LookupOptions(), prefer_async=True)
    assert not chain.is_async and chain.cache is cache
    await chain.open()
    assert chain.lookup((1,)) == chain.lookup((1,)) == [ALICE]
    assert len(table.calls) == 1
    await chain.close()

    async_cache = DefaultLookupCache.new_builder().expire_after_write(60).build()
    async_provider = PartialCachingAsyncLookupProvider.of(AsyncFn(table), async_cache)
    chain = LookupChain.create(async_provider, LookupOptions(), prefer_async=False)
    assert chain.is_async and chain.cache is async_cache
    await chain.open()
    assert await chain.async_lookup((1,)) == [ALICE]
    await chain.close()

    assert LookupFunctionProvider.of(SyncFn(table)).async_lookup_function() is None
    assert AsyncLookupFunctionProvider.of(BatchFn(table)).lookup_function() is None
    with pytest.raises(ConfigurationError, match="function"):
        LookupFunctionProvider.of(AsyncFn(table))  # type: ignore[arg-type]


async def test_in_memory_connector_both_modes() -> None:
    connector = InMemoryConnector([ALICE, {"id": 2, "name": "bob"}], key_columns=["id"])
    for prefer_async in (True, False):
        chain = LookupChain.create(connector, options(), prefer_async=prefer_async)
        await chain.open()
        if chain.is_async:
            got = await asyncio.gather(*(chain.async_lookup((k,)) for k in (1, 2, 3)))
        else:
            # blocking calls, from a thread as Spark's task thread makes them
            got = [await asyncio.to_thread(chain.lookup, (k,)) for k in (1, 2, 3)]
        assert got == [[ALICE], [{"id": 2, "name": "bob"}], []]
        await chain.close()


@pytest.mark.parametrize(
    ("delay", "max_attempts", "named"),
    [
        (0.0, 3, "fixed-delay"),
        ("10s", 3, "fixed-delay"),
        (True, 3, "fixed-delay"),
        (1.0, 0, "max-attempts"),
        (1.0, 1.5, "max-attempts"),
        (1.0, "3", "max-attempts"),
        (1.0, True, "max-attempts"),
    ],
)
def test_miss_retry_rejects_bad_settings_naming_the_hint_option(
    delay: Any, max_attempts: Any, named: str
) -> None:
    with pytest.raises(ConfigurationError) as raised:
        MissRetry(delay=delay, max_attempts=max_attempts)
    assert raised.value.option == named and "allowed" in str(raised.value)


async def test_lookup_cached_answers_hits_only_and_counts_each_lookup_once() -> None:
    table, clock = Table({(1,): [ALICE]}), ManualClock()
    chain, _ = await async_chain(table, options(), clock)
    assert chain.lookup_cached((1,)) is None  # a miss: nothing counted, nothing called
    assert chain.metrics.snapshot()["numLookups"] == 0 and table.calls == []
    assert await chain.async_lookup((1,)) == [ALICE]
    first = chain.lookup_cached((1,))
    second = chain.lookup_cached((1,))
    assert first == second == [ALICE] and first is not second
    assert table.calls == [(1,)]
    snap = chain.metrics.snapshot()
    assert (snap["numLookups"], snap["hitCount"], snap["missCount"]) == (3, 2, 1)
    await chain.close()


async def test_lookup_cached_never_answers_without_a_peekable_cache() -> None:
    table, clock = Table({(1,): [ALICE]}), ManualClock()
    none, _ = await async_chain(table, LookupOptions(), clock)
    assert await none.async_lookup((1,)) == [ALICE]
    assert none.lookup_cached((1,)) is None

    class Counting(DefaultLookupCache):  # a user's cache: get_if_present may have effects
        pass

    cache = Counting(None, None, 10, True)
    chain = LookupChain.create(
        PartialCachingAsyncLookupProvider.of(AsyncFn(table), cache),
        LookupOptions(),
        prefer_async=True,
    )
    await chain.open()
    assert await chain.async_lookup((1,)) == [ALICE]
    assert chain.lookup_cached((1,)) is None
    await none.close()
    await chain.close()


async def test_lookup_cached_reads_the_full_cache_snapshot() -> None:
    rows = [{"id": 1, "name": "a"}]
    table = Table()
    full = LookupOptions.from_dict(
        {"lookup.cache": "FULL", "lookup.full-cache.periodic-reload.interval": "1h"}
    )
    chain = LookupChain.create(
        Source(table, async_=AsyncFn(table), rows=rows), full, prefer_async=True, key_columns=["id"]
    )
    await chain.open()
    assert chain.lookup_cached((1,)) == rows and chain.lookup_cached((2,)) == []
    snap = chain.metrics.snapshot()
    assert (snap["numLookups"], snap["hitCount"], table.calls) == (2, 2, [])
    await chain.close()


class _FailMissFailHit(AsyncLookupFunction):
    """A lookup that fails, misses, fails, misses, fails, then finds its row."""

    def __init__(self) -> None:
        self.answers: list[Any] = [
            TransientError("a"),
            [],
            TransientError("b"),
            [],
            TransientError("c"),
            [{"id": 1}],
        ]

    async def async_lookup(self, key: Key) -> Collection[Row]:
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return list(answer)


async def test_a_lookup_is_counted_retried_once_across_its_miss_retries() -> None:
    """Each lookup-miss retry starts a failure retry at attempt 1: one lookup was counted in
    the causes' 'retried' once per miss attempt that failed."""
    options = LookupOptions.from_dict({"lookup.max-retry-backoff": "10ms"})
    chain = LookupChain.create(
        Source(Table({}), async_=_FailMissFailHit()),
        options,
        prefer_async=True,
        miss_retry=MissRetry(delay=0.001, max_attempts=5),
    )
    await chain.open()
    try:
        assert await chain.async_lookup((1,)) == [{"id": 1}]
    finally:
        await chain.close()
    counts = chain.metrics.causes.take().to_json()["TransientError"]
    assert (counts["retries"], counts["retried"]) == (3, 1)


class _MissTwiceThenDown(AsyncLookupFunction):
    def __init__(self) -> None:
        self.calls = 0

    async def async_lookup(self, key: Key) -> Collection[Row]:
        self.calls += 1
        if self.calls <= 3:  # the first call and 2 lookup-miss retries: no row
            return []
        raise TransientError("down")


@pytest.mark.parametrize("mode", ["async", "sync"])
async def test_a_failed_lookup_s_attempts_are_every_call_it_made(mode: str) -> None:
    """A row failing after lookup-miss retries said the calls of its last load (2 of 5)."""
    from asyncio_lookup.errors import LookupFailedError

    options = LookupOptions.from_dict(
        {"lookup.max-retries": "1", "lookup.max-retry-backoff": "1ms"}
    )
    function = _MissTwiceThenDown()
    source = Source(Table({}), async_=function if mode == "async" else None)
    if mode == "sync":
        from asyncio_lookup.lookup.functions import LookupFunction

        class Blocking(LookupFunction):
            def lookup(self, key: Key) -> list[Row]:
                return list(asyncio.run(function.async_lookup(key)))  # type: ignore[arg-type]

        source = Source(Table({}), sync=Blocking())
    chain = LookupChain.create(
        source,
        options,
        prefer_async=mode == "async",
        miss_retry=MissRetry(delay=0.001, max_attempts=5),
    )
    await chain.open()
    try:
        with pytest.raises(LookupFailedError) as error:
            if mode == "async":
                await chain.async_lookup((1,))
            else:
                await asyncio.to_thread(chain.lookup, (1,))
    finally:
        await chain.close()
    assert function.calls == 5 and error.value.attempts == 5


class _MissThenBadAnswer(AsyncLookupFunction):
    def __init__(self) -> None:
        self.calls = 0

    async def async_lookup(self, key: Key) -> Collection[Row]:
        self.calls += 1
        if self.calls <= 3:
            return []
        raise ValueError("bad answer")  # not retried: wrapped into LookupFailedError


async def test_a_lookup_failing_for_good_after_miss_retries_counts_every_call() -> None:
    from asyncio_lookup.lookup.failed_rows import attempts_of

    function = _MissThenBadAnswer()
    chain = LookupChain.create(
        Source(Table({}), async_=function),
        LookupOptions.from_dict({}),
        prefer_async=True,
        miss_retry=MissRetry(delay=0.001, max_attempts=5),
    )
    await chain.open()
    try:
        with pytest.raises(Exception) as error:
            await chain.async_lookup((1,))
    finally:
        await chain.close()
    assert function.calls == 4 and attempts_of(error.value) == 4
