"""The DataStream-style API: ``AsyncDataStream.ordered_wait(stream, fn, timeout)`` and friends."""

from __future__ import annotations

import asyncio
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Iterable,
    Iterator,
)
from datetime import timedelta
from typing import Any, Generic, TypeVar

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.runtime.batch_operator import AsyncBatchWaitOperator, BatchFn
from asyncio_lookup.runtime.elements import OutputMode, Watermark
from asyncio_lookup.runtime.function import AsyncFunction
from asyncio_lookup.runtime.handler import WatermarkEntry
from asyncio_lookup.runtime.loop import new_event_loop, run_to_end, unwind
from asyncio_lookup.runtime.metrics import OperatorMetrics
from asyncio_lookup.runtime.operator import AsyncWaitOperator
from asyncio_lookup.runtime.retry import AsyncRetryStrategy, RetryStrategies

IN = TypeVar("IN")
OUT = TypeVar("OUT")

Source = Iterable[Any] | AsyncIterable[Any]
Fn = AsyncFunction[IN, OUT] | Callable[[IN], Awaitable[Collection[OUT]]]


class AsyncStream(Generic[IN, OUT]):
    """The outputs of an async wait operator over a source, flattened, with watermarks.

    Iterate with ``async for`` inside a running loop, or with ``for`` outside one (it then runs
    its own event loop: uvloop when installed, unless ``use_uvloop=False`` or env
    ``ASYNCIO_LOOKUP_UVLOOP=0``). It can be the source of another ``AsyncDataStream`` call.
    Each iteration runs the operator over the source again. An ``async for`` left early closes
    the run (cancels its calls, ``fn.close()``) only when its generator is closed: wrap it in
    ``contextlib.aclosing(aiter(stream))``, or a loop shutting down may skip ``close()``.
    """

    def __init__(
        self,
        source: Source,
        operator: AsyncWaitOperator[IN, OUT] | AsyncBatchWaitOperator[IN, OUT],
        use_uvloop: bool | None,
    ) -> None:
        if isinstance(source, (str, bytes, bytearray)) or not isinstance(
            source, (Iterable, AsyncIterable)
        ):
            raise ConfigurationError(
                "stream",
                source,
                "an iterable or async iterable of records (not a string)",
            )
        if use_uvloop is not None and not isinstance(use_uvloop, bool):
            raise ConfigurationError("use_uvloop", use_uvloop, "True, False or None")
        self.source = source
        self.operator = operator
        self.use_uvloop = use_uvloop

    @property
    def metrics(self) -> OperatorMetrics:
        """The operator's counters (cumulative over iterations)."""
        return self.operator.metrics

    async def _batches(self) -> AsyncGenerator[list[OUT | Watermark], None]:
        batched = isinstance(self.operator, AsyncBatchWaitOperator)
        async with self.operator.running(self.source) as run:
            while True:
                batch = await run.next_batch()
                if batch is None:
                    return
                out: list[Any] = []
                for entry in batch:
                    if type(entry) is WatermarkEntry:
                        out.append(entry.element)
                    elif batched:  # one collection of outputs per element of the batch
                        for outputs in entry.result:
                            out.extend(outputs)
                    else:
                        out.extend(entry.result)
                yield out

    async def __aiter__(self) -> AsyncIterator[OUT | Watermark]:
        batches = self._batches()
        try:
            async for batch in batches:
                for item in batch:
                    yield item
        finally:
            await batches.aclose()

    def __iter__(self) -> Iterator[OUT | Watermark]:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError(
                "a running event loop is in this thread: iterate with `async for`, not `for`"
            )
        loop = new_event_loop(self.use_uvloop)
        batches = self._batches()
        step: asyncio.Task[list[OUT | Watermark]] | None = None
        try:
            while True:
                step = loop.create_task(batches.__anext__())
                try:
                    batch = loop.run_until_complete(step)
                except StopAsyncIteration:
                    return
                step = None
                yield from batch
        finally:
            try:
                unwind(loop, step)
                run_to_end(loop, batches.aclose())
                run_to_end(loop, loop.shutdown_asyncgens())
            finally:
                loop.close()

    def __repr__(self) -> str:
        return f"AsyncStream({self.operator!r})"


def _stream(
    stream: Source,
    fn: Fn[IN, OUT],
    timeout: float | timedelta | None,
    capacity: int,
    output_mode: OutputMode,
    retry_strategy: AsyncRetryStrategy,
    use_uvloop: bool | None,
    key_selector: Callable[[IN], Any] | None = None,
) -> AsyncStream[IN, OUT]:
    operator: AsyncWaitOperator[IN, OUT] = AsyncWaitOperator(
        fn,
        timeout=timeout,
        capacity=capacity,
        output_mode=output_mode,
        retry_strategy=retry_strategy,
        key_selector=key_selector,
    )
    return AsyncStream(stream, operator, use_uvloop)


def _batch_operator(
    fn: BatchFn[IN, OUT],
    timeout: float | timedelta | None,
    batch_size: int,
    batch_timeout: float | timedelta | None,
    capacity: int,
    output_mode: OutputMode,
    retry_strategy: AsyncRetryStrategy,
) -> AsyncBatchWaitOperator[IN, OUT]:
    return AsyncBatchWaitOperator(
        fn,
        batch_size=batch_size,
        batch_timeout=batch_timeout,
        timeout=timeout,
        capacity=capacity,
        output_mode=output_mode,
        retry_strategy=retry_strategy,
    )


