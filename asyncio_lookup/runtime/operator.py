"""The async wait operator (Flink's ``AsyncWaitOperator`` with FLIP-232 retries) on asyncio."""

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
    Sequence,
)
from datetime import timedelta
from typing import Any, ClassVar, Generic, TypeVar

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.runtime.elements import OUTPUT_MODES_ALLOWED, OutputMode, Watermark
from asyncio_lookup.runtime.function import (
    AsyncFunction,
    as_async_function,
    check_plain_callable,
    has_timeout_hook,
    invoker,
    is_async_callable,
    now_invoker,
)
from asyncio_lookup.runtime.handler import WatermarkEntry
from asyncio_lookup.runtime.keyed import KeyOrderedRun, KeySelector
from asyncio_lookup.runtime.metrics import OperatorMetrics
from asyncio_lookup.runtime.retry import AsyncRetryStrategy, NoRetryStrategy, RetryStrategies
from asyncio_lookup.runtime.run import OperatorRun
from asyncio_lookup.validation import parse_int, to_seconds

IN = TypeVar("IN")
OUT = TypeVar("OUT")

_TIMEOUT_ALLOWED = "seconds (float) or a timedelta; None or <= 0 disables it (not with retry)"


def _check_timeout(timeout: Any) -> float | None:
    if timeout is None:
        return None
    seconds = to_seconds("timeout", timeout, _TIMEOUT_ALLOWED, text=False)
    if seconds <= 0 or math.isinf(seconds):
        return None
    return seconds


def _check_capacity(capacity: Any) -> int:
    return parse_int("capacity", capacity, minimum=1, allowed="an int >= 1", text=False)


def _check_output_mode(output_mode: Any) -> OutputMode:
    try:
        return OutputMode(output_mode)
    except ValueError:
        raise ConfigurationError("output_mode", output_mode, OUTPUT_MODES_ALLOWED) from None


def _check_on_error(on_error: Any) -> Any:
    if on_error is not None:
        check_plain_callable(
            "on_error", on_error, "None or a callable (element, error, attempts) -> outputs"
        )
    return on_error


def _check_key_selector(key_selector: Any, output_mode: OutputMode) -> KeySelector | None:
    if output_mode is OutputMode.KEY_ORDERED:
        if key_selector is None:
            raise ConfigurationError(
                "key_selector",
                key_selector,
                "a callable element -> hashable key",
                reason="output_mode KEY_ORDERED keeps order per key and needs the key",
            )
        check_plain_callable("key_selector", key_selector, "a callable element -> hashable key")
        return key_selector  # type: ignore[no-any-return]
    if key_selector is not None:
        raise ConfigurationError(
            "key_selector",
            key_selector,
            "None unless output_mode is KEY_ORDERED",
            reason=f"output_mode {output_mode.name} does not use a key",
        )
    return None


def _check_retry(
    retry_strategy: Any, timeout: float | None, given: Any = None
) -> AsyncRetryStrategy | None:
    """The strategy to consult, or None when retry is off (no strategy or no predicate).
    ``timeout`` is the checked timeout (None: none), ``given`` the user's value of it."""
    if not isinstance(retry_strategy, AsyncRetryStrategy):
        raise ConfigurationError(
            "retry_strategy",
            retry_strategy,
            "an AsyncRetryStrategy (can_retry, backoff, retry_predicate), e.g. RetryStrategies.*",
        )
    if isinstance(retry_strategy, NoRetryStrategy):
        return None
    if timeout is None:
        raise ConfigurationError(
            "timeout",
            given,
            "a finite timeout > 0",
            reason=f"retry ({retry_strategy!r}) needs a timeout",
        )
    for hook in ("can_retry", "backoff"):
        if is_async_callable(getattr(retry_strategy, hook)):
            raise ConfigurationError(
                "retry_strategy",
                retry_strategy,
                "an AsyncRetryStrategy whose can_retry and backoff are plain methods",
                reason=f"{type(retry_strategy).__name__}.{hook} is `async def`: it is called "
                "without await",
            )
    predicate = retry_strategy.retry_predicate
    if predicate.result_predicate is None and predicate.exception_predicate is None:
        return None
    return retry_strategy


