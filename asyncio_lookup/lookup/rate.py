"""What a rate limit is (docs/semantics.md §2.12): a job's budget (:class:`RateLimit`), a task's
share of it (:class:`TaskRate`), the text of a rate, and which errors say "too many requests"."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from asyncio_lookup.errors import ConfigurationError, TransientError
from asyncio_lookup.lookup.rate_control import BURST_SECONDS
from asyncio_lookup.validation import parse_bool, parse_int

#: Answers that mean "too many requests": the adaptive mode backs off on them.
THROTTLE_STATUSES = frozenset({429, 503})
RATE_ALLOWED = (
    "a number of requests per second > 0 (e.g. 200 or '200'), or a rate with a unit: "
    "'200/s', '12000/min', '100000/h'"
)
_UNITS = {"s": 1.0, "sec": 1.0, "second": 1.0, "min": 60.0, "minute": 60.0, "h": 3600.0}


def parse_rate(option: str, value: Any) -> float:
    """Requests per second from a number or ``'N'``, ``'N/s'``, ``'N/min'``, ``'N/h'``."""
    if isinstance(value, bool):
        raise ConfigurationError(option, value, RATE_ALLOWED)
    if isinstance(value, (int, float)):
        rate, per = float(value), 1.0
    elif isinstance(value, str):
        number, _, unit = value.strip().partition("/")
        per_unit = _UNITS.get(unit.strip().lower() or "s")
        try:
            rate = float(number)
        except ValueError:
            raise ConfigurationError(option, value, RATE_ALLOWED) from None
        if per_unit is None:
            raise ConfigurationError(
                option, value, RATE_ALLOWED, reason=f"unknown unit {unit.strip()!r}"
            )
        per = per_unit
    else:
        raise ConfigurationError(option, value, RATE_ALLOWED)
    if not math.isfinite(rate) or rate <= 0:
        raise ConfigurationError(option, value, RATE_ALLOWED, reason="not a positive rate")
    return rate / per


def format_rate(rate: float) -> str:
    """A rate as the text :func:`parse_rate` reads back exactly (requests per second)."""
    return f"{rate!r}/s"


def is_throttle(error: BaseException) -> bool:
    """True for an error that says the service wants fewer requests: a ``status`` of 429 or
    503 (:class:`TransientError`, :class:`~asyncio_lookup.errors.HttpStatusError`, aiohttp's
    ``ClientResponseError``) or a :class:`TransientError` with a ``retry_after``."""
    if getattr(error, "status", None) in THROTTLE_STATUSES:
        return True
    return isinstance(error, TransientError) and error.retry_after is not None


@dataclass(frozen=True)
class RateLimit:
    """A job-wide budget for ``async_map(..., rate_limit=...)``: ``requests_per_second`` (a
    number or ``'N/s'``, ``'N/min'``, ``'N/h'``) shared by the tasks that run at once
    (``parallelism``; default: the task slots the Spark conf describes), adapted on 429 / 503
    answers when ``adaptive``. The same as a lookup table's ``lookup.rate-limit`` options."""

    requests_per_second: float
    adaptive: bool = False
    parallelism: int | None = None

    def __post_init__(self) -> None:
        rate = parse_rate("rate_limit", self.requests_per_second)
        object.__setattr__(self, "requests_per_second", rate)
        object.__setattr__(self, "adaptive", parse_bool("rate_limit.adaptive", self.adaptive))
        if self.parallelism is not None:
            parse_int("rate_limit.parallelism", self.parallelism, minimum=1, text=False)

    @classmethod
    def of(cls, value: Any) -> RateLimit | None:
        """A :class:`RateLimit` from itself, a rate (number or text) or None."""
        if value is None or isinstance(value, RateLimit):
            return value
        return cls(value)


@dataclass(frozen=True)
class TaskRate:
    """What one task may send: ``rate`` requests per second (its share of the job's budget),
    adapted on throttling answers when ``adaptive``."""

    rate: float
    adaptive: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate", parse_rate("rate", self.rate))

    @property
    def burst(self) -> float:
        return max(1.0, self.rate * BURST_SECONDS)
