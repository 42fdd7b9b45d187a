"""An event loop on virtual time: ``loop.time()`` jumps to the next timer when nothing is ready.

Timing rules are checked exactly and instantly: a 10 s timeout takes no real time. The loop
refuses to block forever (a deadlock in the code under test fails fast instead of hanging).
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _VirtualSelector(selectors.DefaultSelector):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[Any]:
        if timeout is None:
            raise RuntimeError(
                "virtual-time loop would block forever: nothing scheduled (deadlock)"
            )
        events = super().select(0)
        if not events and timeout > 0:
            self.now += timeout
        return events


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose clock only advances when the loop would otherwise sleep."""

    def __init__(self) -> None:
        self._virtual = _VirtualSelector()
        super().__init__(self._virtual)

    def time(self) -> float:
        return self._virtual.now

    def stall(self, seconds: float) -> None:
        """Hold the loop for ``seconds`` as a blocking call would: timers due meanwhile all
        run in the next iteration, in order of their times."""
        self._virtual.now += seconds

    def pending_timers(self) -> list[asyncio.TimerHandle]:
        """Timers still scheduled and not cancelled."""
        return [h for h in self._scheduled if not h.cancelled()]  # type: ignore[attr-defined]


def run_virtual(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on a fresh virtual-time loop and close it; an error that reached the loop's
    exception handler (raised in a callback, such as a timer's) fails the run: it would only be
    logged, and what the callback did not finish would go unseen."""
    loop = VirtualTimeLoop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        result = loop.run_until_complete(coro)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
    if reported:
        raise AssertionError(f"errors reached the loop's exception handler: {reported}")
    return result
