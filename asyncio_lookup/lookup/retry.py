"""Retries below the cache: two policies of one kind, both run by tenacity.

- :class:`FailureRetry` (``lookup.max-retries``): a call that raised a transient error
  (``TransientError``, ``ConnectionError``, ``OSError``) is retried with exponential backoff and
  jitter, capped at ``lookup.max-retry-backoff``, never sooner than the error's ``retry_after``.
  With the defaults (3 retries after 0.5-1, 1.5-2 and 4.5-5 s) it rides out an outage of 6.5 s.
  When the retries run out the lookup raises ``LookupFailedError`` naming the table, the key, the
  attempts and the last error (also its ``__cause__``). Other errors propagate at once.
- :class:`MissRetry` (the LOOKUP hint's ``retry-predicate=lookup_miss``): an empty result is
  retried after a fixed delay; when the attempts run out the empty result stands.

A policy's first attempt runs outside tenacity (:meth:`RetryPolicy.resume` takes over after
it): building tenacity's machinery costs more than most lookups, so the common case, success at
once, never does.
"""

from __future__ import annotations

import ssl
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import tenacity

from asyncio_lookup.errors import LookupFailedError, TransientError, error_text, lookup_context
from asyncio_lookup.lookup.functions import Key
from asyncio_lookup.validation import format_duration, parse_duration, parse_int

T = TypeVar("T")

TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (TransientError, ConnectionError, OSError)
# OSErrors no retry fixes: a local file missing or not readable, a rejected TLS certificate
PERMANENT_OS_ERRORS: tuple[type[BaseException], ...] = (
    FileNotFoundError,
    FileExistsError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
    ssl.SSLCertVerificationError,
)

DEFAULT_MAX_RETRIES = 3
DEFAULT_MAX_BACKOFF = 10.0

OnRetry = Callable[[BaseException | None, int], None]
"""Called before each retry with the error retried (None: a result was) and the number of the
attempt that gave it (1: the lookup's first retry follows)."""


def _ignore(_error: BaseException | None, _attempt: int) -> None:
    """The default :data:`OnRetry`: nothing is counted."""


def _error_of(state: tenacity.RetryCallState) -> BaseException | None:
    outcome = state.outcome
    return outcome.exception() if outcome is not None and outcome.failed else None


def is_transient(error: BaseException) -> bool:
    """True for errors a retry may fix."""
    if isinstance(error, TransientError):
        return True
    return isinstance(error, TRANSIENT_ERRORS) and not isinstance(error, PERMANENT_OS_ERRORS)


NO_KEY: Key = ()  # the key of a call that looks no key up (a full cache's scan)


class _Replay:
    """The outcome of the attempt made before tenacity took over, given back as its first."""

    def __init__(self, outcome: Any, failed: bool) -> None:
        self.pending = True
        self.outcome = outcome
        self.failed = failed

    def take(self) -> Any:
        self.pending = False
        if self.failed:
            raise self.outcome
        return self.outcome


class RetryPolicy(ABC):
    """When a lookup below the cache is tried again and how long it waits first."""

    @abstractmethod
    def retries(self, outcome: Any, failed: bool) -> bool:
        """True when this outcome (a result, or an error when ``failed``) is worth a retry."""

    @abstractmethod
    def _tenacity(self) -> dict[str, Any]:
        """tenacity's ``stop`` and ``wait`` for this policy."""

    @abstractmethod
    def _give_up(self, key: Key, state: tenacity.RetryCallState) -> Any:
        """What the lookup returns (or raises) when the retries run out."""

    def _take_over(self, first: Any, failed: bool) -> _Replay | None:
        """The replay of ``first`` for tenacity when it is worth a retry; else None when it
        stands as the result, or ``first`` raised again when it is an error."""
        if self.retries(first, failed):
            return _Replay(first, failed)
        if failed:
            raise first
        return None

    def _settings(self, key: Key, on_retry: OnRetry) -> dict[str, Any]:
        def retry(state: tenacity.RetryCallState) -> bool:
            outcome = state.outcome
            assert outcome is not None
            if outcome.failed:
                return self.retries(outcome.exception(), True)
            return self.retries(outcome.result(), False)

        # A retry counts when it starts, not when its wait does: the lookup's deadline may
        # cancel it during the wait (then no call is made, and none is counted).
        waiting: list[tuple[BaseException | None, int]] = []

        def counted(state: tenacity.RetryCallState) -> None:
            if waiting:
                on_retry(*waiting.pop())

        return {
            **self._tenacity(),
            "retry": retry,
            "before_sleep": lambda state: waiting.append((_error_of(state), state.attempt_number)),
            "before": counted,
            "retry_error_callback": lambda state: self._give_up(key, state),
        }

    def call(
        self,
        key: Key,
        attempt: Callable[[], T],
        *,
        sleep: Callable[[float], None],
        on_retry: OnRetry = _ignore,
    ) -> T:
        """Run ``attempt()`` until this policy is satisfied, sleeping with ``sleep`` (blocks)."""
        try:
            result = attempt()
        except Exception as error:
            return self.resume(key, attempt, error, failed=True, sleep=sleep, on_retry=on_retry)
        return self.resume(key, attempt, result, failed=False, sleep=sleep, on_retry=on_retry)

    def resume(
        self,
        key: Key,
        attempt: Callable[[], T],
        first: Any,
        *,
        failed: bool,
        sleep: Callable[[float], None],
        on_retry: OnRetry = _ignore,
    ) -> T:
        """:meth:`call` after its first attempt, made by the caller, gave ``first`` (its error
        when ``failed``): a hot path makes that attempt inline and calls this only when it
        did not succeed at once."""
        replay = self._take_over(first, failed)
        if replay is None:
            return first  # type: ignore[no-any-return]
        retrying = tenacity.Retrying(sleep=sleep, **self._settings(key, on_retry))
        return retrying(lambda: replay.take() if replay.pending else attempt())

    async def call_async(
        self,
        key: Key,
        attempt: Callable[[], Awaitable[T]],
        *,
        sleep: Callable[[float], Awaitable[None]],
        on_retry: OnRetry = _ignore,
    ) -> T:
        """:meth:`call` for async attempts, waiting with ``sleep`` (loop timers)."""
        try:
            result = await attempt()
        except Exception as error:
            return await self.resume_async(
                key, attempt, error, failed=True, sleep=sleep, on_retry=on_retry
            )
        return await self.resume_async(
            key, attempt, result, failed=False, sleep=sleep, on_retry=on_retry
        )

    async def resume_async(
        self,
        key: Key,
        attempt: Callable[[], Awaitable[T]],
        first: Any,
        *,
        failed: bool,
        sleep: Callable[[float], Awaitable[None]],
        on_retry: OnRetry = _ignore,
    ) -> T:
        """:meth:`resume` for async attempts."""
        replay = self._take_over(first, failed)
        if replay is None:
            return first  # type: ignore[no-any-return]
        retrying = tenacity.AsyncRetrying(sleep=sleep, **self._settings(key, on_retry))

        async def run() -> T:  # tenacity awaits only coroutine functions, not lambdas
            return replay.take() if replay.pending else await attempt()

        return await retrying(run)


