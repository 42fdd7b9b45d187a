"""Flink's own test cases for the async wait operator, ported to our operator (virtual time).

Sources (apache/flink, flink-streaming-java/src/test/java/org/apache/flink/streaming/):
``api/operators/async/AsyncWaitOperatorTest`` (the FLIP-232 version with retry),
``api/operators/async/queue/{StreamElementQueueTest, OrderedStreamElementQueueTest,
UnorderedStreamElementQueueTest}`` and ``util/retryable/AsyncRetryStrategiesTest``. Each test's
docstring names the Flink test method it ports. Flink's durations are kept (10 ms is 0.01 s),
on virtual time: no test waits for real. Flink's ``StreamRecord`` timestamps have no
counterpart (a record is its value). A queue test is ported through the operator: a queue's
``tryPut`` is the operator reading its next input, ``popCompleted`` what it emits, and
completing a ``ResultFuture`` an attempt that ends at a chosen virtual time.

Not ported (Flink internals our API has no counterpart for):

- ``testStateSnapshotAndRestore``, ``testRestartWithFullQueue`` (FLINK-7949): checkpoint state
  snapshots and task restore.
- ``testObjectReused``: object reuse of mutable input records by Flink's serialization stack.
- ``testIgnoreAsyncOperatorRecordsOnDrain`` (and ``...WithRetry``): mailbox drain on
  stop-with-savepoint, whose records are replayed on recovery.
- ``testAsyncOperatorIsNeverChained`` (FLINK-13063) and the job-graph vertex count asserted in
  ``createChainedVertex``: Flink's operator chaining in a job graph.
- ``testProcessingTimeRepeatedCompleteOrderedWithRetry`` / ``...UnorderedWithRetry``: an
  ill-written function calling ``ResultFuture.complete`` ten times; our attempt's outcome is its
  return value (no ``ResultFuture``), so it cannot complete twice.
- ``AsyncRetryStrategiesTest.testFixedIncrementalDelayRetryStrategy``: we have no
  fixed-incremental-delay strategy (only fixed delay and exponential backoff).
- ``StreamElementQueueTest.testPut``'s ``queue.values()`` (the entries a checkpoint stores) and
  ``UnorderedStreamElementQueueTest``'s ``OperatorActions`` mock: checkpoint state and the
  mailbox's failure callback. The rest of those tests is ported.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from typing import Any, cast

import pytest

from asyncio_lookup.runtime import (
    AsyncDataStream,
    AsyncFunction,
    AsyncRetryStrategy,
    AsyncWaitOperator,
    OutputMode,
    RetryPredicates,
    RetryStrategies,
    Watermark,
)

from .support import HANG, Reads, Scripted, WithTimeoutHook, collect, const
from .virtual_time import VirtualTimeLoop, run_virtual

ORDERED, UNORDERED = OutputMode.ORDERED, OutputMode.UNORDERED
MODES = [ORDERED, UNORDERED]

TIMEOUT = 1.0  # AsyncWaitOperatorTest.TIMEOUT, 1000 ms


def empty_result_fixed_delay() -> AsyncRetryStrategy:
    """``emptyResultFixedDelayRetryStrategy``: 2 retries, 10 ms apart, on an empty result."""
    return RetryStrategies.fixed_delay(2, 0.01, result_predicate=RetryPredicates.EMPTY_RESULT)


def exception_fixed_delay() -> AsyncRetryStrategy:
    """``exceptionRetryStrategy``: 2 retries, 10 ms apart, on any exception."""
    return RetryStrategies.fixed_delay(2, 0.01, exception_predicate=RetryPredicates.HAS_EXCEPTION)


def retry_modes() -> list[Any]:
    """(mode, with retry?) for the four ``...Handling`` / ``...HandlingWithRetry`` cases."""
    return [
        pytest.param(ORDERED, False, id="ordered"),
        pytest.param(ORDERED, True, id="ordered-with-retry"),
        pytest.param(UNORDERED, False, id="unordered"),
        pytest.param(UNORDERED, True, id="unordered-with-retry"),
    ]


def doubling(delays: dict[int, float] | None = None) -> Scripted:
    """``MyAsyncFunction``: completes with ``input * 2`` (after ``delays[input]``, default 0)."""
    table = delays or {}
    return Scripted(lambda e, a: (table.get(e, 0.0), [e * 2]))


def by_element(delays: dict[Any, float]) -> Scripted:
    """Completes with ``[element]`` ``delays[element]`` after the call (a ``ResultFuture``
    completed by the test at that time)."""
    return Scripted(lambda e, a: (delays[e], [e]))


class Lazy(AsyncFunction[int, int]):
    """``LazyAsyncFunction``: completes with ``[input]`` once the latch is open."""

    def __init__(self) -> None:
        self.latch = asyncio.Event()
        self.cancelled: list[int] = []

    async def async_invoke(self, element: int) -> list[int]:
        try:
            await self.latch.wait()
        except asyncio.CancelledError:
            self.cancelled.append(element)
            raise
        return [element]


class IgnoreTimeoutLazy(Lazy):
    """``IgnoreTimeoutLazyAsyncFunction``: its timeout completes with ``input * 3``."""

    async def timeout(self, element: int) -> list[int]:
        return [element * 3]


async def at_times(schedule: Iterable[tuple[float, Any]]) -> AsyncIterator[Any]:
    """A source that yields each element at its loop time (``processElement`` after
    ``setProcessingTime``)."""
    loop = asyncio.get_running_loop()
    for when, element in schedule:
        await asyncio.sleep(max(0.0, when - loop.time()))
        yield element


def flat(timed: list[tuple[float, Any]]) -> list[tuple[float, Any]]:
    """(time, output) per output and (time, watermark) per watermark, as Flink's harness
    records its output."""
    out: list[tuple[float, Any]] = []
    for at, item in timed:
        if isinstance(item, Watermark):
            out.append((at, item))
        else:
            out.extend((at, output) for output in item[1])
    return out


def values(timed: list[tuple[float, Any]]) -> list[Any]:
    return [item for _, item in flat(timed)]


async def until_failure(
    operator: AsyncWaitOperator[Any, Any], source: Any
) -> tuple[list[Any], float, BaseException]:
    """Run to the failure: (the outputs emitted before it, its loop time, the exception)."""
    loop = asyncio.get_running_loop()
    seen: list[tuple[float, Any]] = []
    with pytest.raises(BaseException) as raised:
        async for item in operator.process(source):
            seen.append((loop.time(), item))
    return values(seen), loop.time(), raised.value


# --- AsyncWaitOperatorTest ---------------------------------------------------------------------


def test_event_time_ordered() -> None:
    """Ports ``testEventTimeOrdered``: capacity 2, records 1, 2, watermark 2, record 3; ORDERED
    emits 2, 4, the watermark, 6."""
    wm = Watermark(2)
    op = AsyncWaitOperator(
        doubling({1: 0.3, 2: 0.1, 3: 0.0}), timeout=TIMEOUT, capacity=2, output_mode=ORDERED
    )
    out = run_virtual(collect(op, [1, 2, wm, 3]))
    assert values(out) == [2, 4, wm, 6]


def test_watermark_unordered() -> None:
    """Ports ``testWaterMarkUnordered``: as ``testEventTimeOrdered`` in UNORDERED mode; the
    watermark is at index 2, record 3's output last, records 1 and 2 in any order before it."""
    wm = Watermark(2)
    op = AsyncWaitOperator(
        doubling({1: 0.3, 2: 0.1, 3: 0.0}), timeout=TIMEOUT, capacity=2, output_mode=UNORDERED
    )
    out = values(run_virtual(collect(op, [1, 2, wm, 3])))
    assert out[2] == wm
    assert out[3] == 6
    assert sorted(out[:2]) == [2, 4]
    assert out == [4, 2, wm, 6]  # here: completion order (record 2 finished first)


