"""Elements grouped into batches: a batch is flushed when it is full, when ``batch_timeout``
has passed since its first element was read, at a watermark and at the end of the input.

A :class:`Batch` is one element of the async wait operator (it takes one slot, one timeout,
one retry schedule); :mod:`.batch_operator` fans its results back out to its elements.

A plain iterable never makes the reader wait, so it is cut by size, watermarks and its end
only. An async source is read by one reader task (no task per element), which reads ahead at
most one batch beyond what the operator has taken; a loop timer per partial batch flushes it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from types import GeneratorType
from typing import Any, Generic, TypeVar

from asyncio_lookup.runtime.elements import Watermark

E = TypeVar("E")


class Batch(Generic[E]):
    """Consecutive elements of the input, called together; ``elements`` is what the batch
    function gets (the same list on every attempt)."""

    __slots__ = ("elements",)

    def __init__(self, elements: list[E]) -> None:
        self.elements = elements

    def __len__(self) -> int:
        return len(self.elements)

    def __repr__(self) -> str:
        elements = self.elements
        if len(elements) == 1:
            return f"Batch(1 element: {elements[0]!r})"
        return f"Batch({len(elements)} elements: {elements[0]!r} ... {elements[-1]!r})"


def batches(
    source: Iterable[Any] | AsyncIterable[Any], size: int, timeout: float | None
) -> Iterator[Batch[Any] | Watermark] | AsyncIterator[Batch[Any] | Watermark]:
    """``source`` as batches of at most ``size`` elements (watermarks pass through as
    themselves, each flushing the batch before it); see the module docstring."""
    if isinstance(source, AsyncIterable):
        return TimedBatches(source.__aiter__(), size, timeout)
    return _chunks(iter(source), size)


def _chunks(iterator: Iterator[Any], size: int) -> Iterator[Batch[Any] | Watermark]:
    buffer: list[Any] = []
    try:
        for element in iterator:
            if isinstance(element, Watermark):
                if buffer:
                    yield Batch(buffer)
                    buffer = []
                yield element
                continue
            buffer.append(element)
            if len(buffer) >= size:
                yield Batch(buffer)
                buffer = []
        if buffer:
            yield Batch(buffer)
    finally:
        if isinstance(iterator, GeneratorType):
            iterator.close()


class TimedBatches:
    """The batches of an async source, cut by size, time, watermarks and the end.

    The reader task runs only while no flushed batch waits to be taken, so at most one batch
    (and the watermarks after it) is read ahead of the consumer. ``aclose()`` cancels the reader
    and closes the source.
    """

    def __init__(self, source: AsyncIterator[Any], size: int, timeout: float | None) -> None:
        self._source = source
        self._size = size
        self._timeout = timeout
        self._buffer: list[Any] = []  # the batch being filled
        self._ready: deque[Batch[Any] | Watermark] = deque()  # flushed, not taken yet
        self._timer: asyncio.TimerHandle | None = None
        self._reader: asyncio.Task[None] | None = None
        self._consumer: asyncio.Future[None] | None = None  # the consumer waits for a batch
        self._room: asyncio.Future[None] | None = None  # the reader waits for the batch's taking
        self._ended = False
        self._error: BaseException | None = None

    def __aiter__(self) -> TimedBatches:
        return self

    async def __anext__(self) -> Batch[Any] | Watermark:
        loop = asyncio.get_running_loop()
        while not self._ready:
            if self._error is not None:
                error, self._error = self._error, None
                self._ended = True
                raise error
            if self._ended:
                raise StopAsyncIteration
            if self._reader is None:
                self._reader = loop.create_task(self._read())
            waiter = self._consumer = loop.create_future()
            await waiter
        item = self._ready.popleft()
        room = self._room
        if room is not None and not self._ready:
            self._room = None
            if not room.done():
                room.set_result(None)
        return item

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        source, size, timeout = self._source, self._size, self._timeout
        try:
            while True:
                while self._ready:  # one flushed batch waits: read no further
                    room = self._room = loop.create_future()
                    await room
                try:
                    element = await source.__anext__()
                except StopAsyncIteration:
                    self.flush()
                    self._ended = True
                    return
                if isinstance(element, Watermark):
                    self.flush()
                    self._ready.append(element)
                    self._wake()
                    continue
                buffer = self._buffer  # flush() starts a new list
                buffer.append(element)
                if len(buffer) >= size:
                    self.flush()
                elif len(buffer) == 1 and timeout is not None:
                    self._timer = loop.call_later(timeout, self.flush)
        except asyncio.CancelledError:
            raise
        except BaseException as error:  # a BaseException too: the consumer must not wait on
            self._error = error
            if isinstance(error, (KeyboardInterrupt, SystemExit)):
                raise
        finally:
            self._wake()

    def flush(self) -> None:
        """Hand the partial batch, if any, to the consumer (its size, its timer or the end)."""
        timer = self._timer
        if timer is not None:
            self._timer = None
            timer.cancel()
        if self._buffer:
            self._ready.append(Batch(self._buffer))
            self._buffer = []
            self._wake()

    def _wake(self) -> None:
        waiter = self._consumer
        if waiter is not None:
            self._consumer = None
            if not waiter.done():
                waiter.set_result(None)

    async def aclose(self) -> None:
        """Cancel the reader and the timer, then close the source."""
        self._ended = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        reader = self._reader
        try:
            if reader is not None and not reader.done():
                # called while this task is being cancelled (the run's stop()): only a
                # cancellation that comes while we wait for the reader is ours to pass on
                current = asyncio.current_task()
                before = current.cancelling() if current is not None else 0
                reader.cancel()
                try:
                    await reader
                except asyncio.CancelledError:
                    if current is not None and current.cancelling() > before:
                        raise
        finally:
            aclose = getattr(self._source, "aclose", None)
            if aclose is not None:
                await aclose()
