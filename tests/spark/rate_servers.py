"""A dim service that records when each request came, and optionally answers 429 above a rate.

``GET /items/{id}`` answers ``{"id": id, "v": "v<id>"}``. With ``limit`` (requests/s) the
service keeps a token bucket of that rate holding 100 ms of it and answers 429 when it is
empty, as a quota-enforcing API does. Runs its own event loop in a background thread.

The service times a request when its loop reads it. On a loaded machine that loop can be
descheduled: requests sent on time during a stall of D seconds are then all timed at its end,
so a 1 s window can count up to D x rate more than the client sent in it. The service's
heartbeat measures those stalls (:attr:`Windows.stall`), and a test's bound allows for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from aiohttp import web

from tests.services import BackgroundService


@dataclass(frozen=True)
class Windows:
    """Requests counted per 100 ms window, and what a rate-limit test asks of them."""

    counts: list[int]
    total: int
    seconds: float  # from the first request to the last
    stall: float = 0.0  # the service's longest loop stall between them, in seconds

    @property
    def max_per_second(self) -> int:
        """The most requests in any 1 s window (ten consecutive 100 ms windows)."""
        width = min(10, len(self.counts))
        return max(sum(self.counts[i : i + width]) for i in range(len(self.counts) - width + 1))

    @property
    def average(self) -> float:
        return self.total / self.seconds if self.seconds > 0 else float("inf")


def windows(times: list[float], stalls: Sequence[tuple[float, float]] = ()) -> Windows:
    """``times`` counted per 100 ms window; ``stalls``: (ended at, seconds) of the service's."""
    if not times:
        return Windows([], 0, 0.0)
    first, last = min(times), max(times)
    counts = [0] * (int((last - first) / 0.1) + 1)
    for t in times:
        counts[int((t - first) / 0.1)] += 1
    stall = max((s for ended, s in stalls if first <= ended <= last + 0.1), default=0.0)
    return Windows(counts, len(times), last - first, stall)


class CountingService(BackgroundService):
    """Records the arrival time of every request; answers 429 above ``limit`` requests/s."""

    def __init__(self, limit: float | None = None) -> None:
        super().__init__()
        self.limit = limit
        self.times: list[float] = []
        self.rejected: list[float] = []
        self.stalls: list[tuple[float, float]] = []  # (ended at, seconds) of the loop's stalls
        self._tokens = 0.0 if limit is None else limit / 10
        self._updated = time.monotonic()

    def reset(self) -> None:
        self.times.clear()
        self.rejected.clear()
        self.stalls.clear()

    def windows(self) -> Windows:
        return windows(self.times, self.stalls)

    async def _heartbeat(self, app: web.Application) -> AsyncIterator[None]:
        async def beat() -> None:
            period = 0.005
            while True:
                before = time.monotonic()
                await asyncio.sleep(period)
                after = time.monotonic()
                if after - before > period + 0.01:
                    self.stalls.append((after, after - before - period))

        task = asyncio.ensure_future(beat())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def _admit(self, now: float) -> bool:
        if self.limit is None:
            return True
        burst = self.limit / 10
        self._tokens = min(burst, self._tokens + (now - self._updated) * self.limit)
        self._updated = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    async def _item(self, request: web.Request) -> web.Response:
        now = time.monotonic()
        self.times.append(now)  # one thread (the service's loop) appends
        if not self._admit(now):
            self.rejected.append(now)
            return web.json_response({"error": "too many requests"}, status=429)
        key = request.match_info["id"]
        return web.json_response({"id": int(key), "v": f"v{key}"})

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/items/{id}", self._item)
        app.cleanup_ctx.append(self._heartbeat)
