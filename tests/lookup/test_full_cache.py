"""Full cache and reload triggers: docs/semantics.md §2.4 on a manual clock (and once on real
time)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any

import pytest

from asyncio_lookup.errors import CacheLoadError, DataFormatError
from asyncio_lookup.lookup.clock import WALL
from asyncio_lookup.lookup.full_cache import FullCache
from asyncio_lookup.lookup.functions import FailedKey
from asyncio_lookup.lookup.metrics import CacheMetricGroup
from asyncio_lookup.lookup.reload import (
    CacheReloadTrigger,
    LoadTimes,
    PeriodicCacheReloadTrigger,
    ScheduleMode,
    TimedCacheReloadTrigger,
)
from tests.lookup.support import LimitedTrigger, ManualClock

ROWS = [
    {"id": 1, "v": "a"},
    {"id": 1, "v": "b"},  # duplicate key: both kept, in order
    {"id": 2, "v": "c"},
    {"id": None, "v": "skipped"},  # NULL key: skipped
]


def timed_scan(clock: ManualClock, duration: float, starts: list[float]) -> Callable[[], Any]:
    def scan() -> list[dict[str, Any]]:
        starts.append(clock.now())
        clock.advance(duration)
        return ROWS

    return scan


def run_schedule(
    trigger: CacheReloadTrigger, duration: float, start: float, reloads: int
) -> list[float]:
    clock = ManualClock(start)
    starts: list[float] = []
    cache = FullCache(
        timed_scan(clock, duration, starts),
        ["id"],
        LimitedTrigger(trigger, reloads),
        CacheMetricGroup(),
        clock=clock,
    )
    cache.start().result(timeout=10)
    assert cache._thread is not None
    cache._thread.join(timeout=10)
    assert not cache._thread.is_alive()
    return [s - start for s in starts]


def test_fixed_delay_starts_interval_after_previous_end() -> None:
    trigger = PeriodicCacheReloadTrigger(10, ScheduleMode.FIXED_DELAY)
    assert run_schedule(trigger, 3, 1000, 3) == [0, 13, 26, 39]


def test_fixed_rate_starts_every_interval_from_first() -> None:
    trigger = PeriodicCacheReloadTrigger("10s", "FIXED_RATE")
    assert run_schedule(trigger, 3, 1000, 3) == [0, 10, 20, 30]


def test_fixed_rate_late_load_queues_never_overlaps() -> None:
    trigger = PeriodicCacheReloadTrigger(10, ScheduleMode.FIXED_RATE)
    assert run_schedule(trigger, 15, 1000, 3) == [0, 15, 30, 45]


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def test_timed_reload_across_midnight() -> None:
    start = _epoch("2026-01-01T23:50:00+00:00")
    starts = run_schedule(TimedCacheReloadTrigger("00:10Z", 1), 1, start, 3)
    assert starts == [0, 20 * 60, 20 * 60 + 86400, 20 * 60 + 2 * 86400]


def test_timed_reload_today_when_still_ahead_and_every_n_days() -> None:
    start = _epoch("2026-01-02T00:05:00+00:00")
    starts = run_schedule(TimedCacheReloadTrigger(time(0, 10, tzinfo=UTC), 2), 1, start, 2)
    assert starts == [0, 5 * 60, 5 * 60 + 2 * 86400]


def test_timed_reload_with_offset() -> None:
    start = _epoch("2026-01-01T16:50:00+00:00")  # 23:50 at +07:00
    starts = run_schedule(TimedCacheReloadTrigger("00:10+07:00"), 1, start, 1)
    assert starts == [0, 20 * 60]


def test_timed_reload_local_time() -> None:
    start = _epoch("2026-03-01T12:00:00+00:00")
    trigger = TimedCacheReloadTrigger("10:15")
    local_day = datetime.fromtimestamp(start).date()
    today = datetime.combine(local_day, time(10, 15)).timestamp()
    expected = today if today > start else today + 86400  # no DST change on 2026-03-01/02 in UTC
    assert trigger.next_reload(LoadTimes(start, start, start + 1, True)) == expected


def test_snapshot_skips_null_keys_keeps_duplicates_and_counts() -> None:
    clock = ManualClock()
    metrics = CacheMetricGroup()
    cache = FullCache(lambda: (clock.advance(2.5), ROWS)[1], ["id"], None, metrics, clock=clock)
    cache.start().result(timeout=10)
    assert cache.get((1,)) == [{"id": 1, "v": "a"}, {"id": 1, "v": "b"}]
    assert cache.get((3,)) == []
    assert cache.get((None,)) == []
    snap = metrics.snapshot()
    assert snap["hitCount"] == 3 and snap["missCount"] == 0
    assert snap["loadCount"] == 1 and snap["latestLoadTime"] == 2500
    assert snap["numCachedRecords"] == 2 and snap["numCachedBytes"] > 0


def test_a_key_no_scanned_key_can_equal_is_an_error_not_a_silent_miss() -> None:
    """A Redis key name parsed without key_types gives '1'; a JSON scan gives dates as text:
    every lookup of the INT 1 or of a date would miss."""
    rows = [{"id": "1", "at": "2024-01-01", "n": 2, "ts": datetime(2024, 1, 1)}]
    cache = FullCache(lambda: rows, ["id"], None, CacheMetricGroup(), name="Customers")
    cache.start().result(timeout=10)
    assert cache.get(("1",)) == [rows[0]] and cache.get(("2",)) == []
    with pytest.raises(DataFormatError, match=r"Customers.*'id' is int.*str \(e\.g\. '1'\)"):
        cache.get((1,))
    numbers = FullCache(lambda: rows, ["n"], None, CacheMetricGroup())
    numbers.start().result(timeout=10)
    assert numbers.get((2.0,)) == [rows[0]] and numbers.get((Decimal(3),)) == []  # numbers
    times = FullCache(lambda: rows, ["ts"], None, CacheMetricGroup())
    times.start().result(timeout=10)
    assert times.get((datetime(2024, 1, 2),)) == []
    # an aware key never equals a naive one; the message said "is datetime but ... datetime"
    with pytest.raises(DataFormatError, match=r"'ts' is an aware datetime.* a naive datetime"):
        times.get((datetime(2024, 1, 1, tzinfo=UTC),))
    dates = FullCache(lambda: rows, ["at"], None, CacheMetricGroup())
    dates.start().result(timeout=10)
    with pytest.raises(DataFormatError, match="'at' is date"):
        dates.get((date(2024, 1, 1),))


def test_a_key_the_scan_could_not_read_fails_its_own_lookups_only() -> None:
    """A scan gives :class:`FailedKey` in place of a key's rows when it cannot read its value:
    one bad value failed the whole load, and every key's lookups with it."""
    bad = FailedKey({"id": 2}, DataFormatError("value of key 2 is not JSON"))
    rows = [{"id": 1, "v": "a"}, bad, {"id": 2, "v": "also"}, {"id": 3, "v": "c"}]
    cache = FullCache(lambda: rows, ["id"], None, CacheMetricGroup(), name="T")
    cache.start().result(timeout=10)
    assert cache.get((1,)) == [rows[0]] and cache.get((3,)) == [rows[3]]
    assert cache.get((4,)) == [] and not cache.failed
    for _ in range(2):
        with pytest.raises(DataFormatError, match="key 2 is not JSON") as raised:
            cache.get((2,))  # its other row too: a point lookup of it fails whole
        assert raised.value.__cause__ is bad.error
    assert cache.metrics.snapshot()["numCachedRecords"] == 3


