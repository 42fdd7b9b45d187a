"""The clock the caches, retries and reload schedules read: real by default, injectable in tests."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """Seconds as a float, a blocking sleep, and an interruptible wait for reload threads."""

    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...

    def wait_until(self, deadline: float, stop: threading.Event) -> bool:
        """Block until ``now() >= deadline`` or ``stop`` is set; return True when stopped."""
        ...


_LONGEST_WAIT = 3600.0
"""Waits are cut into hours: ``threading`` cannot wait much past 292 years in one call."""


class MonotonicClock:
    """``time.monotonic``: for expiry and load durations (immune to wall-clock jumps)."""

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def wait_until(self, deadline: float, stop: threading.Event) -> bool:
        while not stop.is_set():
            remaining = deadline - self.now()
            if remaining <= 0:
                return False
            stop.wait(min(remaining, _LONGEST_WAIT))
        return True


class WallClock(MonotonicClock):
    """``time.time`` (epoch seconds): for full-cache reload schedules, which name times of day."""

    def now(self) -> float:
        return time.time()


MONOTONIC = MonotonicClock()
WALL = WallClock()
