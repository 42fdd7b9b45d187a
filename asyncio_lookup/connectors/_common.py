"""Pieces every connector shares: its error types and the two-faced scan result."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

from asyncio_lookup.errors import AsyncLookupError
from asyncio_lookup.lookup.functions import Row


class DataFormatError(AsyncLookupError, ValueError):
    """A stored value is not what the connector was configured to read (bad JSON, wrong type)."""


class Scan:
    """A full-table scan usable both with ``for`` and with ``async for``.

    ``lookup.cache = FULL`` may load on a thread (sync) or on the worker's event loop (async);
    each form opens its own client for the duration of one pass and closes it afterwards.
    """

    def __init__(
        self,
        sync_rows: Callable[[], Iterator[Row]],
        async_rows: Callable[[], AsyncIterator[Row]],
        description: str,
    ) -> None:
        self._sync_rows = sync_rows
        self._async_rows = async_rows
        self._description = description

    def __iter__(self) -> Iterator[Row]:
        return self._sync_rows()

    def __aiter__(self) -> AsyncIterator[Row]:
        return self._async_rows()

    def __repr__(self) -> str:
        return f"Scan({self._description})"
