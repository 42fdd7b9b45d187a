"""docs/semantics.md §1.5 retry: strategies, predicates and the timer-driven retry in the
operator."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.runtime import (
    AsyncRetryPredicate,
    AsyncRetryStrategy,
    AsyncWaitOperator,
    OutputMode,
    RetryPredicates,
    RetryStrategies,
)

from .support import Scripted, WithTimeoutHook, collect, const, keys
from .virtual_time import VirtualTimeLoop, run_virtual


def test_fixed_delay_counts_retries_and_has_a_constant_backoff() -> None:
    s = RetryStrategies.fixed_delay(3, 0.25, result_predicate=RetryPredicates.EMPTY_RESULT)
    assert [s.can_retry(n) for n in (1, 2, 3, 4)] == [True, True, True, False]
    assert [s.backoff(n) for n in (1, 2, 3)] == [0.25, 0.25, 0.25]
    assert isinstance(s, AsyncRetryStrategy)


def test_exponential_backoff_is_a_pure_function_of_the_attempt_number() -> None:
    s = RetryStrategies.exponential_backoff(
        10, 0.1, 1.0, 2.0, exception_predicate=RetryPredicates.HAS_EXCEPTION
    )
    expected = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert [s.backoff(n) for n in range(1, 7)] == pytest.approx(expected)
    # any call order, any number of times: same answers (no state shared between records)
    assert [s.backoff(n) for n in (6, 1, 3, 3, 2)] == pytest.approx([1.0, 0.1, 0.4, 0.4, 0.2])
    assert s.backoff(10**6) == 1.0  # capped, no overflow
    assert [s.can_retry(n) for n in (10, 11)] == [True, False]


def test_timedelta_delays() -> None:
    from datetime import timedelta

    empty = RetryPredicates.EMPTY_RESULT
    fixed = RetryStrategies.fixed_delay(1, timedelta(milliseconds=20), result_predicate=empty)
    assert fixed.backoff(1) == 0.02
    s = RetryStrategies.exponential_backoff(
        1, timedelta(seconds=1), timedelta(seconds=3), 1.5, result_predicate=empty
    )
    assert (s.initial_delay, s.max_delay) == (1.0, 3.0)


@pytest.mark.parametrize("bad", ["yes", 1, 0.5, [len], True])
@pytest.mark.parametrize("which", ["result_predicate", "exception_predicate"])
def test_a_predicate_that_is_not_callable_is_refused_when_the_strategy_is_built(
    bad: Any, which: str
) -> None:
    """Before: accepted, and every record failed in the task with "'str' object is not
    callable"."""
    for build in (
        lambda: RetryStrategies.fixed_delay(2, 0.1, **{which: bad}),
        lambda: RetryStrategies.exponential_backoff(2, 0.1, 1.0, 2.0, **{which: bad}),
        lambda: AsyncRetryPredicate(**{which: bad}),
    ):
        with pytest.raises(ConfigurationError, match=which) as info:
            build()
        assert repr(bad) in str(info.value) and "callable" in str(info.value)


def test_no_retry_never_retries() -> None:
    assert not RetryStrategies.NO_RETRY.can_retry(1)
    assert RetryStrategies.NO_RETRY.retry_predicate == AsyncRetryPredicate()


def test_builtin_predicates() -> None:
    assert RetryPredicates.EMPTY_RESULT([]) and not RetryPredicates.EMPTY_RESULT([1])
    assert RetryPredicates.HAS_EXCEPTION(ValueError())
    only_os = RetryPredicates.exception_type(OSError, KeyError)
    assert only_os(ConnectionResetError())  # subclass of OSError
    assert only_os(KeyError("k"))
    assert not only_os(ValueError())
    wrapped = RuntimeError("wrapper")
    wrapped.__cause__ = OSError("inner")
    assert not only_os(wrapped)  # causes are not unwrapped


def test_max_attempts_plus_one_calls_at_most_then_last_result_is_final() -> None:
    fn = Scripted(const(0.0, []))
    strategy = RetryStrategies.fixed_delay(3, 0.1, result_predicate=RetryPredicates.EMPTY_RESULT)
    op = AsyncWaitOperator(fn, timeout=100, retry_strategy=strategy)
    out = run_virtual(collect(op, [0]))
    assert len(fn.calls) == 4
    assert out == [(pytest.approx(0.3), (0, []))]  # the last (empty) result, as is
    assert op.metrics.retries == 3


