"""Test helpers for the lookup layer: a manual clock and recording lookup functions."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Collection, Sequence
from typing import Any

from asyncio_lookup.lookup.functions import AsyncLookupFunction, Key, LookupFunction, Row
from asyncio_lookup.lookup.reload import CacheReloadTrigger, LoadTimes


class ManualClock:
    """Time moves only when a test (or a sleep) moves it; sleeps return at once."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._lock = threading.Lock()
        self.sleeps: list[float] = []

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.advance(seconds)

    def wait_until(self, deadline: float, stop: threading.Event) -> bool:
        if stop.is_set():
            return True
        with self._lock:
            self._now = max(self._now, deadline)
        return False


class Table:
    """A mutable dim table: key -> rows, shared by the sync and async functions below."""

    def __init__(self, data: dict[Key, list[dict[str, Any]]] | None = None) -> None:
        self.data: dict[Key, list[dict[str, Any]]] = dict(data or {})
        self.calls: list[Key] = []
        self.batches: list[list[Key]] = []
        self.errors: dict[Key, list[BaseException]] = {}  # raised in order, one per call

    def _answer(self, key: Key) -> list[Row]:
        self.calls.append(key)
        pending = self.errors.get(key)
        if pending:
            raise pending.pop(0)
        return [dict(r) for r in self.data.get(key, [])]


class SyncFn(LookupFunction):
    def __init__(self, table: Table, clock: ManualClock | None = None, cost: float = 0.0) -> None:
        self.table, self.clock, self.cost = table, clock, cost
        self.opened = self.closed = 0

    def open(self) -> None:
        self.opened += 1

    def lookup(self, key: Key) -> Collection[Row]:
        if self.clock is not None and self.cost:
            self.clock.advance(self.cost)
        return self.table._answer(key)

    def close(self) -> None:
        self.closed += 1


class AsyncFn(AsyncLookupFunction):
    """Async lookups; ``gate`` (when set) holds every call until released."""

    def __init__(self, table: Table, gate: asyncio.Event | None = None) -> None:
        self.table, self.gate = table, gate
        self.opened = self.closed = 0

    async def open(self) -> None:
        self.opened += 1

    async def async_lookup(self, key: Key) -> Collection[Row]:
        if self.gate is not None:
            await self.gate.wait()
        await asyncio.sleep(0)
        return self.table._answer(key)

    async def close(self) -> None:
        self.closed += 1


class BatchFn(AsyncFn):
    """Async lookups with a real batched read (records each batch)."""

    async def async_lookup_batch(
        self, keys: Sequence[Key]
    ) -> Sequence[Collection[Row] | BaseException]:
        if self.gate is not None:
            await self.gate.wait()
        await asyncio.sleep(0)
        self.table.batches.append(list(keys))
        out: list[Collection[Row] | BaseException] = []
        for key in keys:
            try:
                out.append(self.table._answer(key))
            except Exception as error:
                out.append(error)
        return out


class Source:
    """A LookupTableSource over a Table, with chosen capabilities."""

    def __init__(
        self,
        table: Table,
        *,
        sync: LookupFunction | None = None,
        async_: AsyncLookupFunction | None = None,
        rows: list[dict[str, Any]] | None = None,
    ) -> None:
        self.table, self.sync, self.async_, self.rows = table, sync, async_, rows

    def lookup_function(self) -> LookupFunction | None:
        return self.sync

    def async_lookup_function(self) -> AsyncLookupFunction | None:
        return self.async_

    def scan(self) -> list[dict[str, Any]] | None:
        return None if self.rows is None else list(self.rows)


class LimitedTrigger(CacheReloadTrigger):
    """Stops ``inner`` after ``reloads`` reloads, so a manual-clock schedule ends."""

    def __init__(self, inner: CacheReloadTrigger, reloads: int) -> None:
        self.inner, self.left = inner, reloads

    def next_reload(self, previous: LoadTimes) -> float | None:
        if self.left == 0:
            return None
        self.left -= 1
        return self.inner.next_reload(previous)
