"""Rate limits on the calls a task makes to an external system (docs/semantics.md §2.12).

Three pieces, state apart from I/O (httpcore's manner):

- :class:`TokenBucket`: ``rate`` tokens per second, at most ``burst`` saved; every method takes
  ``now``, so any clock (a fake one in tests) drives it. In any interval of ``T`` seconds it
  grants at most ``rate * T + burst`` requests.
- :class:`Aimd`: the adaptive mode's rate and concurrency: a slow start (from an eighth of the
  ceiling, doubling every 0.5 s), then halved on a throttling answer (429 / 503, or a
  ``Retry-After``) at most once per round trip and raised by ``ceiling / 10`` per second of
  successful calls back to the ceiling (TCP's additive increase, multiplicative decrease).
- :class:`RateLimiter`: both on an event loop (waiters released in order by one loop timer),
  with a blocking form for the sync mode; :class:`RateLimitedLookup` puts it in front of an
  :class:`AsyncLookupFunction` (every point or batch call, retries included, takes a token;
  cache hits never reach it) and :class:`RateLimitedFunction` in front of an ``async_map``
  function (every attempt takes one).
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from asyncio_lookup.errors import ConfigurationError, TransientError
from asyncio_lookup.lookup.functions import AsyncLookupFunction, Key, LookupFunction, Row
from asyncio_lookup.runtime.batch_function import AsyncBatchFunction, as_async_batch_function
from asyncio_lookup.runtime.function import (
    AsyncFunction,
    as_async_function,
    has_timeout_hook,
    invoker,
    now_invoker,
)
from asyncio_lookup.validation import parse_bool, parse_int

#: Answers that mean "too many requests": the adaptive mode backs off on them.
THROTTLE_STATUSES = frozenset({429, 503})
#: A task saves at most this many seconds of its rate (the bucket's burst), at least 1 request.
BURST_SECONDS = 0.05
#: Adaptive mode: the factor a throttling answer multiplies the rate and concurrency by ...
DECREASE = 0.5
#: ... and the seconds of successful calls that climb from 0 back to the ceiling.
RECOVERY_SECONDS = 10.0
#: The adaptive rate never drops below this fraction of the ceiling.
FLOOR_FRACTION = 0.01
#: Adaptive mode starts at this fraction of the ceiling, doubling every this many seconds.
SLOW_START_FRACTION = 0.125
SLOW_START_DOUBLING = 0.5
_SLOW_START_GAIN = math.log(2) / SLOW_START_DOUBLING
#: A token, give or take float rounding (a timer set for a token's time must find one).
_WHOLE = 1.0 - 1e-9

RATE_ALLOWED = (
    "a number of requests per second > 0 (e.g. 200 or '200'), or a rate with a unit: "
    "'200/s', '12000/min', '100000/h'"
)
_UNITS = {"s": 1.0, "sec": 1.0, "second": 1.0, "min": 60.0, "minute": 60.0, "h": 3600.0}


def parse_rate(option: str, value: Any) -> float:
    """Requests per second from a number or ``'N'``, ``'N/s'``, ``'N/min'``, ``'N/h'``."""
    if isinstance(value, bool):
        raise ConfigurationError(option, value, RATE_ALLOWED)
    if isinstance(value, (int, float)):
        rate, per = float(value), 1.0
    elif isinstance(value, str):
        number, _, unit = value.strip().partition("/")
        per_unit = _UNITS.get(unit.strip().lower() or "s")
        try:
            rate = float(number)
        except ValueError:
            raise ConfigurationError(option, value, RATE_ALLOWED) from None
        if per_unit is None:
            raise ConfigurationError(
                option, value, RATE_ALLOWED, reason=f"unknown unit {unit.strip()!r}"
            )
        per = per_unit
    else:
        raise ConfigurationError(option, value, RATE_ALLOWED)
    if not math.isfinite(rate) or rate <= 0:
        raise ConfigurationError(option, value, RATE_ALLOWED, reason="not a positive rate")
    return rate / per


def format_rate(rate: float) -> str:
    """A rate as the text :func:`parse_rate` reads back (requests per second)."""
    return f"{rate:g}/s"


def is_throttle(error: BaseException) -> bool:
    """True for an error that says the service wants fewer requests: a ``status`` of 429 or
    503 (:class:`TransientError`, :class:`~asyncio_lookup.errors.HttpStatusError`, aiohttp's
    ``ClientResponseError``) or a :class:`TransientError` with a ``retry_after``."""
    if getattr(error, "status", None) in THROTTLE_STATUSES:
        return True
    return isinstance(error, TransientError) and error.retry_after is not None


@dataclass(frozen=True)
class RateLimit:
    """A job-wide budget for ``async_map(..., rate_limit=...)``: ``requests_per_second`` (a
    number or ``'N/s'``, ``'N/min'``, ``'N/h'``) shared by the tasks that run at once
    (``parallelism``; default: the task slots the Spark conf describes), adapted on 429 / 503
    answers when ``adaptive``. The same as a lookup table's ``lookup.rate-limit`` options."""

    requests_per_second: float
    adaptive: bool = False
    parallelism: int | None = None

    def __post_init__(self) -> None:
        rate = parse_rate("rate_limit", self.requests_per_second)
        object.__setattr__(self, "requests_per_second", rate)
        object.__setattr__(self, "adaptive", parse_bool("rate_limit.adaptive", self.adaptive))
        if self.parallelism is not None:
            parse_int("rate_limit.parallelism", self.parallelism, minimum=1, text=False)

    @classmethod
    def of(cls, value: Any) -> RateLimit | None:
        """A :class:`RateLimit` from itself, a rate (number or text) or None."""
        if value is None or isinstance(value, RateLimit):
            return value
        return cls(value)