def test_last_error_fails_the_stream_after_retries_run_out() -> None:
    errors = [ConnectionError(f"attempt {n}") for n in range(1, 5)]
    fn = Scripted(lambda e, a: (0.0, errors[a - 1]))
    strategy = RetryStrategies.fixed_delay(
        3, 0.1, exception_predicate=RetryPredicates.HAS_EXCEPTION
    )
    op = AsyncWaitOperator(fn, timeout=100, retry_strategy=strategy)
    with pytest.raises(ConnectionError) as raised:
        run_virtual(collect(op, [0]))
    assert raised.value is errors[3]
    assert len(fn.calls) == 4


@dataclass
class Recording:
    """A strategy that records the attempt numbers it is asked about."""

    max_attempts: int
    asked_can_retry: list[int] = field(default_factory=list)
    asked_backoff: list[int] = field(default_factory=list)

    def can_retry(self, current_attempts: int) -> bool:
        self.asked_can_retry.append(current_attempts)
        return current_attempts <= self.max_attempts

    def backoff(self, current_attempts: int) -> float:
        self.asked_backoff.append(current_attempts)
        return 0.1 * current_attempts

    @property
    def retry_predicate(self) -> AsyncRetryPredicate:
        return AsyncRetryPredicate(result_predicate=RetryPredicates.EMPTY_RESULT)


def test_strategy_sees_the_one_based_number_of_the_attempt_just_completed() -> None:
    fn = Scripted(const(0.0, []))
    strategy = Recording(max_attempts=3)
    run_virtual(collect(AsyncWaitOperator(fn, timeout=100, retry_strategy=strategy), [0]))
    assert strategy.asked_can_retry == [1, 2, 3, 4]
    assert strategy.asked_backoff == [1, 2, 3]
    # attempt n+1 starts backoff(n) after attempt n ended
    assert [round(c.at, 6) for c in fn.calls] == [0.0, 0.1, 0.3, 0.6]


def test_exponential_backoff_schedules_each_record_independently() -> None:
    fn = Scripted(lambda e, a: (0.0, [] if a <= 3 else [e]))
    strategy = RetryStrategies.exponential_backoff(
        5, 0.1, 1.0, 3.0, result_predicate=RetryPredicates.EMPTY_RESULT
    )

    async def source() -> Any:
        yield "a"
        await asyncio.sleep(0.05)
        yield "b"

    op = AsyncWaitOperator(fn, timeout=100, retry_strategy=strategy, capacity=5)
    out = run_virtual(collect(op, source()))
    times = {e: [round(c.at, 6) for c in fn.calls if c.element == e] for e in "ab"}
    assert times["a"] == [0.0, 0.1, 0.4, 1.3]
    assert times["b"] == [0.05, 0.15, 0.45, 1.35]
    assert keys(out) == ["a", "b"]


def test_strategy_without_predicate_does_not_retry_and_says_so_when_built() -> None:
    with pytest.warns(UserWarning, match="never retries") as caught:
        strategy = RetryStrategies.fixed_delay(3, 0.1)
    assert caught[0].filename == __file__  # the caller's line, not the library's
    with pytest.warns(UserWarning, match="never retries"):
        RetryStrategies.exponential_backoff(3, 0.1, 1.0, 2.0)
    fn = Scripted(const(0.0, []))
    out = run_virtual(collect(AsyncWaitOperator(fn, timeout=10, retry_strategy=strategy), [0]))
    assert len(fn.calls) == 1 and out == [(0.0, (0, []))]
    boom = ValueError()
    fn = Scripted(const(0.0, boom))
    with pytest.raises(ValueError):
        run_virtual(collect(AsyncWaitOperator(fn, timeout=10, retry_strategy=strategy), [0]))
    assert len(fn.calls) == 1


def test_result_predicate_sees_results_only_and_exception_predicate_exceptions_only() -> None:
    seen_results: list[Any] = []
    seen_errors: list[BaseException] = []

    def on_result(result: Any) -> bool:
        seen_results.append(result)
        return False

    def on_error(error: BaseException) -> bool:
        seen_errors.append(error)
        return isinstance(error, ConnectionError)

    err = ConnectionError()
    fn = Scripted(lambda e, a: (0.0, err if a == 1 else ["ok"]))
    strategy = RetryStrategies.fixed_delay(
        2, 0.1, result_predicate=on_result, exception_predicate=on_error
    )
    out = run_virtual(collect(AsyncWaitOperator(fn, timeout=10, retry_strategy=strategy), [0]))
    assert seen_errors == [err] and seen_results == [["ok"]]
    assert out == [(pytest.approx(0.1), (0, ["ok"]))]