@pytest.mark.parametrize("mode", MODES)
def test_processing_time(mode: OutputMode) -> None:
    """Ports ``testProcessingTimeOrdered`` and ``testProcessingUnordered``: capacity 6, records
    1-8 doubled; in input order when ORDERED, the same outputs in any order when UNORDERED."""
    delays = {e: (e * 7) % 5 * 0.01 for e in range(1, 9)}
    op = AsyncWaitOperator(doubling(delays), timeout=TIMEOUT, capacity=6, output_mode=mode)
    out = values(run_virtual(collect(op, range(1, 9))))
    expected = [2, 4, 6, 8, 10, 12, 14, 16]
    if mode is ORDERED:
        assert out == expected
    else:
        assert sorted(out) == expected
        assert out != expected  # the delays do reorder them


def test_operator_chain_with_processing_time() -> None:
    """Ports ``testOperatorChainWithProcessingTime``: ordered wait (capacity 6, doubling) ->
    map(+1) -> unordered wait (capacity 3, doubling); 5..9 give 22, 26, 30, 34, 38 (compared
    sorted). The map is an async generator between the two streams."""
    first_fn = doubling({5: 0.3, 6: 0.1, 7: 0.2, 8: 0.0, 9: 0.1})
    second_fn = doubling({11: 0.0, 13: 0.3, 15: 0.1, 17: 0.2, 19: 0.0})

    async def plus_one(stream: AsyncIterator[Any]) -> AsyncIterator[int]:
        initial_value = 1  # the RichMapFunction's field set in open()
        async for value in stream:
            yield initial_value + value

    async def run() -> list[Any]:
        first = AsyncDataStream.ordered_wait(range(5, 10), first_fn, TIMEOUT, 6)
        second = AsyncDataStream.unordered_wait(plus_one(aiter(first)), second_fn, TIMEOUT, 3)
        return [value async for value in second]

    out = run_virtual(run())
    assert sorted(out) == [22, 26, 30, 34, 38]
    assert (first_fn.opened, first_fn.closed, second_fn.opened, second_fn.closed) == (1, 1, 1, 1)


