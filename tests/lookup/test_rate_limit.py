"""The rate limiter: token bucket and AIMD on a fake clock, the async limiter on virtual time,
and the chain's use of it (every connector call takes a token, cache hits none)."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncio_lookup.errors import ConfigurationError, HttpStatusError, TransientError
from asyncio_lookup.lookup.chain import LookupChain, MissRetry
from asyncio_lookup.lookup.functions import Key, Row
from asyncio_lookup.lookup.options import LookupOptions
from asyncio_lookup.lookup.rate import RateLimit, TaskRate, format_rate, is_throttle, parse_rate
from asyncio_lookup.lookup.rate_control import (
    DECREASE,
    RECOVERY_SECONDS,
    SLOW_START_DOUBLING,
    SLOW_START_FRACTION,
    Aimd,
    TokenBucket,
)
from asyncio_lookup.lookup.rate_limit import RateLimitedLookup, rate_limited
from asyncio_lookup.lookup.rate_limiter import RateLimiter
from tests.lookup.support import AsyncFn, BatchFn, ManualClock, Source, SyncFn, Table
from tests.runtime.virtual_time import run_virtual

# -- parsing -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "rate"),
    [("200", 200.0), ("200/s", 200.0), (" 12000 / min ", 200.0), ("7200/h", 2.0), (0.5, 0.5)],
)
def test_parse_rate(text: Any, rate: float) -> None:
    assert parse_rate("lookup.rate-limit", text) == rate


@pytest.mark.parametrize("bad", ["0", "-3", "fast", "10/day", "nan", True, None, float("inf")])
def test_parse_rate_rejects(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"lookup\.rate-limit.*allowed: a number"):
        parse_rate("lookup.rate-limit", bad)


@given(st.floats(min_value=1e-6, max_value=1e9))
def test_format_rate_round_trips(rate: float) -> None:
    assert parse_rate("r", format_rate(rate)) == rate  # exactly: 1234567/s, 7/min


def test_throttled_time_carries_the_fractions_of_a_millisecond() -> None:
    # each wait of a fast limit is under half a millisecond: rounded one by one, they read 0
    from asyncio_lookup.lookup.chain_build import _WholeMilliseconds

    added: list[int] = []
    waited = _WholeMilliseconds(added.append)
    for _ in range(8000):
        waited(0.000155)
    assert sum(added) == 1240 and all(ms >= 1 for ms in added)


def test_options_round_trip_and_combinations() -> None:
    options = LookupOptions.from_dict(
        {
            "lookup.rate-limit": "600/min",
            "lookup.rate-limit.adaptive": "true",
            "lookup.rate-limit.parallelism": "4",
        }
    )
    assert (options.rate_limit, options.rate_limit_adaptive, options.rate_limit_parallelism) == (
        10.0,
        True,
        4,
    )
    assert LookupOptions.from_dict(options.to_dict()) == options
    assert "lookup.rate-limit" not in LookupOptions().to_dict()
    with pytest.raises(ConfigurationError, match=r"'lookup\.rate-limit'.*required when"):
        LookupOptions.from_dict({"lookup.rate-limit.adaptive": "true"})
    with pytest.raises(ConfigurationError, match=r"'lookup\.rate-limit'.*required when"):
        LookupOptions.from_dict({"lookup.rate-limit.parallelism": "8"})
    with pytest.raises(ConfigurationError, match="no per-key calls to limit"):
        LookupOptions.from_dict(
            {
                "lookup.cache": "FULL",
                "lookup.full-cache.periodic-reload.interval": "1h",
                "lookup.rate-limit": "10",
            }
        )
    with pytest.raises(ConfigurationError, match=r"lookup\.rate-limit\.parallelism.*>= 1"):
        LookupOptions.from_dict({"lookup.rate-limit": "10", "lookup.rate-limit.parallelism": "0"})
    with pytest.raises(ConfigurationError, match="did you mean"):
        LookupOptions.from_dict({"lookup.rate-limt": "10"})


def test_rate_limit_argument() -> None:
    assert RateLimit.of("120/min") == RateLimit(2.0)
    assert RateLimit.of(None) is None
    with pytest.raises(ConfigurationError, match=r"'rate_limit\.adaptive'"):
        RateLimit(10, adaptive="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"'rate_limit\.parallelism'"):
        RateLimit(10, parallelism=0)


def test_is_throttle() -> None:
    assert is_throttle(TransientError("x", status=429))
    assert is_throttle(TransientError("x", status=503))
    assert is_throttle(TransientError("x", retry_after=1.0))
    assert is_throttle(HttpStatusError("x", 429))
    assert not is_throttle(TransientError("connection reset"))
    assert not is_throttle(TransientError("x", status=502))
    assert not is_throttle(HttpStatusError("x", 500))
    assert not is_throttle(ValueError("x"))


# -- token bucket (fake clock) ---------------------------------------------------------------


@settings(max_examples=200)
@given(
    rate=st.floats(min_value=0.5, max_value=1000),
    gaps=st.lists(st.floats(min_value=0, max_value=0.5), min_size=1, max_size=300),
    window=st.floats(min_value=0.01, max_value=5),
)
def test_bucket_never_grants_more_than_rate_times_window_plus_burst(
    rate: float, gaps: list[float], window: float
) -> None:
    """Whatever the arrival times, any window of T seconds holds at most rate*T + burst grants."""
    limit = TaskRate(rate)
    bucket = TokenBucket(rate, limit.burst, 0.0)
    now, granted = 0.0, []
    for gap in gaps:
        now += gap
        if bucket.take(now) == 0.0:
            granted.append(now)
    for i, start in enumerate(granted):
        inside = sum(1 for t in granted[i:] if t <= start + window)
        assert inside <= rate * window + limit.burst + 1e-6


@settings(max_examples=100)
@given(rate=st.floats(min_value=0.5, max_value=5000), n=st.integers(min_value=1, max_value=500))
def test_bucket_serves_a_waiting_client_at_its_rate(rate: float, n: int) -> None:
    """A client that always comes back when told gets its n-th request at (n-1)/rate."""
    bucket = TokenBucket(rate, TaskRate(rate).burst, 0.0)
    now = 0.0
    for _ in range(n):
        delay = bucket.take(now)
        while delay > 0:
            now += delay
            delay = bucket.take(now)
    assert now == pytest.approx((n - 1) / rate, rel=1e-6, abs=1e-9)


def test_bucket_pause_and_rate_change() -> None:
    bucket = TokenBucket(10.0, 1.0, 0.0)
    assert bucket.take(0.0) == 0.0
    bucket.pause(5.0, 0.1)  # a Retry-After of 4.9 s
    assert bucket.take(1.0) == pytest.approx(4.0 + 0.1)
    assert bucket.take(5.1) == 0.0  # one token accrued after the pause
    bucket.set_rate(2.0, 5.1)
    assert bucket.take(5.1) == pytest.approx(0.5)


# -- AIMD (fake clock) ------------------------------------------------------------------------


def _succeed_until(aimd: Aimd, rate: float) -> float:
    """Successes at the pace of the rate until it reaches ``rate``; the seconds they took."""
    seconds = 0.0
    while aimd.rate < rate:
        seconds += 1.0 / aimd.rate
        aimd.succeeded()
    return seconds


def test_aimd_slow_start_doubles_every_half_second() -> None:
    aimd = Aimd(100.0)
    assert aimd.rate == 100.0 * SLOW_START_FRACTION and aimd.slow_start
    # 12.5 -> 100: three doublings
    assert _succeed_until(aimd, 100.0) == pytest.approx(3 * SLOW_START_DOUBLING, rel=0.05)
    assert aimd.rate == 100.0 and aimd.concurrency is None


def test_aimd_halves_once_per_round_trip_and_recovers() -> None:
    aimd = Aimd(100.0)
    _succeed_until(aimd, 100.0)
    assert aimd.throttled(sent_at=0.0, now=0.01, in_flight=8)
    assert (aimd.rate, aimd.concurrency, aimd.slow_start) == (100.0 * DECREASE, 8 * DECREASE, False)
    # answers to calls sent before that decrease say nothing about the new rate
    assert not aimd.throttled(sent_at=0.005, now=0.02, in_flight=8)
    assert aimd.rate == 50.0
    assert aimd.throttled(sent_at=0.03, now=0.04, in_flight=3)
    assert (aimd.rate, aimd.concurrency) == (25.0, 1.5)
    # additive increase: +ceiling/RECOVERY_SECONDS per second of successes
    seconds = _succeed_until(aimd, 100.0)
    assert seconds == pytest.approx(RECOVERY_SECONDS * 0.75, rel=0.05)
    assert aimd.concurrency is not None and aimd.concurrency > 30


@given(st.lists(st.booleans(), max_size=400))
def test_aimd_stays_between_floor_and_ceiling(outcomes: list[bool]) -> None:
    aimd = Aimd(50.0)
    now = 0.0
    for throttled in outcomes:
        now += 0.01
        if throttled:
            aimd.throttled(now - 0.001, now, in_flight=4)
        else:
            aimd.succeeded()
        assert aimd.floor <= aimd.rate <= aimd.ceiling
        assert aimd.concurrency is None or aimd.concurrency >= 1.0


# -- the async limiter (virtual time) ---------------------------------------------------------


def test_limiter_releases_waiters_in_order_at_its_rate() -> None:
    async def main() -> list[float]:
        limiter = RateLimiter(TaskRate(20.0))
        loop = asyncio.get_running_loop()
        start = loop.time()
        times: list[float] = []

        async def call(i: int) -> None:
            sent = await limiter.acquire()
            times.append(sent - start)
            limiter.release(sent, None)

        await asyncio.gather(*(call(i) for i in range(41)))
        return times

    times = run_virtual(main())
    assert times == pytest.approx([i / 20.0 for i in range(41)])


def test_a_cancelled_waiter_takes_no_token() -> None:
    async def main() -> list[float]:
        limiter = RateLimiter(TaskRate(10.0))
        assert await limiter.acquire() == 0.0
        waiting = asyncio.ensure_future(limiter.acquire())
        await asyncio.sleep(0.01)
        waiting.cancel()
        later = await limiter.acquire()
        return [later, limiter.in_flight]

    later, in_flight = run_virtual(main())
    assert later == pytest.approx(0.1) and in_flight == 2


def test_adaptive_limiter_caps_calls_in_flight_after_a_429() -> None:
    async def main() -> tuple[float, float | None, list[float]]:
        limiter = RateLimiter(TaskRate(8000.0, adaptive=True))  # slow start at 1000/s
        sent = [await limiter.acquire() for _ in range(4)]  # four calls in flight
        limiter.release(sent[0], TransientError("429", status=429))
        assert limiter.aimd is not None
        rate, cap = limiter.aimd.rate, limiter.aimd.concurrency
        # three still in flight, cap 2: the next call waits for a slot, not only a token
        waiter = asyncio.ensure_future(limiter.acquire())
        await asyncio.sleep(0.5)
        assert not waiter.done()
        limiter.release(sent[1], None)  # 2 in flight; a success raises the cap to 2.5
        granted = await waiter
        return rate, cap, [granted, limiter.aimd.concurrency or 0.0]

    rate, cap, (granted, after) = run_virtual(main())
    assert rate == 500.0 and cap == 2.0
    assert granted == pytest.approx(0.503) and after == 2.5  # at the release (calls 1 ms apart)


def test_retry_after_pauses_the_whole_task() -> None:
    async def main() -> float:
        limiter = RateLimiter(TaskRate(1000.0))
        sent = await limiter.acquire()
        limiter.release(sent, TransientError("slow down", retry_after=2.0))
        return await limiter.acquire()

    assert run_virtual(main()) == pytest.approx(2.0 + 1 / 1000.0)


def test_rate_limited_async_map_function_keeps_its_hooks() -> None:
    class Fn:
        async def __call__(self, row: Any) -> Collection[Any]:
            return [row]

    wrapped = rate_limited(Fn(), TaskRate(5.0))
    assert type(wrapped).__name__ == "RateLimitedFunction"

    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        times = []
        for i in range(3):
            assert await wrapped.async_invoke(i) == [i]
            times.append(loop.time())
        return times

    # no first token: a slot's tasks, one after another, each get a new limiter, and each
    # first token was one call over the job's budget (ten one-row tasks at 0.5/s: ten calls
    # in 45 ms)
    assert run_virtual(main()) == pytest.approx([0.2, 0.4, 0.6])


def test_a_rate_limited_async_map_call_is_timed_from_its_token_on() -> None:
    """The wait for a token is no call time: callLatency* read 800 ms for 5 ms calls."""
    from asyncio_lookup.runtime import AsyncWaitOperator
    from asyncio_lookup.runtime.sketch import LatencySketch

    async def fn(row: Any) -> Collection[Any]:
        await asyncio.sleep(0.001)
        return [row]

    operator = AsyncWaitOperator(rate_limited(fn, TaskRate(5.0)), timeout=None, capacity=10)
    operator.metrics.calls = sketch = LatencySketch()
    operator.fn.calls = sketch  # type: ignore[attr-defined]  # as async_map wires it
    operator.metrics.calls_timed_by_function = True

    async def main() -> list[Any]:
        return [x async for x in operator.process(range(5))]

    assert run_virtual(main()) == [(i, [i]) for i in range(5)]
    snapshot = operator.metrics.snapshot()
    assert snapshot["callLatencyCount"] == 5
    assert snapshot["callLatencyMaxMs"] < 50, snapshot  # 1 ms calls, up to 1 s in the queue


# -- the chain: what takes a token --------------------------------------------------------------


class _Throttling(AsyncFn):
    """Answers 429 to the first ``n`` calls."""

    def __init__(self, table: Table, n: int) -> None:
        super().__init__(table)
        self.left = n

    async def async_lookup(self, key: Key) -> Collection[Row]:
        self.table.calls.append(key)
        if self.left:
            self.left -= 1
            raise TransientError("429", status=429)
        return [dict(r) for r in self.table.data.get(key, [])]


def _chain(fn: Any, options: dict[str, str], rate: TaskRate, *, sync: Any = None) -> LookupChain:
    table = Table({(i,): [{"id": i}] for i in range(100)})
    source = Source(table, async_=fn(table) if fn else None, sync=sync(table) if sync else None)
    return LookupChain.create(
        source,
        LookupOptions.from_dict(options),
        prefer_async=fn is not None,
        async_sleep=asyncio.sleep,
        rate=rate,
    )


def test_cache_hits_take_no_token_and_calls_do() -> None:
    async def main() -> tuple[float, int, float]:
        chain = _chain(
            AsyncFn,
            {"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "100"},
            TaskRate(10.0),
        )
        await chain.open()
        loop = asyncio.get_running_loop()
        for i in range(5):
            await chain.async_lookup((i,))
        after_misses = loop.time()
        for _ in range(50):
            for i in range(5):
                assert await chain.async_lookup((i,)) == [{"id": i}]
        hits_took = loop.time() - after_misses
        await chain.close()
        return after_misses, chain.metrics.snapshot()["numExternalCalls"], hits_took

    after_misses, calls, hits_took = run_virtual(main())
    assert after_misses == pytest.approx(0.4) and calls == 5 and hits_took == 0.0


def test_batched_calls_take_one_token_each() -> None:
    async def main() -> tuple[float, list[list[Key]]]:
        table = Table({(i,): [{"id": i}] for i in range(100)})
        fn = BatchFn(table)
        chain = LookupChain.create(
            Source(table, async_=fn),
            LookupOptions.from_dict({"lookup.batch.max-size": "10"}),
            prefer_async=True,
            rate=TaskRate(2.0),
        )
        await chain.open()
        loop = asyncio.get_running_loop()
        rows = await asyncio.gather(*(chain.async_lookup((i,)) for i in range(30)))
        assert [r[0]["id"] for r in rows] == list(range(30))
        await chain.close()
        return loop.time(), table.batches

    took, batches = run_virtual(main())
    assert [len(b) for b in batches] == [10, 10, 10]
    assert took == pytest.approx(1.0)  # three calls at 2/s: at 0, 0.5 and 1.0 s


def test_retries_take_tokens_and_a_429_slows_an_adaptive_chain() -> None:
    async def main() -> tuple[dict[str, float], float, list[Key]]:
        table = Table({(1,): [{"id": 1}]})
        fn = _Throttling(table, 2)
        chain = LookupChain.create(
            Source(table, async_=fn),
            LookupOptions.from_dict({"lookup.max-retries": "3"}),
            prefer_async=True,
            rate=TaskRate(100.0, adaptive=True),
        )
        await chain.open()
        assert await chain.async_lookup((1,)) == [{"id": 1}]
        rate = chain._async.limiter.rate  # type: ignore[union-attr]
        await chain.close()
        return chain.metrics.snapshot(), rate, table.calls

    metrics, rate, calls = run_virtual(main())
    assert calls == [(1,)] * 3
    assert metrics["numThrottledCalls"] == 2 and metrics["numFailureRetries"] == 2
    # slow start's 12.5/s halved twice (3.125/s), then one success adds step / rate
    halved = 100.0 * SLOW_START_FRACTION * DECREASE * DECREASE
    assert rate == pytest.approx(halved + (100.0 / RECOVERY_SECONDS) / halved)


@pytest.mark.parametrize("batched", [False, True])
def test_a_chain_counts_and_times_its_calls_from_their_token_on(batched: bool) -> None:
    """numExternalCalls counted calls still waiting for a token (a row's timeout then
    cancelled them: 100 counted, 38 made) and callLatency* timed the wait (1.2 s for 5 ms)."""

    async def main() -> tuple[dict[str, float], Any, int]:
        table = Table({(i,): [{"id": i}] for i in range(100)})
        fn: Any = BatchFn(table) if batched else AsyncFn(table)
        options = {"lookup.batch.max-size": "2", "lookup.batch.max-wait": "0"} if batched else {}
        chain = LookupChain.create(
            Source(table, async_=fn),
            LookupOptions.from_dict(options),
            prefer_async=True,
            rate=TaskRate(10.0),
        )
        await chain.open()
        lookups = [asyncio.ensure_future(chain.async_lookup((i,))) for i in range(20)]
        await asyncio.sleep(0.45)  # tokens at 0, 0.1, ... 0.4 s: five calls made
        for lookup in lookups:
            lookup.cancel()
        await asyncio.gather(*lookups, return_exceptions=True)
        await chain.close()
        made = len(table.batches) if batched else len(table.calls)
        return chain.metrics.snapshot(), chain.metrics.drain_calls(), made

    metrics, calls, made = run_virtual(main())
    assert made == 5
    assert metrics["numExternalCalls"] == made
    assert metrics["numExternalKeys"] == (2 * made if batched else made)
    assert calls.count == made
    assert calls.max_ms < 50  # the calls answer at once; the queue took 0.4 s


class _Slow(AsyncFn):
    """Answers after a second."""

    async def async_lookup(self, key: Key) -> Collection[Row]:
        self.table.calls.append(key)
        await asyncio.sleep(1.0)
        return []


def test_a_call_cut_off_after_its_token_is_counted_not_timed() -> None:
    """Made (the service has it), so counted; cut off by its row's timeout, so not timed."""

    async def main() -> tuple[dict[str, float], Any, int]:
        table = Table({})
        chain = LookupChain.create(
            Source(table, async_=_Slow(table)),
            LookupOptions(),
            prefer_async=True,
            rate=TaskRate(1000.0),
        )
        await chain.open()
        lookups = [asyncio.ensure_future(chain.async_lookup((i,))) for i in range(3)]
        await asyncio.sleep(0.1)
        for lookup in lookups:
            lookup.cancel()
        await asyncio.gather(*lookups, return_exceptions=True)
        await chain.close()
        return chain.metrics.snapshot(), chain.metrics.drain_calls(), len(table.calls)

    metrics, calls, made = run_virtual(main())
    assert made == 3 and metrics["numExternalCalls"] == 3 and calls.count == 0