def test_a_decimal_key_finds_the_json_float_of_its_text_and_a_float_the_numeric() -> None:
    """An HTTP (JSON) scan gives floats, a DECIMAL(10, 2) key is Decimal('0.10'), and
    Decimal('0.10') != 0.1: FULL missed every such row that NONE and PARTIAL joined."""
    floats = [{"id": 0.1, "code": "x", "v": "ten cents"}, {"id": 1.5, "code": "y", "v": "1.5"}]
    cache = FullCache(lambda: floats, ["id", "code"], None, CacheMetricGroup())
    cache.start().result(timeout=10)
    assert cache.get((Decimal("0.10"), "x")) == [floats[0]]
    assert cache.get((Decimal("1.50"), "y")) == [floats[1]]
    assert cache.get((Decimal("0.1000000000000000001"), "x")) == []  # only rounds to 0.1
    assert cache.get((Decimal("0.10"), "y")) == []
    numerics = [{"id": Decimal("0.10"), "v": "ten cents"}]
    cache = FullCache(lambda: numerics, ["id"], None, CacheMetricGroup())
    cache.start().result(timeout=10)
    assert cache.get((0.1,)) == [numerics[0]] and cache.get((0.2,)) == []
    # only the parts whose column holds the other type: a DOUBLE beside a DECIMAL stays float
    mixed = [{"price": 0.1, "weight": 0.2}, {"price": Decimal("0.10"), "weight": 0.3}]
    cache = FullCache(lambda: mixed, ["price", "weight"], None, CacheMetricGroup())
    cache.start().result(timeout=10)
    assert cache.get((Decimal("0.10"), 0.2)) == [mixed[0]]
    assert cache.get((0.1, 0.3)) == [mixed[1]]
    np = pytest.importorskip("numpy")  # a custom provider's numpy scan
    numpy_floats = [{"id": np.float64(0.1), "v": "np"}]
    cache = FullCache(lambda: numpy_floats, ["id"], None, CacheMetricGroup())
    cache.start().result(timeout=10)
    assert cache.get((Decimal("0.10"),)) == [numpy_floats[0]]