def test_async_timeout_failure() -> None:
    """Ports ``testAsyncTimeoutFailure``: timeout 10 ms, capacity 2, ORDERED, a function that
    answers only when a latch opens; record 1 at t=0, record 2 at t=5, record 1 times out at 10,
    the latch opens at 11 (ms). The failure is a ``TimeoutError``, as Flink's ``TimeoutException``.

    Difference (documented, docs/semantics.md §1.4 "fails the stream at once ... outstanding
    attempts are cancelled"): Flink reports the failure to its task (``failExternally``) and its
    harness still emits record 2's output (2) after the latch opens; here the stream raises at
    10 ms, record 2's call is cancelled and nothing is emitted."""
    fn = Lazy()

    async def run() -> tuple[list[Any], float, BaseException]:
        asyncio.get_running_loop().call_at(0.011, fn.latch.set)
        op = AsyncWaitOperator(fn, timeout=0.01, capacity=2, output_mode=ORDERED)
        return await until_failure(op, at_times([(0.0, 1), (0.005, 2)]))

    emitted, at, error = run_virtual(run())
    assert isinstance(error, TimeoutError)
    assert at == pytest.approx(0.01)
    assert emitted == []  # Flink: [2]
    assert sorted(fn.cancelled) == [1, 2]


def test_async_timeout_ignore() -> None:
    """Ports ``testAsyncTimeoutIgnore``: as ``testAsyncTimeoutFailure`` with a timeout hook that
    completes with ``input * 3``: the output is 3 (record 1 at its deadline, 10 ms), then 2
    (record 2, when the latch opens at 11 ms); no failure."""
    fn = IgnoreTimeoutLazy()

    async def run() -> list[tuple[float, Any]]:
        asyncio.get_running_loop().call_at(0.011, fn.latch.set)
        op = AsyncWaitOperator(fn, timeout=0.01, capacity=2, output_mode=ORDERED)
        return flat(await collect(op, at_times([(0.0, 1), (0.005, 2)])))

    out = run_virtual(run())
    assert [value for _, value in out] == [3, 2]
    assert [at for at, _ in out] == [pytest.approx(0.01), pytest.approx(0.011)]


