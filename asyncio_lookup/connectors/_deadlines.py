"""Per-request timeouts for many concurrent requests with one loop timer.

aiohttp's own total timeout arms a timer and a context per request; for point lookups at
thousands of requests per second that is a measurable share of the CPU. The requests of one
connector all have the same timeout and start in time order, so their deadlines are monotone:
a queue in start order plus ONE ``call_at`` timer for the head covers them all (the same scheme
as the async wait operator's timeouts).
"""

from __future__ import annotations

import asyncio
from collections import deque

from asyncio_lookup.runtime.loop import TIMER_STEP


class Deadline:
    """One request's deadline; ``task`` is cleared once the request has finished."""

    __slots__ = ("at", "cancelling", "expired", "task")

    def __init__(self, at: float, task: asyncio.Task[object] | None) -> None:
        self.at = at
        self.task = task
        self.expired = False
        # cancellations the task already had pending: those are not ours to consume
        self.cancelling = task.cancelling() if task is not None else 0

    def finish(self) -> None:
        self.task = None

    def timed_out(self) -> bool:
        """True when this deadline cancelled the request and nothing else did since it
        started (call it on ``CancelledError``; it consumes this deadline's cancellation)."""
        task = self.task
        return self.expired and task is not None and task.uncancel() <= self.cancelling


class Deadlines:
    """Cancels the task of each request that runs past ``timeout`` seconds."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._queue: deque[Deadline] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # finished requests leave the queue from its head; one stuck at the head keeps those
        # behind it: the queue is rebuilt of live requests once it grows past this
        self._compact_at = 1024

    def start(self) -> Deadline:
        """A deadline for a request starting now in the current task."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # first use, or a new loop: the old one's requests are gone
            self.close()
            self._loop = loop
        queue = self._queue
        while queue and queue[0].task is None:  # finished requests at the head
            queue.popleft()
        if len(queue) > self._compact_at:
            queue = self._queue = deque(d for d in queue if d.task is not None)
            self._compact_at = max(1024, 2 * len(queue))
        deadline = Deadline(loop.time() + self.timeout, asyncio.current_task())
        queue.append(deadline)
        if self._timer is None:
            self._timer = loop.call_at(deadline.at, self._fire)
        return deadline

    def _fire(self) -> None:
        self._timer = None
        loop = self._loop
        if loop is None:
            return
        now = loop.time()
        queue = self._queue
        while queue and (queue[0].task is None or queue[0].at <= now):
            deadline = queue.popleft()
            task = deadline.task
            if task is not None:
                deadline.expired = True
                task.cancel()
        if queue:  # not sooner than one clock step: an early timer must not spin
            self._timer = loop.call_at(max(queue[0].at, now + TIMER_STEP), self._fire)

    def close(self) -> None:
        """Stop the timer (the requests are being closed with their session)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._queue.clear()
