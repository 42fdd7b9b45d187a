"""``AsyncFunction.invoke_now``: a result at hand at admission skips the task, nothing else."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any

import pytest

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.runtime import (
    AsyncWaitOperator,
    OutputMode,
    RetryPredicates,
    RetryStrategies,
    Watermark,
)
from asyncio_lookup.runtime.function import AsyncFunction


class HalfCached(AsyncFunction[int, int]):
    """Even elements are answered at once, odd ones after a sleep; records what ran."""

    def __init__(self) -> None:
        self.now_calls: list[int] = []
        self.async_calls: list[int] = []
        self.tasks_seen: set[asyncio.Task[Any] | None] = set()

    def invoke_now(self, element: int) -> Collection[int] | None:
        self.now_calls.append(element)
        return [element * 10] if element % 2 == 0 else None

    async def async_invoke(self, element: int) -> Collection[int]:
        self.async_calls.append(element)
        self.tasks_seen.add(asyncio.current_task())
        await asyncio.sleep(0.001 * (element % 5))
        return [element * 10]


async def collect(operator: AsyncWaitOperator[Any, Any], source: Any) -> list[Any]:
    return [item async for item in operator.process(source)]


@pytest.mark.parametrize("mode", [OutputMode.ORDERED, OutputMode.UNORDERED])
async def test_fast_results_mix_with_async_ones_in_the_mode_order(mode: OutputMode) -> None:
    fn = HalfCached()
    operator: AsyncWaitOperator[int, int] = AsyncWaitOperator(
        fn, timeout=5.0, capacity=4, output_mode=mode
    )
    source: list[Any] = [*range(10), Watermark(1), *range(10, 20)]
    out = await collect(operator, source)
    records = [item for item in out if isinstance(item, tuple)]
    assert len(records) == 20 and all(outputs == [e * 10] for e, outputs in records)
    elements = [e for e, _ in records]
    if mode is OutputMode.ORDERED:
        assert elements == list(range(20))
    else:
        assert sorted(elements[:10]) == list(range(10)) and isinstance(out[10], Watermark)
    assert fn.now_calls == list(range(20))
    assert fn.async_calls and all(e % 2 == 1 for e in fn.async_calls)
    assert sorted(fn.async_calls) == list(range(1, 20, 2))
    snapshot = operator.metrics.snapshot()
    assert (snapshot["numCompleted"], snapshot["numInFlight"]) == (20, 0)


async def test_an_error_from_invoke_now_fails_the_stream() -> None:
    class Broken(HalfCached):
        def invoke_now(self, element: int) -> Collection[int] | None:
            if element == 3:
                raise KeyError("no shard for 3")
            return None

    operator: AsyncWaitOperator[int, int] = AsyncWaitOperator(Broken(), timeout=5.0)
    with pytest.raises(KeyError, match="no shard"):
        await collect(operator, range(6))


async def test_retry_predicates_see_fast_outcomes_and_retry_through_async_invoke() -> None:
    class EmptyAtFirst(HalfCached):
        def invoke_now(self, element: int) -> Collection[int] | None:
            if element == 2:
                raise ConnectionError("flaky")
            return [] if element < 2 else None

    fn = EmptyAtFirst()
    strategy = RetryStrategies.fixed_delay(
        2,
        0.001,
        result_predicate=RetryPredicates.EMPTY_RESULT,
        exception_predicate=RetryPredicates.HAS_EXCEPTION,
    )
    operator: AsyncWaitOperator[int, int] = AsyncWaitOperator(
        fn, timeout=5.0, retry_strategy=strategy
    )
    out = await collect(operator, range(4))
    assert out == [(e, [e * 10]) for e in range(4)]
    assert sorted(fn.async_calls) == [0, 1, 2, 3]  # 0-2 on their retry, 3 at once
    assert operator.metrics.snapshot()["numRetries"] == 3


async def test_a_fast_result_that_is_not_a_collection_fails_the_stream() -> None:
    class Bad(HalfCached):
        def invoke_now(self, element: int) -> Any:
            return 5

    operator: AsyncWaitOperator[int, int] = AsyncWaitOperator(Bad(), timeout=5.0)
    with pytest.raises(TypeError, match="collection of outputs"):
        await collect(operator, range(3))


def test_async_invoke_now_is_a_configuration_error() -> None:
    class Wrong(HalfCached):
        async def invoke_now(self, element: int) -> Any:  # type: ignore[override]
            return [element]

    with pytest.raises(ConfigurationError, match="invoke_now must be a plain method"):
        AsyncWaitOperator(Wrong(), timeout=1.0)