def test_timeout_cleanup() -> None:
    """Ports ``testTimeoutCleanup`` (FLINK-5652): UNORDERED, capacity 1, record 42 gives 84, and
    the record's timeout timer is cancelled when it completes (no timer left, and the run ends
    with the record, not at its deadline)."""
    fn = doubling()
    op = AsyncWaitOperator(fn, timeout=TIMEOUT, capacity=1, output_mode=UNORDERED)
    loop = VirtualTimeLoop()
    try:
        out = loop.run_until_complete(collect(op, [42]))
        assert values(out) == [84]
        assert loop.time() < TIMEOUT
        assert loop.pending_timers() == []
    finally:
        loop.close()


def test_timeout_after_complete() -> None:
    """Ports ``testTimeoutAfterComplete`` (FLINK-22573): UNORDERED, capacity 1; the record
    completes at half the timeout, the stream stays open past its deadline (Flink: a test timer
    registered after the operator's), and ``timeout()`` is never called."""
    fn = WithTimeoutHook(const(TIMEOUT / 2))

    async def run() -> list[tuple[float, Any]]:
        async def source() -> AsyncIterator[int]:
            yield 1
            await asyncio.sleep(2 * TIMEOUT)

        op = AsyncWaitOperator(fn, timeout=TIMEOUT, capacity=1, output_mode=UNORDERED)
        out = await collect(op, source())
        # the source is read on when the slot frees (0.5 s), so it ends at 2.5 s, past the
        # record's deadline at 1 s
        assert asyncio.get_running_loop().time() == pytest.approx(2.5 * TIMEOUT)
        return out

    assert flat(run_virtual(run())) == [(TIMEOUT / 2, 1)]
    assert fn.timeout_calls == []


