"""A cheap estimate of the memory a cached key and its rows take (``numCachedBytes``)."""

from __future__ import annotations

import sys
from collections.abc import Collection, Mapping
from typing import Any

from asyncio_lookup.lookup.functions import Key, Row

_SCALARS = frozenset({int, float, str, bytes, bool, type(None)})


def _value_bytes(value: Any) -> int:
    # Shallow for scalars; one level into containers (nested lists/maps in rows are rare and
    # the metric is an estimate, like Flink's).
    size = sys.getsizeof(value)
    if type(value) in _SCALARS:
        return size
    if isinstance(value, (list, tuple, set, frozenset)):
        size += sum(map(sys.getsizeof, value))
    elif isinstance(value, Mapping):
        size += sum(sys.getsizeof(k) + sys.getsizeof(v) for k, v in value.items())
    return size


def estimate_bytes(key: Key, rows: Collection[Row]) -> int:
    """Bytes of ``key`` and ``rows``: containers, column names and values (names are shared
    between rows in practice, so each name is counted once)."""
    getsizeof = sys.getsizeof
    scalars = _SCALARS
    size = _value_bytes(key) + getsizeof(rows)
    names: set[str] = set()
    for row in rows:
        size += getsizeof(row)
        for name, value in row.items():
            if name not in names:
                names.add(name)
                size += getsizeof(name)
            size += getsizeof(value) if type(value) in scalars else _value_bytes(value)
    return size
