"""Conversion of user-given durations (seconds or ``timedelta``) to float seconds."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from asyncio_lookup.errors import ConfigurationError


def to_seconds(option: str, value: Any, allowed: str) -> float:
    """Return ``value`` in seconds; a bool, a non-number or NaN is a :class:`ConfigurationError`."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ConfigurationError(option, value, allowed)
    return float(value)