class UserException(AsyncFunction[int, int]):
    """``UserExceptionAsyncFunction``: every call fails with ``Exception("Test exception")``."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def async_invoke(self, element: int) -> list[int]:
        self.calls.append(asyncio.get_running_loop().time())
        raise Exception("Test exception")


@pytest.mark.parametrize(("mode", "retry"), retry_modes())
def test_user_exception_handling(mode: OutputMode, retry: bool) -> None:
    """Ports ``testOrderedWaitUserExceptionHandling``, ``testUnorderedWaitUserExceptionHandling``
    (FLINK-6435) and their ``...WithRetry`` variants (``exceptionRetryStrategy``: 2 retries, 10 ms
    apart): capacity 2, one record whose call fails; the stream fails with the user's exception
    and does not hang.

    Difference (documented, docs/semantics.md §1.5 "End of input does not cut retries short"):
    Flink's test ends the input at once, and Flink's ``endInput`` fires the pending retry at once
    as the last attempt (2 calls, both at t=0); here both retries run on their timers (3 calls, at
    0, 0.01 and 0.02). Flink asserts only that the task failed."""
    fn = UserException()
    strategy = exception_fixed_delay() if retry else RetryStrategies.NO_RETRY
    op = AsyncWaitOperator(
        fn, timeout=TIMEOUT, capacity=2, output_mode=mode, retry_strategy=strategy
    )
    emitted, _, error = run_virtual(until_failure(op, [1]))
    assert type(error) is Exception and str(error) == "Test exception"
    assert emitted == []
    assert fn.calls == ([0.0, pytest.approx(0.01), pytest.approx(0.02)] if retry else [0.0])


@pytest.mark.parametrize(("mode", "retry"), retry_modes())
def test_timeout_exception_handling(mode: OutputMode, retry: bool) -> None:
    """Ports ``testOrderedWaitTimeoutHandling``, ``testUnorderedWaitTimeoutHandling`` (FLINK-6435)
    and their ``...WithRetry`` variants (``emptyResultFixedDelayRetryStrategy``): timeout 10 ms,
    capacity 2, a function that never completes (``NoOpAsyncFunction``); at the deadline the
    record is completed with the timeout failure and the operator closes instead of hanging."""
    fn = Scripted(const(0.0, HANG))
    strategy = empty_result_fixed_delay() if retry else RetryStrategies.NO_RETRY
    op = AsyncWaitOperator(fn, timeout=0.01, capacity=2, output_mode=mode, retry_strategy=strategy)
    emitted, at, error = run_virtual(until_failure(op, [1]))
    assert type(error) is TimeoutError and str(error) == "Async function call has timed out."
    assert at == pytest.approx(0.01)
    assert emitted == []
    assert len(fn.calls) == 1 and fn.cancelled == [(1, 1)]
    assert (fn.opened, fn.closed) == (1, 1)


def odd_input_empty_result() -> Scripted:
    """``OddInputEmptyResultAsyncFunction``: after 3 ms, an odd input gives an empty result, an
    even one ``input * 2``."""
    return Scripted(lambda e, a: (0.003, [] if e % 2 == 1 else [e * 2]))


@pytest.mark.parametrize("mode", MODES)
def test_processing_time_with_retry(mode: OutputMode) -> None:
    """Ports ``testProcessingTimeOrderedWithRetry`` and ``testProcessingTimeUnorderedWithRetry``:
    capacity 6, records 1-6, ``emptyResultFixedDelayRetryStrategy``; the odd records stay empty
    after their retries and emit nothing, so the outputs are 4, 8, 12 (sorted when UNORDERED)."""
    fn = odd_input_empty_result()
    op = AsyncWaitOperator(
        fn,
        timeout=TIMEOUT,
        capacity=6,
        output_mode=mode,
        retry_strategy=empty_result_fixed_delay(),
    )
    out = values(run_virtual(collect(op, range(1, 7))))
    if mode is ORDERED:
        assert out == [4, 8, 12]
    else:
        assert sorted(out) == [4, 8, 12]
    assert {e: fn.attempts_of(e) for e in range(1, 7)} == {1: 3, 2: 1, 3: 3, 4: 1, 5: 3, 6: 1}


class AlwaysTimeoutWithDefaultValue(AsyncFunction[int, int]):
    """``AlwaysTimeoutWithDefaultValueAsyncFunction``: every call fails with
    ``Exception("Dummy error")`` after 501 ms; the timeout completes with ``-1``."""

    def __init__(self) -> None:
        self.try_counts: dict[int, int] = {}
        self.timeouts: list[tuple[int, float]] = []

    async def async_invoke(self, element: int) -> list[int]:
        self.try_counts[element] = self.try_counts.get(element, 0) + 1
        await asyncio.sleep(0.501)
        raise Exception("Dummy error")

    async def timeout(self, element: int) -> list[int]:
        self.timeouts.append((element, asyncio.get_running_loop().time()))
        return [-1]


@pytest.mark.parametrize("mode", MODES)
def test_processing_time_always_timeout_function_with_retry(mode: OutputMode) -> None:
    """Ports ``testProcessingTimeWithTimeoutFunctionOrderedWithRetry`` and
    ``...UnorderedWithRetry``: timeout 1 s, capacity 10, 5 retries 100 ms apart on any exception,
    each call failing after 501 ms: the second call (from 601 ms) is still running at the
    deadline, so each record emits the timeout's -1 and was tried twice (Flink: at most twice,
    against load; exactly twice on virtual time)."""
    fn = AlwaysTimeoutWithDefaultValue()
    strategy = RetryStrategies.fixed_delay(
        5, 0.1, exception_predicate=RetryPredicates.HAS_EXCEPTION
    )
    op = AsyncWaitOperator(fn, timeout=1.0, capacity=10, output_mode=mode, retry_strategy=strategy)
    out = run_virtual(collect(op, [1, 2]))
    assert values(out) == [-1, -1]
    assert fn.try_counts == {1: 2, 2: 2}
    assert sorted(e for e, _ in fn.timeouts) == [1, 2]
    assert all(at == pytest.approx(1.0) for _, at in fn.timeouts)


def test_closing_with_blocked_emitter() -> None:
    """Ports ``testClosingWithBlockedEmitter`` (FLINK-5638, Flink 1.x): an operator whose
    emitter is blocked (its output does not take the record it emits) is closed with records in
    flight, and the close must not deadlock. Here: two chained operators, upstream capacity 1,
    downstream capacity 2; the consumer takes record 0 and stops pulling (the blocked output),
    downstream's call for record 1 hangs, so neither operator reads on. Closing the stream
    returns, cancels the hanging call, closes both functions and leaves no task behind."""
    upstream_fn = Scripted(const(0.0))
    downstream_fn = Scripted(lambda e, a: (0.0, [e] if e == 0 else HANG))

    async def run() -> set[asyncio.Task[Any]]:
        upstream = AsyncDataStream.ordered_wait(range(10), upstream_fn, TIMEOUT, capacity=1)
        downstream = AsyncDataStream.ordered_wait(upstream, downstream_fn, TIMEOUT, capacity=2)
        iterator = cast(AsyncGenerator[Any, None], aiter(downstream))
        async with contextlib.aclosing(iterator):
            assert await anext(iterator) == 0
            await asyncio.sleep(0.5)  # the consumer holds record 0's output; 1 hangs downstream
            assert [c.element for c in downstream_fn.calls] == [0, 1]
            assert [c.element for c in upstream_fn.calls] == [0, 1]  # back-pressure upstream
        return asyncio.all_tasks() - {asyncio.current_task()}

    assert run_virtual(run()) == set()
    assert downstream_fn.cancelled == [(1, 1)]
    assert (upstream_fn.opened, upstream_fn.closed) == (1, 1)
    assert (downstream_fn.opened, downstream_fn.closed) == (1, 1)


# --- StreamElementQueueTest (both output modes) ------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_queue_put(mode: OutputMode) -> None:
    """Ports ``StreamElementQueueTest.testPut``: a queue of capacity 2 is full with a record and
    a watermark, and the next element is not admitted. Here the record comes first (a watermark
    with nothing ahead of it is emitted, and leaves the queue, at once); the third element is
    read only when the record completes at t=5."""
    first, second = Watermark(0), Watermark(2)
    source = Reads([42, first, second])
    op = AsyncWaitOperator(by_element({42: 5.0}), timeout=None, capacity=2, output_mode=mode)
    out = run_virtual(collect(op, source))
    assert source.at == {42: 0.0, first: 0.0, second: 5.0}
    assert flat(out) == [(5.0, 42), (5.0, first), (5.0, second)]


@pytest.mark.parametrize("mode", MODES)
def test_queue_pop(mode: OutputMode) -> None:
    """Ports ``StreamElementQueueTest.testPop``: capacity 2, watermark 0 then record 42; the
    watermark pops at once (watermarks are always complete), the record's output 43 when its
    call completes."""
    wm = Watermark(0)
    fn = Scripted(lambda e, a: (1.0, [43]))
    op = AsyncWaitOperator(fn, timeout=None, capacity=2, output_mode=mode)
    assert flat(run_virtual(collect(op, [wm, 42]))) == [(0.0, wm), (1.0, 43)]


@pytest.mark.parametrize("mode", MODES)
def test_queue_put_on_full(mode: OutputMode) -> None:
    """Ports ``StreamElementQueueTest.testPutOnFull``: capacity 1; record 43 cannot be put while
    record 42 is in the queue; once 42's result (42 * 42) is popped, 43 is put."""
    source = Reads([42, 43])
    fn = Scripted(lambda e, a: (1.0, [e * e]))
    op = AsyncWaitOperator(fn, timeout=None, capacity=1, output_mode=mode)
    out = run_virtual(collect(op, source))
    assert source.at == {42: 0.0, 43: 1.0}
    assert flat(out) == [(1.0, 42 * 42), (2.0, 43 * 43)]


