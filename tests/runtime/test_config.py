"""Configuration errors raise at construction, naming the argument and the bad value."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.runtime import (
    AsyncBatchWaitOperator,
    AsyncDataStream,
    AsyncFunction,
    AsyncWaitOperator,
    OutputMode,
    RetryPredicates,
    RetryStrategies,
)


async def ok(element: Any) -> list[Any]:
    return [element]


def check(error: pytest.ExceptionInfo[ConfigurationError], option: str, value: Any) -> None:
    assert error.value.option == option
    assert repr(value) in str(error.value) and repr(option) in str(error.value)
    assert "allowed" in str(error.value)


@pytest.mark.parametrize("capacity", [0, -1, 1.5, True, "10", None])
def test_capacity_below_one(capacity: Any) -> None:
    with pytest.raises(ConfigurationError) as error:
        AsyncWaitOperator(ok, timeout=1, capacity=capacity)
    check(error, "capacity", capacity)


@pytest.mark.parametrize("timeout", [None, 0, -5, float("inf")])
def test_retry_without_timeout(timeout: Any) -> None:
    strategy = RetryStrategies.fixed_delay(3, 0.1, result_predicate=RetryPredicates.EMPTY_RESULT)
    with pytest.raises(ConfigurationError) as error:
        AsyncWaitOperator(ok, timeout=timeout, retry_strategy=strategy)
    assert error.value.option == "timeout"
    assert f"invalid value {timeout!r} for 'timeout'" in str(error.value)  # what the user gave
    with pytest.raises(ConfigurationError, match=f"invalid value {timeout!r} for 'timeout'"):
        AsyncBatchWaitOperator(ok, batch_size=2, timeout=timeout, retry_strategy=strategy)
    with pytest.raises(ConfigurationError):
        AsyncDataStream.ordered_wait_with_retry([1], ok, timeout, strategy)


@pytest.mark.parametrize("max_attempts", [0, -1, 1.5, True])
def test_max_attempts_not_positive(max_attempts: Any) -> None:
    with pytest.raises(ConfigurationError) as error:
        RetryStrategies.fixed_delay(max_attempts, 0.1)
    check(error, "max_attempts", max_attempts)
    with pytest.raises(ConfigurationError):
        RetryStrategies.exponential_backoff(max_attempts, 0.1, 1.0, 2.0)


@pytest.mark.parametrize("delay", [0, -0.1, "1s", float("nan")])
def test_delay_not_positive(delay: Any) -> None:
    with pytest.raises(ConfigurationError) as error:
        RetryStrategies.fixed_delay(3, delay)
    assert error.value.option == "delay"
    with pytest.raises(ConfigurationError) as error:
        RetryStrategies.exponential_backoff(3, delay, 1.0, 2.0)
    assert error.value.option == "initial_delay"


def test_exponential_backoff_bounds() -> None:
    with pytest.raises(ConfigurationError) as error:
        RetryStrategies.exponential_backoff(3, 1.0, 0.5, 2.0)
    check(error, "max_delay", 0.5)
    with pytest.raises(ConfigurationError) as error:
        RetryStrategies.exponential_backoff(3, 0.1, 1.0, 0.5)
    check(error, "multiplier", 0.5)


def sync_function(element: Any) -> list[Any]:
    return [element]


class SyncInvoke(AsyncFunction[Any, Any]):
    def async_invoke(self, element: Any) -> list[Any]:  # type: ignore[override]
        return [element]


@pytest.mark.parametrize(
    "fn", [sync_function, lambda e: [e], SyncInvoke(), None, 42, AsyncFunction]
)
def test_function_that_is_not_async(fn: Any) -> None:
    with pytest.raises(ConfigurationError) as error:
        AsyncWaitOperator(fn, timeout=1)
    assert error.value.option == "fn"
    assert repr(fn) in str(error.value)
    with pytest.raises(ConfigurationError):
        AsyncDataStream.unordered_wait([1], fn, 1)


def test_async_callables_are_accepted() -> None:
    import functools

    class Callable_:
        async def __call__(self, element: Any) -> list[Any]:
            return [element]

    async def two(element: Any, extra: int) -> list[Any]:
        return [element, extra]

    for fn in (ok, Callable_(), functools.partial(two, extra=1)):
        AsyncWaitOperator(fn, timeout=1)


@pytest.mark.parametrize("mode", ["sideways", 3, None])
def test_bad_output_mode(mode: Any) -> None:
    with pytest.raises(ConfigurationError) as error:
        AsyncWaitOperator(ok, timeout=1, output_mode=mode)
    check(error, "output_mode", mode)
    assert AsyncWaitOperator(ok, timeout=1, output_mode="UNORDERED").output_mode is (  # type: ignore[arg-type]
        OutputMode.UNORDERED
    )


@pytest.mark.parametrize("timeout", ["10s", [1], float("nan"), True])
def test_bad_timeout_type(timeout: Any) -> None:
    with pytest.raises(ConfigurationError) as error:
        AsyncWaitOperator(ok, timeout=timeout)
    assert error.value.option == "timeout"


def test_bad_retry_strategy_and_exception_types() -> None:
    with pytest.raises(ConfigurationError) as error:
        AsyncWaitOperator(ok, timeout=1, retry_strategy="fixed_delay")  # type: ignore[arg-type]
    assert error.value.option == "retry_strategy"
    with pytest.raises(ConfigurationError) as error:
        RetryPredicates.exception_type(ValueError, "OSError")  # type: ignore[arg-type]
    assert error.value.option == "types"
    with pytest.raises(ConfigurationError):
        RetryPredicates.exception_type()


async def async_hook(*args: Any) -> Any:
    return True


class _AsyncCall:
    async def __call__(self, *args: Any) -> Any:
        return True


@pytest.mark.parametrize("hook", [async_hook, _AsyncCall(), functools.partial(_AsyncCall(), 1)])
def test_hooks_called_without_await_refuse_async_callables(hook: Any) -> None:
    """An `async def` key selector, predicate or error handler returned a coroutine, taken as
    the answer: every record its own key, every outcome retried, a failed stream at run time."""
    cases = [
        (
            "key_selector",
            lambda: AsyncWaitOperator(ok, timeout=1, output_mode="key_ordered", key_selector=hook),
        ),
        ("on_error", lambda: AsyncWaitOperator(ok, timeout=1, on_error=hook)),
        ("on_error", lambda: AsyncBatchWaitOperator(ok, batch_size=2, timeout=1, on_error=hook)),
        ("result_predicate", lambda: RetryStrategies.fixed_delay(2, 0.1, result_predicate=hook)),
        (
            "exception_predicate",
            lambda: RetryStrategies.fixed_delay(2, 0.1, exception_predicate=hook),
        ),
    ]
    for option, build in cases:
        with pytest.raises(ConfigurationError, match="`async def`") as error:
            build()
        assert error.value.option == option


def test_a_strategy_with_async_can_retry_or_backoff_is_refused() -> None:
    base = RetryStrategies.fixed_delay(2, 0.1, result_predicate=RetryPredicates.EMPTY_RESULT)

    class AsyncCanRetry:
        retry_predicate = base.retry_predicate

        async def can_retry(self, attempts: int) -> bool:
            return attempts < 2

        def backoff(self, attempts: int) -> float:
            return 0.1

    with pytest.raises(ConfigurationError, match="can_retry is `async def`") as error:
        AsyncWaitOperator(ok, timeout=1, retry_strategy=AsyncCanRetry())
    assert error.value.option == "retry_strategy"
