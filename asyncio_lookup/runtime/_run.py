"""One run of the async wait operator over one input: admission, timers, retries and emission.

Cost model (the operator must stay within 1.5x of a hand-rolled task-per-element pipeline):
no Task when the function's ``invoke_now`` has the result at admission (a cache hit), else
one Task per attempt, whose coroutine awaits the function and handles the outcome inline (a
done callback would cost one more loop callback per element; no ``asyncio.wait`` or
``asyncio.timeout`` per element). Deadlines are monotone (same timeout, admissions in time
order), so the admitted records in order plus ONE ``call_at`` timer for the earliest pending
deadline cover every timeout. A finished record needs no timer work: when the timer fires it
skips finished records and re-arms for the next pending deadline, and it is cancelled once
every record is emitted. Retries are ``call_later`` handles kept in a retry set. Outputs
leave in batches.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import (
    AsyncIterable,
    Awaitable,
    Callable,
    Collection,
    Iterable,
    Iterator,
    Mapping,
)
from datetime import timedelta
from types import GeneratorType
from typing import Any

from asyncio_lookup.errors import ResultTypeError
from asyncio_lookup.runtime.elements import Watermark
from asyncio_lookup.runtime.function import TIMEOUT_MESSAGE, AsyncFunction
from asyncio_lookup.runtime.loop import TIMER_STEP
from asyncio_lookup.runtime.metrics import SAMPLES, OperatorMetrics
from asyncio_lookup.runtime.retry import AsyncRetryStrategy

# Entry states. Records go _PENDING <-> _WAITING, maybe _TIMING_OUT, then _DONE or _FAILED;
# watermarks are _MARK from the start. _DONE <= state <= _MARK means "ready to emit".
_PENDING = 0  # an attempt is running
_WAITING = 1  # waiting for a retry timer
_TIMING_OUT = 2  # the deadline passed and the timeout hook is running
_DONE = 3  # final result, waiting to be emitted
_MARK = 4  # a watermark
MARK = _MARK  # for consumers of batches: ``entry.state == MARK``
_FAILED = 5  # final error
_SAMPLE_MASK = SAMPLES - 1


class Entry:
    """An admitted record or watermark, from admission until it is emitted."""

    __slots__ = (
        "admitted",
        "attempts",
        "deadline",
        "element",
        "handle",
        "result",
        "segment",
        "state",
        "task",
    )
    # Set later, only where needed (an unset slot costs nothing at admission):
    attempts: int  # the current attempt number (1-based), once started
    result: Collection[Any]  # when _DONE
    task: asyncio.Task[None]  # the running attempt or timeout hook, once started
    handle: asyncio.TimerHandle  # when _WAITING
    deadline: float  # at admission, when a timeout is configured
    segment: _Segment  # at admission, in unordered mode

    def __init__(self, element: Any, admitted: float, state: int = _PENDING) -> None:
        self.element = element
        self.admitted = admitted
        self.state = state


class _Segment:
    """Unordered mode: the records between two watermarks, and the watermark closing them."""

    __slots__ = ("done", "pending", "watermark")

    def __init__(self) -> None:
        self.pending = 0  # records of this segment not final yet
        self.done: list[Entry] = []  # final records waiting for earlier segments to drain
        self.watermark: Entry | None = None


def result_type_error(element: Any, result: Any) -> ResultTypeError | None:
    """The failure for a result that is not a collection of outputs, else ``None``."""
    kind = type(result)
    if kind is list or kind is tuple:
        return None
    if (
        result is None
        or isinstance(result, (str, bytes, bytearray, Mapping))
        or not isinstance(result, Collection)
    ):
        return ResultTypeError(
            f"async function returned {result!r} ({kind.__name__}) for element {element!r}; "
            "it must return a collection of outputs such as a list (empty for no output)"
        )
    return None


class OperatorRun:
    """The state of one ``process()`` call; use ``start``, ``next_batch`` until None, ``stop``."""

    def __init__(
        self,
        fn: AsyncFunction[Any, Any],
        invoke: Callable[[Any], Awaitable[Collection[Any]]],
        *,
        timeout: float | None,
        capacity: int,
        ordered: bool,
        retry_strategy: AsyncRetryStrategy | None,
        timeout_hook: bool,
        metrics: OperatorMetrics,
        manage_lifecycle: bool,
        invoke_now: Callable[[Any], Collection[Any] | None] | None = None,
    ) -> None:
        self._fn = fn
        self._invoke = invoke
        self._invoke_now = invoke_now
        self._timeout = timeout
        self._capacity = capacity
        self._ordered = ordered
        self._strategy = retry_strategy
        predicate = retry_strategy.retry_predicate if retry_strategy is not None else None
        self._result_predicate = predicate.result_predicate if predicate else None
        self._exception_predicate = predicate.exception_predicate if predicate else None
        self._timeout_hook = timeout_hook
        self._metrics = metrics
        self._manage = manage_lifecycle
        self._loop = asyncio.get_running_loop()
        # loop.time() of the default loop is time.monotonic(); calling that directly is cheaper.
        self._time: Callable[[], float] = (
            time.monotonic
            if type(self._loop).time is asyncio.BaseEventLoop.time
            else self._loop.time
        )

        self._occupied = 0  # admitted and not yet emitted (records and watermarks)
        self._handed = 0  # of those, in the batch the consumer is taking
        self._live = 0  # records admitted and not final
        self._queue: deque[Entry] = deque()  # ordered mode: every entry, in input order
        self._segments: deque[_Segment] = deque([_Segment()])  # unordered mode
        self._ready: list[Entry] = []  # emittable, in emission order
        # Records in admission order = deadline order, so the earliest deadline is at the head.
        # Ordered mode uses the queue itself; unordered mode this deque, from which final
        # records are dropped lazily. Every record that is not final is in one of them.
        self._admitted: deque[Entry] = self._queue if ordered else deque()
        self._compact_at = 2 * capacity + 32
        self._timer: asyncio.TimerHandle | None = None
        self._retrying: set[Entry] = set()
        # Tasks not reachable through the admitted records: attempts cancelled at their deadline
        # (until they finish) and timeout hooks (until they finish).
        self._side_tasks: set[asyncio.Task[None]] = set()
        self._feeder: asyncio.Task[None] | None = None
        self._consumer_waiter: asyncio.Future[None] | None = None
        self._feeder_waiter: asyncio.Future[None] | None = None
        self._input_done = False
        self._closed = False
        self._opened = False
        self.failure: BaseException | None = None

    # ---------------------------------------------------------------- consumer side

    async def start(self, source: Iterable[Any] | AsyncIterable[Any]) -> None:
        """Open the function (when managing its lifecycle) and start reading ``source``."""
        if self._manage:
            self._opened = True
            await self._fn.open()
        self._feeder = self._loop.create_task(self._feed(source))
        self._feeder.add_done_callback(self._feeder_done)

    async def next_batch(self) -> list[Entry] | None:
        """The next entries to emit, in order; ``None`` once every admitted record is emitted.

        The entries of a batch keep their slots until the consumer asks for the next batch
        (it has then taken them all), so capacity also bounds what a slow consumer holds.
        Raises the failure of the stream as soon as there is one.
        """
        if self._handed:
            self._occupied -= self._handed
            self._handed = 0
            waiter = self._feeder_waiter
            if waiter is not None:
                self._feeder_waiter = None
                if not waiter.done():
                    waiter.set_result(None)
        while True:
            if self.failure is not None:
                raise self.failure
            ready = self._ready
            if ready:
                self._ready = []
                self._handed = len(ready)
                return ready
            if self._input_done and self._occupied == 0:
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
                return None
            waiter = self._consumer_waiter = self._loop.create_future()
            await waiter

    async def stop(self, error: BaseException | None = None) -> None:
        """Cancel and await everything outstanding, then close the function (when managing it).

        With ``error`` (the stream is failing), an error from ``close()`` is attached to
        ``error`` as a note instead of replacing it.
        """
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for entry in self._retrying:
            entry.handle.cancel()
        self._retrying.clear()
        outstanding: set[asyncio.Task[None]] = set(self._side_tasks)
        for entry in self._admitted:
            if entry.state < _DONE and entry.state != _WAITING:
                outstanding.add(entry.task)
        if self._feeder is not None:
            outstanding.add(self._feeder)
        outstanding = {task for task in outstanding if not task.done()}
        for task in outstanding:
            task.cancel()
        cancelled = False
        while outstanding:
            try:
                _, outstanding = await asyncio.wait(outstanding)
            except asyncio.CancelledError:
                cancelled = True
        self._metrics.in_flight -= self._live
        self._live = 0
        if self._opened:
            self._opened = False
            try:
                await self._fn.close()
            except Exception as close_error:
                if error is None:
                    raise
                note = getattr(error, "add_note", None)
                if note is not None:
                    note(f"AsyncFunction.close() also failed: {close_error!r}")
        if cancelled:
            raise asyncio.CancelledError()

    # ---------------------------------------------------------------- input side

    async def _feed(self, source: Iterable[Any] | AsyncIterable[Any]) -> None:
        capacity = self._capacity
        admit = self._admit
        try:
            if isinstance(source, AsyncIterable):
                aiterator = source.__aiter__()
                try:
                    while self.failure is None:
                        if self._occupied >= capacity:
                            await self._slot_free()
                            continue
                        try:
                            element = await aiterator.__anext__()
                        except StopAsyncIteration:
                            break
                        if self.failure is not None:
                            return  # failed while this element was being read
                        admit(element)
                    else:
                        return  # failed: stop reading
                finally:
                    aclose = getattr(aiterator, "aclose", None)
                    if aclose is not None:
                        await aclose()
            else:
                iterator: Iterator[Any] = iter(source)
                try:
                    while self.failure is None:
                        if self._occupied >= capacity:  # wait BEFORE reading: no read when full
                            await self._slot_free()
                            continue
                        try:
                            element = next(iterator)
                        except StopIteration:
                            break
                        admit(element)
                    else:
                        return  # failed: stop reading
                finally:
                    # like an async source's aclose(): a generator's cleanup (a cursor, a file)
                    # runs now, not whenever the generator is collected
                    if isinstance(iterator, GeneratorType):
                        iterator.close()
        except asyncio.CancelledError:
            raise
        except Exception as error:
            self._fail(error)
            return
        self._input_done = True
        self._wake_consumer()

    def _feeder_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and not self._closed:
            error = task.exception()
            if error is not None:
                self._fail(error)

    async def _slot_free(self) -> None:
        waiter = self._feeder_waiter = self._loop.create_future()
        await waiter

    def _admit(self, element: Any) -> None:
        if isinstance(element, Watermark):
            self._admit_watermark(element)
            return
        now = self._time()
        entry = Entry(element, now)
        self._occupied += 1
        self._live += 1
        self._metrics.in_flight += 1
        if self._ordered:
            self._queue.append(entry)
        else:
            segment = self._segments[-1]
            segment.pending += 1
            entry.segment = segment
            admitted = self._admitted
            while admitted and admitted[0].state >= _DONE:
                admitted.popleft()
            admitted.append(entry)
            if len(admitted) > self._compact_at:
                self._admitted = deque(e for e in admitted if e.state < _DONE)
        if self._timeout is not None:
            entry.deadline = now + self._timeout
            if self._timer is None:
                self._timer = self._loop.call_at(entry.deadline, self._on_timer)
        entry.attempts = 1
        invoke_now = self._invoke_now
        if invoke_now is not None:  # the function's fast path: no task when it has the result
            try:
                result = invoke_now(element)
            except Exception as error:
                self._attempt_failed(entry, error)
                return
            if result is not None:
                self._outcome(entry, result)
                return
        entry.task = self._loop.create_task(self._attempt(entry, 1))

    def _admit_watermark(self, watermark: Watermark) -> None:
        entry = Entry(watermark, self._time(), _MARK)
        self._occupied += 1
        if self._ordered:
            queue = self._queue
            queue.append(entry)
            if queue[0] is entry:
                self._ready.append(queue.popleft())
                self._wake_consumer()
        else:
            self._segments[-1].watermark = entry
            self._segments.append(_Segment())
            self._advance_segments()

    # ---------------------------------------------------------------- attempts and outcomes

    async def _attempt(self, entry: Entry, attempt: int) -> None:
        """One call of the function; the outcome counts only while the attempt is current."""
        try:
            result = await self._invoke(entry.element)
        except asyncio.CancelledError:
            if entry.attempts == attempt and entry.state == _PENDING and not self._closed:
                self._attempt_failed(
                    entry,
                    RuntimeError(f"async function call for {entry.element!r} was cancelled"),
                )
            raise
        except Exception as error:
            if entry.attempts == attempt and entry.state == _PENDING and not self._closed:
                self._attempt_failed(entry, error)
            return
        if entry.attempts != attempt or entry.state != _PENDING or self._closed:
            return  # the record's outcome is already fixed: a late result is ignored
        self._outcome(entry, result)

    def _outcome(self, entry: Entry, result: Any) -> None:
        """The current attempt returned ``result``: check it, maybe retry, else finish."""
        kind = type(result)
        if kind is not list and kind is not tuple:
            type_error = result_type_error(entry.element, result)
            if type_error is not None:
                self._finish_error(entry, type_error)
                return
        predicate = self._result_predicate
        if predicate is not None:
            try:
                retryable = predicate(result)
            except Exception as predicate_error:
                self._finish_error(entry, predicate_error)
                return
            if retryable and self._schedule_retry(entry):
                return
        self._finish_result(entry, result)

    def _attempt_failed(self, entry: Entry, error: BaseException) -> None:
        predicate = self._exception_predicate
        if predicate is not None:
            try:
                retryable = predicate(error)
            except Exception as predicate_error:
                predicate_error.__cause__ = error
                self._finish_error(entry, predicate_error)
                return
            if retryable and self._schedule_retry(entry):
                return
        self._finish_error(entry, error)

    def _schedule_retry(self, entry: Entry) -> bool:
        """Schedule the next attempt if the strategy allows; False if the outcome is final."""
        strategy = self._strategy
        assert strategy is not None
        try:
            if not strategy.can_retry(entry.attempts):
                return False
            delay: Any = strategy.backoff(entry.attempts)
            if isinstance(delay, timedelta):
                delay = delay.total_seconds()
            delay = max(0.0, float(delay))
        except Exception as error:
            self._finish_error(entry, error)
            return True
        entry.state = _WAITING
        entry.handle = self._loop.call_later(delay, self._fire_retry, entry)
        self._retrying.add(entry)
        return True

    def _fire_retry(self, entry: Entry) -> None:
        if self._closed or entry.state != _WAITING:
            return
        self._retrying.discard(entry)
        entry.state = _PENDING
        self._metrics.retries += 1
        entry.attempts += 1
        entry.task = self._loop.create_task(self._attempt(entry, entry.attempts))

    def _on_timer(self) -> None:
        self._timer = None
        if self._closed:
            return
        now = self._time()
        if self._ordered:  # the queue keeps finished records until emitted: scan, don't pop
            expired: list[Entry] = []
            next_deadline: float | None = None
            for entry in self._queue:
                if entry.state >= _TIMING_OUT:
                    continue
                if entry.deadline > now:
                    next_deadline = entry.deadline
                    break
                expired.append(entry)
            for entry in expired:
                self._expire(entry)
        else:
            admitted = self._admitted
            while admitted:
                entry = admitted[0]
                if entry.state >= _TIMING_OUT:
                    admitted.popleft()
                elif entry.deadline <= now:
                    admitted.popleft()
                    self._expire(entry)
                else:
                    break
            next_deadline = admitted[0].deadline if admitted else None
        if next_deadline is not None:
            # not sooner than one clock step from now (see TIMER_STEP)
            self._timer = self._loop.call_at(max(next_deadline, now + TIMER_STEP), self._on_timer)

    def _expire(self, entry: Entry) -> None:
        """The record's deadline passed: cancel what is pending; the timeout hook decides."""
        self._metrics.timeouts += 1
        if entry.state == _WAITING:
            entry.handle.cancel()
            self._retrying.discard(entry)
        else:
            task = entry.task
            if not task.done():
                task.cancel()
                self._track(task)
        if not self._timeout_hook:
            self._finish_error(entry, TimeoutError(TIMEOUT_MESSAGE))
            return
        entry.state = _TIMING_OUT
        entry.task = self._loop.create_task(self._timeout_attempt(entry))
        self._track(entry.task)

    def _track(self, task: asyncio.Task[None]) -> None:
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    async def _timeout_attempt(self, entry: Entry) -> None:
        try:
            result = await self._fn.timeout(entry.element)
        except asyncio.CancelledError:
            if not self._closed:
                self._finish_error(
                    entry, RuntimeError(f"timeout() for {entry.element!r} was cancelled")
                )
            raise
        except Exception as error:
            if not self._closed:
                self._finish_error(entry, error)
            return
        if self._closed:
            return
        type_error = result_type_error(entry.element, result)
        if type_error is not None:
            self._finish_error(entry, type_error)
        else:
            self._finish_result(entry, result)

    def _finish_result(self, entry: Entry, result: Collection[Any]) -> None:
        entry.state = _DONE
        entry.result = result
        self._live -= 1
        metrics = self._metrics
        metrics.in_flight -= 1
        metrics.completed += 1
        # metrics.record_latency(), inlined: this runs once per record
        ms = (self._time() - entry.admitted) * 1000.0
        count = metrics.latency_count
        metrics.samples[count & _SAMPLE_MASK] = ms
        metrics.latency_count = count + 1
        metrics.latency_sum_ms += ms
        if ms > metrics.latency_max_ms:
            metrics.latency_max_ms = ms
        if self._ordered:
            queue = self._queue
            if queue[0] is not entry:
                return  # waits behind an unfinished head
            ready = self._ready
            ready.append(queue.popleft())
            while queue and _DONE <= queue[0].state <= _MARK:
                ready.append(queue.popleft())
        else:
            segment = entry.segment
            segment.pending -= 1
            if segment is not self._segments[0]:
                segment.done.append(entry)  # waits for the earlier segments' watermarks
                return
            self._ready.append(entry)
            if segment.pending == 0 and segment.watermark is not None:
                self._advance_segments()
        # self._wake_consumer(), inlined
        waiter = self._consumer_waiter
        if waiter is not None:
            self._consumer_waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def _advance_segments(self) -> None:
        """Unordered mode: emit the watermarks whose segments have drained, and what follows."""
        segments = self._segments
        ready = self._ready
        woke = False
        while len(segments) > 1:
            head = segments[0]
            if head.pending or head.watermark is None:
                break
            ready.append(head.watermark)
            segments.popleft()
            following = segments[0]
            ready.extend(following.done)
            following.done = []
            woke = True
        if woke:
            self._wake_consumer()

    def _finish_error(self, entry: Entry, error: BaseException) -> None:
        entry.state = _FAILED
        self._live -= 1
        self._metrics.in_flight -= 1
        self._metrics.errors += 1
        self._fail(error)

    def _fail(self, error: BaseException) -> None:
        if self.failure is None:
            self.failure = error
            self._wake_consumer()

    def _wake_consumer(self) -> None:
        waiter = self._consumer_waiter
        if waiter is not None:
            self._consumer_waiter = None
            if not waiter.done():
                waiter.set_result(None)
