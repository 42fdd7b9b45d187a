"""Lookup functions (FLIP-221) and the ``LookupTableSource`` shape every connector has.

Keys are tuples of the dim key columns' values in dim-schema order; rows are ``dict``s
(column -> value). A lookup returns the rows for one key, in the store's order; an empty
collection is a lookup miss.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Collection,
    Iterable,
    Mapping,
    Sequence,
)
from typing import Any, Protocol, TypeAlias, runtime_checkable

Key: TypeAlias = tuple[Any, ...]
Row: TypeAlias = Mapping[str, Any]

#: The one NaN every key holds: Spark SQL joins NaN with NaN, but two NaN floats are neither
#: equal nor hashed alike in Python unless they are the same object (dicts test identity first).
NAN = float("nan")


def one_nan(value: Any) -> Any:
    """``value``, or :data:`NAN` when it is a NaN float."""
    return NAN if value != value and type(value) is float else value


def same_nan(values: list[Any]) -> list[Any]:
    """``values`` with every NaN float replaced by :data:`NAN` (in place; returned)."""
    for i, value in enumerate(values):
        if value != value and type(value) is float:
            values[i] = NAN
    return values


class LookupFunction(ABC):
    """A synchronous point lookup: ``lookup(key) -> rows``. Opened on the executor."""

    def open(self) -> None:  # noqa: B027 - optional hook
        """Open clients and pools; called once per Python worker process before the first lookup."""

    @abstractmethod
    def lookup(self, key: Key) -> Collection[Row]:
        """Return the rows whose key equals ``key`` (empty when there is none)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what :meth:`open` acquired."""


class AsyncLookupFunction(ABC):
    """An asynchronous point lookup, with an optional batched form.

    ``async_lookup_batch(keys)`` returns a sequence aligned with ``keys``: for each key its
    rows, or the exception that key's lookup failed with. Raising from it fails every key
    of the batch. Override it only when the store has a real batched read (MGET, ``= ANY``).
    Each call gets a list of its own; a function that reorders or changes it fails the batch
    with a ``ResultTypeError`` (its results would pair with the wrong keys).
    """

    async def open(self) -> None:  # noqa: B027 - optional hook
        """Open clients and pools on the event loop that will run the lookups."""

    @abstractmethod
    async def async_lookup(self, key: Key) -> Collection[Row]:
        """Return the rows whose key equals ``key`` (empty when there is none)."""

    async def async_lookup_batch(
        self, keys: Sequence[Key]
    ) -> Sequence[Collection[Row] | BaseException]:
        """Look up many keys in one call; the default calls :meth:`async_lookup` per key."""
        results: list[Collection[Row] | BaseException] = []
        for key in keys:
            try:
                results.append(await self.async_lookup(key))
            except Exception as error:  # delivered to that key's caller only
                results.append(error)
        return results

    @property
    def supports_batch(self) -> bool:
        """True when a subclass overrides :meth:`async_lookup_batch` with a real batched read."""
        return type(self).async_lookup_batch is not AsyncLookupFunction.async_lookup_batch

    @property
    def max_batch_size(self) -> int | None:
        """The most keys one :meth:`async_lookup_batch` call sends in one request to the store
        (None: any number). A chain never batches more keys than this, so one call is one
        request: what a rate limit counts and ``numExternalCalls`` reports."""
        return None

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release what :meth:`open` acquired."""


ScanResult: TypeAlias = "Iterable[Row] | AsyncIterable[Row]"


class FailedKey(dict[str, Any]):
    """What a scan yields for a key whose stored value it could not read, instead of rows: the
    key columns' values (so that it is routed and indexed as that key's rows are) and the
    ``error``. A FULL cache then fails the lookups of that key alone, with that error, as a
    point lookup of it fails (one bad value must not fail every key's lookups)."""

    __slots__ = ("error",)

    def __init__(self, key_values: Mapping[str, Any], error: Exception) -> None:
        super().__init__(key_values)
        self.error = error


def scan_rows(rows: ScanResult) -> AsyncIterator[Row]:
    """A scan's rows as one async iterator, whether the source returned an async iterable (the
    connectors) or a plain one (a list, a user's generator): scans are consumed one way."""
    if isinstance(rows, AsyncIterable):
        return aiter(rows)
    return _from_iterable(rows)


async def _from_iterable(rows: Iterable[Row]) -> AsyncIterator[Row]:
    for row in rows:
        yield row


@runtime_checkable
class LookupTableSource(Protocol):
    """What ``LookupTable(connector=...)`` accepts: a connector, a provider, or any such object.

    A source offers a sync lookup, an async lookup, or both, and optionally a full scan for
    ``lookup.cache = FULL`` (rows as an async iterable, or a plain one; see :func:`scan_rows`).
    A capability it lacks returns ``None``. A connector built on an async lookup offers its
    sync lookup as :class:`~asyncio_lookup.lookup.blocking.BlockingLookupFunction`.

    Optionally, a source may also define ``partitioner(key_columns) -> KeyPartitioner | None``
    (see :mod:`asyncio_lookup.lookup.partitioning`): a hash lookup join (``SHUFFLE_HASH``) then
    routes keys by it instead of the plain key hash, e.g. by Redis cluster slot.
    """

    def lookup_function(self) -> LookupFunction | None: ...

    def async_lookup_function(self) -> AsyncLookupFunction | None: ...

    def scan(self) -> ScanResult | None: ...
