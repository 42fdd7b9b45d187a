"""A dim table held in memory: async lookups (with batches), their sync form, and a scan.

For tests, demos and notebooks.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection, Iterable, Mapping, Sequence
from typing import Any

from asyncio_lookup.connectors._args import seconds
from asyncio_lookup.connectors._secrets import identity_digest
from asyncio_lookup.connectors.source import AsyncFirstSource
from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.lookup.functions import AsyncLookupFunction, Key, Row, same_nan


class InMemoryConnector(AsyncFirstSource):
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
            raise ConfigurationError("key_columns", key_columns, "one or more column names")
        latency = seconds("latency", latency, zero=True)
        self.rows = [dict(row) for row in rows]
        self.key_columns = tuple(key_columns)
        self.latency = latency

    def __repr__(self) -> str:
        return (
            f"InMemoryConnector(rows={len(self.rows)}, key_columns={list(self.key_columns)}, "
            f"latency={self.latency})"
        )

    @property
    def target(self) -> str:
        """What run-time errors name."""
        return f"in-memory rows ({len(self.rows)})"

    @property
    def cache_identity(self) -> str:
        """What its answers depend on (the shared cache's namespace): the rows and key columns."""
        return identity_digest("memory", repr((self.key_columns, self.rows)))

    def _index(self) -> dict[Key, list[Row]]:
        index: dict[Key, list[Row]] = {}
        for row in self.rows:
            key = [row.get(c) for c in self.key_columns]
            index.setdefault(tuple(same_nan(key)), []).append(row)
        return index

    def async_lookup_function(self) -> AsyncLookupFunction:
        return _MemoryLookup(self)

    async def _scan(self) -> AsyncIterator[Row]:
        for row in list(self.rows):
            yield row


class _MemoryLookup(AsyncLookupFunction):
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
