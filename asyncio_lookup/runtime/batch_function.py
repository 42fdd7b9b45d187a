"""The user's batch function: :class:`AsyncBatchFunction`, or a plain ``async def`` over a list
of elements, and :func:`batch_call`, which shows it to the operator as an ordinary
:class:`AsyncFunction` whose element is a :class:`Batch` and whose result has one collection of
outputs per element of the batch (checked here, so a wrong count never reaches the fan-out).
"""

from __future__ import annotations

import inspect
import operator
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any, Generic, TypeVar

from asyncio_lookup.errors import ConfigurationError, ResultTypeError
from asyncio_lookup.runtime.batcher import Batch
from asyncio_lookup.runtime.function import TIMEOUT_MESSAGE, AsyncFunction
from asyncio_lookup.runtime.handler import result_type_error

IN = TypeVar("IN")
OUT = TypeVar("OUT")


class AsyncBatchFunction(ABC, Generic[IN, OUT]):
    """An async function called with a batch of records (Flink's ``AsyncBatchFunction``).

    ``async_invoke_batch`` returns one collection of outputs per record, in the records' order
    (an empty collection: no output for that record). ``timeout`` is called once when the
    batch's total timeout expires, with the same records; its outcome is final. ``open`` /
    ``close`` bracket the function's use. Each call gets a list of its own; results pair with
    it as given, so a function that reorders or changes it fails (sort a copy instead).
    """

    async def open(self) -> None:
        """Acquire resources; called before the first batch."""

    @abstractmethod
    async def async_invoke_batch(self, elements: list[IN]) -> Sequence[Collection[OUT]]:
        """Return the outputs of each of ``elements``; raise to fail (or retry) the batch."""

    async def timeout(self, elements: list[IN]) -> Sequence[Collection[OUT]]:
        """Called when the batch's timeout expires. The default fails the stream."""
        raise TimeoutError(TIMEOUT_MESSAGE)

    async def close(self) -> None:
        """Release resources; called on every exit path."""


class _CallableBatchFunction(AsyncBatchFunction[IN, OUT]):
    """A plain ``async def f(elements: list) -> Sequence[Collection]`` as a batch function."""

    def __init__(self, func: Callable[[list[IN]], Awaitable[Sequence[Collection[OUT]]]]) -> None:
        self.func = func

    async def async_invoke_batch(self, elements: list[IN]) -> Sequence[Collection[OUT]]:
        return await self.func(elements)

    def __repr__(self) -> str:
        return f"AsyncBatchFunction({self.func!r})"


_ALLOWED = (
    "an AsyncBatchFunction instance or an `async def` function taking a list of rows and "
    "returning one collection of outputs per row"
)


def as_async_batch_function(fn: Any, option: str = "fn") -> AsyncBatchFunction[Any, Any]:
    """Return ``fn`` as an :class:`AsyncBatchFunction`; anything else is a ConfigurationError
    (an :class:`AsyncFunction` takes one record, so it is refused with that reason)."""
    if isinstance(fn, AsyncBatchFunction):
        for hook in ("async_invoke_batch", "timeout", "open", "close"):
            if not inspect.iscoroutinefunction(getattr(fn, hook)):
                raise ConfigurationError(
                    option, fn, _ALLOWED, reason=f"{type(fn).__name__}.{hook} is not `async def`"
                )
        return fn
    if isinstance(fn, AsyncFunction):
        raise ConfigurationError(
            option,
            fn,
            _ALLOWED,
            reason=f"{type(fn).__name__} is an AsyncFunction, which takes one row; with a "
            "batch size the function takes a list of rows (AsyncBatchFunction.async_invoke_batch)",
        )
    call = getattr(type(fn), "__call__", None)  # noqa: B004 - async __call__ on an instance
    if (
        isinstance(fn, type)
        or not callable(fn)
        or not (inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call))
    ):
        raise ConfigurationError(option, fn, _ALLOWED, reason="not an async function")
    return _CallableBatchFunction(fn)


def check_batch_result(
    batch: Batch[Any], results: Any, source: str = "async batch function"
) -> list[Collection[Any]]:
    """``results`` as a list of one collection per element of ``batch``, else a
    :class:`ResultTypeError` naming the batch size, what came back and ``source`` (what
    returned it)."""
    size = len(batch.elements)
    if (
        results is None
        or isinstance(results, (str, bytes, bytearray, Mapping))
        or not isinstance(results, Sequence)
    ):
        raise ResultTypeError(
            f"{source} returned {type(results).__name__} {results!r:.200} for a "
            f"batch of {size} rows; it must return a list with one collection of outputs per "
            "row, in the rows' order"
        )
    if len(results) != size:
        raise ResultTypeError(
            f"{source} returned {len(results)} results for a batch of {size} rows "
            f"({batch!r:.300}); it must return exactly one collection of outputs per row, in "
            "the rows' order (an empty list for a row without output)"
        )
    checked = results if type(results) is list else list(results)
    for element, outputs in zip(batch.elements, checked, strict=True):
        kind = type(outputs)
        if kind is not list and kind is not tuple:
            error = result_type_error(element, outputs, source)
            if error is not None:
                raise ResultTypeError(f"in a batch of {size} rows: {error}")
    return checked


def check_unchanged(given: list[Any], elements: Sequence[Any], function: str) -> None:
    """A :class:`ResultTypeError` when ``function`` changed ``given``, its copy of
    ``elements``: its results pair with ``elements`` in their order, so a function that sorted,
    filled or emptied its list would pair them with the wrong records."""
    if len(given) != len(elements):
        change = f"it now holds {len(given)}"
    elif not all(map(operator.is_, given, elements)):
        change = "it reordered or replaced some"
    else:
        return
    raise ResultTypeError(
        f"{function} changed the list of {len(elements)} items it was given ({change}); its "
        "results pair with the items in the order it was given them: sort or change a copy"
    )


class BatchCall(AsyncFunction[Batch[Any], Collection[Any]]):
    """A batch function seen by the operator: element = a :class:`Batch`, result = the
    checked list of per-element collections. Opened and closed with the batch function."""

    def __init__(self, fn: AsyncBatchFunction[Any, Any]) -> None:
        self.fn = fn
        self._invoke = fn.func if isinstance(fn, _CallableBatchFunction) else fn.async_invoke_batch

    async def open(self) -> None:
        await self.fn.open()

    async def async_invoke(self, element: Batch[Any]) -> Collection[Any]:
        given = list(element.elements)
        results = await self._invoke(given)
        check_unchanged(given, element.elements, "async batch function")
        return check_batch_result(element, results)

    async def close(self) -> None:
        await self.fn.close()

    def __repr__(self) -> str:
        return repr(self.fn)


class _BatchCallWithTimeout(BatchCall):
    """A :class:`BatchCall` whose batch function has its own timeout hook."""

    async def timeout(self, element: Batch[Any]) -> Collection[Any]:
        given = list(element.elements)
        results = await self.fn.timeout(given)
        check_unchanged(given, element.elements, "async batch function's timeout")
        return check_batch_result(element, results, "async batch function's timeout()")


def batch_call(fn: AsyncBatchFunction[Any, Any]) -> BatchCall:
    """``fn`` as the operator's function (with a timeout hook only when ``fn`` has one, so the
    default timeout fails without a task, as for a per-record function)."""
    if type(fn).timeout is AsyncBatchFunction.timeout:
        return BatchCall(fn)
    return _BatchCallWithTimeout(fn)
