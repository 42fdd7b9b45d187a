"""Retry inside the operator, present only when a run has a retry strategy (FLIP-232).

:class:`RetryPolicy` is the run's strategy with its predicates; each admitted record's handler is
wrapped in a :class:`RetryingHandler` (Flink's ``RetryableResultHandlerDelegator``), which
receives every attempt's outcome and either schedules the next attempt or passes the outcome
on to the handler as final. The delegator also stands for the record in the deadline queue, so
that a deadline passing between two attempts cancels the retry timer.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from asyncio_lookup.runtime.handler import ResultHandler, State, result_type_error
from asyncio_lookup.runtime.retry import AsyncRetryStrategy

if TYPE_CHECKING:
    from asyncio_lookup.runtime.run import OperatorRun


class RetryPolicy:
    """A run's retry strategy: which outcomes are retried, how often and after what delay."""

    def __init__(self, strategy: AsyncRetryStrategy, run: OperatorRun) -> None:
        self.strategy = strategy
        self.run = run
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


class RetryingHandler:
    """One record's attempts under a retry policy, delegating final outcomes to its handler."""

    __slots__ = ("at", "attempts", "handler", "policy", "timer")

    def __init__(self, handler: ResultHandler, policy: RetryPolicy) -> None:
        self.handler = handler
        self.policy = policy
        self.at = handler.at
        self.attempts = 1  # the current attempt's number
        self.timer: asyncio.TimerHandle | None = None  # the next attempt's, while waiting

    @property
    def armed(self) -> bool:
        return self.handler.armed

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
        if not (retryable and self._retry()):
            handler.complete_exceptionally(error)

    def _retry(self) -> bool:
        """Schedule the next attempt if the strategy allows; False if the outcome is final."""
        try:
            delay = self.policy.delay(self.attempts)
        except Exception as error:
            self.handler.complete_exceptionally(error)
            return True
        if delay is None:
            return False
        self.timer = self.handler.run._loop.call_later(delay, self._next_attempt)
        return True

    def _next_attempt(self) -> None:
        self.timer = None
        handler = self.handler
        run = handler.run
        if run._closed or handler.state is not State.PENDING:
            return
        run._metrics.retries += 1
        self.attempts += 1
        handler.start(self)

    def expire(self) -> None:
        """The deadline passed: no further attempt; the handler's timeout rules apply."""
        self.cancel()
        self.handler.expire()

    def cancel(self) -> asyncio.Task[None] | None:
        """Cancel the retry timer and the running attempt (see ``ResultHandler.cancel``)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        return self.handler.cancel()