class _SlowSleepClock(ManualClock):
    """A manual clock whose sleeps also take 50 ms of real time (what a call's timer sees)."""

    def sleep(self, seconds: float) -> None:
        import time

        time.sleep(0.05)
        super().sleep(seconds)


def _sync_chain(clock: ManualClock) -> tuple[LookupChain, Table]:
    """A sync chain over ten keys at 4 calls a second, sleeping on ``clock``."""
    table = Table({(i,): [{"id": i}] for i in range(10)})
    chain = LookupChain.create(
        Source(table, sync=SyncFn(table)),
        LookupOptions(),
        prefer_async=False,
        clock=clock,
        rate=TaskRate(4.0),
    )
    return chain, table


def test_sync_calls_are_counted_from_their_token_on() -> None:
    chain, _ = _sync_chain(_SlowSleepClock(0.0))
    for i in range(9):
        chain.lookup((i,))
    calls = chain.metrics.drain_calls()
    assert chain.metrics.snapshot()["numExternalCalls"] == 9 and calls.count == 9
    assert calls.max_ms < 40  # the waits (50 ms of real time each) are no call time


def test_sync_mode_sleeps_on_the_chain_clock() -> None:
    clock = ManualClock(0.0)
    chain, table = _sync_chain(clock)
    for i in range(9):
        assert chain.lookup((i,)) == [{"id": i}]
    assert clock.now() == pytest.approx(2.0) and len(table.calls) == 9


