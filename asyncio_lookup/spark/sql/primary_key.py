"""``PRIMARY KEY (...) NOT ENFORCED`` of a lookup table's DDL: metadata, never a filter.

Flink does not check a ``NOT ENFORCED`` key either, and its JDBC connector returns every row a
key matches. So does this library: a lookup by the declared primary key that returns several
rows joins all of them (docs/semantics.md, "PRIMARY KEY"). Such a result means the key is not
unique in the store, which a user should hear about: :class:`PrimaryKeyCheck` wraps the table's
connector and logs one WARNING per table and Python worker naming the table, the key and the
row count (the rows still all join).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from typing import Any

from asyncio_lookup.lookup.functions import AsyncLookupFunction, Key, LookupFunction, Row
from asyncio_lookup.lookup.providers import (
    FullCachingLookupProvider,
    PartialCachingAsyncLookupProvider,
    PartialCachingLookupProvider,
)

log = logging.getLogger(__name__)
_PROVIDERS = (
    FullCachingLookupProvider,
    PartialCachingLookupProvider,
    PartialCachingAsyncLookupProvider,
)


class _Warner:
    """Logs the first key of ``table`` that returned several rows (once per worker process)."""

    def __init__(self, table: str, key: tuple[str, ...]) -> None:
        self.table, self.key = table, key
        self.warned = False

    def check(self, key: Key, rows: Collection[Row]) -> Collection[Row]:
        if not self.warned and len(rows) > 1:
            self.warned = True
            log.warning(
                "lookup table %s: PRIMARY KEY (%s) NOT ENFORCED, but key %r returned %d rows; "
                "all of them are joined (a NOT ENFORCED key is not checked, as in Flink's JDBC "
                "connector). Make the key unique in the store, or drop the PRIMARY KEY.",
                self.table,
                ", ".join(self.key),
                tuple(key),
                len(rows),
            )
        return rows


class _SyncCheck(LookupFunction):
    def __init__(self, inner: LookupFunction, warner: _Warner) -> None:
        self.inner, self.warner = inner, warner

    def open(self) -> None:
        self.inner.open()

    def lookup(self, key: Key) -> Collection[Row]:
        return self.warner.check(key, self.inner.lookup(key))

    def close(self) -> None:
        self.inner.close()


class _AsyncCheck(AsyncLookupFunction):
    def __init__(self, inner: AsyncLookupFunction, warner: _Warner) -> None:
        self.inner, self.warner = inner, warner

    async def open(self) -> None:
        await self.inner.open()

    async def async_lookup(self, key: Key) -> Collection[Row]:
        return self.warner.check(key, await self.inner.async_lookup(key))

    async def async_lookup_batch(
        self, keys: Sequence[Key]
    ) -> Sequence[Collection[Row] | BaseException]:
        results = await self.inner.async_lookup_batch(keys)
        for key, rows in zip(keys, results, strict=False):
            if not isinstance(rows, BaseException):
                self.warner.check(key, rows)
        return results

    @property
    def supports_batch(self) -> bool:
        return self.inner.supports_batch

    @property
    def max_batch_size(self) -> int | None:
        return self.inner.max_batch_size

    async def close(self) -> None:
        await self.inner.close()


class PrimaryKeyCheck:
    """``source`` (a connector) whose lookups warn when a primary key returns several rows;
    everything else is the source's own (``scan``, ``target``, ``partitioner``...)."""

    def __init__(self, source: Any, table: str, key: tuple[str, ...]) -> None:
        self.source = source
        self.warner = _Warner(table, key)

    def __getattr__(self, name: str) -> Any:
        if name in ("source", "warner"):  # not set yet (unpickling)
            raise AttributeError(name)
        return getattr(self.source, name)

    def lookup_function(self) -> LookupFunction | None:
        function = self.source.lookup_function()
        return None if function is None else _SyncCheck(function, self.warner)

    def async_lookup_function(self) -> AsyncLookupFunction | None:
        function = self.source.async_lookup_function()
        return None if function is None else _AsyncCheck(function, self.warner)

    def __repr__(self) -> str:
        return repr(self.source)


def checked(source: Any, table: str, key: tuple[str, ...], primary_key: tuple[str, ...]) -> Any:
    """``source`` wrapped in :class:`PrimaryKeyCheck` when ``key`` is the declared primary key
    (a caching provider is left as it is: its type says how it caches)."""
    if not primary_key or tuple(key) != tuple(primary_key) or isinstance(source, _PROVIDERS):
        return source
    if not callable(getattr(source, "lookup_function", None)):
        return source
    return PrimaryKeyCheck(source, table, primary_key)
