"""The async batch wait operator (docs/semantics.md §1.8) on virtual time: batching triggers,
per-batch timeout, retry and errors, result checks, validation, lifecycle, AsyncDataStream."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from asyncio_lookup import (
    AsyncBatchFunction,
    AsyncBatchWaitOperator,
    AsyncDataStream,
    AsyncFunction,
    ConfigurationError,
    OutputMode,
    RetryPredicates,
    RetryStrategies,
    Watermark,
)
from asyncio_lookup.errors import ResultTypeError

from .support import aiter_of
from .virtual_time import run_virtual


@dataclass
class Doubler(AsyncBatchFunction[int, int]):
    """Returns ``[2 * e]`` per element after ``delay``; records each call's list and time."""

    delay: float = 0.0
    calls: list[tuple[list[int], float]] = field(default_factory=list)
    opened: int = 0
    closed: int = 0

    async def open(self) -> None:
        self.opened += 1

    async def close(self) -> None:
        self.closed += 1

    async def async_invoke_batch(self, elements: list[int]) -> list[list[int]]:
        self.calls.append((list(elements), asyncio.get_running_loop().time()))
        await asyncio.sleep(self.delay)
        return [[2 * e] for e in elements]


async def run(op: AsyncBatchWaitOperator[Any, Any], source: Any) -> list[Any]:
    return [item async for item in op.process(source)]


def batches_of(fn: Doubler) -> list[list[int]]:
    return [batch for batch, _ in fn.calls]


def test_size_trigger_and_end_of_input_flush_the_partial_last_batch() -> None:
    fn = Doubler()
    op = AsyncBatchWaitOperator(fn, batch_size=4, timeout=5.0)
    out = run_virtual(run(op, range(10)))
    assert out == [(n, [2 * n]) for n in range(10)]
    assert batches_of(fn) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert (fn.opened, fn.closed) == (1, 1)
    assert op.metrics.completed == 3  # the operator counts batches


def test_time_trigger_flushes_a_partial_batch_of_an_async_source() -> None:
    async def source() -> AsyncIterator[int]:
        for n, gap in enumerate([0, 0.1, 0.1, 5.0, 0.1, 5.0]):
            await asyncio.sleep(gap)
            yield n

    fn = Doubler()
    op = AsyncBatchWaitOperator(fn, batch_size=10, batch_timeout=timedelta(seconds=1), timeout=5)
    out = run_virtual(run(op, source()))
    assert [e for e, _ in out] == list(range(6))
    assert batches_of(fn) == [[0, 1, 2], [3, 4], [5]]
    # a partial batch leaves batch_timeout after its first element was read, the last one
    # when the input ends (right after element 5, read at 10.3)
    assert [at for _, at in fn.calls] == pytest.approx([1.0, 6.2, 10.3])


def test_a_watermark_flushes_the_batch_before_it_and_passes_through() -> None:
    fn = Doubler()
    op = AsyncBatchWaitOperator(fn, batch_size=3, timeout=5, output_mode=OutputMode.UNORDERED)
    out = run_virtual(run(op, [0, 1, Watermark(1), 2, 3, 4, 5]))
    assert batches_of(fn) == [[0, 1], [2, 3, 4], [5]]
    assert out[2] == Watermark(1)
    assert sorted(e for e, _ in (o for o in out if isinstance(o, tuple))) == list(range(6))


@dataclass
class SlowFirst(AsyncBatchFunction[int, int]):
    """The batch starting at 0 takes 5 s, every other batch 1 s."""

    async def async_invoke_batch(self, elements: list[int]) -> list[list[int]]:
        await asyncio.sleep(5 if elements[0] == 0 else 1)
        return [[e] for e in elements]


def test_unordered_emits_batches_as_they_finish_ordered_in_input_order() -> None:
    def order(mode: OutputMode) -> list[int]:
        op = AsyncBatchWaitOperator(SlowFirst(), batch_size=2, timeout=10, output_mode=mode)
        return [e for e, _ in run_virtual(run(op, range(6)))]

    assert order(OutputMode.ORDERED) == [0, 1, 2, 3, 4, 5]
    assert order(OutputMode.UNORDERED) == [2, 3, 4, 5, 0, 1]  # a batch's rows stay together


def test_capacity_counts_batches() -> None:
    fn = Doubler(delay=1.0)
    op = AsyncBatchWaitOperator(fn, batch_size=3, timeout=10, capacity=2)
    run_virtual(run(op, range(12)))
    starts = [at for _, at in fn.calls]
    assert starts == pytest.approx([0, 0, 1, 1])  # two batches (six rows) at a time


