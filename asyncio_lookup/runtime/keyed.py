"""Key-ordered mode (FLIP-519): per key, one call in flight and outputs in input order.

Flink 2.1's keyed async wait operator keeps a deque of pending records per key in its own
component (``TableAsyncExecutionController``); :class:`KeyOrder` is that component here. The
queue and the handlers stay those of unordered mode: a record is admitted, takes its slot and
joins the current watermark segment at once (so capacity counts waiting records and a watermark
waits for them), but only the first record of a key is started; a later one waits in its key's
lane until the one before it is final, and then starts. Completion order between keys is
unordered mode's; within a key it is input order, because the next record of a key only starts
once the previous one completed (and so was put in the emission order before it).

The run (:class:`KeyOrderedRun`) chooses this once; no queue or handler tests a flag.

Cost per record: one key selector call, one dict lookup, and for a key that already has a record
in flight an append and a pop. A waiting record has no task, no timer and no deadline entry;
its timeout budget starts when it starts (as in Flink, where the timer is registered when the
record is handed to the async function), so a hot key's backlog does not time out while it waits.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Hashable
from typing import Any, cast

from asyncio_lookup.runtime.elements import Watermark
from asyncio_lookup.runtime.handler import ResultHandler, Slot, _end_stream
from asyncio_lookup.runtime.run import OperatorRun

KeySelector = Callable[[Any], Hashable]
"""``key_selector(element) -> key``: records with equal keys keep their order."""


class KeyedHandler(ResultHandler):
    """A record of a key-ordered run: its key, the queue's slot it reports to after its key's
    lane has moved on, and, once its deadline cancelled a running call, that call's task (its
    key is freed only when the call has unwound: never two calls of a key at once)."""

    __slots__ = ("key", "segment", "unwinding")

    key: Hashable
    segment: Slot
    unwinding: asyncio.Task[None]  # set only by expire() (no cost per record otherwise)

    def expire(self) -> None:
        task = self.task
        if task is not None and not task.done():
            self.unwinding = task  # before the outcome: without a hook it is final at once
        super().expire()


class KeyOrder:
    """The records waiting for their key, a lane (deque) per key with a record in flight.

    A key is in ``lanes`` while one of its records is started and not final; its lane holds the
    records admitted after it, in input order (``None`` while there are none, to spare a deque
    per record). It is the :class:`Slot` of every keyed handler: a final record passes on to its
    queue segment first (so it is emitted before anything its key starts next), then frees its
    key, which starts the next record of the lane.
    """

    __slots__ = ("_backlog", "_start", "_starting", "lanes")

    def __init__(self, start: Callable[[KeyedHandler], None]) -> None:
        self._start = start
        self.lanes: dict[Hashable, deque[KeyedHandler] | None] = {}
        # records freed while another start is under way further up the stack (a record answered
        # at once by the function's fast path frees its key inside its own start): started by the
        # outermost release, in a loop, so a long lane never recurses
        self._backlog: deque[KeyedHandler] = deque()
        self._starting = False

    def admit(self, handler: KeyedHandler, key: Hashable) -> bool:
        """Take a record just put in the queue (``handler.slot`` is its segment). True when its
        key is free: the caller starts it now; False: it waits in its key's lane."""
        handler.key = key
        handler.segment = handler.slot
        handler.slot = self
        lanes = self.lanes
        if key not in lanes:
            lanes[key] = None
            return True
        lane = lanes[key]
        if lane is None:
            lanes[key] = deque((handler,))
        else:
            lane.append(handler)
        return False

    def completed(self, handler: ResultHandler) -> bool:
        """A record of a key is final: queue it for emission, then start the key's next record."""
        keyed = cast(KeyedHandler, handler)  # every handler whose slot this is
        ready = keyed.segment.completed(keyed)
        unwinding: asyncio.Task[None] | None = getattr(keyed, "unwinding", None)
        if unwinding is not None and not unwinding.done():
            # a call its deadline cancelled is still unwinding: the key's next call waits for it
            key = keyed.key
            unwinding.add_done_callback(lambda _: self._release(key))
        else:
            self._release(keyed.key)
        return ready

    def waiting(self) -> int:
        """Records admitted whose key is busy: in their lanes, or freed and not yet started."""
        return sum(len(lane) for lane in self.lanes.values() if lane) + len(self._backlog)

    def _release(self, key: Hashable) -> None:
        lanes = self.lanes
        lane = lanes[key]
        if not lane:
            del lanes[key]
            return
        following = lane.popleft()
        if self._starting:
            self._backlog.append(following)
            return
        self._starting = True
        start = self._start
        backlog = self._backlog
        try:
            start(following)
            while backlog:
                start(backlog.popleft())
        finally:
            self._starting = False
            backlog.clear()


class KeyOrderedRun(OperatorRun):
    """A run in key-ordered mode: unordered mode's queue, with :class:`KeyOrder` in front of
    the calls."""

    def __init__(self, *args: Any, key_selector: KeySelector, **kwargs: Any) -> None:
        super().__init__(*args, ordered=False, **kwargs)
        self._key_of = key_selector
        self._keys = KeyOrder(self._start_waiting)

    def _admit(self, element: Any) -> None:
        if isinstance(element, Watermark):
            super()._admit(element)
            return
        key = self._key_of(element)  # first: a selector that raises fails the stream as is
        try:
            hash(key)  # before the record takes its slot: a failed stream leaves no gauge up
        except TypeError as error:
            raise TypeError(
                f"key_selector returned {key!r} for {element!r}, which is not hashable; "
                "return a hashable key such as a tuple"
            ) from error
        now = self.time()
        admitted = now if self.clock is self.time else self.clock()  # as OperatorRun's
        handler = KeyedHandler(self, element, admitted, now + self._timeout)
        self._occupied += 1
        self._queue.put(handler)
        self.metrics.in_flight += 1  # admitted, final or not: waiting for its key counts
        if self._keys.admit(handler, key):
            self._call(handler)

    def _waiting(self) -> int:
        """Records waiting for their key (counted in ``numInFlight`` at admission)."""
        return self._keys.waiting()

    def _start_waiting(self, handler: KeyedHandler) -> None:
        """Start a record that waited for its key; its timeout budget starts now."""
        if self.closed:
            return  # stop() counted it out with the lanes it found
        if self.failure is not None:  # failing: it leaves its lane unstarted, before stop()
            self.metrics.in_flight -= 1
            return
        handler.at = self.time() + self._timeout
        try:
            self._call(handler)
        except BaseException as error:  # invoke_now's, or a retry predicate's
            # started from another record's completion (a task, a timer): raised there, no one
            # would read it and the stream would hang
            _end_stream(self, error)