class AsyncDataStream:
    """Flink's ``AsyncDataStream``: apply an async function to a stream, ordered or not,
    with a total timeout per record and optional retries. ``timeout`` is in seconds or a
    ``timedelta``; ``capacity`` bounds the records in flight."""

    # The four methods are Flink's public API (the two key-ordered ones FLIP-519's keyed variant),
    # each with its own typed signature for users and type checkers; they differ only in the
    # output mode, key selector and retry strategy given to _stream.

    @staticmethod
    def ordered_wait(
        stream: Source,
        fn: Fn[IN, OUT],
        timeout: float | timedelta | None,
        capacity: int = 100,
        *,
        use_uvloop: bool | None = None,
    ) -> AsyncStream[IN, OUT]:
        """Outputs in input order."""
        return _stream(
            stream, fn, timeout, capacity, OutputMode.ORDERED, RetryStrategies.NO_RETRY, use_uvloop
        )

    @staticmethod
    def unordered_wait(
        stream: Source,
        fn: Fn[IN, OUT],
        timeout: float | timedelta | None,
        capacity: int = 100,
        *,
        use_uvloop: bool | None = None,
    ) -> AsyncStream[IN, OUT]:
        """Outputs in completion order, never across a watermark."""
        return _stream(
            stream,
            fn,
            timeout,
            capacity,
            OutputMode.UNORDERED,
            RetryStrategies.NO_RETRY,
            use_uvloop,
        )

    @staticmethod
    def ordered_wait_with_retry(
        stream: Source,
        fn: Fn[IN, OUT],
        timeout: float | timedelta,
        retry_strategy: AsyncRetryStrategy,
        capacity: int = 100,
        *,
        use_uvloop: bool | None = None,
    ) -> AsyncStream[IN, OUT]:
        """Outputs in input order; retries per ``retry_strategy`` within ``timeout``."""
        return _stream(
            stream, fn, timeout, capacity, OutputMode.ORDERED, retry_strategy, use_uvloop
        )

    @staticmethod
    def unordered_wait_with_retry(
        stream: Source,
        fn: Fn[IN, OUT],
        timeout: float | timedelta,
        retry_strategy: AsyncRetryStrategy,
        capacity: int = 100,
        *,
        use_uvloop: bool | None = None,
    ) -> AsyncStream[IN, OUT]:
        """Outputs in completion order (never across a watermark); retries per
        ``retry_strategy`` within ``timeout``."""
        return _stream(
            stream, fn, timeout, capacity, OutputMode.UNORDERED, retry_strategy, use_uvloop
        )

    @staticmethod
    def key_ordered_wait(
        stream: Source,
        fn: Fn[IN, OUT],
        key_selector: Callable[[IN], Any],
        timeout: float | timedelta | None,
        capacity: int = 100,
        *,
        use_uvloop: bool | None = None,
    ) -> AsyncStream[IN, OUT]:
        """Per key (``key_selector(element)``) outputs in input order, at most one call in flight
        per key; different keys concurrently, in completion order, never across a watermark.
        ``capacity`` counts the records waiting for their key too."""
        return _stream(
            stream,
            fn,
            timeout,
            capacity,
            OutputMode.KEY_ORDERED,
            RetryStrategies.NO_RETRY,
            use_uvloop,
            key_selector,
        )

    @staticmethod
    def key_ordered_wait_with_retry(
        stream: Source,
        fn: Fn[IN, OUT],
        key_selector: Callable[[IN], Any],
        timeout: float | timedelta,
        retry_strategy: AsyncRetryStrategy,
        capacity: int = 100,
        *,
        use_uvloop: bool | None = None,
    ) -> AsyncStream[IN, OUT]:
        """As :meth:`key_ordered_wait`; retries per ``retry_strategy`` within ``timeout`` (a
        record's key stays busy until its last attempt is final)."""
        return _stream(
            stream,
            fn,
            timeout,
            capacity,
            OutputMode.KEY_ORDERED,
            retry_strategy,
            use_uvloop,
            key_selector,
        )

    @staticmethod
    def ordered_wait_batch(
        stream: Source,
        fn: BatchFn[IN, OUT],
        timeout: float | timedelta | None,
        batch_size: int,
        batch_timeout: float | timedelta | None = None,
        capacity: int = 100,
        *,
        retry_strategy: AsyncRetryStrategy = RetryStrategies.NO_RETRY,
        use_uvloop: bool | None = None,
    ) -> AsyncStream[IN, OUT]:
        """Calls ``fn`` with batches of up to ``batch_size`` records (flushed when full,
        ``batch_timeout`` after their first record, and at the end); outputs in input order.
        ``timeout``, ``capacity`` and ``retry_strategy`` apply per batch."""
        operator = _batch_operator(
            fn, timeout, batch_size, batch_timeout, capacity, OutputMode.ORDERED, retry_strategy
        )
        return AsyncStream(stream, operator, use_uvloop)

    @staticmethod
    def unordered_wait_batch(
        stream: Source,
        fn: BatchFn[IN, OUT],
        timeout: float | timedelta | None,
        batch_size: int,
        batch_timeout: float | timedelta | None = None,
        capacity: int = 100,
        *,
        retry_strategy: AsyncRetryStrategy = RetryStrategies.NO_RETRY,
        use_uvloop: bool | None = None,
    ) -> AsyncStream[IN, OUT]:
        """As :meth:`ordered_wait_batch`, with batches emitted in completion order (never
        across a watermark; a batch's records stay together and in order)."""
        operator = _batch_operator(
            fn, timeout, batch_size, batch_timeout, capacity, OutputMode.UNORDERED, retry_strategy
        )
        return AsyncStream(stream, operator, use_uvloop)


# Keep RetryStrategies importable from here for users writing `AsyncDataStream` code.
__all__ = ["AsyncDataStream", "AsyncStream", "RetryStrategies"]
