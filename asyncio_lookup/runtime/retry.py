"""Retry strategies and predicates for the async wait operator (FLIP-232).

A strategy says whether attempt ``n + 1`` may follow attempt ``n`` (``can_retry(n)``, ``n`` 1-based)
and how long to wait before it (``backoff(n)`` seconds); its predicate says which outcomes are
worth a retry. The built-ins are immutable, so one strategy can serve any number of records.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.runtime.function import check_plain_callable
from asyncio_lookup.validation import parse_duration, parse_int, parse_number

ResultPredicate = Callable[[Collection[Any]], bool]
ExceptionPredicate = Callable[[BaseException], bool]


@dataclass(frozen=True)
class AsyncRetryPredicate:
    """Which outcomes are retryable: results matching ``result_predicate`` (results only) or
    exceptions matching ``exception_predicate`` (exceptions only). ``None`` matches nothing."""

    result_predicate: ResultPredicate | None = None
    exception_predicate: ExceptionPredicate | None = None

    def __post_init__(self) -> None:
        for name in ("result_predicate", "exception_predicate"):
            value = getattr(self, name)
            if value is not None:
                check_plain_callable(name, value, "a callable returning a bool, or None")


@runtime_checkable
class AsyncRetryStrategy(Protocol):
    """When and how often the operator retries a record (Flink's ``AsyncRetryStrategy``)."""

    def can_retry(self, current_attempts: int) -> bool:
        """Whether another attempt may follow attempt number ``current_attempts`` (1-based)."""
        ...

    def backoff(self, current_attempts: int) -> float:
        """Seconds to wait after attempt number ``current_attempts`` before the next one."""
        ...

    @property
    def retry_predicate(self) -> AsyncRetryPredicate:
        """The outcomes that may be retried."""
        ...


@dataclass(frozen=True)
class NoRetryStrategy:
    """Never retries."""

    def can_retry(self, current_attempts: int) -> bool:
        return False

    def backoff(self, current_attempts: int) -> float:
        return 0.0

    @property
    def retry_predicate(self) -> AsyncRetryPredicate:
        return AsyncRetryPredicate()


def _check_max_attempts(max_attempts: Any) -> int:
    allowed = "an int > 0 (the number of retries after the first call)"
    return parse_int("max_attempts", max_attempts, minimum=1, allowed=allowed, text=False)


def _check_delay(option: str, value: Any) -> float:
    allowed = "a delay > 0, in seconds (float) or a timedelta"
    return parse_duration(option, value, positive=True, allowed=allowed, text=False)


class _RetriesCounted:
    """``can_retry(n) = n <= max_attempts``: ``max_attempts`` counts retries, so a record gets
    at most ``max_attempts + 1`` calls (docs/semantics.md §1.5)."""

    max_attempts: int

    def can_retry(self, current_attempts: int) -> bool:
        return current_attempts <= self.max_attempts


@dataclass(frozen=True)
class FixedDelayRetryStrategy(_RetriesCounted):
    """Up to ``max_attempts`` retries, each ``delay`` seconds after the previous attempt ended."""

    max_attempts: int
    delay: float
    retry_predicate: AsyncRetryPredicate

    def backoff(self, current_attempts: int) -> float:
        return self.delay


@dataclass(frozen=True)
class ExponentialBackoffRetryStrategy(_RetriesCounted):
    """Up to ``max_attempts`` retries; ``backoff(1) = initial_delay``,
    ``backoff(n) = min(backoff(n - 1) * multiplier, max_delay)`` — a pure function of ``n``."""

    max_attempts: int
    initial_delay: float
    max_delay: float
    multiplier: float
    retry_predicate: AsyncRetryPredicate

    def backoff(self, current_attempts: int) -> float:
        delay = self.initial_delay
        for _ in range(current_attempts - 1):
            if delay >= self.max_delay:
                break
            delay = min(delay * self.multiplier, self.max_delay)
        return delay


def _predicate(
    result_predicate: ResultPredicate | None, exception_predicate: ExceptionPredicate | None
) -> AsyncRetryPredicate:
    if result_predicate is None and exception_predicate is None:
        warnings.warn(
            "a retry strategy without result_predicate or exception_predicate never retries "
            "(as Flink's); give one, such as RetryPredicates.EMPTY_RESULT or "
            "RetryPredicates.HAS_EXCEPTION",
            UserWarning,
            stacklevel=3,
        )
    return AsyncRetryPredicate(result_predicate, exception_predicate)


class RetryStrategies:
    """The built-in strategies (Flink's ``AsyncRetryStrategies``)."""

    NO_RETRY: AsyncRetryStrategy = NoRetryStrategy()

    @staticmethod
    def fixed_delay(
        max_attempts: int,
        delay: float | Any,
        result_predicate: ResultPredicate | None = None,
        exception_predicate: ExceptionPredicate | None = None,
    ) -> FixedDelayRetryStrategy:
        """At most ``max_attempts`` retries, ``delay`` seconds (or a timedelta) apart."""
        return FixedDelayRetryStrategy(
            _check_max_attempts(max_attempts),
            _check_delay("delay", delay),
            _predicate(result_predicate, exception_predicate),
        )

    @staticmethod
    def exponential_backoff(
        max_attempts: int,
        initial_delay: float | Any,
        max_delay: float | Any,
        multiplier: float,
        result_predicate: ResultPredicate | None = None,
        exception_predicate: ExceptionPredicate | None = None,
    ) -> ExponentialBackoffRetryStrategy:
        """At most ``max_attempts`` retries; delays grow by ``multiplier`` up to ``max_delay``."""
        initial = _check_delay("initial_delay", initial_delay)
        maximum = _check_delay("max_delay", max_delay)
        if maximum < initial:
            raise ConfigurationError(
                "max_delay", max_delay, f">= initial_delay ({initial_delay!r})"
            )
        parse_number("multiplier", multiplier, minimum=1.0, allowed="a number >= 1.0")
        return ExponentialBackoffRetryStrategy(
            _check_max_attempts(max_attempts),
            initial,
            maximum,
            float(multiplier),
            _predicate(result_predicate, exception_predicate),
        )


def _empty_result(result: Collection[Any]) -> bool:
    return len(result) == 0


def _has_exception(error: BaseException) -> bool:
    return True


class RetryPredicates:
    """The built-in predicates (Flink's ``RetryPredicates``)."""

    EMPTY_RESULT: ResultPredicate = _empty_result
    """Retry when the result is an empty collection."""
    HAS_EXCEPTION: ExceptionPredicate = _has_exception
    """Retry on any exception."""

    @staticmethod
    def exception_type(*types: type[BaseException]) -> ExceptionPredicate:
        """Retry on exceptions that are instances of any of ``types`` (subclasses included;
        causes are not unwrapped)."""
        if not types or not all(
            isinstance(t, type) and issubclass(t, BaseException) for t in types
        ):
            raise ConfigurationError("types", types, "one or more exception classes")
        matched = tuple(types)

        def predicate(error: BaseException) -> bool:
            return isinstance(error, matched)

        predicate.__qualname__ = f"exception_type({', '.join(t.__name__ for t in matched)})"
        return predicate
