"""Range checks of connector constructor arguments (the shared parsers of
:mod:`asyncio_lookup.validation`, in the connectors' vocabulary), raising at construction."""

from __future__ import annotations

import math
from typing import Any

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.validation import NEVER, parse_int, parse_number

MAX_POOL = 10_000  # connections per pool: more is a typo, not a plan
# a timeout shorter than 100 years (docs/semantics.md: durations); a socket's cannot hold more
_MAX_SECONDS = math.nextafter(NEVER, 0.0)


def count(option: str, value: Any, *, maximum: int | None = None) -> int:
    """An integer in ``[1, maximum]``."""
    allowed = "an integer >= 1" + (f" and <= {maximum:,}" if maximum is not None else "")
    return parse_int(option, value, minimum=1, maximum=maximum, allowed=allowed, text=False)


def seconds(option: str, value: Any, *, zero: bool = False) -> float:
    """A number of seconds > 0 (``>= 0`` with ``zero``), shorter than 100 years."""
    if zero:
        return parse_number(
            option, value, minimum=0, maximum=_MAX_SECONDS, allowed="seconds >= 0, under 100 years"
        )
    return parse_number(
        option, value, above=0, maximum=_MAX_SECONDS, allowed="seconds > 0, under 100 years"
    )


def optional_seconds(option: str, value: Any) -> float | None:
    """Seconds > 0 (under 100 years), or ``None`` for no limit."""
    if value is None:
        return None
    return parse_number(
        option,
        value,
        above=0,
        maximum=_MAX_SECONDS,
        allowed="seconds > 0 and under 100 years, or None (no limit)",
    )


def text(option: str, value: Any) -> str:
    """A non-empty string."""
    if not isinstance(value, str) or not value:
        raise ConfigurationError(option, value, "a non-empty string")
    return value