class _wait_backoff(tenacity.wait.wait_base):
    """``backoff`` capped at ``maximum``, but never sooner than a ``TransientError``'s
    ``retry_after`` (the server's word wins over the cap)."""

    def __init__(self, backoff: tenacity.wait.wait_base, maximum: float) -> None:
        self.backoff = backoff
        self.maximum = maximum

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        seconds = min(float(self.backoff(retry_state)), self.maximum)
        outcome = retry_state.outcome
        error = outcome.exception() if outcome is not None and outcome.failed else None
        if isinstance(error, TransientError) and error.retry_after is not None:
            seconds = max(seconds, float(error.retry_after))
        return seconds


@dataclass(frozen=True)
class FailureRetry(RetryPolicy):
    """``max_retries`` retries of a call that failed transiently; retry ``n`` waits
    ``initial * multiplier**(n-1)`` plus up to ``jitter`` seconds, at most ``maximum`` seconds,
    and at least the error's ``retry_after``. ``table`` and ``target`` are named in the final
    error."""

    max_retries: int = DEFAULT_MAX_RETRIES
    maximum: float = DEFAULT_MAX_BACKOFF
    initial: float = 0.5
    multiplier: float = 3.0
    jitter: float = 0.5
    table: str = ""
    target: str = ""

    def __post_init__(self) -> None:
        parse_int("lookup.max-retries", self.max_retries, minimum=0, text=False)
        maximum = parse_duration("lookup.max-retry-backoff", self.maximum, positive=True)
        object.__setattr__(self, "maximum", maximum)

    def retries(self, outcome: Any, failed: bool) -> bool:
        return failed and is_transient(outcome)

    def _tenacity(self) -> dict[str, Any]:
        backoff = tenacity.wait_exponential(
            multiplier=self.initial, exp_base=self.multiplier
        ) + tenacity.wait_random(0, self.jitter)
        return {
            "stop": tenacity.stop_after_attempt(self.max_retries + 1),
            "wait": _wait_backoff(backoff, self.maximum),
        }

    def _give_up(self, key: Key, state: tenacity.RetryCallState) -> Any:
        outcome = state.outcome
        assert outcome is not None
        last = outcome.exception()
        assert last is not None  # FailureRetry retries failures only
        context = lookup_context(self.table, key or None, self.target)
        error = LookupFailedError(
            f"{context}: failed after {state.attempt_number} attempt(s), "
            f"{format_duration(round(state.idle_for, 3))} of backoff (lookup.max-retries="
            f"{self.max_retries}, lookup.max-retry-backoff={format_duration(self.maximum)}); "
            f"last error: {type(last).__name__}: {error_text(last)}",
            attempts=state.attempt_number,
        )
        if self.table:
            error.context = context
        raise error from last


@dataclass(frozen=True)
class MissRetry(RetryPolicy):
    """The LOOKUP hint's retry on lookup miss (``retry-predicate=lookup_miss``, ``fixed_delay``):
    an empty result is retried after ``delay`` seconds, at most ``max_attempts`` times."""

    delay: float
    max_attempts: int

    def __post_init__(self) -> None:
        delay = parse_duration(
            "fixed-delay",
            self.delay,
            positive=True,
            allowed="a duration > 0, in seconds",
            text=False,
        )
        object.__setattr__(self, "delay", delay)
        parse_int("max-attempts", self.max_attempts, minimum=1, text=False)

    def retries(self, outcome: Any, failed: bool) -> bool:
        return not failed and not outcome

    def _tenacity(self) -> dict[str, Any]:
        return {
            "stop": tenacity.stop_after_attempt(self.max_attempts + 1),
            "wait": tenacity.wait_fixed(self.delay),
        }

    def _give_up(self, key: Key, state: tenacity.RetryCallState) -> Any:
        assert state.outcome is not None
        return state.outcome.result()
