"""Monotone deadlines with one loop timer: the operator's record timeouts, the HTTP requests'.

Every user gives its entries one timeout and adds them in time order, so their deadlines are
monotone: a deque in order of addition plus ONE ``call_at`` timer for the earliest armed
deadline covers them all (no timer, context or ``asyncio.timeout`` per entry). An entry that
settles before its deadline only clears ``armed``; settled entries leave the deque lazily: from
its head when the timer fires or the owner calls ``trim()`` (the operator once per batch, the
HTTP connector per request), all at once when one entry stuck at the head keeps too many
behind it.

A Spark Python worker runs its loop only while the task asks it to: between two output
batches the loop stands still while Spark takes the batch. An answer that arrived meanwhile is
read in the same loop iteration in which the timer of a deadline that fell due meanwhile runs,
and the timer ran first (the answer wakes its task one iteration later, its result handler one
more). So the timer, when it fires, waits :data:`GRACE_HOPS` loop iterations before it expires
anything: an answer already received wins, as Flink's completed result does; one that has not
arrived does not.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable, Iterator
from typing import Generic, Protocol, TypeVar

from asyncio_lookup.runtime.loop import TIMER_STEP

#: Loop iterations a due deadline waits for an answer already received (socket read, task
#: wake-up, done callbacks of the layers around the call).
GRACE_HOPS = 4


class Expiring(Protocol):
    """What the deadline queue needs of an entry."""

    at: float
    """The deadline, on the queue's clock; ``math.inf`` never expires."""

    @property
    def armed(self) -> bool:
        """Whether the deadline still applies (False once the entry has settled)."""
        ...

    def expire(self) -> None:
        """Called once, when the deadline has passed and the entry is still armed; it must
        disarm the entry."""
        ...


E = TypeVar("E", bound=Expiring)


class DeadlineQueue(Generic[E]):
    """Entries in deadline order and one timer that expires them.

    ``clock`` is the loop's time (or an equivalent, cheaper clock); ``compact_at`` is the
    smallest length at which the deque is rebuilt of its armed entries.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop | None = None,
        clock: Callable[[], float] | None = None,
        compact_at: int = 1024,
    ) -> None:
        self._loop = loop
        self._clock = clock
        self._queue: deque[E] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._min_compact_at = self._compact_at = compact_at

    def add(self, entry: E) -> None:
        """Add ``entry`` (its deadline not before any entry added earlier)."""
        self._queue.append(entry)
        if self._timer is None and entry.at != math.inf:
            assert self._loop is not None
            self._timer = self._loop.call_at(entry.at, self._fire)

    def trim(self) -> None:
        """Drop settled entries from the head, and rebuild the deque of its armed entries when
        one stuck at the head keeps too many behind it. Call it now and then: the queue grows
        by every entry added in between."""
        queue = self._queue
        while queue and not queue[0].armed:
            queue.popleft()
        if len(queue) > self._compact_at:
            self._queue = deque(e for e in queue if e.armed)
            self._compact_at = max(self._min_compact_at, 2 * len(self._queue))

    def __iter__(self) -> Iterator[E]:
        """The entries that may still be armed, in deadline order."""
        return iter(list(self._queue))

    def _fire(self) -> None:
        self._timer = None
        self._expire_due(GRACE_HOPS)

    def _expire_due(self, hops: int) -> None:
        loop = self._loop
        if loop is None:
            return
        if hops:
            loop.call_soon(self._expire_due, hops - 1)
            return
        now = self._clock() if self._clock is not None else loop.time()
        queue = self._queue
        while queue and (not queue[0].armed or queue[0].at <= now):
            entry = queue.popleft()
            if entry.armed:
                entry.expire()
        self._rearm(loop, now)

    def _rearm(self, loop: asyncio.AbstractEventLoop, now: float) -> None:
        # A method of its own: in _fire, after `self._timer = None`, mypy narrows the attribute
        # to None and mypyc compiles the check below to expect None (a TypeError in the timer
        # callback, and no timer for the head, when expire() armed one through add()).
        if self._timer is not None:
            # an entry added while others expired (key-ordered mode starts a key's next record
            # when its predecessor times out) armed a timer: the one below replaces it
            self._timer.cancel()
            self._timer = None
        queue = self._queue
        if queue and queue[0].at != math.inf:
            # not sooner than one clock step from now: an early timer must not spin (TIMER_STEP)
            self._timer = loop.call_at(max(queue[0].at, now + TIMER_STEP), self._fire)

    def close(self) -> None:
        """Stop the timer and forget every entry."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._queue.clear()


class Deadline:
    """One request's deadline; ``task`` is cleared once the request has finished."""

    __slots__ = ("armed", "at", "cancelling", "expired", "task")

    def __init__(self, at: float, task: asyncio.Task[object] | None) -> None:
        self.at = at
        self.task = task
        self.armed = task is not None
        self.expired = False
        # cancellations the task already had pending: those are not ours to consume
        self.cancelling = task.cancelling() if task is not None else 0

    def expire(self) -> None:
        self.armed = False
        self.expired = True
        if self.task is not None:
            self.task.cancel()

    def finish(self) -> None:
        self.armed = False
        self.task = None

    def timed_out(self) -> bool:
        """True when this deadline cancelled the request and nothing else did since it
        started (call it on ``CancelledError``; it consumes this deadline's cancellation)."""
        task = self.task
        return self.expired and task is not None and task.uncancel() <= self.cancelling


class Deadlines(DeadlineQueue[Deadline]):
    """Cancels the task of each request that runs past ``timeout`` seconds.

    aiohttp's own total timeout arms a timer and a context per request; for point lookups at
    thousands of requests per second that is a measurable share of the CPU.
    """

    def __init__(self, timeout: float) -> None:
        super().__init__()
        self.timeout = timeout

    def start(self) -> Deadline:
        """A deadline for a request starting now in the current task."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # first use, or a new loop: the old one's requests are gone
            self.close()
            self._loop = loop
        self.trim()
        deadline = Deadline(loop.time() + self.timeout, asyncio.current_task())
        self.add(deadline)
        return deadline