@pytest.mark.parametrize("mode", MODES)
def test_queue_watermark_only(mode: OutputMode) -> None:
    """Ports ``StreamElementQueueTest.testWatermarkOnly``: two adjacent watermarks in a queue of
    capacity 2 come out in order, and nothing else."""
    fn = Scripted(const(0.0))
    op = AsyncWaitOperator(fn, timeout=None, capacity=2, output_mode=mode)
    out = run_virtual(collect(op, [Watermark(2), Watermark(5)]))
    assert flat(out) == [(0.0, Watermark(2)), (0.0, Watermark(5))]
    assert fn.calls == []


def test_ordered_queue_completion_order() -> None:
    """Ports ``OrderedStreamElementQueueTest.testCompletionOrder``: capacity 4, records 1, 2, a
    watermark, record 3; records 2 and 3 complete first (nothing pops), then record 1: all four
    pop together in input order."""
    wm = Watermark(2)
    fn = Scripted(lambda e, a: ({1: 3.0, 2: 1.0, 3: 2.0}[e], [e + 9]))
    op = AsyncWaitOperator(fn, timeout=None, capacity=4, output_mode=ORDERED)
    out = run_virtual(collect(op, [1, 2, wm, 3]))
    assert flat(out) == [(3.0, 10), (3.0, 11), (3.0, wm), (3.0, 12)]