@dataclass
class Short(AsyncBatchFunction[int, int]):
    results: Any

    async def async_invoke_batch(self, elements: list[int]) -> Any:
        return self.results


@pytest.mark.parametrize(
    ("results", "message"),
    [
        ([[1], [2]], "returned 2 results for a batch of 3 rows"),
        ([[1], [2], [3], [4]], "returned 4 results for a batch of 3 rows"),
        (None, "returned NoneType None for a batch of 3 rows"),
        ({"a": 1}, "returned dict"),
        ([[1], None, [3]], "in a batch of 3 rows: async batch function returned None"),
    ],
)
def test_a_wrong_result_is_an_error_naming_the_batch_size_and_count(
    results: Any, message: str
) -> None:
    retry = RetryStrategies.fixed_delay(3, 0.1, exception_predicate=RetryPredicates.HAS_EXCEPTION)
    fn = Short(results)
    op = AsyncBatchWaitOperator(fn, batch_size=3, timeout=5, retry_strategy=retry)
    with pytest.raises(ResultTypeError, match=message.replace("(", r"\(")):
        run_virtual(run(op, range(3)))
    assert op.metrics.retries == 0  # never retried, whatever the predicate


@dataclass
class FailsBatch(AsyncBatchFunction[int, int]):
    """Raises for the batch holding ``bad`` on its first ``failures`` attempts."""

    bad: int
    failures: int = 1
    attempts: dict[int, int] = field(default_factory=dict)
    lists: dict[int, list[list[int]]] = field(default_factory=dict)

    async def async_invoke_batch(self, elements: list[int]) -> list[list[int]]:
        first = elements[0]
        self.attempts[first] = self.attempts.get(first, 0) + 1
        self.lists.setdefault(first, []).append(list(elements))
        await asyncio.sleep(0.1)
        if self.bad in elements and self.attempts[first] <= self.failures:
            raise ConnectionError(f"batch {elements}")
        return [[e] for e in elements]


def test_retry_calls_the_same_batch_again_and_only_that_batch() -> None:
    fn = FailsBatch(bad=4, failures=2)
    retry = RetryStrategies.fixed_delay(
        2, 0.5, exception_predicate=RetryPredicates.exception_type(ConnectionError)
    )
    op = AsyncBatchWaitOperator(fn, batch_size=3, timeout=10, retry_strategy=retry)
    out = run_virtual(run(op, range(9)))
    assert out == [(n, [n]) for n in range(9)]
    assert fn.attempts == {0: 1, 3: 3, 6: 1}
    assert fn.lists[3] == [[3, 4, 5]] * 3  # the same records every attempt
    assert op.metrics.retries == 2


def test_the_error_of_a_batch_fails_the_stream_when_final() -> None:
    fn = FailsBatch(bad=4, failures=1)
    op = AsyncBatchWaitOperator(fn, batch_size=3, timeout=10)
    with pytest.raises(ConnectionError, match=r"batch \[3, 4, 5\]"):
        run_virtual(run(op, range(9)))


@dataclass
class Consumes(AsyncBatchFunction[int, int]):
    """Empties its list while answering; fails its first attempt."""

    seen: list[list[int]] = field(default_factory=list)

    async def async_invoke_batch(self, elements: list[int]) -> list[list[int]]:
        self.seen.append(list(elements))
        out = []
        while elements:
            out.append([elements.pop(0)])
        if len(self.seen) == 1:
            raise ConnectionError("first attempt")
        return out


def test_each_call_gets_its_own_list_and_a_changed_list_fails_the_batch() -> None:
    # a function that empties its list on a failed attempt leaves the retry its records
    retry = RetryStrategies.fixed_delay(1, 0.1, exception_predicate=RetryPredicates.HAS_EXCEPTION)
    fn = Consumes()
    op = AsyncBatchWaitOperator(fn, batch_size=3, timeout=10, retry_strategy=retry)
    with pytest.raises(ResultTypeError, match=r"changed the list of 3 items .*it now holds 0"):
        run_virtual(run(op, range(3)))
    assert fn.seen == [[0, 1, 2], [0, 1, 2]]

    async def reverse(elements: list[int]) -> list[list[int]]:
        out = [[e] for e in elements]
        elements.reverse()
        return out

    op = AsyncBatchWaitOperator(reverse, batch_size=3, timeout=10)
    with pytest.raises(ResultTypeError, match="it reordered or replaced some"):
        run_virtual(run(op, range(3)))