def test_numpy_and_pandas_keys_of_a_scan_compare_as_numbers_and_datetimes() -> None:
    """A custom provider's scan built with numpy or pandas: a key missing from it was an
    error (np.int64 and pandas.Timestamp were kinds of their own), not a miss."""
    np = pytest.importorskip("numpy")
    pd = pytest.importorskip("pandas")
    rows = [{"id": np.int64(1), "x": np.float64(0.5), "ts": pd.Timestamp("2024-01-01")}]
    for column, hit, miss in [
        ("id", 1, 7),
        ("x", 0.5, Decimal("0.25")),
        ("ts", datetime(2024, 1, 1), datetime(2024, 1, 2)),
    ]:
        cache = FullCache(lambda: rows, [column], None, CacheMetricGroup())
        cache.start().result(timeout=10)
        assert cache.get((hit,)) == rows and cache.get((miss,)) == []
    flags = FullCache(lambda: [{"b": np.bool_(True)}], ["b"], None, CacheMetricGroup())
    flags.start().result(timeout=10)
    assert flags.get((True,)) == [{"b": np.bool_(True)}] and flags.get((False,)) == []


async def test_async_scan_runs_on_the_reload_thread() -> None:
    threads: list[str] = []

    async def rows() -> AsyncIterator[dict[str, Any]]:
        threads.append(threading.current_thread().name)
        for row in ROWS:
            await asyncio.sleep(0)
            yield row

    cache = FullCache(rows, ["id"], None, CacheMetricGroup(), name="T")
    await cache.open()
    assert len(cache.get((1,))) == 2
    assert threads == ["full-cache-T"]


async def test_missing_key_column_fails_the_load() -> None:
    cache = FullCache(lambda: ROWS, ["ident"], None, CacheMetricGroup())
    with pytest.raises(CacheLoadError, match="ident"):
        await cache.open()


async def test_failed_initial_load_raises_on_open() -> None:
    def scan() -> Iterator[dict[str, Any]]:
        yield ROWS[0]
        raise ConnectionRefusedError("db down")

    metrics = CacheMetricGroup()
    cache = FullCache(scan, ["id"], None, metrics)
    with pytest.raises(CacheLoadError, match="db down") as raised:
        await cache.open()
    assert isinstance(raised.value.__cause__, ConnectionRefusedError)
    assert cache.failed
    assert metrics.snapshot()["numLoadFailures"] == 1
    with pytest.raises(CacheLoadError):
        cache.get((1,))


