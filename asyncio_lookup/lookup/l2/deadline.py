"""A deadline for a store call that a paused event loop does not trip.

A Spark Python worker runs its loop only while a task asks it to: between two output batches
the loop stands still while Spark takes the batch. A store's answer that arrived meanwhile is
read in the same loop iteration in which an ``asyncio.timeout`` that fell due meanwhile fires,
and the timeout's cancellation runs first (I/O callbacks wake the task one iteration later).
So the deadline here, when it falls due, waits :data:`GRACE_HOPS` loop iterations before it
cancels: an answer already in the socket buffer wins; a store that has not answered does not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

# Loop iterations a due deadline waits for an answer already received: the runtime's.
from asyncio_lookup.runtime.deadlines import GRACE_HOPS

T = TypeVar("T")


async def bounded(awaitable: Awaitable[T], timeout: float) -> T:
    """``await awaitable``, raising :class:`TimeoutError` (and cancelling it) if it has not
    finished ``timeout`` seconds (plus :data:`GRACE_HOPS` loop iterations) later."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(awaitable)
    expired = False

    def expire(hops: int) -> None:
        nonlocal expired
        if task.done():
            return
        if hops:
            loop.call_soon(expire, hops - 1)
            return
        expired = True
        task.cancel()

    handle = loop.call_later(timeout, expire, GRACE_HOPS)
    try:
        return await task
    except asyncio.CancelledError:
        if expired and task.cancelled():
            current = asyncio.current_task()
            if current is None or not current.cancelling():
                raise TimeoutError(f"no answer within {timeout * 1000:g} ms") from None
        raise
    finally:
        handle.cancel()