def test_exception_type_predicate_retries_only_matching_errors() -> None:
    fn = Scripted(lambda e, a: (0.0, ConnectionResetError() if a == 1 else ValueError("final")))
    strategy = RetryStrategies.fixed_delay(
        5, 0.1, exception_predicate=RetryPredicates.exception_type(OSError)
    )
    with pytest.raises(ValueError, match="final"):
        run_virtual(collect(AsyncWaitOperator(fn, timeout=10, retry_strategy=strategy), [0]))
    assert len(fn.calls) == 2


def test_every_attempt_gets_the_same_input_element() -> None:
    element = {"id": 7}
    received: list[Any] = []

    async def fn(e: Any) -> list[Any]:
        received.append(e)
        return [] if len(received) < 3 else [e]

    strategy = RetryStrategies.fixed_delay(5, 0.1, result_predicate=RetryPredicates.EMPTY_RESULT)
    run_virtual(collect(AsyncWaitOperator(fn, timeout=10, retry_strategy=strategy), [element]))
    assert len(received) == 3 and all(r is element for r in received)


@pytest.mark.parametrize("mode", [OutputMode.ORDERED, OutputMode.UNORDERED])
def test_end_of_input_lets_retries_finish(mode: OutputMode) -> None:
    fn = Scripted(lambda e, a: (0.0, ConnectionError() if a <= 2 else [e]))
    strategy = RetryStrategies.fixed_delay(
        3, 1.0, exception_predicate=RetryPredicates.HAS_EXCEPTION
    )
    op = AsyncWaitOperator(fn, timeout=10, retry_strategy=strategy, output_mode=mode)
    out = run_virtual(collect(op, [0, 1]))
    assert sorted(keys(out)) == [0, 1]
    assert [t for t, _ in out] == [2.0, 2.0]


def test_waiting_retry_holds_no_caller_while_others_proceed() -> None:
    fn = Scripted(lambda e, a: (0.0, [] if (e == 0 and a == 1) else [e]))
    strategy = RetryStrategies.fixed_delay(1, 5.0, result_predicate=RetryPredicates.EMPTY_RESULT)
    op = AsyncWaitOperator(
        fn, timeout=10, retry_strategy=strategy, capacity=3, output_mode=OutputMode.UNORDERED
    )
    out = run_virtual(collect(op, range(5)))
    assert [t for t, _ in out] == [0.0, 0.0, 0.0, 0.0, 5.0]
    assert keys(out)[-1] == 0


def test_predicate_error_fails_the_stream() -> None:
    def broken(result: Any) -> bool:
        raise ZeroDivisionError("predicate bug")

    strategy = RetryStrategies.fixed_delay(1, 0.1, result_predicate=broken)
    with pytest.raises(ZeroDivisionError):
        run_virtual(
            collect(
                AsyncWaitOperator(Scripted(const(0.0)), timeout=1, retry_strategy=strategy), [0]
            )
        )


def test_a_retry_due_with_the_deadline_is_neither_made_nor_counted() -> None:
    """The call fails at 0.2 s, the retry is due at 0.46 s and the deadline at 0.48 s; the loop
    is held from 0.44 to 0.49 s, so both fall due in one iteration, the retry first. Its task
    was made and counted (numRetries, on_error's attempts), then cancelled before its first
    step by the deadline."""
    fn = Scripted(lambda e, n: (0.2, ConnectionError("down")))
    strategy = RetryStrategies.fixed_delay(
        3, 0.26, exception_predicate=RetryPredicates.HAS_EXCEPTION
    )
    op = AsyncWaitOperator(
        fn,
        timeout=0.48,
        retry_strategy=strategy,
        on_error=lambda element, error, attempts: [(type(error).__name__, attempts)],
    )

    async def run() -> list[tuple[float, Any]]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop)
        loop.call_at(0.44, loop.stall, 0.05)
        return await collect(op, [0])

    assert [item for _, item in run_virtual(run())] == [(0, [("TimeoutError", 1)])]
    assert len(fn.calls) == 1
    assert op.metrics.snapshot()["numRetries"] == 0


def test_timeout_hook_with_retries_metrics() -> None:
    fn = WithTimeoutHook(const(0.0, []), timeout_result=["T"])
    strategy = RetryStrategies.fixed_delay(10, 0.4, result_predicate=RetryPredicates.EMPTY_RESULT)
    op = AsyncWaitOperator(fn, timeout=1.0, retry_strategy=strategy)
    run_virtual(collect(op, [0]))
    snap = op.metrics.snapshot()
    assert snap["numRetries"] == 2 and snap["numTimeouts"] == 1 and snap["numCompleted"] == 1
    assert snap["numErrors"] == 0 and snap["numInFlight"] == 0
    assert snap["latencyMaxMs"] == pytest.approx(1000.0)
