"""The async batch wait operator (Flink's ``AsyncBatchWaitOperator``), built on the async wait
operator: the input is cut into batches (:mod:`.batcher`), each batch is ONE element of an
:class:`AsyncWaitOperator` over the batch function (:mod:`.batch_function`), and each batch's
outcome fans out to its elements.

So capacity, timeout, retry, ordering and metrics are the operator's, per batch: ``capacity``
bounds the batches admitted and not emitted, ``timeout`` is one budget per batch from its
admission, a retry calls the function with the same batch again. A batch's outcome reaches
exactly its elements: its results one per element, its error (when final) fails the stream,
or with ``on_error`` becomes each element's error output.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Iterable,
    Iterator,
    Sequence,
)
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar, Generic, TypeVar, cast

from asyncio_lookup.errors import ConfigurationError, ResultTypeError
from asyncio_lookup.runtime.batch_function import (
    AsyncBatchFunction,
    as_async_batch_function,
    batch_call,
)
from asyncio_lookup.runtime.batcher import Batch, batches
from asyncio_lookup.runtime.elements import OutputMode, Watermark
from asyncio_lookup.runtime.handler import result_type_error
from asyncio_lookup.runtime.metrics import OperatorMetrics
from asyncio_lookup.runtime.operator import (
    AsyncWaitOperator,
    _check_on_error,
    _check_output_mode,
    _check_retry,
    _check_timeout,
)
from asyncio_lookup.runtime.rebatch import aclose
from asyncio_lookup.runtime.retry import AsyncRetryPredicate, AsyncRetryStrategy, RetryStrategies
from asyncio_lookup.runtime.run import OperatorRun
from asyncio_lookup.validation import parse_int, to_seconds

IN = TypeVar("IN")
OUT = TypeVar("OUT")

BatchFn = AsyncBatchFunction[IN, OUT] | Callable[[list[IN]], Awaitable[Sequence[Collection[OUT]]]]

_BATCH_TIMEOUT_ALLOWED = "seconds (float) > 0 or a timedelta, or None (flush by size and end only)"


def check_batch_size(batch_size: Any) -> int:
    """``batch_size``: the most elements per call, an int >= 1."""
    return parse_int("batch_size", batch_size, minimum=1, allowed="an int >= 1", text=False)


def check_batch_timeout(batch_timeout: Any) -> float | None:
    """``batch_timeout``: seconds from a batch's first element to its flush, or None."""
    if batch_timeout is None:
        return None
    seconds = to_seconds("batch_timeout", batch_timeout, _BATCH_TIMEOUT_ALLOWED, text=False)
    if seconds <= 0 or math.isinf(seconds):
        raise ConfigurationError(
            "batch_timeout", batch_timeout, _BATCH_TIMEOUT_ALLOWED, reason="must be > 0, finite"
        )
    return seconds


@dataclass(frozen=True)
class PerBatchRetry:
    """The user's strategy applied to batches: a batch is retried when its error matches the
    exception predicate, or when the result predicate matches ANY element's outputs. A
    :class:`ResultTypeError` (a wrong result shape or count) is never retried (semantics §1.4)."""

    strategy: AsyncRetryStrategy

    def can_retry(self, current_attempts: int) -> bool:
        return self.strategy.can_retry(current_attempts)

    def backoff(self, current_attempts: int) -> float:
        return self.strategy.backoff(current_attempts)

    @property
    def retry_predicate(self) -> AsyncRetryPredicate:
        predicate = self.strategy.retry_predicate
        on_result, on_error = predicate.result_predicate, predicate.exception_predicate

        def any_element(results: Collection[Collection[Any]]) -> bool:
            assert on_result is not None
            return any(on_result(outputs) for outputs in results)

        def not_shape(error: BaseException) -> bool:
            assert on_error is not None
            return not isinstance(error, ResultTypeError) and on_error(error)

        return AsyncRetryPredicate(
            any_element if on_result is not None else None,
            not_shape if on_error is not None else None,
        )

    def __repr__(self) -> str:
        return f"PerBatch({self.strategy!r})"


def fan_out(
    batch: Batch[IN], results: Collection[Collection[OUT]]
) -> Iterator[tuple[IN, Collection[OUT]]]:
    """``(element, outputs)`` for each element of ``batch``, in the batch's order (the result
    was checked to have one collection per element)."""
    return zip(batch.elements, results, strict=True)


async def _flattened(chunks: AsyncIterable[Sequence[IN]]) -> AsyncIterator[IN]:
    async for chunk in chunks:
        for element in chunk:
            yield element


def _per_element(
    on_error: Callable[[IN, BaseException, int], Collection[OUT]],
    metrics: Callable[[], OperatorMetrics],
) -> Callable[[Batch[IN], BaseException, int], Collection[Collection[OUT]]]:
    """The error output of a batch: its final error given to each of its elements, each
    counted in ``numFailedRows`` (the operator counts the batch as one)."""

    def batch_failed(
        batch: Batch[IN], error: BaseException, attempts: int
    ) -> Collection[Collection[OUT]]:
        outputs = []
        for element in batch.elements:
            output = on_error(element, error, attempts)
            type_error = result_type_error(element, output, "on_error")
            if type_error is not None:  # as for a record of the per-record operator (§1.7)
                raise type_error from error
            outputs.append(output)
        metrics().failed += len(outputs) - 1
        return outputs

    return batch_failed