async def test_atomic_swap_during_slow_reload() -> None:
    midway, release = threading.Event(), threading.Event()
    loads = [0]
    new_rows = [{"id": k, "v": f"new{k}"} for k in (10, 11, 12, 13)]

    def scan() -> Iterator[dict[str, Any]]:
        loads[0] += 1
        if loads[0] == 1:
            yield from ROWS
            return
        yield from new_rows[:2]
        midway.set()
        release.wait(10)
        yield from new_rows[2:]

    metrics = CacheMetricGroup()
    trigger = LimitedTrigger(PeriodicCacheReloadTrigger(60), 1)
    cache = FullCache(scan, ["id"], trigger, metrics, clock=ManualClock())
    await cache.open()
    assert await asyncio.to_thread(midway.wait, 10)
    # the reload has read half the new table: lookups still see the old snapshot whole
    assert len(cache.get((1,))) == 2 and cache.get((2,)) == [ROWS[2]]
    assert cache.get((10,)) == [] and cache.get((11,)) == []
    release.set()
    assert cache._thread is not None
    await asyncio.to_thread(cache._thread.join, 10)
    assert cache.get((1,)) == [] and cache.get((13,)) == [new_rows[3]]
    assert metrics.snapshot()["loadCount"] == 2
    assert metrics.snapshot()["numCachedRecords"] == 4


async def test_failed_reload_fails_lookups_never_stale(caplog: pytest.LogCaptureFixture) -> None:
    loads = [0]

    def scan() -> list[dict[str, Any]]:
        loads[0] += 1
        if loads[0] == 2:
            raise TimeoutError("scan timed out")
        return ROWS

    metrics = CacheMetricGroup()
    trigger = LimitedTrigger(PeriodicCacheReloadTrigger(60), 1)
    cache = FullCache(scan, ["id"], trigger, metrics, clock=ManualClock(), name="Customers")
    await cache.open()
    assert cache._thread is not None
    await asyncio.to_thread(cache._thread.join, 10)
    with pytest.raises(CacheLoadError, match=r"Customers.*scan timed out") as raised:
        cache.get((1,))
    assert isinstance(raised.value.__cause__, TimeoutError)
    snap = metrics.snapshot()
    assert (snap["loadCount"], snap["numLoadFailures"]) == (1, 1)
    # logged where the task runs: the metric alone showed a reload that failed and healed
    assert any("Customers: reload failed" in r.getMessage() for r in caplog.records)


def test_reloads_run_without_an_event_loop_in_real_time() -> None:
    third = threading.Event()
    count = [0]

    def scan() -> list[dict[str, Any]]:
        count[0] += 1
        if count[0] == 3:
            third.set()
        return ROWS

    cache = FullCache(
        scan, ["id"], PeriodicCacheReloadTrigger(0.01), CacheMetricGroup(), clock=WALL
    )
    cache.start().result(timeout=10)
    try:
        assert third.wait(10)
    finally:
        cache.close(timeout=10)
    assert cache._thread is not None and not cache._thread.is_alive()


