"""One record's way through the operator (Flink's ``ResultHandler`` and its queue entry).

A :class:`ResultHandler` is created when its record is admitted and lives until the record is
emitted. Its attempts report to a *receiver*: the handler itself, or the retry delegator
(:mod:`asyncio_lookup.runtime.retry_policy`) wrapped around it when a retry strategy is given.
The handler fixes the record's final outcome exactly once; late outcomes are ignored.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable, Collection, Coroutine, Mapping
from typing import Any, ClassVar, Protocol

from asyncio_lookup.errors import ResultTypeError
from asyncio_lookup.runtime.causes import FAILURES, TIMEOUT_CAUSE, TIMEOUTS
from asyncio_lookup.runtime.function import TIMEOUT_MESSAGE, AsyncFunction
from asyncio_lookup.runtime.metrics import OperatorMetrics
from asyncio_lookup.runtime.sketch import FOLD_EVERY

_TIMED_OUT = {TIMEOUTS: 1}  # one deadline that expired, for Causes.add


class State(enum.Enum):
    """Where a record is; only ``PENDING`` records have a deadline that still applies."""

    PENDING = "an attempt is running or, with retry, the next one is scheduled"
    TIMING_OUT = "the deadline passed; the function's timeout hook decides the outcome"
    DONE = "final: a result, to be emitted"
    FAILED = "final: an error, which fails the stream (or, with an error output, a DONE record)"


_PENDING = State.PENDING
_DONE = State.DONE


class Slot(Protocol):
    """Where a handler reports its final result: its queue (or the queue's segment)."""

    def completed(self, handler: ResultHandler) -> bool:
        """Take the handler's result; True when entries became ready to emit."""
        ...


class RunContext(Protocol):
    """What a handler sees of the operator run it belongs to (Flink: the operator's callbacks
    and mailbox a ``ResultHandler`` is given), nothing more. The attributes are read once per
    record on the hot path, so they are plain attributes, not methods."""

    fn: AsyncFunction[Any, Any]
    invoke: Callable[[Any], Awaitable[Collection[Any]]]
    on_error: Callable[[Any, BaseException, int], Collection[Any]] | None
    timeout_hook: bool  # the function has its own timeout()
    metrics: OperatorMetrics
    loop: asyncio.AbstractEventLoop
    time: Callable[[], float]  # the loop's clock
    clock: Callable[[], float]  # the clock of latencies (precise; may be the loop's)
    new_task: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]]
    closed: bool  # stop() began: outcomes no longer count
    timing_out: int  # records whose timeout hook runs
    consumer_waiter: asyncio.Future[None] | None  # the consumer, waiting for a ready entry

    def track(self, task: asyncio.Task[None]) -> None:
        """Keep a task no record points to until it finishes (a cancelled attempt, a hook)."""
        ...

    def fail(self, error: BaseException) -> None:
        """Fail the stream with ``error``."""
        ...

    def wake_consumer(self) -> None:
        """Entries became ready to emit."""
        ...


class Receiver(Protocol):
    """What an attempt reports its outcome to (Flink's ``ResultFuture``)."""

    def complete(self, result: Any) -> None: ...

    def complete_exceptionally(self, error: BaseException) -> None: ...


def result_type_error(
    element: Any, result: Any, source: str = "async function"
) -> ResultTypeError | None:
    """The failure for a result that is not a collection of outputs, else ``None``
    (``source``: what returned it)."""
    kind = type(result)
    if kind is list or kind is tuple:
        return None
    if (
        result is None
        or isinstance(result, (str, bytes, bytearray, Mapping))
        or not isinstance(result, Collection)
    ):
        return ResultTypeError(
            f"{source} returned {result!r:.200} ({kind.__name__}) for element {element!r:.200}; "
            "it must return a collection of outputs such as a list (empty for no output)"
        )
    return None


