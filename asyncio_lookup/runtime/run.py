"""One run of the async wait operator over one input: reading, admission, emission, shutdown.

The parts, each in its module: the queue that orders emission (:mod:`.queue`, ordered or
unordered, chosen here once), a handler per record (:mod:`.handler`), the retry delegator
wrapped around it when a strategy is given (:mod:`.retry_policy`), and the deadline queue with
the run's one timeout timer (:mod:`.deadlines`). Key-ordered mode is a subclass of this run
(:mod:`.keyed`) that starts only the first waiting record of each key.

Cost model (the operator must stay within 1.5x of a hand-rolled task-per-element pipeline):
no Task when the function's ``invoke_now`` has the result at admission (a cache hit), else
one Task per attempt, whose coroutine awaits the function and handles the outcome inline (a
done callback would cost one more loop callback per element; no ``asyncio.wait`` or
``asyncio.timeout`` per element). Deadlines are monotone, so ONE ``call_at`` timer covers
every timeout; a finished record needs no timer work (the deadline queue drops it once per
batch), and one finished at admission never enters the deadline queue. Retries are
``call_later`` handles. Outputs leave in batches.
"""

from __future__ import annotations

import asyncio
import functools
import math
import sys
import time
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Coroutine,
    Iterable,
    Iterator,
)
from types import GeneratorType
from typing import Any

from asyncio_lookup.runtime.deadlines import DeadlineQueue
from asyncio_lookup.runtime.elements import Watermark
from asyncio_lookup.runtime.function import AsyncFunction
from asyncio_lookup.runtime.handler import QueueEntry, ResultHandler, WatermarkEntry
from asyncio_lookup.runtime.metrics import OperatorMetrics
from asyncio_lookup.runtime.queue import OrderedQueue, StreamElementQueue, UnorderedQueue
from asyncio_lookup.runtime.retry import AsyncRetryStrategy
from asyncio_lookup.runtime.retry_policy import RetryingHandler, RetryPolicy

ATTEMPT_TASK_NAME = "asyncio-lookup attempt"


def attempt_task_factory(
    loop: asyncio.AbstractEventLoop,
) -> Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]]:
    """How a run starts its attempts' tasks: ``loop.create_task``, or, on Python 3.11 when the
    loop has no task factory, the same Task given a name: 3.11 formats a ``Task-<n>`` name for
    every task created without one, about 2,000 instructions per record."""
    if sys.version_info >= (3, 12) or loop.get_task_factory() is not None:
        return loop.create_task
    return functools.partial(asyncio.Task, loop=loop, name=ATTEMPT_TASK_NAME)


_END = object()


