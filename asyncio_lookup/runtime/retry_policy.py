"""Retry inside the operator, present only when a run has a retry strategy (FLIP-232).

:class:`RetryPolicy` is the run's strategy with its predicates; each admitted record's handler is
wrapped in a :class:`RetryingHandler` (Flink's ``RetryableResultHandlerDelegator``), which
receives every attempt's outcome and either schedules the next attempt or passes the outcome
on to the handler as final. The next attempt's timer is kept on the handler (``next_attempt``),
so that the handler's deadline cancels it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from asyncio_lookup.runtime.causes import RETRIED, RETRIES
from asyncio_lookup.runtime.handler import ResultHandler, State, result_type_error
from asyncio_lookup.runtime.retry import AsyncRetryStrategy


class RetryPolicy:
    """A run's retry strategy: which outcomes are retried, how often and after what delay."""

    __slots__ = ("exception_predicate", "result_predicate", "strategy")

    def __init__(self, strategy: AsyncRetryStrategy) -> None:
        self.strategy = strategy
        predicate = strategy.retry_predicate
        self.result_predicate = predicate.result_predicate
        self.exception_predicate = predicate.exception_predicate

    def delay(self, attempts: int) -> float | None:
        """Seconds before attempt ``attempts + 1``, or None when the strategy allows no more."""
        strategy = self.strategy
        if not strategy.can_retry(attempts):
            return None
        delay: Any = strategy.backoff(attempts)
        if isinstance(delay, timedelta):
            delay = delay.total_seconds()
        return max(0.0, float(delay))


#: The cause of a retry the result predicate asked for (no error).
RESULT_CAUSE = "result predicate"


class RetryingHandler:
    """One record's attempts under a retry policy, delegating final outcomes to its handler."""

    __slots__ = ("error", "handler", "policy")

    def __init__(self, handler: ResultHandler, policy: RetryPolicy) -> None:
        self.handler = handler
        self.policy = policy
        self.error: BaseException | None = None  # what the scheduled retry follows

    @property
    def attempts(self) -> int:
        """The current attempt's number."""
        return self.handler.attempts_made()

    def complete(self, result: Any) -> None:
        """An attempt's result: retried when the result predicate says so and the strategy
        allows, else final. A result that is no collection is never retried."""
        handler = self.handler
        predicate = self.policy.result_predicate
        if predicate is None:
            handler.complete(result)
            return
        kind = type(result)  # list and tuple inline: result_type_error() is a call
        if (kind is not list and kind is not tuple) and result_type_error(
            handler.element, result
        ) is not None:
            handler.complete(result)  # fails with that error: never retried
            return
        try:
            retryable = predicate(result)
        except Exception as predicate_error:
            handler.complete_exceptionally(predicate_error)
            return
        self.error = None
        if not (retryable and self._retry()):
            handler.complete(result)

    def complete_exceptionally(self, error: BaseException) -> None:
        """An attempt's error: retried when the exception predicate says so and the strategy
        allows, else final."""
        handler = self.handler
        predicate = self.policy.exception_predicate
        if predicate is None:
            handler.complete_exceptionally(error)
            return
        try:
            retryable = predicate(error)
        except Exception as predicate_error:
            predicate_error.__cause__ = error
            handler.complete_exceptionally(predicate_error)
            return
        self.error = error
        if not (retryable and self._retry()):
            handler.complete_exceptionally(error)

    def _retry(self) -> bool:
        """Schedule the next attempt if the strategy allows; False if the outcome is final."""
        try:
            delay = self.policy.delay(self.handler.attempts_made())
        except Exception as error:
            self.handler.complete_exceptionally(error)
            return True
        if delay is None:
            return False
        handler = self.handler
        handler.next_attempt = handler.run.loop.call_later(delay, self._next_attempt)
        return True

    def _next_attempt(self) -> None:
        handler = self.handler
        handler.next_attempt = None
        run = handler.run
        if run.closed or handler.state is not State.PENDING:
            return
        if handler.at <= run.time():
            return  # its deadline fires in this loop iteration: no call, no retry counted
        run.metrics.retries += 1
        attempts = handler.attempts_made()
        error, cause = self.error, None if self.error is not None else RESULT_CAUSE
        causes = run.metrics.causes
        causes.record(RETRIES, error, cause)
        if attempts == 1:
            causes.record(RETRIED, error, cause)
        handler.attempts = attempts + 1
        handler.start(self)
