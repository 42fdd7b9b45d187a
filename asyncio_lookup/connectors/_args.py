"""Range checks of connector constructor arguments, raising ``ConfigurationError`` at once."""

from __future__ import annotations

import math
from typing import Any

from asyncio_lookup.errors import ConfigurationError

MAX_POOL = 10_000  # connections per pool: more is a typo, not a plan


def count(option: str, value: Any, *, maximum: int | None = None) -> int:
    """An integer in ``[1, maximum]``."""
    allowed = "an integer >= 1" + (f" and <= {maximum:,}" if maximum is not None else "")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(option, value, allowed)
    if maximum is not None and value > maximum:
        raise ConfigurationError(option, value, allowed)
    return value


def seconds(option: str, value: Any, *, zero: bool = False) -> float:
    """A finite number of seconds > 0 (``>= 0`` with ``zero``)."""
    allowed = "seconds >= 0" if zero else "seconds > 0"
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
        or (value == 0 and not zero)
    ):
        raise ConfigurationError(option, value, allowed)
    return float(value)


def optional_seconds(option: str, value: Any) -> float | None:
    """Seconds > 0, or ``None`` for no limit."""
    if value is None:
        return None
    try:
        return seconds(option, value)
    except ConfigurationError:
        raise ConfigurationError(option, value, "seconds > 0, or None (no limit)") from None


def text(option: str, value: Any) -> str:
    """A non-empty string."""
    if not isinstance(value, str) or not value:
        raise ConfigurationError(option, value, "a non-empty string")
    return value