@dataclass
class EmptyOnce(AsyncBatchFunction[int, int]):
    calls: int = 0

    async def async_invoke_batch(self, elements: list[int]) -> list[list[int]]:
        self.calls += 1
        return [[] if e == 1 and self.calls == 1 else [e] for e in elements]


def test_the_result_predicate_retries_a_batch_when_any_row_matches() -> None:
    fn = EmptyOnce()
    retry = RetryStrategies.fixed_delay(1, 0.1, result_predicate=RetryPredicates.EMPTY_RESULT)
    op = AsyncBatchWaitOperator(fn, batch_size=3, timeout=10, retry_strategy=retry)
    assert run_virtual(run(op, range(3))) == [(0, [0]), (1, [1]), (2, [2])]
    assert fn.calls == 2


@dataclass
class HangsOn(AsyncBatchFunction[int, str]):
    """Never answers for the batch holding ``bad``; its timeout hook answers per row."""

    bad: int
    timed_out: list[list[int]] = field(default_factory=list)

    async def async_invoke_batch(self, elements: list[int]) -> list[list[str]]:
        if self.bad in elements:
            await asyncio.Event().wait()
        return [[f"ok {e}"] for e in elements]

    async def timeout(self, elements: list[int]) -> list[list[str]]:
        self.timed_out.append(list(elements))
        return [[f"fallback {e}"] for e in elements]


def test_a_batch_timeout_reaches_exactly_that_batchs_rows() -> None:
    fn = HangsOn(bad=4)
    op = AsyncBatchWaitOperator(fn, batch_size=3, timeout=2.0)
    out = dict(run_virtual(run(op, range(9))))
    assert fn.timed_out == [[3, 4, 5]]
    assert out == {n: [("fallback" if n in (3, 4, 5) else "ok") + f" {n}"] for n in range(9)}
    assert op.metrics.timeouts == 1


def test_the_default_timeout_fails_the_stream() -> None:
    op = AsyncBatchWaitOperator(HangsOn(bad=0).async_invoke_batch, batch_size=2, timeout=1.0)
    with pytest.raises(TimeoutError):
        run_virtual(run(op, range(4)))


@dataclass
class TimesOutBadly(HangsOn):
    async def timeout(self, elements: list[int]) -> list[Any]:
        return [None for _ in elements]


def test_a_timeout_hooks_bad_result_names_the_hook() -> None:
    """It said "async function returned None": the batch function, which returned nothing."""
    op = AsyncBatchWaitOperator(TimesOutBadly(bad=0), batch_size=2, timeout=1.0)
    with pytest.raises(ResultTypeError, match=r"async batch function's timeout\(\) returned None"):
        run_virtual(run(op, range(2)))


def test_a_plain_async_def_over_a_list_is_a_batch_function() -> None:
    async def lengths(words: list[str]) -> list[list[int]]:
        return [[len(w)] for w in words]

    op = AsyncBatchWaitOperator(lengths, batch_size=2, timeout=None)
    assert run_virtual(run(op, ["a", "bb", "ccc"])) == [("a", [1]), ("bb", [2]), ("ccc", [3])]


class PerRow(AsyncFunction[int, int]):
    async def async_invoke(self, element: int) -> list[int]:
        return [element]


def _not_async(elements: list[int]) -> list[list[int]]:
    return [[e] for e in elements]


@pytest.mark.parametrize(
    ("kwargs", "option", "message"),
    [
        ({"batch_size": 0}, "batch_size", "must be at least 1"),
        ({"batch_size": True}, "batch_size", "an int >= 1"),
        ({"batch_size": 2.5}, "batch_size", "an int >= 1"),
        ({"batch_timeout": 0}, "batch_timeout", "must be > 0"),
        ({"batch_timeout": -1.0}, "batch_timeout", "must be > 0"),
        ({"batch_timeout": "1s"}, "batch_timeout", "seconds"),
        ({"fn": PerRow()}, "fn", "is an AsyncFunction, which takes one row"),
        ({"fn": _not_async}, "fn", "not an async function"),
        ({"capacity": 0}, "capacity", "at least 1"),
        (
            {
                "timeout": None,
                "retry_strategy": RetryStrategies.fixed_delay(
                    1, 0.1, exception_predicate=RetryPredicates.HAS_EXCEPTION
                ),
            },
            "timeout",
            "retry",
        ),
        ({"output_mode": "sorted"}, "output_mode", "ORDERED"),
    ],
)
def test_invalid_settings_are_configuration_errors(
    kwargs: dict[str, Any], option: str, message: str
) -> None:
    arguments: dict[str, Any] = {"fn": Doubler(), "batch_size": 4, "timeout": 1.0, **kwargs}
    fn = arguments.pop("fn")
    with pytest.raises(ConfigurationError, match=message) as error:
        AsyncBatchWaitOperator(fn, **arguments)
    assert error.value.option == option