class AsyncWaitOperator(Generic[IN, OUT]):
    """Applies an async function to every record with bounded concurrency (FLIP-232).

    At most ``capacity`` records and watermarks are admitted and not yet emitted; when full no
    more input is read. ``timeout`` is one budget per record from admission to final outcome,
    across retries; at the deadline ``fn.timeout(element)`` decides the outcome (the default
    raises ``TimeoutError``). Every argument is validated here (:class:`ConfigurationError`).

    ``output_mode`` KEY_ORDERED (FLIP-519) needs ``key_selector(element) -> key``: records with
    equal keys are emitted in input order with at most one call in flight per key (a later one
    waits, holding its slot, until the earlier one is final; its timeout starts when it starts);
    records of different keys run concurrently, emitted as in UNORDERED mode.

    ``on_error(element, error, attempts)``, when given, is the error output: a record whose
    final outcome is an error (after its retries, or its timeout when the timeout hook raises)
    is emitted with the outputs it returns instead of failing the stream, and counted in
    ``numFailedRows`` (docs/semantics.md §1.7). If it raises, the stream fails with that error.
    """

    fans_out: ClassVar[bool] = False
    """A record entry's element is the record itself (:class:`AsyncBatchWaitOperator`: a batch)."""

    def __init__(
        self,
        fn: AsyncFunction[IN, OUT] | Callable[[IN], Awaitable[Collection[OUT]]],
        *,
        timeout: float | timedelta | None,
        capacity: int = 100,
        output_mode: OutputMode | str = OutputMode.ORDERED,
        retry_strategy: AsyncRetryStrategy = RetryStrategies.NO_RETRY,
        metrics: OperatorMetrics | None = None,
        manage_lifecycle: bool = True,
        on_error: Callable[[IN, BaseException, int], Collection[OUT]] | None = None,
        key_selector: Callable[[IN], Any] | None = None,
    ) -> None:
        self.fn: AsyncFunction[IN, OUT] = as_async_function(fn, "fn")
        self.timeout = _check_timeout(timeout)
        self.capacity = _check_capacity(capacity)
        self.output_mode = _check_output_mode(output_mode)
        self.key_selector = _check_key_selector(key_selector, self.output_mode)
        self.retry_strategy = retry_strategy
        self._retry = _check_retry(retry_strategy, self.timeout, timeout)
        if metrics is not None and not isinstance(metrics, OperatorMetrics):
            raise ConfigurationError("metrics", metrics, "an OperatorMetrics or None")
        self.metrics = metrics if metrics is not None else OperatorMetrics()
        if not isinstance(manage_lifecycle, bool):
            raise ConfigurationError("manage_lifecycle", manage_lifecycle, "True or False")
        self.manage_lifecycle = manage_lifecycle
        self.on_error = _check_on_error(on_error)
        self._invoke = invoker(self.fn)
        self._invoke_now = now_invoker(self.fn)
        self._timeout_hook = has_timeout_hook(self.fn)

    def new_run(self) -> OperatorRun:
        """The state of one pass over an input (for adapters that drive batches themselves):
        ``await run.start(source)``, ``await run.next_batch()`` until None, ``await run.stop()``."""
        settings: dict[str, Any] = {
            "timeout": self.timeout,
            "capacity": self.capacity,
            "retry_strategy": self._retry,
            "timeout_hook": self._timeout_hook,
            "metrics": self.metrics,
            "manage_lifecycle": self.manage_lifecycle,
            "invoke_now": self._invoke_now,
            "on_error": self.on_error,
        }
        if self.key_selector is not None:
            return KeyOrderedRun(self.fn, self._invoke, key_selector=self.key_selector, **settings)
        return OperatorRun(
            self.fn, self._invoke, ordered=self.output_mode is OutputMode.ORDERED, **settings
        )

    @contextlib.asynccontextmanager
    async def running(
        self,
        source: (
            Iterable[IN | Watermark] | AsyncIterable[IN | Watermark] | AsyncIterable[Sequence[IN]]
        ),
        *,
        chunked: bool = False,
    ) -> AsyncIterator[OperatorRun]:
        """A started run over ``source`` (``await run.next_batch()`` until None), stopped on
        leaving the block whatever the exit: outstanding work is cancelled and awaited and
        ``fn.close()`` runs (when managing the lifecycle); on a failure, the failure is raised.
        ``chunked``: ``source`` is an async iterable of lists of records."""
        run = self.new_run()
        error: BaseException | None = None
        try:
            await run.start(source, chunked=chunked)
            yield run
        except GeneratorExit:  # the consumer stopped early (aclose): not a failure
            raise
        except BaseException as raised:
            error = raised
            raise
        finally:
            await run.stop(error)

    async def process(
        self, source: Iterable[IN | Watermark] | AsyncIterable[IN | Watermark]
    ) -> AsyncIterator[tuple[IN, Collection[OUT]] | Watermark]:
        """Yield ``(element, outputs)`` once per record when its outcome is final (outputs may be
        empty), and each watermark as itself, in the output mode's order.

        On failure raises the original error after cancelling and awaiting everything
        outstanding; ``fn.close()`` runs on every exit path (when managing the lifecycle),
        including when the consumer stops early (``aclose()``).
        """
        async with self.running(source) as run:
            while True:
                batch = await run.next_batch()
                if batch is None:
                    return
                for entry in batch:
                    if run.failure is not None:
                        raise run.failure
                    if type(entry) is WatermarkEntry:
                        yield entry.element
                    else:
                        yield (entry.element, entry.result)

    def __repr__(self) -> str:
        return (
            f"AsyncWaitOperator({self.fn!r}, timeout={self.timeout}, capacity={self.capacity}, "
            f"output_mode={self.output_mode.name}, retry_strategy={self.retry_strategy!r}"
            + ("" if self.key_selector is None else f", key_selector={self.key_selector!r}")
            + ")"
        )
