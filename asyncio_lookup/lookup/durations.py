"""Durations written as Flink writes them: ``'10s'``, ``'10 s'``, ``'100ms'``, ``'3 min'``."""

from __future__ import annotations

import math
import re
from datetime import timedelta

from asyncio_lookup.errors import ConfigurationError

_UNIT_SECONDS: dict[str, float] = {}
for _names, _seconds in (
    (("ns", "nano", "nanos", "nanosecond", "nanoseconds"), 1e-9),
    (("us", "µs", "micro", "micros", "microsecond", "microseconds"), 1e-6),
    (("ms", "milli", "millis", "millisecond", "milliseconds"), 1e-3),
    (("s", "sec", "secs", "second", "seconds"), 1.0),
    (("m", "min", "mins", "minute", "minutes"), 60.0),
    (("h", "hour", "hours"), 3600.0),
    (("d", "day", "days"), 86400.0),
):
    for _name in _names:
        _UNIT_SECONDS[_name] = _seconds

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zµ]*)\s*$", re.IGNORECASE)

DURATION_ALLOWED = (
    "a non-negative duration such as '10s', '10 s', '100ms', '3 min', '1h' (no unit = ms)"
)


def parse_duration(option: str, value: str | float | int | timedelta) -> float:
    """Parse a duration into seconds, raising :class:`ConfigurationError` naming ``option``.

    Strings use Flink's syntax (a number with no unit is milliseconds); numbers are seconds.
    """
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool):
        raise ConfigurationError(option, value, DURATION_ALLOWED)
    elif isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        match = _DURATION.match(value)
        if not match:
            raise ConfigurationError(option, value, DURATION_ALLOWED)
        number, unit = match.groups()
        unit_seconds = _UNIT_SECONDS.get(unit.lower()) if unit else 1e-3
        if unit_seconds is None:
            raise ConfigurationError(
                option, value, DURATION_ALLOWED, reason=f"unknown time unit {unit!r}"
            )
        seconds = float(number) * unit_seconds
    else:
        raise ConfigurationError(option, value, DURATION_ALLOWED)
    if seconds < 0 or math.isnan(seconds) or math.isinf(seconds):
        raise ConfigurationError(option, value, DURATION_ALLOWED, reason="must not be negative")
    return seconds
