"""DefaultLookupCache: docs/semantics.md §2.3 on a manual clock."""

from __future__ import annotations

import pickle
import threading
from datetime import timedelta

import pytest

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.lookup.cache import DefaultLookupCache, LookupCache
from asyncio_lookup.lookup.metrics import EVICTION_COUNT, CacheMetricGroup
from tests.lookup.support import ManualClock

ROW = {"id": 1, "name": "a"}


def make(clock: ManualClock, **settings: object) -> tuple[DefaultLookupCache, CacheMetricGroup]:
    builder = DefaultLookupCache.new_builder().clock(clock)
    for name, value in settings.items():
        getattr(builder, name)(value)
    cache = builder.build()
    metrics = CacheMetricGroup()
    cache.open(metrics)
    return cache, metrics


def test_is_a_lookup_cache() -> None:
    assert isinstance(DefaultLookupCache.new_builder().maximum_size(1).build(), LookupCache)


def test_hit_miss_and_cached_empty_result() -> None:
    clock = ManualClock()
    cache, metrics = make(clock, maximum_size=10)
    assert cache.get_if_present((1,)) is None
    cache.put((1,), [ROW])
    cache.put((2,), [])
    assert cache.get_if_present((1,)) == [ROW]
    assert cache.get_if_present((2,)) == []  # an empty list counts as cached
    snap = metrics.snapshot()
    assert (snap["hitCount"], snap["missCount"], snap["numCachedRecords"]) == (2, 1, 2)
    assert snap["numCachedBytes"] > 0


def test_cache_missing_key_false_stores_no_empty_result() -> None:
    cache, _ = make(ManualClock(), maximum_size=10, cache_missing_key=False)
    cache.put((1,), [])
    cache.put((2,), [ROW])
    assert cache.get_if_present((1,)) is None
    assert cache.get_if_present((2,)) == [ROW]
    assert cache.size() == 1


def test_expire_after_write() -> None:
    clock = ManualClock()
    cache, _ = make(clock, expire_after_write=10)
    cache.put((1,), [ROW])
    clock.advance(9.999)
    assert cache.get_if_present((1,)) == [ROW]  # a hit does not extend a write expiry
    clock.advance(0.001)  # now - written == W: expired
    assert cache.get_if_present((1,)) is None
    assert cache.size() == 0


def test_expire_after_access_is_sliding() -> None:
    clock = ManualClock()
    cache, _ = make(clock, expire_after_access=timedelta(seconds=10))
    cache.put((1,), [ROW])
    for _ in range(5):
        clock.advance(9)
        assert cache.get_if_present((1,)) == [ROW]  # each hit restarts the window
    clock.advance(10)
    assert cache.get_if_present((1,)) is None


def test_both_expiries_either_expires() -> None:
    clock = ManualClock()
    cache, _ = make(clock, expire_after_access=5, expire_after_write=12)
    cache.put((1,), [ROW])
    cache.put((2,), [ROW])
    for _ in range(2):
        clock.advance(4)
        assert cache.get_if_present((1,)) == [ROW]
    # t=8: key 2 idle for 8 >= 5 -> expired by access; key 1 accessed at t=8
    assert cache.get_if_present((2,)) is None
    clock.advance(4)  # t=12: key 1 written 12 ago -> expired by write though accessed at 8
    assert cache.get_if_present((1,)) is None


def test_exact_lru_order_hits_and_writes_count_as_use() -> None:
    cache, _ = make(ManualClock(), maximum_size=3)
    for k in (1, 2, 3):
        cache.put((k,), [ROW])
    assert cache.get_if_present((1,)) == [ROW]  # order now 2, 3, 1
    cache.put((2,), [ROW])  # rewrite: order 3, 1, 2
    cache.put((4,), [ROW])  # evicts 3
    assert cache.keys() == [(1,), (2,), (4,)]
    cache.put((5,), [ROW])  # evicts 1
    assert cache.get_if_present((1,)) is None
    assert cache.keys() == [(2,), (4,), (5,)]


def test_max_rows_counts_keys_not_rows() -> None:
    cache, metrics = make(ManualClock(), maximum_size=2)
    cache.put((1,), [ROW] * 50)
    cache.put((2,), [ROW] * 50)
    assert cache.size() == 2
    assert cache.get_if_present((1,)) == [ROW] * 50
    assert metrics.snapshot()["numCachedRecords"] == 2


def test_max_rows_zero_keeps_nothing() -> None:
    cache, metrics = make(ManualClock(), maximum_size=0)
    cache.put((1,), [ROW])
    assert cache.get_if_present((1,)) is None
    assert metrics.snapshot()["numCachedRecords"] == 0
    assert metrics.snapshot()["numCachedBytes"] == 0


