"""The sync mode of an async lookup function (FLIP-234 ``'async'='false'``).

A connector implements its lookup once, asynchronously; :class:`BlockingLookupFunction` makes it
a :class:`LookupFunction` by running each call to completion on the event loop the function was
opened for (the worker's :func:`~asyncio_lookup.runtime.loop.process_loop`), one call at a time:
one lookup in flight, and a retry blocks the task, as Flink's sync lookup does.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Collection, Coroutine
from typing import Any, TypeVar

from asyncio_lookup.lookup.functions import AsyncLookupFunction, Key, LookupFunction, Row
from asyncio_lookup.runtime.loop import process_loop

T = TypeVar("T")

_closing: set[asyncio.Task[None]] = set()  # closes scheduled on a running loop, kept alive


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class BlockingLookupFunction(LookupFunction):
    """``function`` (async) as a blocking point lookup.

    Its resources (pools, sessions) belong to one loop: the loop running when :meth:`open` is
    called (a chain opens on the worker's loop), else the process loop. The async ``open`` then
    runs at the first lookup, inside that lookup's failure retry. A call from a thread that is
    running an event loop is refused: blocking there would stop the loop it waits for.
    """

    def __init__(self, function: AsyncLookupFunction) -> None:
        self.function = function
        self._loop: asyncio.AbstractEventLoop | None = None
        self._opened = False
        self._lock = threading.Lock()  # one call at a time; run_until_complete is not reentrant

    def __repr__(self) -> str:
        return f"BlockingLookupFunction({self.function!r})"

    def __getstate__(self) -> dict[str, Any]:
        return {"function": self.function}  # never a loop

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["function"])  # type: ignore[misc]

    def open(self) -> None:
        if self._loop is not None:
            return
        running = _running_loop()
        self._loop = running if running is not None else process_loop()
        if running is None:
            self._ensure_open()

    def lookup(self, key: Key) -> Collection[Row]:
        self._ensure_open()
        return self._run(self.function.async_lookup(key))

    def close(self) -> None:
        loop, self._loop = self._loop, None
        opened, self._opened = self._opened, False
        if not opened or loop is None or loop.is_closed():
            return  # never opened, or its loop is gone: nothing can be awaited any more
        running = _running_loop()
        if running is loop:  # closing from a coroutine on that loop (a chain's close)
            task = loop.create_task(self.function.close())
            _closing.add(task)
            task.add_done_callback(_closing.discard)
        elif running is None:
            with self._lock:
                self._drive(loop, self.function.close())

    def _ensure_open(self) -> None:
        if self._opened:
            return
        if self._loop is None:
            self._loop = process_loop()
        with self._lock:
            if not self._opened:
                self._drive(self._loop, self.function.open())
                self._opened = True

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        loop = self._loop
        assert loop is not None
        with self._lock:
            return self._drive(loop, coroutine)

    @staticmethod
    def _drive(loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, T]) -> T:
        if _running_loop() is not None:
            coroutine.close()
            raise RuntimeError(
                "a blocking lookup was called on a thread running an event loop; use the "
                "async mode ('async'='true') or call it from another thread"
            )
        if loop.is_closed():
            coroutine.close()
            raise RuntimeError("the event loop this lookup function was opened on is closed")
        if loop.is_running():  # driven by another thread: hand the call over and wait
            return asyncio.run_coroutine_threadsafe(coroutine, loop).result()
        return loop.run_until_complete(coroutine)


__all__ = ["BlockingLookupFunction"]