def test_a_full_caching_provider_takes_no_rate_limit() -> None:
    from asyncio_lookup.lookup.providers import FullCachingLookupProvider
    from asyncio_lookup.lookup.reload import PeriodicCacheReloadTrigger

    provider = FullCachingLookupProvider.of(lambda: [], PeriodicCacheReloadTrigger(60.0))
    with pytest.raises(ConfigurationError, match=r"'lookup\.rate-limit'.*no per-key calls"):
        LookupChain.validate(
            provider, LookupOptions(rate_limit=5.0), prefer_async=True, key_columns=("id",)
        )


def test_a_cancelled_call_neither_raises_nor_lowers_the_adaptive_rate() -> None:
    async def main() -> tuple[float, int]:
        gate = asyncio.Event()
        table = Table({(1,): [{"id": 1}]})
        fn = RateLimitedLookup(AsyncFn(table, gate), TaskRate(80.0, adaptive=True))
        call = asyncio.ensure_future(fn.async_lookup((1,)))
        await asyncio.sleep(0.1)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        return fn.limiter.rate, fn.limiter.in_flight

    rate, in_flight = run_virtual(main())
    assert rate == 80.0 * SLOW_START_FRACTION and in_flight == 0


def test_the_time_calls_wait_for_tokens_is_reported() -> None:
    async def main() -> list[float]:
        spans: list[float] = []
        limiter = RateLimiter(TaskRate(20.0), on_wait=spans.append)  # a burst of 1 token

        async def call() -> None:
            limiter.release(await limiter.acquire(), None)

        await asyncio.gather(*(call() for _ in range(41)))  # 40 wait: 2 s at 20/s
        await asyncio.sleep(1.0)  # idle: no span
        await call()  # a token at hand: no wait
        return spans

    assert run_virtual(main()) == [pytest.approx(2.0)]


