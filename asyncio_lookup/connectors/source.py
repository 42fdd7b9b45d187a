"""What every built-in connector shares: lookups written once, on asyncio, and a lazy scan."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator

from asyncio_lookup.connectors.scan import Scan
from asyncio_lookup.lookup.blocking import BlockingLookupFunction
from asyncio_lookup.lookup.functions import AsyncLookupFunction, LookupFunction, Row


class AsyncFirstSource(ABC):
    """A ``LookupTableSource`` whose lookups are async; the sync mode ('async'='false') is
    :class:`BlockingLookupFunction` over them, and the scan reads :meth:`_scan` when iterated."""

    @abstractmethod
    def async_lookup_function(self) -> AsyncLookupFunction:
        """A new, unopened async lookup function over this connector."""

    @abstractmethod
    def _scan(self) -> AsyncIterator[Row]:
        """Every row of the table, on a client of its own."""

    def lookup_function(self) -> LookupFunction:
        return BlockingLookupFunction(self.async_lookup_function())

    def scan(self) -> Scan | None:
        return Scan(self._scan, repr(self))