class ResultHandler:
    """An admitted record: its attempts, its deadline and its final outcome.

    ``result`` is meaningful once the state is ``DONE``; ``slot`` is set by the queue's ``put``
    right after the handler is created.
    """

    __slots__ = (
        "admitted",
        "armed",
        "at",
        "attempts",
        "element",
        "next_attempt",
        "result",
        "run",
        "slot",
        "state",
        "task",
    )

    attempts: int  # set by the retry delegator from the second attempt on; see attempts_made

    def __init__(self, run: RunContext, element: Any, admitted: float, at: float) -> None:
        self.run = run
        self.element = element
        self.admitted = admitted  # run.clock() at admission
        self.at = at  # the deadline (math.inf without a timeout)
        self.state = _PENDING
        self.armed = True  # state is PENDING: for the deadline queue, without an enum lookup
        self.task: asyncio.Task[None] | None = None  # the running attempt or timeout hook
        self.next_attempt: asyncio.TimerHandle | None = None  # with retry, between attempts
        self.result: Collection[Any] = ()  # the outputs, once DONE
        self.slot: Slot

    def start(self, receiver: Receiver) -> None:
        """Start an attempt whose outcome goes to ``receiver``."""
        self.task = self.run.new_task(self.attempt(receiver))

    async def attempt(self, receiver: Receiver) -> None:
        """One call of the function; its outcome counts only while the record is pending."""
        run = self.run
        metrics = run.metrics
        # None unless the caller times the function's calls (and the function does not)
        calls = None if metrics.calls_timed_by_function else metrics.calls
        started = run.clock() if calls is not None else 0.0
        try:
            result = await run.invoke(self.element)
        except asyncio.CancelledError:
            if self.state is _PENDING and not run.closed:
                receiver.complete_exceptionally(
                    RuntimeError(f"async function call for {self.element!r} was cancelled")
                )
            raise
        except Exception as error:
            if calls is not None:
                calls.add((run.clock() - started) * 1000.0)
            if self.state is _PENDING and not run.closed:
                try:
                    receiver.complete_exceptionally(error)
                except BaseException as outcome:  # the retry predicates' or strategy's own
                    _end_stream(run, outcome)
            return
        except BaseException as error:
            _end_stream(run, error)  # no Exception: never retried, never given to on_error
            return
        if calls is not None:
            calls.add((run.clock() - started) * 1000.0)
        if self.state is _PENDING and not run.closed:
            try:
                receiver.complete(result)
            except BaseException as outcome:  # an Exception there fails the record itself
                _end_stream(run, outcome)

    def complete(self, result: Any) -> None:
        """The record's final result (a result that is no collection fails it)."""
        kind = type(result)
        if kind is not list and kind is not tuple:
            type_error = result_type_error(self.element, result)
            if type_error is not None:
                self.complete_exceptionally(type_error)
                return
        self.state = _DONE
        self.armed = False
        self.result = result
        run = self.run
        metrics = run.metrics
        metrics.in_flight -= 1
        metrics.completed += 1
        # metrics.latency.add(), inlined: this runs once per record
        pending = metrics.latency.pending
        pending.append((run.clock() - self.admitted) * 1000.0)
        if len(pending) >= FOLD_EVERY:
            metrics.latency.fold()
        if self.slot.completed(self):
            # run.wake_consumer(), inlined: this runs once per record
            waiter = run.consumer_waiter
            if waiter is not None:
                run.consumer_waiter = None
                if not waiter.done():
                    waiter.set_result(None)

    def complete_exceptionally(self, error: BaseException) -> None:
        """The record's final error: the stream fails with it, or, with an error output
        (``on_error``), the record is emitted with the outputs ``on_error`` gives for it."""
        self.state = State.FAILED
        self.armed = False
        run = self.run
        metrics = run.metrics
        metrics.in_flight -= 1
        metrics.errors += 1
        metrics.causes.record(FAILURES, error)
        on_error = run.on_error
        if on_error is None:
            run.fail(error)
            return
        try:
            outputs = on_error(self.element, error, self.attempts_made())
        except Exception as output_error:
            if output_error.__cause__ is None:
                output_error.__cause__ = error
            run.fail(output_error)
            return
        except BaseException as output_error:
            _end_stream(run, output_error)
            return
        type_error = result_type_error(self.element, outputs, "on_error")
        if type_error is not None:
            type_error.__cause__ = error
            run.fail(type_error)
            return
        self.state = _DONE
        self.result = outputs
        metrics.failed += 1
        if self.slot.completed(self):
            run.wake_consumer()

    def attempts_made(self) -> int:
        """Calls of the function started for this record. ``attempts`` is set by the retry
        delegator from the second attempt on (left unset otherwise: no cost per record)."""
        return getattr(self, "attempts", 1)

    def expire(self) -> None:
        """The deadline passed: cancel the running attempt; the timeout hook decides."""
        run = self.run
        run.metrics.timeouts += 1
        run.metrics.causes.add(TIMEOUT_CAUSE, _TIMED_OUT, TIMEOUT_MESSAGE)
        self.cancel()
        if not run.timeout_hook:
            self.complete_exceptionally(TimeoutError(TIMEOUT_MESSAGE))
            return
        self.state = State.TIMING_OUT
        self.armed = False
        run.timing_out += 1
        self.task = run.loop.create_task(self._timeout_hook())
        run.track(self.task)

    def cancel(self) -> asyncio.Task[None] | None:
        """Cancel the running attempt or the next one's timer; return the attempt's task if it
        has yet to finish."""
        if self.next_attempt is not None:
            self.next_attempt.cancel()
            self.next_attempt = None
        task = self.task
        if task is None or task.done():
            return None
        task.cancel()
        self.run.track(task)
        return task

    async def _timeout_hook(self) -> None:
        run = self.run
        try:
            result = await run.fn.timeout(self.element)
        except asyncio.CancelledError:
            if not run.closed:
                self.complete_exceptionally(
                    RuntimeError(f"timeout() for {self.element!r} was cancelled")
                )
            raise
        except Exception as error:
            if not run.closed:
                self.complete_exceptionally(error)
            return
        except BaseException as error:
            _end_stream(run, error)
            return
        finally:
            run.timing_out -= 1
        if not run.closed:
            # named, or the error blamed the async function, which returned nothing here
            type_error = result_type_error(self.element, result, "timeout()")
            if type_error is not None:
                self.complete_exceptionally(type_error)
            else:
                self.complete(result)

    def __repr__(self) -> str:
        return f"ResultHandler({self.element!r}, {self.state.name})"


def _end_stream(run: RunContext, error: BaseException) -> None:
    """A BaseException that is no CancelledError from a user's function: KeyboardInterrupt and
    SystemExit go on out of the loop (asyncio raises them out of run_until_complete, and the
    caller's clean-up closes the stream); any other (a test framework's outcome) ends the
    stream with it: left in the task, no one would read it and the record would stay pending
    for ever."""
    if isinstance(error, (KeyboardInterrupt, SystemExit)):
        raise error
    if not run.closed:
        run.fail(error)


class WatermarkEntry:
    """A watermark in the queue: ready from the start (Flink's ``WatermarkQueueEntry``)."""

    state: ClassVar[State] = State.DONE  # emittable as soon as nothing before it holds it back
    result: ClassVar[Collection[Any]] = ()  # no outputs of its own

    __slots__ = ("element",)

    def __init__(self, element: Any) -> None:
        self.element = element


QueueEntry = ResultHandler | WatermarkEntry
