"""Drive async work on the worker process's loop from Spark's synchronous iterator protocol.

A ``mapInArrow`` function is a plain generator run by the Python worker's main thread. Each
partition runs its async pipeline on :func:`process_loop` (persistent per worker process, so
pools and caches opened on it serve every task the process runs): the generator steps the
pipeline with ``run_until_complete`` and yields each output batch to Spark. Input batches are
pulled from Spark's iterator in a reader thread, one batch ahead, so in-flight lookups keep
running while the JVM delivers the next batch.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from asyncio_lookup.runtime.loop import process_loop, run_to_end, unwind

T = TypeVar("T")
U = TypeVar("U")

_END = object()
_reader_lock = threading.Lock()
_reader: ThreadPoolExecutor | None = None


def _forget_reader() -> None:
    # a forked child has the executor but not its thread: a read would wait forever
    global _reader, _reader_lock
    _reader = None
    _reader_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_reader)


def _reader_thread() -> ThreadPoolExecutor:
    # One thread per process: Spark's input iterator is a generator, never advanced concurrently.
    global _reader
    with _reader_lock:
        if _reader is None:
            _reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="asyncio-lookup-reader")
        return _reader


def run(awaitable: Awaitable[T]) -> T:
    """Run ``awaitable`` to completion on this process's loop."""
    loop = process_loop()
    return loop.run_until_complete(asyncio.ensure_future(awaitable, loop=loop))


async def read_ahead(items: Iterator[T], convert: Callable[[T], U]) -> AsyncGenerator[U, None]:
    """``convert(item)`` for each item of a blocking iterator, read in a thread one item ahead."""
    loop = asyncio.get_running_loop()
    executor = _reader_thread()

    def pull() -> Any:
        try:
            item = next(items)
        except StopIteration:
            return _END
        return convert(item)

    future = loop.run_in_executor(executor, pull)
    try:
        while True:
            result = await future
            if result is _END:
                return
            future = loop.run_in_executor(executor, pull)
            yield result
    finally:
        if not future.done():
            # Only on failure: the thread finishes its read and the batch is dropped with the task.
            future.cancel()


def drive(stream: AsyncIterator[T]) -> Generator[T, None, None]:
    """Iterate an async iterator synchronously on the process loop.

    However the caller stops (end, error, ``close()``), the stream is closed on the loop, so
    every task it started is cancelled and awaited before the next partition uses the loop.
    """
    loop = process_loop()
    step: asyncio.Task[T] | None = None
    try:
        while True:
            step = loop.create_task(_next(stream))
            try:
                item = loop.run_until_complete(step)
            except StopAsyncIteration:
                return
            step = None
            yield item
    finally:
        unwind(loop, step)
        close = getattr(stream, "aclose", None)
        if close is not None:
            run_to_end(loop, close())


async def _next(stream: AsyncIterator[T]) -> T:
    return await stream.__anext__()
