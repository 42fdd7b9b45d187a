"""docs/semantics.md §1.3 timeout and §1.4 results and errors, on virtual time."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from asyncio_lookup.errors import ConfigurationError, ResultTypeError
from asyncio_lookup.runtime import (
    AsyncBatchWaitOperator,
    AsyncFunction,
    AsyncWaitOperator,
    OutputMode,
    RetryPredicates,
    RetryStrategies,
)

from .support import HANG, Reads, Scripted, WithTimeoutHook, aiter_of, collect, const, keys
from .virtual_time import VirtualTimeLoop, run_virtual

MODES = [OutputMode.ORDERED, OutputMode.UNORDERED]


async def failing_at(operator: AsyncWaitOperator[Any, Any], source: Any) -> tuple[float, Any]:
    """Run to the failure; return (loop time of the raise, the exception)."""
    loop = asyncio.get_running_loop()
    with pytest.raises(BaseException) as raised:
        async for _ in operator.process(source):
            pass
    return loop.time(), raised.value


@pytest.mark.parametrize("mode", MODES)
def test_default_timeout_fails_the_stream_with_flinks_message(mode: OutputMode) -> None:
    fn = Scripted(const(0.0, HANG))
    op = AsyncWaitOperator(fn, timeout=2.5, output_mode=mode)
    at, error = run_virtual(failing_at(op, [0]))
    assert type(error) is TimeoutError
    assert str(error) == "Async function call has timed out."
    assert at == 2.5
    assert fn.cancelled == [(0, 1)]
    assert op.metrics.timeouts == 1 and op.metrics.errors == 1 and op.metrics.in_flight == 0


@pytest.mark.parametrize("timeout", [None, 0, -1.0])
def test_timeout_none_or_not_positive_disables_it(timeout: Any) -> None:
    fn = Scripted(const(10_000.0))
    op = AsyncWaitOperator(fn, timeout=timeout)
    assert keys(run_virtual(collect(op, [0]))) == [0]


def test_timeout_accepts_timedelta() -> None:
    from datetime import timedelta

    fn = Scripted(const(0.0, HANG))
    op = AsyncWaitOperator(fn, timeout=timedelta(milliseconds=1500))
    at, error = run_virtual(failing_at(op, [0]))
    assert isinstance(error, TimeoutError) and at == 1.5


def test_timeout_hook_is_called_once_and_its_result_is_emitted() -> None:
    fn = WithTimeoutHook(const(0.0, HANG), timeout_result=["fallback"])
    op = AsyncWaitOperator(fn, timeout=1.0)
    out = run_virtual(collect(op, [0]))
    assert out == [(1.0, (0, ["fallback"]))]
    assert fn.timeout_calls == [(0, 1.0)]


def test_timeout_hook_error_fails_the_stream() -> None:
    boom = LookupError("no fallback")
    fn = WithTimeoutHook(const(0.0, HANG), timeout_result=boom)
    _, error = run_virtual(failing_at(AsyncWaitOperator(fn, timeout=1.0), [0]))
    assert error is boom


def test_timeout_hook_returning_none_is_a_result_type_error() -> None:
    fn = WithTimeoutHook(const(0.0, HANG), timeout_result=None)
    _, error = run_virtual(failing_at(AsyncWaitOperator(fn, timeout=1.0), [0]))
    assert isinstance(error, ResultTypeError) and isinstance(error, TypeError)
    # the hook is named: "async function returned None" sent the user to async_invoke
    assert str(error).startswith("timeout() returned None")


def test_timeout_covers_all_retries_from_admission() -> None:
    fn = WithTimeoutHook(lambda e, a: (0.0, ConnectionError(f"attempt {a}")), timeout_result=["T"])
    strategy = RetryStrategies.fixed_delay(
        100, 0.3, exception_predicate=RetryPredicates.HAS_EXCEPTION
    )
    op = AsyncWaitOperator(fn, timeout=1.0, retry_strategy=strategy)
    out = run_virtual(collect(op, [0]))
    assert [round(c.at, 6) for c in fn.calls] == [0.0, 0.3, 0.6, 0.9]
    assert fn.timeout_calls == [(0, 1.0)]
    assert out == [(1.0, (0, ["T"]))]


def test_timeout_outcome_is_final_no_retry_after_it() -> None:
    # The hook returns [], which the result predicate would retry: it must not.
    fn = WithTimeoutHook(const(5.0, []), timeout_result=[])
    strategy = RetryStrategies.fixed_delay(3, 0.1, result_predicate=RetryPredicates.EMPTY_RESULT)
    op = AsyncWaitOperator(fn, timeout=1.0, retry_strategy=strategy)
    loop = VirtualTimeLoop()
    try:
        out = loop.run_until_complete(collect(op, [0]))
        loop.run_until_complete(asyncio.sleep(100))  # nothing may happen afterwards
    finally:
        loop.close()
    assert out == [(1.0, (0, []))]
    assert len(fn.calls) == 1 and len(fn.timeout_calls) == 1
    assert op.metrics.retries == 0


def test_pending_retry_is_cancelled_at_the_deadline() -> None:
    fn = WithTimeoutHook(const(0.0, []), timeout_result=["T"])
    strategy = RetryStrategies.fixed_delay(3, 5.0, result_predicate=RetryPredicates.EMPTY_RESULT)
    op = AsyncWaitOperator(fn, timeout=1.0, retry_strategy=strategy)
    loop = VirtualTimeLoop()
    try:
        out = loop.run_until_complete(collect(op, [0]))
        assert loop.pending_timers() == []
        loop.run_until_complete(asyncio.sleep(100))
    finally:
        loop.close()
    assert out == [(1.0, (0, ["T"]))]
    assert len(fn.calls) == 1


class LateResult(AsyncFunction[int, str]):
    """Ignores cancellation and returns a late result anyway."""

    def __init__(self) -> None:
        self.late_returned = False

    async def async_invoke(self, element: int) -> list[str]:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            await asyncio.sleep(0.5)
        self.late_returned = True
        return ["late"]

    async def timeout(self, element: int) -> list[str]:
        return ["timeout"]


def test_result_arriving_after_the_outcome_is_fixed_is_ignored() -> None:
    fn = LateResult()
    op = AsyncWaitOperator(fn, timeout=1.0)
    out = run_virtual(collect(op, [0, 1]))
    assert out == [(1.0, (0, ["timeout"])), (1.0, (1, ["timeout"]))]


@pytest.mark.parametrize("mode", MODES)
def test_late_result_while_stream_is_still_running_is_ignored(mode: OutputMode) -> None:
    fn = LateResult()
    op = AsyncWaitOperator(fn, timeout=1.0, capacity=10, output_mode=mode)
    # a slow source keeps the stream open while the late results come in at 1.5
    out = run_virtual(collect(op, aiter_of([0, 1, 2], delay=0.4)))
    assert [item for _, item in out] == [(0, ["timeout"]), (1, ["timeout"]), (2, ["timeout"])]
    assert fn.late_returned
    assert op.metrics.completed == 3


class SlowHeadLateTail(AsyncFunction[str, str]):
    """'head' times out and its hook takes 2 s; 'tail' times out, its hook answers at once,
    and its cancelled call still returns 'late' at 1.5 while it waits behind the head."""

    async def async_invoke(self, element: str) -> list[str]:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            if element == "head":
                raise
            await asyncio.sleep(0.5)
        return ["late"]

    async def timeout(self, element: str) -> list[str]:
        if element == "head":
            await asyncio.sleep(2)
        return [f"{element} timeout"]


def test_late_result_does_not_replace_a_result_waiting_behind_the_head() -> None:
    op = AsyncWaitOperator(SlowHeadLateTail(), timeout=1.0, output_mode=OutputMode.ORDERED)
    out = run_virtual(collect(op, ["head", "tail"]))
    assert out == [(3.0, ("head", ["head timeout"])), (3.0, ("tail", ["tail timeout"]))]


def test_timers_of_finished_records_are_cancelled() -> None:
    fn = Scripted(const(0.01))
    op = AsyncWaitOperator(fn, timeout=1000.0, capacity=5)
    loop = VirtualTimeLoop()
    try:
        out = loop.run_until_complete(collect(op, range(20)))
        assert out[-1][0] < 1.0  # ends when the last record finishes, not at a deadline
        assert loop.pending_timers() == []
    finally:
        loop.close()


@pytest.mark.parametrize("bad", [None, 42, "abc", {"a": 1}, object()])
def test_non_collection_result_is_a_type_error_and_never_retried(bad: Any) -> None:
    fn = Scripted(const(0.0, bad))
    strategy = RetryStrategies.fixed_delay(
        3, 0.1, result_predicate=lambda r: True, exception_predicate=RetryPredicates.HAS_EXCEPTION
    )
    op = AsyncWaitOperator(fn, timeout=10, retry_strategy=strategy)
    _, error = run_virtual(failing_at(op, [0]))
    assert isinstance(error, ResultTypeError) and isinstance(error, TypeError)
    assert len(fn.calls) == 1


@pytest.mark.parametrize("good", [[1, 2], (1, 2), {1, 2}, frozenset(), range(2)])
def test_any_collection_is_a_result(good: Any) -> None:
    fn = Scripted(const(0.0, good))
    out = run_virtual(collect(AsyncWaitOperator(fn, timeout=None), [0]))
    assert out == [(0.0, (0, good))]


@pytest.mark.parametrize("mode", MODES)
def test_error_fails_the_stream_at_once_even_behind_a_slow_head(mode: OutputMode) -> None:
    boom = ValueError("record 2 is broken")
    delays = {0: 100.0, 1: 50.0, 2: 0.1}
    fn = Scripted(lambda e, a: (delays[e], boom if e == 2 else [e]))
    op = AsyncWaitOperator(fn, timeout=None, capacity=10, output_mode=mode)
    at, error = run_virtual(failing_at(op, [0, 1, 2]))
    assert error is boom  # the original error object
    assert at == 0.1
    assert sorted(fn.cancelled) == [(0, 1), (1, 1)]  # outstanding attempts were cancelled
    assert fn.opened == 1 and fn.closed == 1
    assert op.metrics.in_flight == 0


def test_error_after_some_outputs_stops_emission_at_once() -> None:
    boom = ValueError("x")
    fn = Scripted(lambda e, a: (0.1 * e, boom if e == 3 else [e]))
    op = AsyncWaitOperator(fn, timeout=None, capacity=10)
    seen: list[Any] = []

    async def run() -> BaseException:
        with pytest.raises(ValueError) as raised:
            async for item in op.process(range(10)):
                seen.append(item[0])
        return raised.value

    assert run_virtual(run()) is boom
    assert seen == [0, 1, 2]


def test_no_task_is_left_behind_after_a_failure() -> None:
    fn = Scripted(lambda e, a: (0.1 if e == 5 else 100.0, RuntimeError() if e == 5 else [e]))
    op = AsyncWaitOperator(fn, timeout=1000.0, capacity=10)

    async def run() -> set[asyncio.Task[Any]]:
        with pytest.raises(RuntimeError):
            async for _ in op.process(range(10)):
                pass
        return asyncio.all_tasks() - {asyncio.current_task()}  # type: ignore[operator]

    loop = VirtualTimeLoop()
    try:
        assert loop.run_until_complete(run()) == set()
        assert loop.pending_timers() == []
    finally:
        loop.close()
    assert len(fn.cancelled) == 9


def test_close_runs_on_every_exit_path() -> None:
    # normal end
    fn = Scripted(const(0.1))
    run_virtual(collect(AsyncWaitOperator(fn, timeout=None), range(3)))
    assert (fn.opened, fn.closed) == (1, 1)
    # consumer stops early: aclose() cancels outstanding attempts and closes
    fn = Scripted(lambda e, a: (0.1 if e == 0 else 50.0, [e]))

    async def first_only() -> None:
        gen = AsyncWaitOperator(fn, timeout=None, output_mode=OutputMode.UNORDERED).process(
            range(5)
        )
        async for _ in gen:
            break
        await gen.aclose()  # type: ignore[attr-defined]
        assert asyncio.all_tasks() == {asyncio.current_task()}

    run_virtual(first_only())
    assert (fn.opened, fn.closed) == (1, 1)
    assert len(fn.cancelled) == 4
    # the source raises
    fn = Scripted(const(0.1))

    def broken_source() -> Any:
        yield 0
        raise KeyError("source broke")

    _, error = run_virtual(failing_at(AsyncWaitOperator(fn, timeout=None), broken_source()))
    assert isinstance(error, KeyError)
    assert (fn.opened, fn.closed) == (1, 1)


def test_open_happens_before_the_first_call_and_open_failure_still_closes() -> None:
    events: list[str] = []

    class Fn(AsyncFunction[int, int]):
        async def open(self) -> None:
            events.append("open")

        async def async_invoke(self, element: int) -> list[int]:
            events.append(f"call {element}")
            return [element]

        async def close(self) -> None:
            events.append("close")

    run_virtual(collect(AsyncWaitOperator(Fn(), timeout=None), [1, 2]))
    assert events == ["open", "call 1", "call 2", "close"]

    class BadOpen(Fn):
        async def open(self) -> None:
            raise OSError("cannot connect")

    events.clear()
    with pytest.raises(OSError):
        run_virtual(collect(AsyncWaitOperator(BadOpen(), timeout=None), [1]))
    assert events == ["close"]


def test_close_error_does_not_hide_the_stream_error() -> None:
    boom = ValueError("record failed")

    class Fn(AsyncFunction[int, int]):
        async def async_invoke(self, element: int) -> list[int]:
            raise boom

        async def close(self) -> None:
            raise OSError("close failed")

    _, error = run_virtual(failing_at(AsyncWaitOperator(Fn(), timeout=None), [1]))
    assert error is boom


def test_manage_lifecycle_false_leaves_open_and_close_to_the_caller() -> None:
    fn = Scripted(const(0.1))
    op = AsyncWaitOperator(fn, timeout=None, manage_lifecycle=False)
    run_virtual(collect(op, range(3)))
    assert (fn.opened, fn.closed) == (0, 0)
    with pytest.raises(ConfigurationError, match=r"'false' for 'manage_lifecycle'"):
        AsyncWaitOperator(fn, timeout=None, manage_lifecycle="false")  # bool('false') is True


def test_async_source_is_read_lazily_and_closed_early_on_failure() -> None:
    closed: list[bool] = []

    async def source() -> Any:
        try:
            for i in range(100):
                yield i
        finally:
            closed.append(True)

    fn = Scripted(lambda e, a: (0.1, ValueError() if e == 2 else [e]))
    reads = Reads([])  # unused; async source tracked via closed flag
    del reads
    _, error = run_virtual(failing_at(AsyncWaitOperator(fn, timeout=None, capacity=3), source()))
    assert isinstance(error, ValueError)
    assert closed == [True]
    assert len(fn.calls) <= 6


@pytest.mark.parametrize("mode", MODES)
def test_a_running_timeout_hook_is_cancelled_when_the_stream_fails(mode: OutputMode) -> None:
    hook_cancelled: list[int] = []

    class SlowHook(AsyncFunction[int, int]):
        async def async_invoke(self, element: int) -> list[int]:
            if element == 1:
                await asyncio.sleep(0.5)
                raise ValueError("record 1")
            await asyncio.sleep(100)
            return [element]

        async def timeout(self, element: int) -> list[int]:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                hook_cancelled.append(element)
                raise
            return [element]

    op = AsyncWaitOperator(SlowHook(), timeout=1.0, capacity=5, output_mode=mode)

    async def run() -> int:
        loop = asyncio.get_running_loop()
        # record 0: admitted at 1.5, hook from 2.5; record 1: admitted at 3.0, fails at 3.5
        source = aiter_of([0, 1], delay=1.5)
        with pytest.raises(ValueError):
            async for _ in op.process(source):
                pass
        assert loop.time() == 3.5
        return len(asyncio.all_tasks()) - 1

    assert run_virtual(run()) == 0
    assert hook_cancelled == [0]


def test_a_failing_close_neither_hides_the_stream_error_nor_passes_silently() -> None:
    class BadClose(Scripted):
        async def close(self) -> None:
            await super().close()
            raise OSError("pool close failed")

    # the stream fails: its own error is raised, close()'s is attached as a note
    fn = BadClose(lambda e, a: (0.1, KeyError("lookup broke") if e == 1 else [e]))
    _, error = run_virtual(failing_at(AsyncWaitOperator(fn, timeout=None), range(3)))
    assert isinstance(error, KeyError) and fn.closed == 1
    assert any("pool close failed" in note for note in getattr(error, "__notes__", []))
    # a normal end: close()'s error is the stream's error
    fn = BadClose(const(0.1))
    with pytest.raises(OSError, match="pool close failed"):
        run_virtual(collect(AsyncWaitOperator(fn, timeout=None), range(3)))
    assert fn.closed == 1


def test_a_generator_source_is_closed_when_the_stream_fails_or_stops_early() -> None:
    closed: list[str] = []

    def source(tag: str) -> Any:
        try:
            yield from range(100)
        finally:
            closed.append(tag)  # e.g. a database cursor released

    async def scenario() -> None:
        fn = Scripted(lambda e, a: (0.1, ValueError() if e == 2 else [e]))
        with pytest.raises(ValueError):
            async for _ in AsyncWaitOperator(fn, timeout=None, capacity=3).process(
                source("failed")
            ):
                pass
            # checked while the error (and its traceback) is still alive:
        assert closed == ["failed"]
        gen = AsyncWaitOperator(Scripted(const(0.1)), timeout=None).process(source("stopped"))
        async for _ in gen:
            break
        await gen.aclose()  # type: ignore[attr-defined]
        assert closed == ["failed", "stopped"]

    run_virtual(scenario())


class SlowHook(Scripted):
    """A Scripted function whose timeout hook takes 5 s."""

    async def timeout(self, element: Any) -> Any:
        await asyncio.sleep(5.0)
        return ["T"]


@pytest.mark.parametrize("mode", MODES)
def test_in_flight_is_zero_after_a_failure_during_a_timeout_hook(mode: OutputMode) -> None:
    # admitted at 1, 2, 3: record 0 times out at 3 and its hook runs until 8; record 1 fails at
    # 3.5, when record 2 (admitted at 3, an empty result) waits for its retry
    boom = ValueError("record 1")
    script = {0: (0.0, HANG), 1: (1.5, boom), 2: (0.0, [])}
    fn = SlowHook(lambda e, a: script[e])
    strategy = RetryStrategies.fixed_delay(100, 1.0, result_predicate=RetryPredicates.EMPTY_RESULT)
    op = AsyncWaitOperator(fn, timeout=2.0, output_mode=mode, retry_strategy=strategy)
    loop = VirtualTimeLoop()
    try:
        at, error = loop.run_until_complete(failing_at(op, aiter_of([0, 1, 2], delay=1.0)))
        assert loop.pending_timers() == []
    finally:
        loop.close()
    assert error is boom and at == 3.5
    assert op.metrics.timeouts == 1 and fn.attempts_of(2) == 1
    assert op.metrics.in_flight == 0


class Abort(BaseException):
    """Neither an Exception nor a CancelledError: pytest's outcomes, gevent.Timeout..."""