@dataclass(frozen=True)
class TaskRate:
    """What one task may send: ``rate`` requests per second (its share of the job's budget),
    adapted on throttling answers when ``adaptive``."""

    rate: float
    adaptive: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate", parse_rate("rate", self.rate))

    @property
    def burst(self) -> float:
        return max(1.0, self.rate * BURST_SECONDS)


class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` saved; starts with one token."""

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = min(1.0, burst)
        self.updated = now  # tokens are counted up to here (later: nothing accrues before it)

    def _refill(self, now: float) -> None:
        if now > self.updated:
            self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
            self.updated = now

    def take(self, now: float) -> float:
        """Take a token and return 0.0, or take nothing and return the seconds until one."""
        self._refill(now)
        if self.tokens >= _WHOLE and now >= self.updated:
            self.tokens -= 1.0
            return 0.0
        return max(0.0, self.updated - now) + (1.0 - self.tokens) / self.rate

    def set_rate(self, rate: float, now: float) -> None:
        """Tokens saved so far count at the old rate; the burst follows the rate."""
        self._refill(now)
        self.rate = rate
        self.burst = max(1.0, rate * BURST_SECONDS)
        self.tokens = min(self.tokens, self.burst)

    def pause(self, until: float, now: float) -> None:
        """Grant nothing before ``until`` (a ``Retry-After``), saved tokens dropped."""
        self._refill(now)
        if until > self.updated:
            self.tokens = min(self.tokens, 0.0)
            self.updated = until


class Aimd:
    """The adaptive mode's rate (between ``ceiling * FLOOR_FRACTION`` and ``ceiling``) and its
    cap on calls in flight (None: no cap until the first throttling answer).

    It starts as TCP does, slowly: at ``ceiling * SLOW_START_FRACTION``, doubling every
    ``SLOW_START_DOUBLING`` seconds of successful calls, so a ceiling set above what the service
    takes is found without a second of calls at twice its rate; from the first throttling
    answer on, additive increase and multiplicative decrease."""

    def __init__(self, ceiling: float) -> None:
        self.ceiling = ceiling
        self.floor = ceiling * FLOOR_FRACTION
        self.rate = max(self.floor, ceiling * SLOW_START_FRACTION)
        self.slow_start = True
        self.step = ceiling / RECOVERY_SECONDS  # requests/s gained per second of successes
        self.concurrency: float | None = None
        self.decreased_at = -math.inf

    def throttled(self, sent_at: float, now: float, in_flight: int) -> bool:
        """A call sent at ``sent_at`` was answered "too many": decrease, unless the call was
        sent before the latest decrease (its answer says nothing about the lower rate).
        ``in_flight`` counts the calls in flight, this one included. True when decreased."""
        if sent_at < self.decreased_at:
            return False
        self.slow_start = False
        self.rate = max(self.floor, self.rate * DECREASE)
        current = in_flight if self.concurrency is None else min(self.concurrency, in_flight)
        self.concurrency = max(1.0, current * DECREASE)
        self.decreased_at = now
        return True

    def succeeded(self) -> None:
        """One successful call: in slow start ``ln 2 / SLOW_START_DOUBLING`` more rate (the rate
        doubles every ``SLOW_START_DOUBLING`` s at full pace), else ``step / rate`` (``step``
        per second at full pace); one more call in flight per round of calls."""
        if self.rate < self.ceiling:
            gain = _SLOW_START_GAIN if self.slow_start else self.step / self.rate
            self.rate = min(self.ceiling, self.rate + gain)
        if self.concurrency is not None:
            self.concurrency += 1.0 / self.concurrency


class RateLimiter:
    """A task's :class:`TaskRate` on its event loop (:meth:`acquire` / :meth:`release` around
    each call), or blocking (:meth:`acquire_blocking`, the sync mode's one call at a time).

    ``clock`` defaults to the loop's (``time.monotonic`` when blocking). Waiters are granted in
    arrival order; a cancelled waiter takes nothing.
    """

    def __init__(self, limit: TaskRate, clock: Callable[[], float] | None = None) -> None:
        self.limit = limit
        self._clock = clock
        self._bucket: TokenBucket | None = None
        self.aimd = Aimd(limit.rate) if limit.adaptive else None
        self.in_flight = 0
        self.throttled = 0  # throttling answers seen
        self._waiters: deque[asyncio.Future[float]] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._lock = threading.Lock()  # the blocking form may be used from threads

    @property
    def rate(self) -> float:
        return self.aimd.rate if self.aimd is not None else self.limit.rate

    def _now(self) -> float:
        if self._clock is not None:
            return self._clock()
        try:
            return asyncio.get_running_loop().time()
        except RuntimeError:
            return time.monotonic()

    def _tokens(self, now: float) -> TokenBucket:
        if self._bucket is None:
            self._bucket = TokenBucket(self.rate, self.limit.burst, now)
        return self._bucket

    def _has_slot(self) -> bool:
        cap = None if self.aimd is None else self.aimd.concurrency
        return cap is None or self.in_flight < cap

    # -- async ------------------------------------------------------------------------------

    async def acquire(self) -> float:
        """Wait for a token (and, adaptive, a slot); returns the time the call may be sent."""
        now = self._now()
        if not self._waiters and self._has_slot() and self._tokens(now).take(now) == 0.0:
            self.in_flight += 1
            return now
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        self._pump()
        try:
            return await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():  # granted, but its caller is gone
                self.release(future.result(), None, answered=False)
            raise

    def release(
        self, sent_at: float, error: BaseException | None, *, answered: bool = True
    ) -> None:
        """A call sent at ``sent_at`` ended (``error`` when it failed; not ``answered`` when it
        was cancelled, which says nothing about the service): adapt, free its slot."""
        self.in_flight -= 1
        if answered:
            self._outcome(sent_at, error)
        if self._waiters:
            self._pump()

    def _outcome(self, sent_at: float, error: BaseException | None) -> None:
        if error is not None and is_throttle(error):
            self.throttled += 1
            now = self._now()
            bucket = self._tokens(now)
            retry_after = getattr(error, "retry_after", None)
            if retry_after is not None and retry_after > 0:
                bucket.pause(now + float(retry_after), now)
            if self.aimd is not None and self.aimd.throttled(sent_at, now, self.in_flight + 1):
                bucket.set_rate(self.aimd.rate, now)
        elif error is None and self.aimd is not None:
            before = self.aimd.rate
            self.aimd.succeeded()
            if self.aimd.rate != before:
                now = self._now()
                self._tokens(now).set_rate(self.aimd.rate, now)

    def _pump(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiters = self._waiters
        while waiters:
            head = waiters[0]
            if head.done():  # cancelled while waiting
                waiters.popleft()
                continue
            if not self._has_slot():
                return  # a release pumps again
            now = self._now()
            delay = self._tokens(now).take(now)
            if delay > 0.0:
                loop = asyncio.get_running_loop()
                self._timer = loop.call_at(loop.time() + delay, self._pump)
                return
            waiters.popleft()
            self.in_flight += 1
            head.set_result(now)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- blocking ---------------------------------------------------------------------------

    def acquire_blocking(self, sleep: Callable[[float], None] = time.sleep) -> float:
        """:meth:`acquire` for a blocking caller: sleeps with ``sleep`` until a token."""
        while True:
            with self._lock:
                now = self._now()
                delay = self._tokens(now).take(now)
                if delay == 0.0:
                    self.in_flight += 1
                    return now
            sleep(delay)

    def release_blocking(
        self, sent_at: float, error: BaseException | None, *, answered: bool = True
    ) -> None:
        with self._lock:
            self.in_flight -= 1
            if answered:
                self._outcome(sent_at, error)


class RateLimitedLookup(AsyncLookupFunction):
    """``function`` behind a :class:`RateLimiter`: each point or batch call takes one token.
    ``on_throttle`` is called for each throttling answer (the chain's metric)."""

    def __init__(
        self,
        function: AsyncLookupFunction,
        limit: TaskRate,
        on_throttle: Callable[[], None] = lambda: None,
    ) -> None:
        self.function = function
        self.limit = limit
        self.limiter = RateLimiter(limit)
        self._on_throttle = on_throttle

    async def open(self) -> None:
        await self.function.open()

    async def close(self) -> None:
        self.limiter.close()
        await self.function.close()

    @property
    def supports_batch(self) -> bool:
        return self.function.supports_batch

    async def async_lookup(self, key: Key) -> Collection[Row]:
        rows = await _limited_call(self.limiter, self.function.async_lookup, key, self._release)
        return rows  # type: ignore[no-any-return]

    async def async_lookup_batch(
        self, keys: Sequence[Key]
    ) -> Sequence[Collection[Row] | BaseException]:
        sent_at = await self.limiter.acquire()
        try:
            outcomes = await self.function.async_lookup_batch(keys)
        except Exception as error:
            self._release(sent_at, error)
            raise
        except BaseException:
            self.limiter.release(sent_at, None, answered=False)
            raise
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
    ) -> None:
        self.function = function
        self.limiter = RateLimiter(limit, clock=clock or time.monotonic)
        self._sleep = sleep
        self._on_throttle = on_throttle

    def open(self) -> None:
        self.function.open()

    def close(self) -> None:
        self.function.close()

    def lookup(self, key: Key) -> Collection[Row]:
        sent_at = self.limiter.acquire_blocking(self._sleep)
        try:
            rows = self.function.lookup(key)
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


class RateLimitedFunction(AsyncFunction[Any, Any]):
    """An ``async_map`` function behind a :class:`RateLimiter`: each attempt takes a token
    (build with :func:`rate_limited`). One per task: the limiter works on that task's loop."""

    def __init__(self, fn: AsyncFunction[Any, Any], limit: TaskRate) -> None:
        self.inner = fn
        self._call = invoker(fn)
        self.limit = limit
        self.limiter = RateLimiter(limit)

    async def open(self) -> None:
        await self.inner.open()

    async def close(self) -> None:
        self.limiter.close()
        await self.inner.close()

    async def async_invoke(self, element: Any) -> Collection[Any]:
        return await _limited_call(self.limiter, self._call, element)  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return f"RateLimited({self.inner!r}, {format_rate(self.limit.rate)})"


async def _limited_call(
    limiter: RateLimiter,
    call: Callable[[Any], Any],
    argument: Any,
    failed: Callable[[float, BaseException], None] | None = None,
) -> Any:
    """``await call(argument)`` once ``limiter`` gives a token; its outcome told back to it
    (an error through ``failed(sent_at, error)`` when given, e.g. to note a throttle)."""
    sent_at = await limiter.acquire()
    try:
        result = await call(argument)
    except Exception as error:
        if failed is None:
            limiter.release(sent_at, error)
        else:
            failed(sent_at, error)
        raise
    except BaseException:
        limiter.release(sent_at, None, answered=False)
        raise
    limiter.release(sent_at, None)
    return result


class RateLimitedBatchFunction(AsyncBatchFunction[Any, Any]):
    """A batched ``async_map`` function behind a :class:`RateLimiter`: each call of a batch
    (each attempt) takes one token. One per task, like :class:`RateLimitedFunction`."""

    def __init__(self, fn: Any, limit: TaskRate) -> None:
        self.inner = as_async_batch_function(fn, "fn")
        self.limit = limit
        self.limiter = RateLimiter(limit)

    async def open(self) -> None:
        await self.inner.open()

    async def close(self) -> None:
        self.limiter.close()
        await self.inner.close()

    async def async_invoke_batch(self, elements: list[Any]) -> Sequence[Collection[Any]]:
        result = await _limited_call(self.limiter, self.inner.async_invoke_batch, elements)
        return result  # type: ignore[no-any-return]

    async def timeout(self, elements: list[Any]) -> Sequence[Collection[Any]]:
        return await self.inner.timeout(elements)

    def __repr__(self) -> str:
        return f"RateLimited({self.inner!r}, {format_rate(self.limit.rate)})"


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
