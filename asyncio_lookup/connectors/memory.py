"""A dim table held in memory: sync, async (with batches) and scan. For tests, demos, notebooks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from asyncio_lookup.lookup.functions import AsyncLookupFunction, Key, LookupFunction, Row


class InMemoryConnector:
    """Rows in a Python list, indexed by ``key_columns``; several rows may share a key.

    ``latency`` (seconds) is added to every call, to make it behave like a remote store.
    The connector is picklable: each Spark task gets a copy of the rows.
    """

    def __init__(
        self,
        rows: Iterable[Mapping[str, Any]],
        key_columns: Sequence[str],
        latency: float = 0.0,
    ) -> None:
        if isinstance(key_columns, str):
            key_columns = [key_columns]
        if not key_columns:
            from asyncio_lookup.errors import ConfigurationError

            raise ConfigurationError("key_columns", key_columns, "one or more column names")
        self.rows = [dict(row) for row in rows]
        self.key_columns = tuple(key_columns)
        self.latency = latency

    def __repr__(self) -> str:
        return (
            f"InMemoryConnector(rows={len(self.rows)}, key_columns={list(self.key_columns)}, "
            f"latency={self.latency})"
        )

    def _index(self) -> dict[Key, list[Row]]:
        index: dict[Key, list[Row]] = {}
        for row in self.rows:
            index.setdefault(tuple(row.get(c) for c in self.key_columns), []).append(row)
        return index

    def lookup_function(self) -> LookupFunction:
        return _SyncMemoryLookup(self)

    def async_lookup_function(self) -> AsyncLookupFunction:
        return _AsyncMemoryLookup(self)

    def scan(self) -> Iterable[Row]:
        return iter(list(self.rows))


class _SyncMemoryLookup(LookupFunction):
    def __init__(self, connector: InMemoryConnector) -> None:
        self.connector = connector
        self.index: dict[Key, list[Row]] = {}

    def open(self) -> None:
        self.index = self.connector._index()

    def lookup(self, key: Key) -> Collection[Row]:
        if self.connector.latency:
            time.sleep(self.connector.latency)
        return [dict(r) for r in self.index.get(tuple(key), ())]


class _AsyncMemoryLookup(AsyncLookupFunction):
    def __init__(self, connector: InMemoryConnector) -> None:
        self.connector = connector
        self.index: dict[Key, list[Row]] = {}

    async def open(self) -> None:
        self.index = self.connector._index()

    async def async_lookup(self, key: Key) -> Collection[Row]:
        if self.connector.latency:
            await asyncio.sleep(self.connector.latency)
        return [dict(r) for r in self.index.get(tuple(key), ())]

    async def async_lookup_batch(
        self, keys: Sequence[Key]
    ) -> Sequence[Collection[Row] | BaseException]:
        if self.connector.latency:
            await asyncio.sleep(self.connector.latency)
        return [[dict(r) for r in self.index.get(tuple(k), ())] for k in keys]