class _AbortingHook(AsyncFunction[int, int]):
    async def async_invoke(self, element: int) -> list[int]:
        await asyncio.sleep(1.0)
        return [element]

    async def timeout(self, element: int) -> list[int]:
        raise Abort("the timeout hook")


async def _abort_at_one(element: int) -> list[int]:
    if element == 1:
        raise Abort("the function")
    return [element]


async def _value_error_at_one(element: int) -> list[int]:
    if element == 1:
        raise ValueError(element)
    return [element]


def _abort_on_error(_element: int, _error: BaseException, _attempts: int) -> list[int]:
    raise Abort("on_error")


def _abort_on(_outcome: Any) -> bool:
    raise Abort("a retry predicate")


async def _aborting_source() -> Any:
    yield 0
    yield 1
    raise Abort("the source")


async def _one_batch(elements: list[int]) -> list[list[int]]:
    return [[e] for e in elements]


@pytest.mark.parametrize(
    ("make", "source", "where"),
    [
        (lambda: AsyncWaitOperator(_abort_at_one, timeout=None), [0, 1, 2], "the function"),
        (lambda: AsyncWaitOperator(_abort_at_one, timeout=0.5), [0, 1, 2], "the function"),
        (lambda: AsyncWaitOperator(_AbortingHook(), timeout=0.2), [0], "the timeout hook"),
        (
            lambda: AsyncWaitOperator(_value_error_at_one, timeout=None, on_error=_abort_on_error),
            [0, 1, 2],
            "on_error",
        ),
        (
            lambda: AsyncBatchWaitOperator(_one_batch, batch_size=5, timeout=None),
            None,
            "the source",
        ),
        (
            lambda: AsyncWaitOperator(
                # its hook's fallback came out, as if the call had succeeded
                WithTimeoutHook(lambda element, attempt: (0.0, [element])),
                timeout=0.5,
                retry_strategy=RetryStrategies.fixed_delay(2, 0.01, result_predicate=_abort_on),
            ),
            [0],
            "a retry predicate",
        ),
        (
            lambda: AsyncWaitOperator(
                _value_error_at_one,
                timeout=0.5,
                retry_strategy=RetryStrategies.fixed_delay(2, 0.01, exception_predicate=_abort_on),
            ),
            [0, 1, 2],
            "a retry predicate",
        ),
    ],
    ids=[
        "function",
        "function-with-timeout",
        "timeout-hook",
        "on_error",
        "batch-source",
        "result-predicate",
        "exception-predicate",
    ],
)
def test_a_base_exception_from_user_code_ends_the_stream_with_it(
    make: Any, source: Any, where: str
) -> None:
    """Left in the attempt's task, no one read it: the record stayed pending for ever (a hang,
    or a TimeoutError in place of the real error)."""
    operator = make()
    _, error = run_virtual(failing_at(operator, _aborting_source() if source is None else source))
    assert type(error) is Abort and str(error) == where


@pytest.mark.parametrize("mode", MODES)
def test_an_answer_received_while_the_loop_stood_still_beats_its_deadline(mode: OutputMode) -> None:
    """A Spark worker's loop stands still while Spark takes a batch: an answer that arrived
    then, before its deadline, came out a timeout (the deadline's timer ran first when the loop
    went on). Flink's result, completed first, wins."""
    import time

    async def fn(x: int) -> list[int]:
        await asyncio.sleep(0.02 if x == 0 else 0.1)
        return [x]

    op = AsyncWaitOperator(fn, timeout=0.3, capacity=10, output_mode=mode)

    async def consume() -> list[int]:
        out: list[int] = []
        async for element, outputs in op.process(range(10)):
            out += outputs
            if element == 0:
                time.sleep(0.6)  # the consumer holds the loop past every answer and deadline
        return out

    assert sorted(asyncio.run(consume())) == list(range(10))
    assert op.metrics.timeouts == 0 and op.metrics.completed == 10
