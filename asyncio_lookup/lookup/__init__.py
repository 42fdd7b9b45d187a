"""Lookup functions, caches, options, metrics, hints and the join runner. Imports no Spark."""

from asyncio_lookup.lookup.durations import parse_duration
from asyncio_lookup.lookup.functions import (
    AsyncLookupFunction,
    Key,
    LookupFunction,
    LookupTableSource,
    Row,
)

__all__ = [
    "AsyncLookupFunction",
    "Key",
    "LookupFunction",
    "LookupTableSource",
    "Row",
    "parse_duration",
]
