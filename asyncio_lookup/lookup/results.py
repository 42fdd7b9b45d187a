"""Check what a lookup function returned: a collection of rows for one key."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from asyncio_lookup.errors import ResultTypeError
from asyncio_lookup.lookup.functions import Key, Row


def as_rows(result: Any, key: Key, function: object) -> list[Row]:
    """``result`` as a list of rows (mappings), or :class:`ResultTypeError` naming the function
    and key. A ``None`` among the rows is refused too: a join would take it for the NULL row of
    a LEFT join's unmatched key."""
    kind = type(result)
    if (
        kind is not list
        and kind is not tuple
        and (  # the common case, without the ABC checks
            result is None
            or isinstance(result, (str, bytes, Mapping))
            or not isinstance(result, Iterable)
        )
    ):
        raise ResultTypeError(
            f"{type(function).__name__} returned {type(result).__name__} for key {key!r}; "
            "a lookup must return a collection of rows (an empty one for no match)"
        )
    rows = list(result)
    for row in rows:
        if type(row) is not dict and not isinstance(row, Mapping):
            raise ResultTypeError(
                f"{type(function).__name__} returned {type(row).__name__} {row!r:.200} in its "
                f"collection for key {key!r}; each row must be a mapping (a dict) of column -> "
                "value"
            )
    return rows
