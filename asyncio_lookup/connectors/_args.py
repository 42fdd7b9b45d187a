"""Range checks of connector constructor arguments (the shared parsers of
:mod:`asyncio_lookup.validation`, in the connectors' vocabulary), raising at construction."""

from __future__ import annotations

from typing import Any

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.validation import parse_int, parse_number

MAX_POOL = 10_000  # connections per pool: more is a typo, not a plan


def count(option: str, value: Any, *, maximum: int | None = None) -> int:
    """An integer in ``[1, maximum]``."""
    allowed = "an integer >= 1" + (f" and <= {maximum:,}" if maximum is not None else "")
    return parse_int(option, value, minimum=1, maximum=maximum, allowed=allowed, text=False)


def seconds(option: str, value: Any, *, zero: bool = False) -> float:
    """A finite number of seconds > 0 (``>= 0`` with ``zero``)."""
    if zero:
        return parse_number(option, value, minimum=0, allowed="seconds >= 0")
    return parse_number(option, value, above=0, allowed="seconds > 0")


def optional_seconds(option: str, value: Any) -> float | None:
    """Seconds > 0, or ``None`` for no limit."""
    if value is None:
        return None
    return parse_number(option, value, above=0, allowed="seconds > 0, or None (no limit)")


def text(option: str, value: Any) -> str:
    """A non-empty string."""
    if not isinstance(value, str) or not value:
        raise ConfigurationError(option, value, "a non-empty string")
    return value
