"""A connector's full-table scan: an async iterable of rows, lazily connected."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from asyncio_lookup.lookup.functions import Row


class Scan:
    """The rows of one table, read when iterated with ``async for``.

    Each pass opens its own client and closes it afterwards, so a scan can be asked for on the
    driver (to learn that the source can be fully cached) and consumed on any event loop.
    """

    def __init__(self, rows: Callable[[], AsyncIterator[Row]], description: str) -> None:
        self._rows = rows
        self._description = description

    def __aiter__(self) -> AsyncIterator[Row]:
        return self._rows()

    def __repr__(self) -> str:
        return f"Scan({self._description})"
