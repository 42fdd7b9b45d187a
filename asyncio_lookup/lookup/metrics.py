"""Cache metrics with Flink's names (FLIP-221), plus logical lookups vs external calls and
the latency of those calls.

Counters only grow (ints); gauges hold a current value. Per-task reporting takes deltas
(:meth:`CacheMetricGroup.take_delta`); the driver sums them with :func:`merge_metrics`
(gauges by max).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from threading import get_ident
from typing import ClassVar

from asyncio_lookup.runtime.causes import Causes
from asyncio_lookup.runtime.metrics import ms as round_ms
from asyncio_lookup.runtime.sketch import FOLD_EVERY, LatencySketch

HIT_COUNT = "hitCount"
MISS_COUNT = "missCount"
LOAD_COUNT = "loadCount"
NUM_LOAD_FAILURES = "numLoadFailures"
LATEST_LOAD_TIME = "latestLoadTime"
NUM_CACHED_RECORDS = "numCachedRecords"
NUM_CACHED_BYTES = "numCachedBytes"
NUM_LOOKUPS = "numLookups"
NUM_EXTERNAL_CALLS = "numExternalCalls"
NUM_EXTERNAL_KEYS = "numExternalKeys"
NUM_COALESCED = "numCoalescedLookups"
NUM_MISS_RETRIES = "numLookupMissRetries"
NUM_FAILURE_RETRIES = "numFailureRetries"
NUM_THROTTLED = "numThrottledCalls"
EVICTION_COUNT = "evictionCount"
THROTTLED_TIME_MS = "throttledTimeMs"
# per cache level, with a shared cache (lookup.shared-cache.*): L1 is the process's cache
L1_HIT_COUNT = "l1HitCount"
L2_HIT_COUNT = "l2HitCount"
L2_MISS_COUNT = "l2MissCount"
L2_ERROR_COUNT = "l2ErrorCount"
L2_SKIPPED = "l2SkippedCount"
L2_LEASE_WAITS = "l2LeaseWaitCount"
L2_BYTES_READ = "l2BytesRead"
L2_BYTES_WRITTEN = "l2BytesWritten"
LEVEL_COUNTERS = (
    L2_HIT_COUNT,
    L2_MISS_COUNT,
    L2_ERROR_COUNT,
    L2_SKIPPED,
    L2_LEASE_WAITS,
    L2_BYTES_READ,
    L2_BYTES_WRITTEN,
)


#: The counter table and call sketch that hold what a group inherited (no thread has ident 0).
_INHERITED = 0


class CacheMetricGroup:
    """The metrics of one lookup chain (one ``LookupTable`` in one process); thread-safe.

    - ``hitCount`` / ``missCount``: cache hits and misses (a FULL cache only hits).
    - ``loadCount`` / ``numLoadFailures``: completed and failed loads (PARTIAL: one per miss,
      however many attempts; FULL: one per scan).
    - ``latestLoadTime``: duration of the latest load in ms, retry sleeps included.
    - ``numCachedRecords`` (keys) / ``numCachedBytes`` (estimate): current cache content.
    - ``numLookups``: logical lookups asked of the chain; ``numExternalCalls``: calls made to the
      connector (a batch is one call); ``numExternalKeys``: keys sent in those calls;
      ``numCoalescedLookups``: connector loads saved by sharing an in-flight call for the same key;
      ``numLookupMissRetries`` / ``numFailureRetries``: retries on empty result / on error;
      ``numThrottledCalls``: calls of a rate-limited table answered 429 / 503 (semantics §2.12);
      ``throttledTimeMs``: time in ms during which calls waited for a token of the rate limit.
    - ``evictionCount``: entries the PARTIAL cache dropped to stay within its ``max-rows``.
    - ``causes``: failures, retries and timeouts by cause (:mod:`asyncio_lookup.runtime.causes`).
    - With a shared cache (:meth:`enable_levels`): ``l1HitCount`` (= ``hitCount``, the
      process's cache), ``l2HitCount`` / ``l2MissCount`` (lookups answered by the shared store /
      sent on to the service), ``l2ErrorCount`` (failed or timed-out store calls),
      ``l2SkippedCount`` (lookups that bypassed a failed store, or whose key cannot be
      written exactly), ``l2LeaseWaitCount`` (lookups
      that waited for another process's fetch), ``l2BytesRead`` / ``l2BytesWritten``.
    - :meth:`record_call`: the latency of every connector call (each attempt, failed ones
      included), drained by :meth:`take_delta`.
    """

    COUNTERS: ClassVar[tuple[str, ...]] = (
        HIT_COUNT,
        MISS_COUNT,
        LOAD_COUNT,
        NUM_LOAD_FAILURES,
        NUM_LOOKUPS,
        NUM_EXTERNAL_CALLS,
        NUM_EXTERNAL_KEYS,
        NUM_COALESCED,
        NUM_MISS_RETRIES,
        NUM_FAILURE_RETRIES,
        NUM_THROTTLED,
        THROTTLED_TIME_MS,
        EVICTION_COUNT,
    )
    GAUGES: ClassVar[frozenset[str]] = frozenset(
        {LATEST_LOAD_TIME, NUM_CACHED_RECORDS, NUM_CACHED_BYTES}
    )
    INT_GAUGES: ClassVar[frozenset[str]] = frozenset({NUM_CACHED_RECORDS, NUM_CACHED_BYTES})

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Counters are plain ints, one table per thread that counts: the hot path (a lookup on
        # the event loop) takes no lock, and a table has one writer. A snapshot sums the tables;
        # each value it reads is one the counter really had, so deltas still sum to the totals.
        self._by_thread: dict[int, dict[str, int]] = {}
        # the connector calls' latencies, one sketch per thread that calls (as the counters)
        self._calls: dict[int, LatencySketch] = {}
        self._gauges: dict[str, float] = dict.fromkeys(self.GAUGES, 0.0)
        self._gauge_fns: dict[str, Callable[[], float]] = {}
        self._reported: dict[str, int] = dict.fromkeys(self.COUNTERS, 0)
        # one take_delta at a time: its snapshot and its update of _reported go together
        self._delta_lock = threading.Lock()
        self._levels = False
        self.causes = Causes()

    def enable_levels(self) -> None:
        """Report the per-level metrics (a chain with a shared cache), zeros included."""
        self._levels = True

    def _counters(self) -> dict[str, int]:
        ident = get_ident()
        counters = self._by_thread.get(ident)
        if counters is None:
            with self._lock:
                counters = self._by_thread.setdefault(ident, dict.fromkeys(self.COUNTERS, 0))
        return counters

    def inc(self, name: str, n: int = 1) -> None:
        """Add ``n`` to counter ``name``."""
        counters = self._by_thread.get(get_ident()) or self._counters()
        counters[name] = counters.get(name, 0) + n

    def inc2(self, first: str, second: str) -> None:
        """Add 1 to counters ``first`` and ``second`` (one call on hot paths)."""
        counters = self._by_thread.get(get_ident()) or self._counters()
        counters[first] += 1
        counters[second] += 1

    def record_call(self, ms: float) -> None:
        """Add one connector call's latency in ms (``LatencySketch.add`` inlined: once per
        call on the hot path)."""
        sketch = self._calls.get(get_ident())
        if sketch is None:
            with self._lock:
                sketch = self._calls.setdefault(get_ident(), LatencySketch())
        pending = sketch.pending
        pending.append(ms)
        if len(pending) >= FOLD_EVERY:
            sketch.fold()

    def thread_tables(self) -> tuple[dict[str, int], LatencySketch]:
        """This thread's counters and call-latency sketch, for a hot path that counts on one
        thread and keeps them rather than finding them per count (a :class:`KeyBatcher` on its
        loop): ``counters[name] += 1`` and ``sketch.pending.append(ms)`` (folding at
        ``FOLD_EVERY``) are :meth:`inc` and :meth:`record_call` inlined. Valid only on this
        thread: the tables have one writer."""
        ident = get_ident()
        with self._lock:
            counters = self._by_thread.setdefault(ident, dict.fromkeys(self.COUNTERS, 0))
            sketch = self._calls.setdefault(ident, LatencySketch())
        return counters, sketch

    def drain_calls(self) -> LatencySketch:
        """The call latencies recorded since the previous drain, merged over threads. Exact
        when the threads that call are not calling meanwhile (a Spark task drains between
        batches, its loop paused)."""
        with self._lock:
            sketches = list(self._calls.values())
        merged = LatencySketch()
        for sketch in sketches:
            merged.merge(sketch.drain())
        return merged

    def set_gauge(self, name: str, value: float) -> None:
        """Set gauge ``name`` to ``value``."""
        self._gauges[name] = float(value)  # one store: atomic, no lock (snapshot copies)

    def register_gauge(self, name: str, read: Callable[[], float]) -> None:
        """Make gauge ``name`` read its value from ``read()`` at snapshot time (Flink's Gauge)."""
        with self._lock:
            self._gauge_fns[name] = read

    def __getitem__(self, name: str) -> int | float:
        return self.snapshot()[name]

    def snapshot(self) -> dict[str, int | float]:
        """Every metric's current value: counters as ints, durations in ms rounded to µs."""
        with self._lock:
            tables = list(self._by_thread.values())
            gauges = dict(self._gauges)
            fns = dict(self._gauge_fns)
        values: dict[str, int | float] = dict.fromkeys(self.COUNTERS, 0)
        for table in tables:
            for name, count in list(table.items()):  # list(): a copy taken under the GIL
                values[name] = values.get(name, 0) + count
        if self._levels:
            for name in LEVEL_COUNTERS:
                values.setdefault(name, 0)
            values[L1_HIT_COUNT] = values[HIT_COUNT]
        for name, read in fns.items():
            gauges[name] = float(read())
        for name, value in gauges.items():
            values[name] = int(value) if name in self.INT_GAUGES else round_ms(value)
        return values

    def inherit(self, old: CacheMetricGroup) -> None:
        """Take on what ``old`` (the group of a chain this one's chain replaces: its FULL
        reload failed between tasks) counted and no task reported: its counters' unreported
        part, its undrained call latencies and its causes, so the job's totals keep them."""
        delta = old.take_delta()
        calls = old.drain_calls()
        with self._lock:
            table = self._by_thread.setdefault(_INHERITED, dict.fromkeys(self.COUNTERS, 0))
            for name, value in delta.items():
                if name in self.COUNTERS and value:
                    table[name] = table.get(name, 0) + int(value)
            self._calls.setdefault(_INHERITED, LatencySketch()).merge(calls)
        for cause, entry in old.causes.take().to_json().items():
            counts = {k: int(v) for k, v in entry.items() if k != "message"}
            self.causes.add(cause, counts, str(entry.get("message") or ""))

    def take_delta(self) -> dict[str, int | float]:
        """Counters since the previous ``take_delta`` (or creation), gauges' current values.

        For per-task reporting of a chain shared by successive tasks: work done outside any
        task's window (the FULL load at open, background reloads) lands in the next delta, and
        the deltas of all tasks always sum to the totals.
        """
        with self._delta_lock:
            snapshot = self.snapshot()
            delta: dict[str, int | float] = {}
            for name, value in snapshot.items():
                if name in self.GAUGES:
                    delta[name] = value
                else:
                    delta[name] = value - self._reported.get(name, 0)
                    self._reported[name] = int(value)
        return delta


def metrics_delta(
    before: Mapping[str, int | float], after: Mapping[str, int | float], gauges: frozenset[str]
) -> dict[str, int | float]:
    """What happened between two snapshots: counters ``after - before``, gauges ``after``."""
    delta: dict[str, int | float] = {}
    for name, value in after.items():
        delta[name] = value if name in gauges else value - before.get(name, 0.0)
    return delta


def merge_metrics(
    a: Mapping[str, int | float], b: Mapping[str, int | float], gauges: frozenset[str]
) -> dict[str, int | float]:
    """Combine two tasks' metrics: counters summed, gauges by max."""
    merged = dict(a)
    for name, value in b.items():
        if name in merged:
            merged[name] = max(merged[name], value) if name in gauges else merged[name] + value
        else:
            merged[name] = value
    return merged
