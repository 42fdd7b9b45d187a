"""Rate limits in front of what calls an external system (docs/semantics.md §2.12):
:class:`RateLimitedLookup` (and its sync form) before a lookup function (every point or batch
call, retries included, takes a token; cache hits never reach it), :class:`RateLimitedFunction`
and :class:`RateLimitedBatchFunction` before an ``async_map`` function (every attempt takes one).
What a rate is: :mod:`~asyncio_lookup.lookup.rate`; the limiter:
:mod:`~asyncio_lookup.lookup.rate_limiter`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

from asyncio_lookup.lookup.functions import AsyncLookupFunction, Key, LookupFunction, Row
from asyncio_lookup.lookup.metrics import NUM_THROTTLED, THROTTLED_TIME_MS
from asyncio_lookup.lookup.rate import TaskRate, format_rate, is_throttle
from asyncio_lookup.lookup.rate_limiter import RateLimiter
from asyncio_lookup.runtime.batch_function import AsyncBatchFunction, as_async_batch_function
from asyncio_lookup.runtime.function import (
    AsyncFunction,
    as_async_function,
    has_timeout_hook,
    invoker,
    now_invoker,
)
from asyncio_lookup.runtime.sketch import LatencySketch

#: ``on_call(keys, None)``: a call made (it has its token) for that many keys;
#: ``on_call(0, ms)``: a call answered (or failed) after ``ms`` from its token. A call a
#: cancellation cuts off is counted, not timed, as a call the batcher makes.
CallCounter = Callable[[int, "float | None"], None]


class RateLimitedLookup(AsyncLookupFunction):
    """``function`` behind a :class:`RateLimiter`: each point or batch call takes one token.
    ``on_throttle`` is called for each throttling answer, ``on_wait`` with the seconds calls
    waited for a token (the chain's metrics)."""

    def __init__(
        self,
        function: AsyncLookupFunction,
        limit: TaskRate,
        on_throttle: Callable[[], None] = lambda: None,
        on_wait: Callable[[float], None] | None = None,
        on_call: CallCounter | None = None,
    ) -> None:
        self.function = function
        self.limit = limit
        self.limiter = RateLimiter(limit, on_wait=on_wait)
        self._on_throttle = on_throttle
        self._on_call = on_call

    @property
    def counts_calls(self) -> bool:
        """True when this wrapper counts and times its calls (``on_call``) from their token
        on: its caller must not count them again, from before the wait."""
        return self._on_call is not None

    async def open(self) -> None:
        await self.function.open()

    async def close(self) -> None:
        self.limiter.close()
        await self.function.close()

    @property
    def supports_batch(self) -> bool:
        return self.function.supports_batch

    @property
    def max_batch_size(self) -> int | None:
        return self.function.max_batch_size

    async def async_lookup(self, key: Key) -> Collection[Row]:
        rows = await _limited_call(
            self.limiter, self.function.async_lookup, key, self._release, on_call=self._on_call
        )
        return rows  # type: ignore[no-any-return]

    async def async_lookup_batch(
        self, keys: Sequence[Key]
    ) -> Sequence[Collection[Row] | BaseException]:
        sent_at = await self.limiter.acquire()
        if self._on_call is not None:
            self._on_call(len(keys), None)
        started = time.perf_counter()
        try:
            outcomes = await self.function.async_lookup_batch(keys)
        except Exception as error:
            if self._on_call is not None:
                self._on_call(0, (time.perf_counter() - started) * 1000.0)
            self._release(sent_at, error)
            raise
        except BaseException:
            self.limiter.release(sent_at, None, answered=False)
            raise
        if self._on_call is not None:
            self._on_call(0, (time.perf_counter() - started) * 1000.0)
        throttle = next(
            (o for o in outcomes if isinstance(o, BaseException) and is_throttle(o)), None
        )
        self._release(sent_at, throttle)
        return outcomes

    def _release(self, sent_at: float, error: BaseException | None) -> None:
        if error is not None and is_throttle(error):
            self._on_throttle()
        self.limiter.release(sent_at, error)

    def __repr__(self) -> str:
        return f"RateLimited({self.function!r}, {format_rate(self.limit.rate)})"


class RateLimitedSyncLookup(LookupFunction):
    """A blocking ``function`` behind a :class:`RateLimiter` (the sync mode)."""

    def __init__(
        self,
        function: LookupFunction,
        limit: TaskRate,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] | None = None,
        on_throttle: Callable[[], None] = lambda: None,
        on_wait: Callable[[float], None] | None = None,
        on_call: CallCounter | None = None,
    ) -> None:
        self.function = function
        self.limiter = RateLimiter(limit, clock=clock or time.monotonic, on_wait=on_wait)
        self._sleep = sleep
        self._on_throttle = on_throttle
        self._on_call = on_call

    @property
    def counts_calls(self) -> bool:
        """As :attr:`RateLimitedLookup.counts_calls`."""
        return self._on_call is not None

    def open(self) -> None:
        self.function.open()

    def close(self) -> None:
        self.function.close()

    def lookup(self, key: Key) -> Collection[Row]:
        sent_at = self.limiter.acquire_blocking(self._sleep)
        if self._on_call is not None:
            self._on_call(1, None)
        started = time.perf_counter()
        try:
            try:
                rows = self.function.lookup(key)
            finally:
                if self._on_call is not None:
                    self._on_call(0, (time.perf_counter() - started) * 1000.0)
        except Exception as error:
            if is_throttle(error):
                self._on_throttle()
            self.limiter.release_blocking(sent_at, error)
            raise
        except BaseException:
            self.limiter.release_blocking(sent_at, None, answered=False)
            raise
        self.limiter.release_blocking(sent_at, None)
        return rows


