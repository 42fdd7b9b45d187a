"""Check what a lookup function returned: a collection of rows for one key."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from asyncio_lookup.errors import ResultTypeError
from asyncio_lookup.lookup.functions import Key, Row


def as_rows(result: Any, key: Key, function: object) -> list[Row]:
    """``result`` as a list of rows, or :class:`ResultTypeError` naming the function and key."""
    kind = type(result)
    if kind is list or kind is tuple:  # the common case, without the ABC checks below
        return list(result)
    if (
        result is None
        or isinstance(result, (str, bytes, Mapping))
        or not isinstance(result, Iterable)
    ):
        raise ResultTypeError(
            f"{type(function).__name__} returned {type(result).__name__} for key {key!r}; "
            "a lookup must return a collection of rows (an empty one for no match)"
        )
    return list(result)
