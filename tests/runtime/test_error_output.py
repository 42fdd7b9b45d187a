"""docs/semantics.md §1.7 error output: ``on_error`` turns a record's final error into outputs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncio_lookup.errors import ConfigurationError, ResultTypeError
from asyncio_lookup.runtime import (
    AsyncBatchWaitOperator,
    AsyncFunction,
    AsyncWaitOperator,
    OutputMode,
    RetryPredicates,
    RetryStrategies,
)
from asyncio_lookup.runtime.datastream import AsyncStream

from .support import HANG, Scripted, WithTimeoutHook, collect, items
from .virtual_time import run_virtual

MODES = [OutputMode.ORDERED, OutputMode.UNORDERED]


class Boom(Exception):
    pass


def failed(element: Any, error: BaseException, attempts: int) -> list[Any]:
    return [("failed", element, type(error).__name__, attempts)]


def outputs(timed: list[tuple[float, Any]]) -> dict[Any, list[Any]]:
    return {element: list(out) for element, out in items(timed)}


@pytest.mark.parametrize("mode", MODES)
def test_a_failing_record_is_emitted_through_on_error_and_the_rest_go_on(mode: Any) -> None:
    fn = Scripted(lambda e, a: (float(e % 3), Boom(f"bad {e}") if e % 4 == 1 else [e]))
    op = AsyncWaitOperator(fn, timeout=None, capacity=3, output_mode=mode, on_error=failed)
    timed = run_virtual(collect(op, range(10)))
    got = outputs(timed)
    assert sorted(got) == list(range(10))  # every record once
    for element in range(10):
        expected = [("failed", element, "Boom", 1)] if element % 4 == 1 else [element]
        assert got[element] == expected
    if mode is OutputMode.ORDERED:
        assert [e for e, _ in items(timed)] == list(range(10))
    m = op.metrics
    assert (m.failed, m.errors, m.completed, m.in_flight) == (3, 3, 7, 0)
    assert op.metrics.snapshot()["numFailedRows"] == 3.0
    assert fn.closed == 1


def test_without_on_error_the_first_error_fails_the_stream_as_before() -> None:
    fn = Scripted(lambda e, a: (0.0, Boom("bad") if e == 2 else [e]))
    op = AsyncWaitOperator(fn, timeout=None)

    async def run() -> None:
        async for _ in op.process(range(5)):
            pass

    with pytest.raises(Boom):
        run_virtual(run())
    assert op.metrics.failed == 0 and op.metrics.snapshot()["numFailedRows"] == 0.0


@pytest.mark.parametrize("mode", MODES)
def test_only_the_final_error_after_retries_goes_to_the_error_output(mode: Any) -> None:
    # element 0 fails twice then succeeds; element 1 fails every time (retries exhausted)
    fn = Scripted(lambda e, a: (0.0, ConnectionError(f"try {a}") if e == 1 or a < 3 else [e]))
    strategy = RetryStrategies.fixed_delay(
        3, 1.0, exception_predicate=RetryPredicates.exception_type(ConnectionError)
    )
    op = AsyncWaitOperator(
        fn, timeout=100.0, output_mode=mode, retry_strategy=strategy, on_error=failed
    )
    got = outputs(run_virtual(collect(op, [0, 1])))
    assert got[0] == [0]
    assert got[1] == [("failed", 1, "ConnectionError", 4)]  # max_attempts 3 = 4 calls
    assert fn.attempts_of(1) == 4 and op.metrics.failed == 1


def test_a_non_retryable_error_goes_to_the_error_output_at_once() -> None:
    fn = Scripted(lambda e, a: (0.0, Boom("not retried")))
    strategy = RetryStrategies.fixed_delay(
        3, 1.0, exception_predicate=RetryPredicates.exception_type(ConnectionError)
    )
    op = AsyncWaitOperator(fn, timeout=100.0, retry_strategy=strategy, on_error=failed)
    assert outputs(run_virtual(collect(op, [7]))) == {7: [("failed", 7, "Boom", 1)]}
    assert fn.attempts_of(7) == 1


@pytest.mark.parametrize("mode", MODES)
def test_a_timeout_with_the_default_hook_is_a_failed_record(mode: Any) -> None:
    fn = Scripted(lambda e, a: (0.0, HANG if e == 1 else [e]))
    op = AsyncWaitOperator(fn, timeout=2.0, output_mode=mode, on_error=failed)
    timed = run_virtual(collect(op, [0, 1, 2]))
    got = outputs(timed)
    assert got == {0: [0], 1: [("failed", 1, "TimeoutError", 1)], 2: [2]}
    assert op.metrics.timeouts == 1 and op.metrics.failed == 1
    assert fn.cancelled == [(1, 1)]


def test_a_timeout_hook_that_returns_a_result_is_a_result_not_a_failure() -> None:
    fn = WithTimeoutHook(lambda e, a: (0.0, HANG), timeout_result=["late"])
    op = AsyncWaitOperator(fn, timeout=1.0, on_error=failed)
    assert outputs(run_virtual(collect(op, [5]))) == {5: ["late"]}
    assert op.metrics.failed == 0 and op.metrics.timeouts == 1


def test_a_timeout_hook_that_raises_is_a_failed_record() -> None:
    fn = WithTimeoutHook(lambda e, a: (0.0, HANG), timeout_result=Boom("hook"))
    op = AsyncWaitOperator(fn, timeout=1.0, on_error=failed)
    assert outputs(run_virtual(collect(op, [5]))) == {5: [("failed", 5, "Boom", 1)]}


def test_a_result_that_is_no_collection_is_a_failed_record() -> None:
    fn = Scripted(lambda e, a: (0.0, None if e == 1 else [e]))
    op = AsyncWaitOperator(fn, timeout=None, on_error=failed)
    got = outputs(run_virtual(collect(op, [0, 1])))
    assert got == {0: [0], 1: [("failed", 1, "ResultTypeError", 1)]}


class NowFails(AsyncFunction[int, int]):
    """Fails at admission (``invoke_now``) for odd elements, answers even ones there."""

    def invoke_now(self, element: int) -> list[int] | None:
        if element % 2:
            raise Boom(f"now {element}")
        return [element]

    async def async_invoke(self, element: int) -> list[int]:
        raise AssertionError("never called")


def test_an_error_at_admission_is_a_failed_record() -> None:
    op = AsyncWaitOperator(NowFails(), timeout=None, on_error=failed)
    got = outputs(run_virtual(collect(op, range(4))))
    assert got == {0: [0], 1: [("failed", 1, "Boom", 1)], 2: [2], 3: [("failed", 3, "Boom", 1)]}
    assert op.metrics.failed == 2 and op.metrics.in_flight == 0


def test_on_error_that_raises_fails_the_stream_with_the_record_error_as_cause() -> None:
    def broken(element: Any, error: BaseException, attempts: int) -> list[Any]:
        raise ValueError("cannot build the failed row")

    op = AsyncWaitOperator(Scripted(lambda e, a: (0.0, Boom("x"))), timeout=None, on_error=broken)

    async def run() -> None:
        async for _ in op.process([1]):
            pass

    with pytest.raises(ValueError) as raised:
        run_virtual(run())
    assert isinstance(raised.value.__cause__, Boom)


@pytest.mark.parametrize("returned", [None, "ERR"])
@pytest.mark.parametrize("batch", [False, True])
def test_on_error_must_return_a_collection(returned: Any, batch: bool) -> None:
    # a batch's error output is checked per element as a record's is: a text is not split
    # into characters, None is no output list
    async def boom_batch(elements: list[int]) -> list[list[int]]:
        raise Boom("x")

    op: Any = (
        AsyncBatchWaitOperator(boom_batch, batch_size=2, timeout=5, on_error=lambda *_: returned)
        if batch
        else AsyncWaitOperator(
            Scripted(lambda e, a: (0.0, Boom("x"))), timeout=None, on_error=lambda *_: returned
        )
    )

    async def run() -> list[Any]:
        return [item async for item in AsyncStream([1, 2], op, None)]

    with pytest.raises(ResultTypeError, match=f"on_error returned {returned!r}") as raised:
        run_virtual(run())
    assert isinstance(raised.value.__cause__, Boom)


def test_on_error_is_validated() -> None:
    with pytest.raises(ConfigurationError, match="on_error"):
        AsyncWaitOperator(Scripted(lambda e, a: (0.0, [e])), timeout=None, on_error="keep")  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(
    outcomes=st.lists(
        st.tuples(st.integers(0, 3), st.sampled_from(["ok", "boom", "hang"])),
        min_size=0,
        max_size=30,
    ),
    capacity=st.integers(1, 5),
    ordered=st.booleans(),
)
def test_every_record_is_emitted_exactly_once_good_or_failed(
    outcomes: list[tuple[int, str]], capacity: int, ordered: bool
) -> None:
    def script(element: int, attempt: int) -> tuple[float, Any]:
        delay, kind = outcomes[element]
        return float(delay), {"ok": [element], "boom": Boom("b"), "hang": HANG}[kind]

    mode = OutputMode.ORDERED if ordered else OutputMode.UNORDERED
    op = AsyncWaitOperator(
        Scripted(script), timeout=5.0, capacity=capacity, output_mode=mode, on_error=failed
    )
    timed = run_virtual(collect(op, range(len(outcomes))))
    emitted = [element for element, _ in items(timed)]
    assert sorted(emitted) == list(range(len(outcomes)))
    if ordered:
        assert emitted == list(range(len(outcomes)))
    got = outputs(timed)
    for element, (_, kind) in enumerate(outcomes):
        if kind == "ok":
            assert got[element] == [element]
        else:
            reason = "Boom" if kind == "boom" else "TimeoutError"
            assert got[element] == [("failed", element, reason, 1)]
    assert op.metrics.failed == sum(1 for _, k in outcomes if k != "ok")
    assert op.metrics.in_flight == 0


def test_on_error_runs_on_the_loop_thread() -> None:
    seen: list[bool] = []

    def on_error(element: Any, error: BaseException, attempts: int) -> list[Any]:
        seen.append(asyncio.get_running_loop() is not None)
        return []

    op = AsyncWaitOperator(Scripted(lambda e, a: (0.0, Boom())), timeout=None, on_error=on_error)
    assert items(run_virtual(collect(op, [1]))) == [(1, [])]
    assert seen == [True]
