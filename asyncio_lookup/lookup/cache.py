"""The partial lookup cache (FLIP-221): the ``LookupCache`` protocol and ``DefaultLookupCache``.

Written here rather than taken from cachetools / cachebox: cachetools' ``TTLCache`` expires on
write only and ``LRUCache`` has no expiry, so expire-after-access (sliding), expire-after-write and
an exact key LRU together, on an injectable clock, with Flink's hit/miss metrics, is not in either;
cachebox's ``TTLCache`` is write-TTL only too. Two ordered dicts give all three rules exactly in
amortised O(1).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Collection
from datetime import timedelta
from typing import Any, Protocol, runtime_checkable

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.lookup.clock import MONOTONIC, Clock
from asyncio_lookup.lookup.functions import Key, Row
from asyncio_lookup.lookup.metrics import (
    EVICTION_COUNT,
    HIT_COUNT,
    MISS_COUNT,
    NUM_CACHED_BYTES,
    NUM_CACHED_RECORDS,
    CacheMetricGroup,
)
from asyncio_lookup.lookup.sizes import estimate_bytes
from asyncio_lookup.validation import parse_duration, parse_int


@runtime_checkable
class LookupCache(Protocol):
    """A semi-persistent mapping from keys to their rows; implementations are thread-safe."""

    def open(self, metric_group: CacheMetricGroup) -> None:
        """Initialise the cache; register its metrics (hits, misses, size) in ``metric_group``."""
        ...

    def get_if_present(self, key: Key) -> list[Row] | None:
        """The rows cached for ``key`` (an empty list is a cached miss), or None when absent."""
        ...

    def put(self, key: Key, rows: Collection[Row]) -> list[Row] | None:
        """Store ``rows`` for ``key``; return the rows it replaced, if any."""
        ...

    def invalidate(self, key: Key) -> None:
        """Discard whatever is cached for ``key``."""
        ...

    def size(self) -> int:
        """The number of keys cached."""
        ...

    def close(self) -> None:
        """Drop every entry and release resources."""
        ...


class _Entry:
    __slots__ = ("accessed", "nbytes", "rows", "written")

    def __init__(self, rows: tuple[Row, ...], written: float, accessed: float, nbytes: int):
        self.rows = rows
        self.written = written
        self.accessed = accessed
        self.nbytes = nbytes


class DefaultLookupCache:
    """Exact LRU on keys with optional expire-after-write and sliding expire-after-access.

    An entry is expired when ``now - written >= expire_after_write`` or
    ``now - last hit or write >= expire_after_access``. ``maximum_size`` bounds the number of
    keys (hits and writes count as use); 0 keeps nothing. Build with :meth:`new_builder`.
    """

    def __init__(
        self,
        expire_after_access: float | None,
        expire_after_write: float | None,
        maximum_size: int | None,
        cache_missing_key: bool,
        clock: Clock = MONOTONIC,
    ) -> None:
        self.expire_after_access = expire_after_access
        self.expire_after_write = expire_after_write
        self.maximum_size = maximum_size
        self.cache_missing_key = cache_missing_key
        self.clock = clock
        self._init_state()

    def _init_state(self) -> None:
        self._lock = threading.Lock()
        self._by_use: OrderedDict[Key, _Entry] = OrderedDict()  # least recently used first
        self._by_write: OrderedDict[Key, None] = OrderedDict()  # oldest write first
        self._bytes = 0
        self._metrics: CacheMetricGroup | None = None

    @staticmethod
    def new_builder() -> DefaultLookupCacheBuilder:
        """A builder: ``.expire_after_access(d).expire_after_write(d).maximum_size(n).build()``."""
        return DefaultLookupCacheBuilder()

    def __repr__(self) -> str:
        return (
            f"DefaultLookupCache(expire_after_access={self.expire_after_access}, "
            f"expire_after_write={self.expire_after_write}, maximum_size={self.maximum_size}, "
            f"cache_missing_key={self.cache_missing_key})"
        )

    # Pickled with its configuration only: each process builds its own entries.
    def __getstate__(self) -> dict[str, Any]:
        return {
            "expire_after_access": self.expire_after_access,
            "expire_after_write": self.expire_after_write,
            "maximum_size": self.maximum_size,
            "cache_missing_key": self.cache_missing_key,
            "clock": self.clock,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_state()

    def open(self, metric_group: CacheMetricGroup) -> None:
        self._metrics = metric_group
        metric_group.register_gauge(NUM_CACHED_RECORDS, self.size)
        metric_group.register_gauge(NUM_CACHED_BYTES, self.cached_bytes)

    def _expired(self, entry: _Entry, now: float) -> bool:
        return (
            self.expire_after_write is not None and now - entry.written >= self.expire_after_write
        ) or (
            self.expire_after_access is not None
            and now - entry.accessed >= self.expire_after_access
        )

    def _remove(self, key: Key) -> _Entry | None:
        entry = self._by_use.pop(key, None)
        if entry is not None:
            self._by_write.pop(key, None)
            self._bytes -= entry.nbytes
        return entry

    def _purge_expired(self, now: float) -> None:
        # Both orders are monotonic in time (the clock is read under the lock, so lock order
        # is time order), so expired entries sit at the fronts.
        if self.expire_after_access is not None:
            while self._by_use:
                key, entry = next(iter(self._by_use.items()))
                if now - entry.accessed < self.expire_after_access:
                    break
                self._remove(key)
        if self.expire_after_write is not None:
            while self._by_write:
                key = next(iter(self._by_write))
                if now - self._by_use[key].written < self.expire_after_write:
                    break
                self._remove(key)

    def get_if_present(self, key: Key) -> list[Row] | None:
        return self._get(key, True)

    def get_hit(self, key: Key) -> list[Row] | None:
        """Like :meth:`get_if_present`, but a miss is not counted: for a fast path whose caller
        asks ``get_if_present`` again (and so counts the miss once) when this returns None."""
        return self._get(key, False)

    def _get(self, key: Key, count_miss: bool) -> list[Row] | None:
        with self._lock:
            now = self.clock.now()
            entry = self._by_use.get(key)
            if entry is not None and self._expired(entry, now):
                self._remove(key)
                entry = None
            if entry is None:
                if count_miss and self._metrics is not None:
                    self._metrics.inc(MISS_COUNT)
                return None
            entry.accessed = now
            self._by_use.move_to_end(key)
            if self._metrics is not None:
                self._metrics.inc(HIT_COUNT)
            return list(entry.rows)

    def put(self, key: Key, rows: Collection[Row]) -> list[Row] | None:
        stored = tuple(rows)
        keep = (stored or self.cache_missing_key) and self.maximum_size != 0
        nbytes = estimate_bytes(key, stored) if keep else 0  # outside the lock: a pure function
        with self._lock:
            now = self.clock.now()
            previous = self._remove(key)
            self._purge_expired(now)
            if keep:
                self._by_use[key] = _Entry(stored, now, now, nbytes)
                self._by_write[key] = None
                self._bytes += nbytes
                while self.maximum_size is not None and len(self._by_use) > self.maximum_size:
                    self._remove(next(iter(self._by_use)))
                    if self._metrics is not None:
                        self._metrics.inc(EVICTION_COUNT)
        return None if previous is None else list(previous.rows)

    def invalidate(self, key: Key) -> None:
        with self._lock:
            self._remove(key)

    def size(self) -> int:
        with self._lock:
            self._purge_expired(self.clock.now())
            return len(self._by_use)

    def cached_bytes(self) -> int:
        """Estimated bytes held by the live entries."""
        with self._lock:
            self._purge_expired(self.clock.now())
            return self._bytes

    def keys(self) -> list[Key]:
        """Live keys, least recently used first (for inspection and tests)."""
        with self._lock:
            self._purge_expired(self.clock.now())
            return list(self._by_use)

    def close(self) -> None:
        with self._lock:
            self._by_use.clear()
            self._by_write.clear()
            self._bytes = 0


class DefaultLookupCacheBuilder:
    """Builds a :class:`DefaultLookupCache`; durations are seconds or ``timedelta``."""

    def __init__(self) -> None:
        self._access: float | None = None
        self._write: float | None = None
        self._max: int | None = None
        self._missing = True
        self._clock: Clock = MONOTONIC

    def expire_after_access(self, duration: float | timedelta) -> DefaultLookupCacheBuilder:
        self._access = parse_duration(
            "expire_after_access", duration, text=False, never=True, positive=True
        )
        return self

    def expire_after_write(self, duration: float | timedelta) -> DefaultLookupCacheBuilder:
        self._write = parse_duration(
            "expire_after_write", duration, text=False, never=True, positive=True
        )
        return self

    def maximum_size(self, maximum_size: int) -> DefaultLookupCacheBuilder:
        self._max = parse_int("maximum_size", maximum_size, minimum=0, text=False)
        return self

    def cache_missing_key(self, cache_missing_key: bool) -> DefaultLookupCacheBuilder:
        if not isinstance(cache_missing_key, bool):
            raise ConfigurationError("cache_missing_key", cache_missing_key, "True or False")
        self._missing = cache_missing_key
        return self

    def clock(self, clock: Clock) -> DefaultLookupCacheBuilder:
        """Read time from ``clock`` (tests inject a manual one)."""
        self._clock = clock
        return self

    def build(self) -> DefaultLookupCache:
        if self._access is None and self._write is None and self._max is None:
            raise ConfigurationError(
                "DefaultLookupCache",
                None,
                "at least one of expire_after_access, expire_after_write, maximum_size",
                reason="an unbounded cache would grow without limit",
            )
        return DefaultLookupCache(self._access, self._write, self._max, self._missing, self._clock)
