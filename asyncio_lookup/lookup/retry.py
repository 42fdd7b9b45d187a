"""Failure retries below the cache (``lookup.max-retries``), with tenacity.

A connector call that raised a transient error (``TransientError``, ``ConnectionError``,
``OSError``) is retried with exponential backoff, never sooner than the error's ``retry_after``.
When the retries run out the lookup raises ``LookupFailedError`` naming the key, with the last
error as ``__cause__``. Other errors propagate at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import tenacity

from asyncio_lookup.errors import ConfigurationError, LookupFailedError, TransientError
from asyncio_lookup.lookup.functions import Key

T = TypeVar("T")

TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (TransientError, ConnectionError, OSError)


def is_transient(error: BaseException) -> bool:
    """True for errors a retry may fix."""
    return isinstance(error, TRANSIENT_ERRORS)


def _replay_first(error: Exception, attempt: Callable[[], T]) -> Callable[[], T]:
    """``attempt`` whose first call raises ``error`` again: tenacity takes over after a first
    attempt made outside it (building tenacity's machinery costs more than most lookups, so
    the common case, success at once, never does)."""
    replay = [error]

    def run() -> T:
        if replay:
            raise replay.pop()
        return attempt()

    return run


@dataclass(frozen=True)
class FailureRetry:
    """``max_retries`` retries of a failed call; waits ``initial * multiplier**n`` (capped at
    ``maximum``) plus up to ``jitter`` seconds, and at least the error's ``retry_after``."""

    max_retries: int
    initial: float = 0.1
    maximum: float = 5.0
    multiplier: float = 2.0
    jitter: float = 0.05

    def _wait(self) -> Callable[[tenacity.RetryCallState], float]:
        backoff = tenacity.wait_exponential(
            multiplier=self.initial, max=self.maximum, exp_base=self.multiplier
        ) + tenacity.wait_random(0, self.jitter)

        def wait(state: tenacity.RetryCallState) -> float:
            seconds = float(backoff(state))
            error = state.outcome.exception() if state.outcome is not None else None
            if isinstance(error, TransientError) and error.retry_after is not None:
                seconds = max(seconds, float(error.retry_after))
            return seconds

        return wait

    def _settings(self, on_retry: Callable[[], None]) -> dict[str, object]:
        return {
            "stop": tenacity.stop_after_attempt(self.max_retries + 1),
            "wait": self._wait(),
            "retry": tenacity.retry_if_exception(is_transient),
            "before_sleep": lambda _state: on_retry(),
            "reraise": False,
        }

    def call(
        self,
        key: Key,
        attempt: Callable[[], T],
        *,
        sleep: Callable[[float], None],
        on_retry: Callable[[], None] = lambda: None,
    ) -> T:
        """Run ``attempt()`` with retries, sleeping with ``sleep`` (blocking)."""
        try:
            return attempt()
        except Exception as error:
            if not is_transient(error):
                raise
            failed: Exception = error
        return self.retry(key, failed, attempt, sleep=sleep, on_retry=on_retry)

    def retry(
        self,
        key: Key,
        failed: Exception,
        attempt: Callable[[], T],
        *,
        sleep: Callable[[float], None],
        on_retry: Callable[[], None] = lambda: None,
    ) -> T:
        """Continue after a first attempt, made by the caller, raised the transient ``failed``
        (callers on a hot path make the first attempt inline and call this only on failure)."""
        retrying = tenacity.Retrying(sleep=sleep, **self._settings(on_retry))  # type: ignore[arg-type]
        try:
            return retrying(_replay_first(failed, attempt))
        except tenacity.RetryError as exhausted:
            raise self._failed(key, exhausted) from exhausted.last_attempt.exception()

    async def call_async(
        self,
        key: Key,
        attempt: Callable[[], Awaitable[T]],
        *,
        sleep: Callable[[float], Awaitable[None]],
        on_retry: Callable[[], None] = lambda: None,
    ) -> T:
        """Await ``attempt()`` with retries, waiting with ``sleep`` (loop timers)."""
        try:
            return await attempt()
        except Exception as error:
            if not is_transient(error):
                raise
            failed: Exception = error
        return await self.retry_async(key, failed, attempt, sleep=sleep, on_retry=on_retry)

    async def retry_async(
        self,
        key: Key,
        failed: Exception,
        attempt: Callable[[], Awaitable[T]],
        *,
        sleep: Callable[[float], Awaitable[None]],
        on_retry: Callable[[], None] = lambda: None,
    ) -> T:
        """:meth:`retry` for async attempts."""
        retrying = tenacity.AsyncRetrying(sleep=sleep, **self._settings(on_retry))  # type: ignore[arg-type]
        replay = [failed]

        async def run() -> T:  # tenacity awaits only coroutine functions, not lambdas
            if replay:
                raise replay.pop()
            return await attempt()

        try:
            return await retrying(run)
        except tenacity.RetryError as exhausted:
            raise self._failed(key, exhausted) from exhausted.last_attempt.exception()

    def _failed(self, key: Key, exhausted: tenacity.RetryError) -> LookupFailedError:
        last = exhausted.last_attempt.exception()
        attempts = exhausted.last_attempt.attempt_number
        return LookupFailedError(
            f"lookup of key {key!r} failed after {attempts} attempt(s) "
            f"(lookup.max-retries={self.max_retries}): {type(last).__name__}: {last}"
        )


@dataclass(frozen=True)
class MissRetry:
    """The LOOKUP hint's retry on lookup miss (``retry-predicate=lookup_miss``, ``fixed_delay``):
    an empty result is retried after ``delay`` seconds, at most ``max_attempts`` times."""

    delay: float
    max_attempts: int

    def __post_init__(self) -> None:
        delay: object = self.delay
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not delay > 0:
            raise ConfigurationError("fixed-delay", self.delay, "a duration > 0, in seconds")
        attempts: object = self.max_attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ConfigurationError("max-attempts", self.max_attempts, "an integer > 0")