class OperatorRun:
    """The state of one ``process()`` call; use ``start``, ``next_batch`` until None, ``stop``.

    A batch holds queue entries: a :class:`WatermarkEntry`, whose ``element`` is the
    :class:`Watermark`, or a record's :class:`ResultHandler`, whose ``element`` is the input and
    ``result`` its outputs.
    """

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
        on_error: Callable[[Any, BaseException, int], Collection[Any]] | None = None,
    ) -> None:
        self.fn = fn
        self.on_error = on_error
        self.invoke = invoke
        self._invoke_now = invoke_now
        self._timeout = math.inf if timeout is None else timeout
        self._capacity = capacity
        self.timeout_hook = timeout_hook
        self.metrics = metrics
        self._manage = manage_lifecycle
        self.loop = asyncio.get_running_loop()
        # loop.time() of the default loop is time.monotonic(); calling that directly is cheaper.
        self.time: Callable[[], float] = (
            time.monotonic if type(self.loop).time is asyncio.BaseEventLoop.time else self.loop.time
        )
        # The clock of latencies: the loop's when it is time.monotonic; uvloop's loop.time() is
        # the loop iteration's start in whole ms, too coarse to time a record or a call.
        coarse = type(self.loop).__module__.startswith("uvloop")
        self.clock: Callable[[], float] = time.perf_counter if coarse else self.time
        self.new_task = attempt_task_factory(self.loop)
        self._queue: StreamElementQueue = OrderedQueue() if ordered else UnorderedQueue()
        self._retry = RetryPolicy(retry_strategy) if retry_strategy is not None else None
        self._plain = self._retry is None and invoke_now is None  # a record's start: one task
        # Every record not final yet, in admission order = deadline order (a record without a
        # deadline never expires): the timeouts, and what stop() has to cancel.
        self._deadlines: DeadlineQueue[ResultHandler] = DeadlineQueue(
            self.loop, self.time, compact_at=2 * capacity + 32
        )

        self._occupied = 0  # admitted and not yet emitted (records and watermarks)
        self._handed = 0  # of those, in the batch the consumer is taking
        self.timing_out = 0  # records whose timeout hook runs (not final, not armed)
        # Tasks no record points to: attempts cancelled at their deadline (until they finish)
        # and timeout hooks (until they finish).
        self._side_tasks: set[asyncio.Task[None]] = set()
        self._feeder: asyncio.Task[None] | None = None
        self.consumer_waiter: asyncio.Future[None] | None = None
        self._feeder_waiter: asyncio.Future[None] | None = None
        self._pending: Iterator[Any] | None = None  # the rest of the chunk being read
        self._input_done = False
        self.closed = False
        self._opened = False
        self.failure: BaseException | None = None

    # ---------------------------------------------------------------- consumer side

    async def start(
        self, source: Iterable[Any] | AsyncIterable[Any], *, chunked: bool = False
    ) -> None:
        """Open the function (when managing its lifecycle) and start reading ``source``;
        ``chunked``: ``source`` is an async iterable of lists of elements (admitted one by one
        as room frees up, without an ``await`` per element)."""
        if self._manage:
            self._opened = True
            await self.fn.open()
        self._feeder = self.loop.create_task(self._feed(source, chunked))
        self._feeder.add_done_callback(self._feeder_done)

    async def next_batch(self) -> list[QueueEntry] | None:
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
                if self._pending is not None:
                    try:
                        self._admit_pending()
                    except Exception as error:
                        self.fail(error)
                if self._pending is None or self._occupied < self._capacity:
                    self._feeder_waiter = None
                    if not waiter.done():
                        waiter.set_result(None)
        while True:
            if self.failure is not None:
                raise self.failure
            if self._queue.ready:
                ready = self._queue.take()
                self._handed = len(ready)
                # at most `capacity` records are admitted between two batches
                self._deadlines.trim()
                return ready
            if self._input_done and self._occupied == 0:
                self._deadlines.close()
                return None
            waiter = self.consumer_waiter = self.loop.create_future()
            await waiter

    async def stop(self, error: BaseException | None = None) -> None:
        """Cancel and await everything outstanding, then close the function (when managing it).

        With ``error`` (the stream is failing), an error from ``close()`` is attached to
        ``error`` as a note instead of replacing it.
        """
        self.closed = True
        live = self.timing_out + self._waiting()  # records admitted and not final
        outstanding: set[asyncio.Task[None]] = set()
        for entry in self._deadlines:
            if entry.armed:
                live += 1
                task = entry.cancel()
                if task is not None:
                    outstanding.add(task)
        self._deadlines.close()
        outstanding.update(self._side_tasks)
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
        self.metrics.in_flight -= live
        self.timing_out = 0
        if self._opened:
            self._opened = False
            try:
                await self.fn.close()
            except Exception as close_error:
                if error is None:
                    raise
                note = getattr(error, "add_note", None)
                if note is not None:
                    note(f"AsyncFunction.close() also failed: {close_error!r}")
        if cancelled:
            raise asyncio.CancelledError()

    # ---------------------------------------------------------------- input side

    async def _feed(self, source: Iterable[Any] | AsyncIterable[Any], chunked: bool) -> None:
        try:
            if chunked:
                assert isinstance(source, AsyncIterable)
                read_all = await self._read_chunks(source.__aiter__())
            elif isinstance(source, AsyncIterable):
                read_all = await self._read_async(source.__aiter__())
            else:
                read_all = await self._read(iter(source))
        except asyncio.CancelledError:
            raise
        except Exception as error:
            self.fail(error)
            return
        if read_all:
            self._input_done = True
            self.wake_consumer()

    async def _read(self, iterator: Iterator[Any]) -> bool:
        """Admit every element; False when the stream failed first. No read when full."""
        capacity = self._capacity
        admit = self._admit
        try:
            for element in iterator:
                admit(element)
                if (self._occupied >= capacity or self.failure is not None) and not (
                    await self._room()
                ):
                    return False
            return True
        finally:
            # like an async source's aclose(): a generator's cleanup (a cursor, a file)
            # runs now, not whenever the generator is collected
            if isinstance(iterator, GeneratorType):
                iterator.close()

    async def _read_async(self, aiterator: AsyncIterator[Any]) -> bool:
        """Admit every element; False when the stream failed first. No read when full."""
        capacity = self._capacity
        admit = self._admit
        try:
            while True:
                if (self._occupied >= capacity or self.failure is not None) and not (
                    await self._room()
                ):
                    return False
                try:
                    element = await aiterator.__anext__()
                except StopAsyncIteration:
                    return True
                if self.failure is not None:
                    return False  # failed while this element was being read
                admit(element)
        finally:
            aclose = getattr(aiterator, "aclose", None)
            if aclose is not None:
                await aclose()

    async def _read_chunks(self, chunks: AsyncIterator[Iterable[Any]]) -> bool:
        """Admit every element of every chunk; False when the stream failed first. No chunk
        is read while the operator is full. The rest of a chunk waits in ``_pending``: the
        consumer admits from it as it frees slots (:meth:`_admit_pending`), in its own loop
        iteration rather than one later, in this task."""
        try:
            while True:
                if not await self._room():
                    return False
                try:
                    chunk = await chunks.__anext__()
                except StopAsyncIteration:
                    return True
                self._pending = iter(chunk)
                while not self._admit_pending():
                    if not await self._room():
                        return False
        finally:
            self._pending = None
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await aclose()

    def _admit_pending(self) -> bool:
        """Admit elements of the chunk being read while there is room; True once it is used
        up (or there is none)."""
        pending = self._pending
        if pending is None:
            return True
        capacity = self._capacity
        admit = self._admit
        while self._occupied < capacity and self.failure is None:
            element = next(pending, _END)
            if element is _END:
                self._pending = None
                return True
            admit(element)
        return False

    async def _room(self) -> bool:
        """Wait for a free slot; False when the stream fails first."""
        while self.failure is None:
            if self._occupied < self._capacity:
                return True
            waiter = self._feeder_waiter = self.loop.create_future()
            await waiter
        return False

    def _feeder_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and not self.closed:
            error = task.exception()
            if error is not None:
                self.fail(error)

    def _waiting(self) -> int:
        """Records admitted (counted in ``numInFlight``) whose call has not started."""
        return 0

    def _admit(self, element: Any) -> None:
        if isinstance(element, Watermark):
            self._occupied += 1
            if self._queue.put_watermark(WatermarkEntry(element)):
                self.wake_consumer()
            return
        now = self.time()
        clock = self.clock
        admitted = now if clock is self.time else clock()
        handler = ResultHandler(self, element, admitted, now + self._timeout)
        self._occupied += 1
        self._queue.put(handler)
        if self._plain:  # _start() inlined for a run without retry or invoke_now (hot path)
            self.metrics.in_flight += 1
            self._deadlines.add(handler)
            handler.task = self.new_task(handler.attempt(handler))
        else:
            self._start(handler)

    def _start(self, handler: ResultHandler) -> None:
        """Make an admitted record's first call (or take the function's answer at once); its
        deadline, ``handler.at``, is set."""
        self.metrics.in_flight += 1
        self._call(handler)

    def _call(self, handler: ResultHandler) -> None:
        """:meth:`_start` of a record already counted in ``numInFlight``."""
        element = handler.element
        retry = self._retry
        receiver = handler if retry is None else RetryingHandler(handler, retry)
        invoke_now = self._invoke_now
        if invoke_now is not None:  # the function's fast path: no task when it has the result
            try:
                result = invoke_now(element)
            except Exception as error:
                receiver.complete_exceptionally(error)
                if handler.armed:  # a retry is scheduled
                    self._deadlines.add(handler)
                return
            if result is not None:
                receiver.complete(result)
                if handler.armed:  # a retry is scheduled
                    self._deadlines.add(handler)
                return
        self._deadlines.add(handler)
        handler.task = self.new_task(handler.attempt(receiver))

    # ---------------------------------------------------------------- shared with the handlers

    def track(self, task: asyncio.Task[None]) -> None:
        """Keep ``task`` (no record points to it any more) for stop() until it finishes."""
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    def fail(self, error: BaseException) -> None:
        if self.failure is None:
            self.failure = error
            self.wake_consumer()

    def wake_consumer(self) -> None:
        waiter = self.consumer_waiter
        if waiter is not None:
            self.consumer_waiter = None
            if not waiter.done():
                waiter.set_result(None)