def test_a_blocking_caller_reports_its_sleeps() -> None:
    clock = ManualClock()
    spans: list[float] = []
    limiter = RateLimiter(TaskRate(10.0), clock=clock.now, on_wait=spans.append)
    for _ in range(3):
        limiter.release_blocking(limiter.acquire_blocking(clock.sleep), None)
    assert spans == [pytest.approx(0.1), pytest.approx(0.1)]


def test_a_chain_sharing_its_table_s_cache_reports_its_throttling_there() -> None:
    """A second join of one table (another mode or retry: another chain, the same cache
    scope) reports into the scope's metric group; its limiter counted into the chain's own,
    which nothing reports."""

    async def main() -> int:
        table = Table({(i,): [{"id": i}] for i in range(10)})
        options = LookupOptions.from_dict(
            {"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "100"}
        )
        chains = [
            LookupChain.create(
                Source(table, async_=AsyncFn(table)),
                options,
                prefer_async=True,
                async_sleep=asyncio.sleep,
                rate=TaskRate(5.0),
                cache_scope="Items",
                key_columns=("id",),
                miss_retry=retry,
            )
            for retry in (None, MissRetry(delay=0.01, max_attempts=1))
        ]
        for chain in chains:
            await chain.open()
        second = chains[1]
        for i in range(6):
            await second.async_lookup((i,))
        snapshot = second.metrics.snapshot()
        for chain in chains:
            await chain.close()
        return int(snapshot["throttledTimeMs"])

    assert run_virtual(main()) == pytest.approx(1000, abs=2)  # 5 calls wait 0.2 s each