@pytest.fixture
def berlin_time(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    import time as _time

    if not hasattr(_time, "tzset"):
        pytest.skip("time.tzset() needs a POSIX platform")
    monkeypatch.setenv("TZ", "Europe/Berlin")
    _time.tzset()
    try:
        yield
    finally:
        monkeypatch.undo()
        _time.tzset()


@pytest.mark.usefixtures("berlin_time")
def test_timed_local_reload_keeps_its_wall_time_across_a_dst_change() -> None:
    # Berlin moves clocks forward on 2026-03-29: the day has 23 hours. A local '10:15'
    # reload must still happen at 10:15 local on the days after it.
    start = datetime(2026, 3, 27, 12, 0).timestamp()  # local, after today's 10:15
    starts = run_schedule(TimedCacheReloadTrigger("10:15"), 1, start, 3)
    local = [datetime.fromtimestamp(start + s) for s in starts[1:]]
    assert [(t.day, t.hour, t.minute) for t in local] == [(28, 10, 15), (29, 10, 15), (30, 10, 15)]


def test_a_second_start_never_runs_a_second_load_thread() -> None:
    gate = threading.Event()
    scans = [0]

    def scan() -> list[dict[str, Any]]:
        scans[0] += 1
        gate.wait(10)
        return ROWS

    cache = FullCache(scan, ["id"], None, CacheMetricGroup(), clock=ManualClock())
    first = cache.start()
    with pytest.raises(RuntimeError, match="already started"):
        cache.start()
    gate.set()
    first.result(timeout=10)
    assert scans[0] == 1
    cache.close(timeout=10)


def test_a_scan_that_fails_transiently_is_retried_from_its_start() -> None:
    from asyncio_lookup.errors import TransientError
    from asyncio_lookup.lookup.retry import FailureRetry

    attempts: list[int] = []

    def scan() -> Iterator[dict[str, Any]]:
        attempts.append(1)
        yield ROWS[0]
        if len(attempts) < 3:
            raise TransientError("connection reset")
        yield from ROWS[1:]

    metrics = CacheMetricGroup()
    retry = FailureRetry(3, 1.0, initial=0.01, jitter=0.0, table="Customers")
    cache = FullCache(scan, ["id"], None, metrics, retry=retry)
    cache.start().result(timeout=10)
    assert len(attempts) == 3
    assert cache.get((1,)) == [{"id": 1, "v": "a"}, {"id": 1, "v": "b"}]  # not doubled
    snap = metrics.snapshot()
    assert (snap["numFailureRetries"], snap["loadCount"], snap["numLoadFailures"]) == (2, 1, 0)

    attempts.clear()
    one_retry = FailureRetry(1, 1.0, initial=0.01, jitter=0.0, table="Customers")
    failing = FullCache(scan, ["id"], None, CacheMetricGroup(), retry=one_retry)
    with pytest.raises(CacheLoadError, match="failed after 2 attempt"):
        failing.start().result(timeout=10)


def test_a_load_time_is_measured_on_a_monotonic_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    import time as time_module

    real = time_module.time

    def scan() -> list[dict[str, Any]]:
        monkeypatch.setattr(time_module, "time", lambda: real() - 3600.0)  # the clock steps back
        return ROWS

    metrics = CacheMetricGroup()
    FullCache(scan, ["id"], None, metrics, clock=WALL).start().result(timeout=10)
    assert 0 <= metrics.snapshot()["latestLoadTime"] < 60_000


def test_a_load_time_counts_its_failed_attempts_and_the_waits_between() -> None:
    """As documented (reference: latestLoadTime, "retry waits included") and as a PARTIAL
    cache's load time counts them: it was the successful attempt's alone."""
    from asyncio_lookup.errors import TransientError
    from asyncio_lookup.lookup.retry import FailureRetry

    attempts: list[int] = []

    def scan() -> list[dict[str, Any]]:
        attempts.append(1)
        if len(attempts) < 3:
            raise TransientError("connection reset")
        return ROWS

    metrics = CacheMetricGroup()
    retry = FailureRetry(3, 1.0, initial=0.1, jitter=0.0)  # 0.1 s + 0.3 s of backoff
    FullCache(scan, ["id"], None, metrics, retry=retry).start().result(timeout=10)
    assert 350 <= metrics.snapshot()["latestLoadTime"] < 5_000


def test_closing_a_cache_whose_scan_waits_to_retry_is_no_failed_load() -> None:
    from asyncio_lookup.errors import TransientError
    from asyncio_lookup.lookup.retry import FailureRetry

    tried = threading.Event()

    def scan() -> list[dict[str, Any]]:
        tried.set()
        raise TransientError("connection reset")

    metrics = CacheMetricGroup()
    cache = FullCache(scan, ["id"], None, metrics, retry=FailureRetry(3, 60.0, initial=30.0))
    first = cache.start()
    assert tried.wait(10)
    cache.close(timeout=10)
    with pytest.raises(CacheLoadError, match="closed while its scan waited to retry"):
        first.result(timeout=10)
    assert metrics.snapshot()["numLoadFailures"] == 0
