"""A task's rate limit on its event loop: :class:`RateLimiter` grants tokens of a
:class:`~asyncio_lookup.lookup.rate_control.TokenBucket` (adapted by
:class:`~asyncio_lookup.lookup.rate_control.Aimd` when adaptive) to waiters in arrival order,
released by one loop timer; with a blocking form for the sync mode."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable

from asyncio_lookup.lookup.rate import TaskRate, is_throttle
from asyncio_lookup.lookup.rate_control import Aimd, TokenBucket


class RateLimiter:
    """A task's :class:`TaskRate` on its event loop (:meth:`acquire` / :meth:`release` around
    each call), or blocking (:meth:`acquire_blocking`, the sync mode's one call at a time).

    ``clock`` defaults to the loop's (``time.monotonic`` when blocking). Waiters are granted in
    arrival order; a cancelled waiter takes nothing.
    """

    def __init__(
        self,
        limit: TaskRate,
        clock: Callable[[], float] | None = None,
        on_wait: Callable[[float], None] | None = None,
        *,
        start_empty: bool = False,
    ) -> None:
        self.limit = limit
        self._start_empty = start_empty  # no first token: see TokenBucket
        self._clock = clock
        # told the seconds of each span during which calls waited for a token (throttled time)
        self._on_wait = on_wait
        self._waiting_since: float | None = None
        self._bucket: TokenBucket | None = None
        self.aimd = Aimd(limit.rate) if limit.adaptive else None
        self.in_flight = 0
        self.throttled = 0  # throttling answers seen
        self._waiters: deque[asyncio.Future[float]] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._lock = threading.Lock()  # the blocking form may be used from threads

    @property
    def rate(self) -> float:
        return self.aimd.rate if self.aimd is not None else self.limit.rate

    def _now(self) -> float:
        if self._clock is not None:
            return self._clock()
        try:
            return asyncio.get_running_loop().time()
        except RuntimeError:
            return time.monotonic()

    def _tokens(self, now: float) -> TokenBucket:
        if self._bucket is None:
            self._bucket = TokenBucket(self.rate, self.limit.burst, now, empty=self._start_empty)
        return self._bucket

    def _has_slot(self) -> bool:
        cap = None if self.aimd is None else self.aimd.concurrency
        return cap is None or self.in_flight < cap

    # -- async ------------------------------------------------------------------------------

    async def acquire(self) -> float:
        """Wait for a token (and, adaptive, a slot); returns the time the call may be sent."""
        now = self._now()
        if not self._waiters and self._has_slot() and self._tokens(now).take(now) == 0.0:
            self.in_flight += 1
            return now
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        if self._waiting_since is None:
            self._waiting_since = now
        self._waiters.append(future)
        self._pump()
        try:
            return await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():  # granted, but its caller is gone
                self.release(future.result(), None, answered=False)
            raise

    def release(
        self, sent_at: float, error: BaseException | None, *, answered: bool = True
    ) -> None:
        """A call sent at ``sent_at`` ended (``error`` when it failed; not ``answered`` when it
        was cancelled, which says nothing about the service): adapt, free its slot."""
        self.in_flight -= 1
        if answered:
            self._outcome(sent_at, error)
        if self._waiters:
            self._pump()

    def _outcome(self, sent_at: float, error: BaseException | None) -> None:
        if error is not None and is_throttle(error):
            self.throttled += 1
            now = self._now()
            bucket = self._tokens(now)
            retry_after = getattr(error, "retry_after", None)
            if retry_after is not None and retry_after > 0:
                bucket.pause(now + float(retry_after), now)
            if self.aimd is not None and self.aimd.throttled(sent_at, now, self.in_flight + 1):
                bucket.set_rate(self.aimd.rate, now)
        elif error is None and self.aimd is not None:
            before = self.aimd.rate
            self.aimd.succeeded()
            if self.aimd.rate != before:
                now = self._now()
                self._tokens(now).set_rate(self.aimd.rate, now)

    def _pump(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiters = self._waiters
        while waiters:
            head = waiters[0]
            if head.done():  # cancelled while waiting
                waiters.popleft()
                continue
            if not self._has_slot():
                return  # a release pumps again
            now = self._now()
            delay = self._tokens(now).take(now)
            if delay > 0.0:
                loop = asyncio.get_running_loop()
                self._timer = loop.call_at(loop.time() + delay, self._pump)
                return
            waiters.popleft()
            self.in_flight += 1
            head.set_result(now)
        self._waited()

    def _waited(self) -> None:
        """No call waits any more: report the span since the first one began to."""
        since, self._waiting_since = self._waiting_since, None
        if since is not None and self._on_wait is not None:
            self._on_wait(max(0.0, self._now() - since))

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- blocking ---------------------------------------------------------------------------

    def acquire_blocking(self, sleep: Callable[[float], None] = time.sleep) -> float:
        """:meth:`acquire` for a blocking caller: sleeps with ``sleep`` until a token."""
        while True:
            with self._lock:
                now = self._now()
                delay = self._tokens(now).take(now)
                if delay == 0.0:
                    self.in_flight += 1
                    return now
            sleep(delay)
            if self._on_wait is not None:
                self._on_wait(delay)

    def release_blocking(
        self, sent_at: float, error: BaseException | None, *, answered: bool = True
    ) -> None:
        with self._lock:
            self.in_flight -= 1
            if answered:
                self._outcome(sent_at, error)