def test_unordered_queue_completion_order() -> None:
    """Ports ``UnorderedStreamElementQueueTest.testCompletionOrder``: capacity 8, R1 R2 W1 R3 R4
    W2 R5 R6. R3 completes first but is behind W1 (nothing pops); R2 pops; R6 and R4 complete
    (nothing pops: R1 is open); R1 pops, then W1, R3 and R4 (Flink: in any order; here in
    completion order), W2 and R6; R5 pops last, when it completes."""
    w1, w2 = Watermark(2), Watermark(5)
    completes = {3: 1.0, 2: 2.0, 6: 3.0, 4: 4.0, 1: 5.0, 5: 6.0}
    op = AsyncWaitOperator(by_element(completes), timeout=None, capacity=8, output_mode=UNORDERED)
    out = flat(run_virtual(collect(op, [1, 2, w1, 3, 4, w2, 5, 6])))
    assert out == [
        (2.0, 2),
        (5.0, 1),
        (5.0, w1),
        (5.0, 3),
        (5.0, 4),
        (5.0, w2),
        (5.0, 6),
        (6.0, 5),
    ]


# --- AsyncRetryStrategiesTest ------------------------------------------------------------------


def test_fixed_delay_retry_strategy() -> None:
    """Ports ``AsyncRetryStrategiesTest.testFixedDelayRetryStrategy``: 10 attempts, 100 ms:
    ``canRetry(10)``, not ``canRetry(11)``, a backoff of 100 ms. Flink's
    ``getBackoffTimeMillis(0)`` is ``backoff(1)`` here (attempts are 1-based, semantics §1.5)."""
    strategy = RetryStrategies.fixed_delay(
        10, 0.1, exception_predicate=RetryPredicates.HAS_EXCEPTION
    )
    assert strategy.can_retry(10)
    assert not strategy.can_retry(11)
    assert strategy.backoff(1) == 0.1


def test_exponential_backoff_delay_retry_strategy() -> None:
    """Ports ``AsyncRetryStrategiesTest.testExponentialBackoffDelayRetryStrategy`` (the current
    version): 10 attempts, 100 ms initial, 2 s at most, multiplier 2; ``canRetry(10)``, not
    ``canRetry(11)``; ``backoff(i)`` doubles from 100 ms up to 2 s, and the strategy is reusable
    (five passes give the same delays)."""
    max_attempts, initial_delay, max_delay, multiplier = 10, 0.1, 2.0, 2.0
    strategy = RetryStrategies.exponential_backoff(
        max_attempts,
        initial_delay,
        max_delay,
        multiplier,
        result_predicate=RetryPredicates.EMPTY_RESULT,
    )
    assert strategy.can_retry(max_attempts)
    assert not strategy.can_retry(max_attempts + 1)
    for _ in range(5):
        current = initial_delay
        for attempt in range(1, max_attempts + 1):
            assert strategy.backoff(attempt) == pytest.approx(current)
            current = min(current * multiplier, max_delay)