def test_stopping_early_cancels_the_reader_and_closes_the_source() -> None:
    closed: list[bool] = []

    async def endless() -> AsyncIterator[int]:
        n = 0
        try:
            while True:
                await asyncio.sleep(0.1)
                yield n
                n += 1
        finally:
            closed.append(True)

    fn = Doubler(delay=0.5)
    op = AsyncBatchWaitOperator(fn, batch_size=4, batch_timeout=1.0, timeout=5)

    async def take(count: int) -> list[int]:
        got: list[int] = []
        stream = op.process(endless())
        async for element, _ in stream:
            got.append(element)
            if len(got) == count:
                break
        await stream.aclose()
        assert len(asyncio.all_tasks()) == 1
        return got

    assert run_virtual(take(6)) == list(range(6))
    assert closed == [True]
    assert fn.closed == 1


def test_each_row_of_a_failed_batch_counts_in_num_failed_rows() -> None:
    async def down(elements: list[int]) -> list[list[int]]:
        raise ValueError("down")

    op = AsyncBatchWaitOperator(
        down, batch_size=4, timeout=5, on_error=lambda element, error, attempts: [-element]
    )
    out = run_virtual(run(op, range(10)))
    assert len(out) == 10
    snap = op.metrics.snapshot()
    assert (snap["numFailedRows"], snap["numErrors"]) == (10, 3)  # rows; batches


@pytest.mark.parametrize("fails", [False, True])
def test_a_source_parked_at_its_yield_is_closed_when_the_stream_stops(fails: bool) -> None:
    """A source with no await between its items leaves the reader waiting for room: the
    reader's cancellation was taken for the closing task's own, and the source was closed
    only at the loop's shutdown (a cursor or file held open under a long-lived loop)."""
    closed: list[bool] = []

    async def eager() -> AsyncIterator[int]:
        try:
            for n in range(1000):
                yield n
        finally:
            closed.append(True)

    async def doubled(elements: list[int]) -> list[list[int]]:
        await asyncio.sleep(0.01)
        if fails and elements[0] >= 8:
            raise ValueError("down")
        return [[2 * e] for e in elements]

    op = AsyncBatchWaitOperator(doubled, batch_size=4, timeout=5, capacity=2)

    async def take() -> list[bool]:
        stream = op.process(eager())
        with contextlib.suppress(ValueError):
            async for element, _ in stream:
                if element == 9:
                    break
        await stream.aclose()
        return list(closed)  # before the loop's shutdown closes what is left

    assert run_virtual(take()) == [True]


def test_a_failing_async_source_fails_the_stream() -> None:
    async def broken() -> AsyncIterator[int]:
        yield 1
        await asyncio.sleep(0.1)
        raise ValueError("source broke")

    op = AsyncBatchWaitOperator(Doubler(), batch_size=4, batch_timeout=1.0, timeout=5)
    with pytest.raises(ValueError, match="source broke"):
        run_virtual(run(op, broken()))


def test_datastream_batch_waits() -> None:
    async def tripled(elements: list[int]) -> list[list[int]]:
        await asyncio.sleep(0.01)
        return [[3 * e, -e] for e in elements]

    ordered = AsyncDataStream.ordered_wait_batch(range(7), tripled, 5.0, batch_size=3)
    assert list(ordered) == [x for e in range(7) for x in (3 * e, -e)]
    unordered = AsyncDataStream.unordered_wait_batch(
        aiter_of(range(7), delay=0.001),
        tripled,
        5.0,
        batch_size=3,
        batch_timeout=0.5,
        retry_strategy=RetryStrategies.NO_RETRY,
    )
    assert sorted(unordered) == sorted(x for e in range(7) for x in (3 * e, -e))
    assert unordered.metrics.completed == 3
