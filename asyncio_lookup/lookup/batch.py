"""Batching and coalescing of async lookups (FLIP-204's "mini-batch lookups" future work).

Concurrent lookups of the same key share one in-flight call (coalescing). With batching on and a
function with a real ``async_lookup_batch``, the keys asked for in the same event-loop iteration
(or within ``max_wait``) go out together, at most ``max_size`` per call. A per-key error reaches
exactly the callers of that key; an error raised by the whole call reaches every key in it,
unless it says one key may have caused it (``split_batch``, an HTTP 400 to a batch request):
the keys are then sent again in two halves, each a call of its own (counted, rate-limited),
until the keys at fault are alone.

Without batching, the first caller of a key makes the call in its own task (no task per call);
later callers of the key wait for it. If that first caller is cancelled (its timeout), its call
is cancelled too and the callers still waiting get a call of their own. So a key whose calls
always take longer than the callers' timeout is never answered, even with a cache: in a lookup
join a timeout fails the job anyway; a direct user of a chain who survives timeouts (a timeout
hook with a fallback) and meets such keys should turn batching on (``lookup.batch.max-size`` > 1
with a batch-capable function), where calls run in tasks of their own and outlive their callers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Sequence
from threading import get_ident
from time import perf_counter

from asyncio_lookup.errors import ResultTypeError
from asyncio_lookup.lookup.functions import AsyncLookupFunction, Key, Row
from asyncio_lookup.lookup.metrics import (
    NUM_COALESCED,
    NUM_EXTERNAL_CALLS,
    NUM_EXTERNAL_KEYS,
    CacheMetricGroup,
)
from asyncio_lookup.lookup.results import as_rows
from asyncio_lookup.runtime.batch_function import check_unchanged
from asyncio_lookup.runtime.sketch import LatencySketch

log = logging.getLogger(__name__)


def _is_sequence(value: object) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray))


class KeyBatcher:
    """Sends the keys of concurrent lookups to one async function; one per chain and loop."""

    def __init__(
        self,
        function: AsyncLookupFunction,
        metrics: CacheMetricGroup,
        *,
        max_size: int,
        max_wait: float,
    ) -> None:
        self.function = function
        self.metrics = metrics
        self.max_size = max_size
        self.max_wait = max_wait
        self.batching = max_size > 1 and function.supports_batch
        # a rate-limited function counts and times its calls from their token on itself
        self._counts = not getattr(function, "counts_calls", False)
        # a key queued or in a call -> the futures of its callers (the first gets the rows
        # the call returned, later ones copies)
        self._in_flight: dict[Key, list[asyncio.Future[list[Row]]]] = {}
        self._queue: list[Key] = []
        self._flush_handle: asyncio.Handle | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._inline: set[asyncio.Task[object]] = set()  # callers making a call in their task
        self._closing = False
        self._split_warned = False  # a batch refused as a whole was split: warned once
        self._unwound: dict[asyncio.Task[object], asyncio.Future[None]] = {}  # aclose waits
        self._loop: asyncio.AbstractEventLoop | None = None
        # The counters and call latencies of the thread running the loop (metrics.thread_tables),
        # bound with the loop: a lookup counts into them without a call per count.
        self._thread = 0
        self._counters: dict[str, int] = {}
        self._calls = LatencySketch()

    async def lookup(self, key: Key) -> list[Row]:
        """The rows for ``key``: a call made in the caller's task when batching is off and no
        call for the key is in flight, else a share of a (batched) call."""
        in_flight = self._in_flight
        if self.batching or key in in_flight:
            return await self.load(key)
        waiters: list[asyncio.Future[list[Row]]] = []  # callers that join while this runs
        in_flight[key] = waiters
        # current_task() without a loop asks get_running_loop(), which on Python 3.11 makes a
        # getpid() system call: the loop the batcher last ran on is asked first.
        loop = self._loop
        caller = None if loop is None else asyncio.current_task(loop)
        if caller is None or self._thread != get_ident():
            caller = self._bind()
        if caller is not None:
            self._inline.add(caller)
        counts = self._counts
        if counts:
            counters = self._counters  # metrics.inc2(), inlined: this runs once per call
            counters[NUM_EXTERNAL_CALLS] += 1
            counters[NUM_EXTERNAL_KEYS] += 1
        started = perf_counter()
        try:
            try:
                answer = await self.function.async_lookup(key)
            except Exception:
                if counts:
                    self._calls.add((perf_counter() - started) * 1000.0)
                raise
            if counts:
                self._calls.add((perf_counter() - started) * 1000.0)
            rows = as_rows(answer, key, self.function)
        except asyncio.CancelledError:
            if self._in_flight.get(key) is waiters:
                if self._closing:
                    self._settle(key, None, asyncio.CancelledError())
                else:
                    del self._in_flight[key]
                    waiting = [f for f in waiters if not f.done()]
                    if waiting:  # they still want the key: a call of their own
                        self._in_flight[key] = waiting
                        self._start([key])
            raise
        except Exception as error:
            if self._in_flight.get(key) is waiters:
                self._settle(key, None, error)
            raise
        finally:
            self._inline.discard(caller)
            if self._closing and caller is not None:
                unwound = self._unwound.pop(caller, None)
                if unwound is not None and not unwound.done():
                    unwound.set_result(None)
        if in_flight.get(key) is waiters:
            del in_flight[key]
            for future in waiters:
                if not future.done():
                    future.set_result(list(rows))
        return rows

    def _bind(self) -> asyncio.Task[object] | None:
        """The running task; notes the loop it runs on and binds this thread's metric tables
        (the first call, a new loop or a new thread)."""
        loop = self._loop = asyncio.get_running_loop()
        self._thread = get_ident()
        self._counters, self._calls = self.metrics.thread_tables()
        return asyncio.current_task(loop)

    def load(self, key: Key) -> asyncio.Future[list[Row]]:
        """A future of the rows for ``key`` from one (possibly shared, possibly batched)
        connector call; await it. Each caller has its own future (and its own list of rows), so
        cancelling one caller cancels neither the call nor the other callers of the key."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Row]] = loop.create_future()
        waiters = self._in_flight.get(key)
        if waiters is not None:
            self.metrics.inc(NUM_COALESCED)
            waiters.append(future)
            return future
        self._in_flight[key] = [future]
        if self.batching:
            self._queue.append(key)
            if len(self._queue) >= self.max_size:
                self._flush()
            elif self._flush_handle is None:
                if self.max_wait > 0:
                    self._flush_handle = loop.call_later(self.max_wait, self._flush)
                else:
                    self._flush_handle = loop.call_soon(self._flush)
        else:
            self._start([key])
        return future

    def _flush(self) -> None:
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        while self._queue:
            keys, self._queue = self._queue[: self.max_size], self._queue[self.max_size :]
            self._start(keys)

    def _start(self, keys: list[Key]) -> None:
        task = asyncio.get_running_loop().create_task(self._call(keys))
        self._tasks.add(task)
        entries = {key: self._in_flight.get(key) for key in keys}

        def done(task: asyncio.Task[None]) -> None:
            self._tasks.discard(task)
            if task.cancelled():  # cancelled before its first step, it settled nothing
                for key, waiters in entries.items():
                    if waiters is not None and self._in_flight.get(key) is waiters:
                        self._settle(key, None, asyncio.CancelledError())

        task.add_done_callback(done)

    async def _call(self, keys: list[Key]) -> None:
        counts = self._counts
        if counts:
            self.metrics.inc(NUM_EXTERNAL_CALLS)
            self.metrics.inc(NUM_EXTERNAL_KEYS, len(keys))
        outcomes: Sequence[Collection[Row] | BaseException]
        started = perf_counter()
        try:
            try:
                if len(keys) == 1:
                    outcomes = [await self.function.async_lookup(keys[0])]
                else:
                    given = list(keys)
                    outcomes = await self.function.async_lookup_batch(given)
                    check_unchanged(
                        given, keys, f"{type(self.function).__name__}.async_lookup_batch"
                    )
            except Exception:
                if counts:
                    self.metrics.record_call((perf_counter() - started) * 1000.0)
                raise
            if counts:
                self.metrics.record_call((perf_counter() - started) * 1000.0)
            if len(keys) > 1 and type(outcomes) is not list and not _is_sequence(outcomes):
                raise ResultTypeError(
                    f"{type(self.function).__name__}.async_lookup_batch returned "
                    f"{type(outcomes).__name__} {outcomes!r:.200}; it must return a sequence "
                    "(a list) with one entry per key, in the keys' order"
                )
            if len(keys) > 1 and len(outcomes) != len(keys):
                raise ResultTypeError(
                    f"{type(self.function).__name__}.async_lookup_batch returned "
                    f"{len(outcomes)} results for {len(keys)} keys"
                )
        except asyncio.CancelledError:
            for key in keys:
                self._settle(key, None, asyncio.CancelledError())
            raise
        except Exception as error:
            if len(keys) > 1 and getattr(error, "split_batch", False):
                if not self._split_warned:
                    self._split_warned = True
                    log.warning(
                        "a batch of %d keys was refused as a whole (%s): its keys are sent "
                        "again in halves until the keys at fault are alone (a key alone is a "
                        "point lookup); if every batch is refused, the batch request is wrong "
                        "(batch_url, batch_mode) or too large (lower batch_size)",
                        len(keys),
                        error,
                    )
                half = len(keys) // 2
                self._start(keys[:half])
                self._start(keys[half:])
                return
            for key in keys:
                self._settle(key, None, error)
            return
        for key, outcome in zip(keys, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                self._settle(key, None, outcome)
            else:
                try:
                    self._settle(key, as_rows(outcome, key, self.function), None)
                except ResultTypeError as error:
                    self._settle(key, None, error)

    def _settle(self, key: Key, rows: list[Row] | None, error: BaseException | None) -> None:
        waiters = self._in_flight.pop(key, None)
        if waiters is None:
            return
        first = True
        for future in waiters:
            if future.done():  # its caller was cancelled
                continue
            if isinstance(error, asyncio.CancelledError):
                future.cancel()
            elif error is not None:
                future.set_exception(error)
            elif rows is None:
                future.set_result([])
            else:
                future.set_result(rows if first else list(rows))
                first = False

    async def cancel_calls(self) -> None:
        """Cancel the queued calls and those in tasks of their own, and wait until they have
        unwound (a Spark task's end: every record of the task is final, so no caller waits for
        them). A call outlives its callers within a task, to answer the key's later callers;
        it must not answer the next task's, which began after it: their lookups make calls of
        their own. The next task warns again of a batch refused as a whole (one per task)."""
        self._split_warned = False
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        for key in self._queue:
            self._settle(key, None, asyncio.CancelledError())
        self._queue.clear()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def aclose(self) -> None:
        """Cancel queued and in-flight calls."""
        self._closing = True
        loop = asyncio.get_running_loop()
        current = asyncio.current_task()
        unwinding: list[asyncio.Future[None]] = []
        for caller in self._inline:
            if caller is current:
                continue
            caller.cancel()  # its call, made in its task; the caller sees CancelledError
            unwinding.append(self._unwound.setdefault(caller, loop.create_future()))
        # every call has unwound before the function is closed
        await self.cancel_calls()
        if unwinding:
            await asyncio.gather(*unwinding, return_exceptions=True)
        self._unwound.clear()
        # Queued keys, and those of a call task cancelled before its first step (it never ran
        # its handlers): release their callers.
        for key in list(self._in_flight):
            self._settle(key, None, asyncio.CancelledError())