def test_put_returns_previous_and_invalidate() -> None:
    cache, _ = make(ManualClock(), maximum_size=5)
    assert cache.put((1,), [ROW]) is None
    assert cache.put((1,), []) == [ROW]
    cache.invalidate((1,))
    assert cache.get_if_present((1,)) is None


def test_bytes_track_evictions_and_expiry() -> None:
    clock = ManualClock()
    cache, metrics = make(clock, maximum_size=2, expire_after_write=10)
    cache.put((1,), [ROW])
    one = metrics.snapshot()["numCachedBytes"]
    cache.put((2,), [ROW])
    cache.put((3,), [ROW])
    assert metrics.snapshot()["numCachedBytes"] == pytest.approx(2 * one)
    clock.advance(10)
    assert metrics.snapshot()["numCachedBytes"] == 0


def test_unbounded_cache_is_rejected() -> None:
    with pytest.raises(ConfigurationError, match="maximum_size"):
        DefaultLookupCache.new_builder().cache_missing_key(True).build()
    with pytest.raises(ConfigurationError, match="maximum_size"):
        DefaultLookupCache.new_builder().maximum_size(-1)
    with pytest.raises(ConfigurationError, match="expire_after_write"):
        DefaultLookupCache.new_builder().expire_after_write(-1)
    # an expiry of 0 never hits yet stores every miss (the lookup.* options refuse '0s' too)
    for expiry in ("expire_after_write", "expire_after_access"):
        with pytest.raises(ConfigurationError, match=rf"{expiry}.*greater than 0"):
            getattr(DefaultLookupCache.new_builder(), expiry)(0)
    # bool('false') is True: only a real bool says whether empty results are cached
    with pytest.raises(ConfigurationError, match=r"'false' for 'cache_missing_key'"):
        DefaultLookupCache.new_builder().cache_missing_key("false")  # type: ignore[arg-type]


def test_pickles_configuration_without_entries() -> None:
    cache = DefaultLookupCache.new_builder().maximum_size(5).expire_after_access(3).build()
    cache.put((1,), [ROW])
    copy = pickle.loads(pickle.dumps(cache))
    assert (copy.maximum_size, copy.expire_after_access) == (5, 3)
    assert copy.size() == 0


def test_thread_safe_under_concurrent_use() -> None:
    cache, metrics = make(ManualClock(), maximum_size=50)

    def work(offset: int) -> None:
        for i in range(2000):
            key = ((i * 7 + offset) % 120,)
            if cache.get_if_present(key) is None:
                cache.put(key, [ROW])

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    snap = metrics.snapshot()
    assert snap["hitCount"] + snap["missCount"] == 8000
    assert cache.size() == 50
    assert len(set(cache.keys())) == 50


class _PausingClock(ManualClock):
    """The first reading on the thread named ``slow`` stalls until ``go`` is set (or 0.5 s)."""

    def __init__(self) -> None:
        super().__init__(0.0)
        self.entered = threading.Event()
        self.go = threading.Event()

    def now(self) -> float:
        if threading.current_thread().name == "slow" and not self.entered.is_set():
            reading = super().now()
            self.entered.set()
            self.go.wait(0.5)
            return reading
        return super().now()


def test_write_order_matches_write_times_when_threads_race() -> None:
    # A writer that read the clock before another writer must not land after it in the
    # expiry order, or an expired entry hides behind a live one (size() counts it).
    clock = _PausingClock()
    cache, _ = make(clock, expire_after_write=5)
    slow = threading.Thread(target=cache.put, args=((1,), [ROW]), name="slow")
    slow.start()
    assert clock.entered.wait(10)
    clock.advance(10)
    fast = threading.Thread(target=cache.put, args=((2,), [ROW]))
    fast.start()
    fast.join(0.2)  # done at once when the slow writer holds no lock while reading the clock
    clock.go.set()
    slow.join(10)
    fast.join(10)
    clock.advance(5 - 0.5)  # now 14.5: (1,), written at 0, has expired; (2,) has not
    assert cache.size() == 1
    assert cache.keys() == [(2,)]


def test_evictions_to_stay_within_max_rows_are_counted() -> None:
    metrics = CacheMetricGroup()
    cache = DefaultLookupCache.new_builder().maximum_size(2).build()
    cache.open(metrics)
    for key in range(5):
        cache.put((key,), [{"id": key}])
    cache.put((4,), [{"id": 4}])  # a replaced entry is no eviction
    assert metrics.snapshot()[EVICTION_COUNT] == 3
