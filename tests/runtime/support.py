"""Scripted async functions and collectors for the operator tests (run on virtual time)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from asyncio_lookup.runtime import AsyncFunction, AsyncWaitOperator, Watermark

HANG = "hang"  # an outcome: never completes by itself


@dataclass
class Call:
    element: Any
    attempt: int
    at: float


@dataclass
class Scripted(AsyncFunction[Any, Any]):
    """``script(element, attempt) -> (delay, outcome)``; outcome is a collection to return,
    an exception to raise, or HANG. Records calls, cancellations, open/close."""

    script: Callable[[Any, int], tuple[float, Any]]
    calls: list[Call] = field(default_factory=list)
    cancelled: list[tuple[Any, int]] = field(default_factory=list)
    opened: int = 0
    closed: int = 0
    concurrent: int = 0
    max_concurrent: int = 0

    async def open(self) -> None:
        self.opened += 1

    async def close(self) -> None:
        self.closed += 1

    def attempts_of(self, element: Any) -> int:
        return sum(1 for c in self.calls if c.element == element)

    async def async_invoke(self, element: Any) -> Any:
        loop = asyncio.get_running_loop()
        attempt = self.attempts_of(element) + 1
        self.calls.append(Call(element, attempt, loop.time()))
        delay, outcome = self.script(element, attempt)
        self.concurrent += 1
        self.max_concurrent = max(self.max_concurrent, self.concurrent)
        try:
            if outcome == HANG:
                await asyncio.Event().wait()
            await asyncio.sleep(delay)
        except asyncio.CancelledError:
            self.cancelled.append((element, attempt))
            raise
        finally:
            self.concurrent -= 1
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


@dataclass
class WithTimeoutHook(Scripted):
    """A Scripted function whose ``timeout`` returns ``timeout_result`` (or raises it)."""

    timeout_result: Any = ("T",)
    timeout_calls: list[tuple[Any, float]] = field(default_factory=list)

    async def timeout(self, element: Any) -> Any:
        self.timeout_calls.append((element, asyncio.get_running_loop().time()))
        if isinstance(self.timeout_result, BaseException):
            raise self.timeout_result
        return self.timeout_result


_ELEMENT = object()


def const(delay: float, outcome: Any = _ELEMENT) -> Callable[[Any, int], tuple[float, Any]]:
    """Every attempt takes ``delay`` and returns ``outcome`` (default: ``[element]``)."""
    return lambda element, attempt: (delay, [element] if outcome is _ELEMENT else outcome)


@dataclass
class Reads:
    """A source that records the loop time at which each element is read."""

    items: Iterable[Any]
    at: dict[Any, float] = field(default_factory=dict)
    count: int = 0

    def __iter__(self) -> Any:
        loop = asyncio.get_running_loop()
        for item in self.items:
            self.at[item] = loop.time()
            self.count += 1
            yield item


async def collect(operator: AsyncWaitOperator[Any, Any], source: Any) -> list[tuple[float, Any]]:
    """Every item ``process()`` yields, with the loop time it was yielded at."""
    loop = asyncio.get_running_loop()
    return [(loop.time(), item) async for item in operator.process(source)]


def items(timed: list[tuple[float, Any]]) -> list[Any]:
    return [item for _, item in timed]


def keys(timed: list[tuple[float, Any]]) -> list[Any]:
    """Elements of the records and the watermarks, in emission order."""
    return [item if isinstance(item, Watermark) else item[0] for _, item in timed]


async def aiter_of(values: Iterable[Any], delay: float = 0.0) -> AsyncIterator[Any]:
    for value in values:
        if delay:
            await asyncio.sleep(delay)
        yield value


def outputs(values: Collection[Any]) -> list[Any]:
    return list(values)
