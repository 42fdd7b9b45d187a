"""Event loops: uvloop when installed (unless turned off), and one persistent loop per process."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from asyncio_lookup.errors import ConfigurationError

T = TypeVar("T")

UVLOOP_ENV = "ASYNCIO_LOOKUP_UVLOOP"
# The coarsest loop clock step we meet (uvloop: 1 ms). A timer may fire up to this much before
# its deadline; whoever re-arms a timer for a deadline must not do so sooner than this from now,
# or it spins until the clock ticks.
TIMER_STEP = 0.001

_lock = threading.Lock()
_process_loop: asyncio.AbstractEventLoop | None = None
_process_pid: int | None = None


def uvloop_available() -> bool:
    """Whether uvloop can be imported."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def new_event_loop(use_uvloop: bool | None = None) -> asyncio.AbstractEventLoop:
    """A new event loop. ``None``: uvloop when installed, unless env ``ASYNCIO_LOOKUP_UVLOOP=0``."""
    if use_uvloop is None:
        disabled = os.environ.get(UVLOOP_ENV, "1").strip().lower() in ("0", "false", "no", "off")
        use_uvloop = not disabled and uvloop_available()
    if use_uvloop:
        try:
            import uvloop
        except ImportError as error:
            raise ConfigurationError(
                "use_uvloop", use_uvloop, "False or None when uvloop is not installed"
            ) from error
        loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        return loop
    return asyncio.new_event_loop()


def process_loop() -> asyncio.AbstractEventLoop:
    """This process's persistent loop, created lazily; recreated after a fork or once closed.

    Everything bound to a loop (connection pools, opened functions, caches) that should outlive
    one task of a worker process lives on it. Run it with ``run_until_complete``.
    """
    global _process_loop, _process_pid
    with _lock:
        pid = os.getpid()
        if _process_loop is None or _process_loop.is_closed() or _process_pid != pid:
            # After a fork the parent's loop object is unusable here; it is dropped, not closed.
            _process_loop = new_event_loop()
            _process_pid = pid
        return _process_loop


def run_to_end(loop: asyncio.AbstractEventLoop, awaitable: Coroutine[Any, Any, T]) -> T:
    """``loop.run_until_complete`` for clean-up in a ``finally``: after a KeyboardInterrupt
    or SystemExit escaped the loop, uvloop's next run stops at once ("Event loop stopped
    before Future completed"); this runs the loop again until the clean-up has finished."""
    task = loop.create_task(awaitable)
    while True:
        try:
            return loop.run_until_complete(task)
        except RuntimeError:
            if task.done():
                raise


def unwind(loop: asyncio.AbstractEventLoop, step: asyncio.Task[Any] | None) -> None:
    """Cancel a step a KeyboardInterrupt (or SystemExit) left running inside a stream's
    ``__anext__`` and run it until it has unwound: ``aclose()`` of a generator still running
    would raise RuntimeError in the interrupt's place."""
    if step is not None and not step.done():
        step.cancel()
        run_to_end(loop, _unwound(step))


async def _unwound(step: asyncio.Task[Any]) -> None:
    with contextlib.suppress(Exception, asyncio.CancelledError):
        await step
