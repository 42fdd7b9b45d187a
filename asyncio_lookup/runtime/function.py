"""The user's async function: :class:`AsyncFunction`, or a plain ``async def`` adapted to it."""

from __future__ import annotations

import functools
import inspect
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Collection
from typing import Any, Generic, TypeVar

from asyncio_lookup.errors import ConfigurationError

IN = TypeVar("IN")
OUT = TypeVar("OUT")

TIMEOUT_MESSAGE = "Async function call has timed out."


class AsyncFunction(ABC, Generic[IN, OUT]):
    """An async function applied to every record of a stream (Flink's ``AsyncFunction``).

    ``async_invoke`` returns the record's outputs as a collection (empty: no output).
    ``timeout`` is called once when the record's total timeout expires; its outcome is final.
    ``open`` / ``close`` bracket the function's use (connection pools and the like).
    """

    async def open(self) -> None:
        """Acquire resources; called before the first element."""

    @abstractmethod
    async def async_invoke(self, element: IN) -> Collection[OUT]:
        """Return the outputs for ``element``; raise to fail (or retry) the attempt."""

    async def timeout(self, element: IN) -> Collection[OUT]:
        """Called when ``element``'s timeout expires. The default fails the stream."""
        raise TimeoutError(TIMEOUT_MESSAGE)

    def invoke_now(self, element: IN) -> Collection[OUT] | None:
        """Optional fast path, a plain (not ``async``) method that must not block: the outputs
        for ``element`` when they are at hand without waiting (a cache hit, say), else None.

        The operator calls it once per record at admission, before any task exists; a
        collection is that record's first attempt's result (predicates and retries apply as
        usual), an exception its first attempt's error, and None runs ``async_invoke``.
        """
        return None

    async def close(self) -> None:
        """Release resources; called on every exit path."""


class _CallableFunction(AsyncFunction[IN, OUT]):
    """A plain ``async def f(element) -> Collection`` seen as an :class:`AsyncFunction`."""

    def __init__(self, func: Callable[[IN], Awaitable[Collection[OUT]]]) -> None:
        self.func = func

    async def async_invoke(self, element: IN) -> Collection[OUT]:
        return await self.func(element)

    def __repr__(self) -> str:
        return f"AsyncFunction({self.func!r})"


FunctionLike = AsyncFunction[IN, OUT] | Callable[[IN], Awaitable[Collection[OUT]]]
_ALLOWED = "an AsyncFunction instance or an `async def` function taking one element"


def is_async_callable(obj: Any) -> bool:
    """Whether calling ``obj`` returns a coroutine (``async def``, or an async ``__call__``;
    through ``functools.partial`` too)."""
    while isinstance(obj, functools.partial):
        obj = obj.func
    if inspect.iscoroutinefunction(obj):
        return True
    call = getattr(type(obj), "__call__", None)  # noqa: B004 - async __call__ on an instance
    return call is not None and inspect.iscoroutinefunction(call)


def check_plain_callable(option: str, value: Any, allowed: str) -> None:
    """Raise :class:`ConfigurationError` unless ``value`` is a callable that is not async: a
    hook called synchronously would get a coroutine back (never awaited, always truthy)."""
    if not callable(value):
        raise ConfigurationError(option, value, allowed)
    if is_async_callable(value):
        raise ConfigurationError(
            option,
            value,
            allowed,
            reason="it is `async def`: it is called without await, and the coroutine it "
            "returns would be taken as its answer; make it a plain `def`",
        )


def as_async_function(fn: Any, option: str = "fn") -> AsyncFunction[Any, Any]:
    """Return ``fn`` as an :class:`AsyncFunction`; anything not async is a ConfigurationError."""
    if isinstance(fn, AsyncFunction):
        for hook in ("async_invoke", "timeout", "open", "close"):
            if not inspect.iscoroutinefunction(getattr(fn, hook)):
                raise ConfigurationError(
                    option, fn, _ALLOWED, reason=f"{type(fn).__name__}.{hook} is not `async def`"
                )
        if inspect.iscoroutinefunction(fn.invoke_now):
            raise ConfigurationError(
                option,
                fn,
                _ALLOWED,
                reason=f"{type(fn).__name__}.invoke_now must be a plain method, not `async def`",
            )
        return fn
    if isinstance(fn, type) or not callable(fn) or not is_async_callable(fn):
        raise ConfigurationError(option, fn, _ALLOWED, reason="not an async function")
    return _CallableFunction(fn)


def invoker(fn: AsyncFunction[IN, OUT]) -> Callable[[IN], Awaitable[Collection[OUT]]]:
    """The callable the operator calls per attempt (the plain function itself when adapted)."""
    if isinstance(fn, _CallableFunction):
        return fn.func
    return fn.async_invoke


def now_invoker(fn: AsyncFunction[IN, OUT]) -> Callable[[IN], Collection[OUT] | None] | None:
    """``fn.invoke_now`` when ``fn`` overrides it, else None (nothing to call per record)."""
    if type(fn).invoke_now is AsyncFunction.invoke_now:
        return None
    return fn.invoke_now


def has_timeout_hook(fn: AsyncFunction[Any, Any]) -> bool:
    """Whether ``fn`` overrides :meth:`AsyncFunction.timeout`."""
    return type(fn).timeout is not AsyncFunction.timeout