class Limited:
    """The lifecycle an ``async_map`` function behind a :class:`RateLimiter` shares with its
    batched form: the inner function opens and closes with it, the limiter closes first."""

    inner: Any
    limit: TaskRate
    limiter: RateLimiter
    #: Where each call is timed from its token on (the wait for it is no call time), if set.
    calls: LatencySketch | None = None
    #: Seconds during which calls waited for a token (summed spans, as a lookup table's).
    waited: float

    def _limit(self, inner: Any, limit: TaskRate) -> None:
        self.inner = inner
        self.limit = limit
        self.waited = 0.0
        # A task's limiter starts without the token a bucket usually starts with: a slot runs
        # its tasks one after another, each with a new limiter, and each first token would be
        # one call over the job's budget.
        self.limiter = RateLimiter(limit, start_empty=True, on_wait=self._add_wait)

    def _add_wait(self, seconds: float) -> None:
        self.waited += seconds

    def counters(self) -> dict[str, int]:
        """``throttledTimeMs`` and ``numThrottledCalls`` so far, as a lookup table counts them."""
        return {THROTTLED_TIME_MS: int(self.waited * 1000.0), NUM_THROTTLED: self.limiter.throttled}

    async def open(self) -> None:
        await self.inner.open()

    async def close(self) -> None:
        self.limiter.close()
        await self.inner.close()

    def __repr__(self) -> str:
        return f"RateLimited({self.inner!r}, {format_rate(self.limit.rate)})"


class RateLimitedFunction(Limited, AsyncFunction[Any, Any]):
    """An ``async_map`` function behind a :class:`RateLimiter`: each attempt takes a token
    (build with :func:`rate_limited`). One per task: the limiter works on that task's loop."""

    inner: AsyncFunction[Any, Any]

    def __init__(self, fn: AsyncFunction[Any, Any], limit: TaskRate) -> None:
        self._limit(fn, limit)
        self._call = invoker(fn)

    async def async_invoke(self, element: Any) -> Collection[Any]:
        result = await _limited_call(self.limiter, self._call, element, calls=self.calls)
        return result  # type: ignore[no-any-return]


async def _limited_call(
    limiter: RateLimiter,
    call: Callable[[Any], Any],
    argument: Any,
    failed: Callable[[float, BaseException], None] | None = None,
    calls: LatencySketch | None = None,
    on_call: CallCounter | None = None,
) -> Any:
    """``await call(argument)`` once ``limiter`` gives a token; its outcome told back to it
    (an error through ``failed(sent_at, error)`` when given, e.g. to note a throttle), its
    time from the token on added to ``calls`` or told to ``on_call`` when given."""
    sent_at = await limiter.acquire()
    if on_call is not None:  # made once it has its token, even if cancelled before its answer
        on_call(1, None)
    started = time.perf_counter()
    try:
        result = await call(argument)
    except Exception as error:
        if calls is not None:
            calls.add((time.perf_counter() - started) * 1000.0)
        if on_call is not None:
            on_call(0, (time.perf_counter() - started) * 1000.0)
        if failed is None:
            limiter.release(sent_at, error)
        else:
            failed(sent_at, error)
        raise
    except BaseException:
        limiter.release(sent_at, None, answered=False)
        raise
    if calls is not None:
        calls.add((time.perf_counter() - started) * 1000.0)
    if on_call is not None:
        on_call(0, (time.perf_counter() - started) * 1000.0)
    limiter.release(sent_at, None)
    return result


class RateLimitedBatchFunction(Limited, AsyncBatchFunction[Any, Any]):
    """A batched ``async_map`` function behind a :class:`RateLimiter`: each call of a batch
    (each attempt) takes one token. One per task, like :class:`RateLimitedFunction`."""

    inner: AsyncBatchFunction[Any, Any]

    def __init__(self, fn: Any, limit: TaskRate) -> None:
        self._limit(as_async_batch_function(fn, "fn"), limit)

    async def async_invoke_batch(self, elements: list[Any]) -> Sequence[Collection[Any]]:
        call = self.inner.async_invoke_batch
        result = await _limited_call(self.limiter, call, elements, calls=self.calls)
        return result  # type: ignore[no-any-return]

    async def timeout(self, elements: list[Any]) -> Sequence[Collection[Any]]:
        return await self.inner.timeout(elements)


class _WithTimeoutHook(RateLimitedFunction):
    async def timeout(self, element: Any) -> Collection[Any]:
        return await self.inner.timeout(element)


class _WithInvokeNow(RateLimitedFunction):
    def invoke_now(self, element: Any) -> Collection[Any] | None:
        return self.inner.invoke_now(element)  # answered at hand: no call, no token


class _WithBoth(_WithTimeoutHook, _WithInvokeNow):
    """Both hooks of the wrapped function kept."""


def rate_limited(fn: Any, limit: TaskRate) -> RateLimitedFunction:
    """``fn`` (an :class:`AsyncFunction` or ``async def``) behind ``limit``, keeping its own
    timeout hook and ``invoke_now`` fast path, if it has them."""
    inner = as_async_function(fn)
    hook = has_timeout_hook(inner)
    now = now_invoker(inner) is not None
    kind = (
        _WithBoth
        if hook and now
        else _WithTimeoutHook
        if hook
        else _WithInvokeNow
        if now
        else RateLimitedFunction
    )
    return kind(inner, limit)