class AsyncBatchWaitOperator(Generic[IN, OUT]):
    """Calls an async batch function with batches of at most ``batch_size`` records.

    A batch is flushed when full, ``batch_timeout`` seconds after its first record was read
    (async sources), at a watermark and at the end of the input. ``timeout``, ``capacity``,
    ``output_mode`` and ``retry_strategy`` are :class:`AsyncWaitOperator`'s, applied per batch;
    every argument is validated here (:class:`ConfigurationError`). ``on_error(element, error,
    attempts)``, when given, is the error output: a batch's final error becomes each of its
    elements' outputs instead of failing the stream.
    """

    def __init__(
        self,
        fn: BatchFn[IN, OUT],
        *,
        batch_size: int,
        batch_timeout: float | timedelta | None = None,
        timeout: float | timedelta | None,
        capacity: int = 100,
        output_mode: OutputMode | str = OutputMode.ORDERED,
        retry_strategy: AsyncRetryStrategy = RetryStrategies.NO_RETRY,
        metrics: OperatorMetrics | None = None,
        manage_lifecycle: bool = True,
        on_error: Callable[[IN, BaseException, int], Collection[OUT]] | None = None,
    ) -> None:
        self.fn: AsyncBatchFunction[IN, OUT] = as_async_batch_function(fn, "fn")
        self.batch_size = check_batch_size(batch_size)
        self.batch_timeout = check_batch_timeout(batch_timeout)
        self.retry_strategy = retry_strategy
        if _check_output_mode(output_mode) is OutputMode.KEY_ORDERED:
            raise ConfigurationError(
                "output_mode",
                output_mode,
                "ORDERED or UNORDERED",
                reason="key order is kept per record; a batch holds records of many keys",
            )
        retry = _check_retry(retry_strategy, _check_timeout(timeout), timeout)
        _check_on_error(on_error)
        self.operator: AsyncWaitOperator[Batch[IN], Collection[OUT]] = AsyncWaitOperator(
            batch_call(self.fn),
            timeout=timeout,
            capacity=capacity,
            output_mode=output_mode,
            retry_strategy=RetryStrategies.NO_RETRY if retry is None else PerBatchRetry(retry),
            metrics=metrics,
            manage_lifecycle=manage_lifecycle,
            on_error=None if on_error is None else _per_element(on_error, lambda: self.metrics),
        )

    fans_out: ClassVar[bool] = True
    """A record entry's element is a :class:`Batch`, its result one collection per element."""

    @property
    def metrics(self) -> OperatorMetrics:
        """The operator's counters; they count batches (``numCompleted``: batches done)."""
        return self.operator.metrics

    @property
    def timeout(self) -> float | None:
        return self.operator.timeout

    @property
    def capacity(self) -> int:
        return self.operator.capacity

    @property
    def output_mode(self) -> OutputMode:
        return self.operator.output_mode

    def _batches(
        self, source: Iterable[IN | Watermark] | AsyncIterable[IN | Watermark]
    ) -> Iterator[Batch[IN] | Watermark] | AsyncIterator[Batch[IN] | Watermark]:
        return batches(source, self.batch_size, self.batch_timeout)

    @contextlib.asynccontextmanager
    async def running(
        self,
        source: (
            Iterable[IN | Watermark] | AsyncIterable[IN | Watermark] | AsyncIterable[Sequence[IN]]
        ),
        *,
        chunked: bool = False,
    ) -> AsyncIterator[OperatorRun]:
        """The inner operator's run over the batches of ``source``: a record entry's
        ``element`` is a :class:`Batch` and its ``result`` one collection per element.
        ``chunked``: ``source`` is an async iterable of lists of elements."""
        if chunked:
            source = _flattened(cast(AsyncIterable[Sequence[IN]], source))
        async with self.operator.running(self._batches(source)) as run:  # type: ignore[arg-type]
            yield run

    async def process(
        self, source: Iterable[IN | Watermark] | AsyncIterable[IN | Watermark]
    ) -> AsyncIterator[tuple[IN, Collection[OUT]] | Watermark]:
        """Yield ``(element, outputs)`` once per record and each watermark as itself, like
        :meth:`AsyncWaitOperator.process`; the records of a batch come together, in order."""
        stream = self.operator.process(self._batches(source))
        try:
            async for item in stream:
                if type(item) is tuple:
                    batch, results = item
                    for pair in fan_out(batch, results):
                        yield pair
                else:
                    yield item  # type: ignore[misc]
        finally:
            await aclose(stream)

    def __repr__(self) -> str:
        op = self.operator
        return (
            f"AsyncBatchWaitOperator({self.fn!r}, batch_size={self.batch_size}, "
            f"batch_timeout={self.batch_timeout}, timeout={op.timeout}, "
            f"capacity={op.capacity}, output_mode={op.output_mode.name}, "
            f"retry_strategy={self.retry_strategy!r})"
        )
