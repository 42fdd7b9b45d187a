"""The failure retry's budget on a fake clock: outages ridden out, longer ones named."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any

import pytest

from asyncio_lookup.errors import ConfigurationError, LookupFailedError, TransientError
from asyncio_lookup.lookup.chain import LookupChain
from asyncio_lookup.lookup.functions import AsyncLookupFunction, Key, LookupFunction, Row
from asyncio_lookup.lookup.options import LookupOptions
from asyncio_lookup.lookup.retry import FailureRetry, MissRetry
from tests.lookup.support import ManualClock, Source, Table

ROW = {"id": 1, "name": "alice"}


class Outage:
    """A server that refuses every call from ``start`` for ``seconds`` of the clock's time."""

    def __init__(self, clock: ManualClock, seconds: float, error: BaseException | None = None):
        self.clock, self.start, self.seconds = clock, clock.now(), seconds
        self.error = error or ConnectionRefusedError("connection refused")
        self.calls: list[float] = []

    def answer(self, key: Key) -> list[Row]:
        self.calls.append(self.clock.now() - self.start)
        if self.clock.now() - self.start < self.seconds:
            raise self.error
        return [dict(ROW)]


class OutageSync(LookupFunction):
    def __init__(self, outage: Outage) -> None:
        self.outage = outage

    def lookup(self, key: Key) -> Collection[Row]:
        return self.outage.answer(key)


class OutageAsync(AsyncLookupFunction):
    def __init__(self, outage: Outage) -> None:
        self.outage = outage

    async def async_lookup(self, key: Key) -> Collection[Row]:
        return self.outage.answer(key)


async def chain_for(outage: Outage, *, is_async: bool, options: LookupOptions) -> LookupChain:
    clock = outage.clock

    async def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        await asyncio.sleep(0)

    function = OutageAsync(outage) if is_async else OutageSync(outage)
    source = Source(Table(), **({"async_": function} if is_async else {"sync": function}))
    chain = LookupChain.create(
        source,
        options,
        prefer_async=is_async,
        name="Customers",
        clock=clock,
        async_sleep=sleep,
    )
    await chain.open()
    return chain


async def lookup(chain: LookupChain, key: Key) -> list[Row]:
    return await chain.async_lookup(key) if chain.is_async else chain.lookup(key)


@pytest.mark.parametrize("is_async", [False, True])
@pytest.mark.parametrize("seconds", [0.2, 2.0, 5.0, 6.4])
async def test_default_retry_rides_out_an_outage_of_5_seconds_and_more(
    is_async: bool, seconds: float
) -> None:
    clock = ManualClock()
    outage = Outage(clock, seconds)
    chain = await chain_for(outage, is_async=is_async, options=LookupOptions())
    assert await lookup(chain, (1,)) == [ROW]
    assert len(outage.calls) <= 4  # lookup.max-retries keeps Flink's meaning: 3 retries
    assert chain.metrics.snapshot()["numFailureRetries"] == len(outage.calls) - 1
    await chain.close()


@pytest.mark.parametrize("is_async", [False, True])
async def test_a_longer_outage_fails_naming_table_key_attempts_and_last_cause(
    is_async: bool,
) -> None:
    clock = ManualClock()
    outage = Outage(clock, 60.0, TransientError("Redis connect failed: refused"))
    chain = await chain_for(outage, is_async=is_async, options=LookupOptions())
    with pytest.raises(LookupFailedError) as raised:
        await lookup(chain, (7,))
    message = str(raised.value)
    for part in ("(7,)", "'Customers'", "4 attempt(s)", "lookup.max-retries=3"):
        assert part in message
    assert "TransientError: Redis connect failed: refused" in message
    assert raised.value.__cause__ is outage.error
    assert len(outage.calls) == 4
    await chain.close()


def test_backoff_grows_with_jitter_and_is_capped() -> None:
    clock = ManualClock()
    waits: list[list[float]] = []
    for _ in range(20):
        clock.sleeps.clear()
        outage = Outage(clock, float("inf"))
        retry = FailureRetry(max_retries=6, maximum=8.0)
        with pytest.raises(LookupFailedError):
            retry.call((1,), lambda o=outage: o.answer((1,)), sleep=clock.sleep)
        waits.append(list(clock.sleeps))
    for run in waits:
        assert len(run) == 6
        bases = (0.5, 1.5, 4.5, 8.0, 8.0, 8.0)
        for wait, base in zip(run, bases, strict=True):
            assert base <= wait <= min(base + 0.5, 8.0)
    assert len({run[0] for run in waits}) > 1  # jitter: tasks do not retry in lockstep
    assert min(sum(run[:3]) for run in waits) >= 6.5  # the default budget covers 5 s


def test_retry_after_is_honoured_even_above_the_cap() -> None:
    clock = ManualClock()
    errors = [TransientError("429", retry_after=30.0), TransientError("503", retry_after=0.01)]

    def attempt() -> list[Row]:
        if errors:
            raise errors.pop(0)
        return [ROW]

    retry = FailureRetry(max_retries=3, maximum=10.0)
    assert retry.call((1,), attempt, sleep=clock.sleep) == [ROW]
    assert clock.sleeps[0] == 30.0
    assert 1.5 <= clock.sleeps[1] <= 2.0  # the backoff when the server asks for less


async def test_max_retry_backoff_option_caps_the_waits() -> None:
    clock = ManualClock()
    outage = Outage(clock, 3.0)
    options = LookupOptions.from_dict(
        {"lookup.max-retries": "10", "lookup.max-retry-backoff": "1s"}
    )
    chain = await chain_for(outage, is_async=False, options=options)
    assert chain.lookup((1,)) == [ROW]
    assert max(clock.sleeps) <= 1.0 and len(clock.sleeps) >= 3
    await chain.close()


def test_miss_retry_is_the_same_kind_of_policy() -> None:
    clock = ManualClock()
    answers: list[list[Row]] = [[], [], [ROW]]
    retry = MissRetry(delay=2.0, max_attempts=5)
    counted: list[tuple[BaseException | None, int]] = []
    rows = retry.call(
        (1,),
        lambda: answers.pop(0),
        sleep=clock.sleep,
        on_retry=lambda error, attempt: counted.append((error, attempt)),
    )
    # told before each retry: no error (an empty result was retried), the attempt that gave it
    assert rows == [ROW] and clock.sleeps == [2.0, 2.0] and counted == [(None, 1), (None, 2)]
    assert MissRetry(delay=1.0, max_attempts=1).call((1,), list, sleep=clock.sleep) == []


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"max_retries": -1}, "lookup.max-retries"),
        ({"max_retries": 1, "maximum": 0.0}, "lookup.max-retry-backoff"),
    ],
)
def test_failure_retry_validates_its_settings(kwargs: dict[str, float], option: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        FailureRetry(**kwargs)  # type: ignore[arg-type]
    assert raised.value.option == option


def test_failure_retries_and_sync_failures_are_counted_by_cause() -> None:
    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        clock = ManualClock()
        recovers = await chain_for(Outage(clock, 0.1), is_async=True, options=LookupOptions())
        assert await recovers.async_lookup((1,)) == [ROW]  # one retry, at 0.5-1 s
        retried = recovers.metrics.causes.take().to_json()
        await recovers.close()
        options = LookupOptions(max_retries=1)
        down = await chain_for(Outage(clock, 1000.0), is_async=False, options=options)
        with pytest.raises(LookupFailedError):
            down.lookup((1,))
        failed = down.metrics.causes.take().to_json()
        await down.close()
        return retried, failed

    retried, failed = asyncio.run(main())
    assert retried == {
        "ConnectionRefusedError": {
            "failures": 0,
            "retries": 1,
            "retried": 1,
            "timeouts": 0,
            "message": "ConnectionRefusedError: connection refused",
        }
    }
    entry = failed["ConnectionRefusedError"]
    assert (entry["failures"], entry["retries"], entry["retried"]) == (1, 1, 1)


def test_the_final_error_names_a_last_error_that_cannot_be_printed() -> None:
    class Unprintable(TransientError):
        def __str__(self) -> str:
            raise RuntimeError("cannot render")

    def attempt() -> list[Row]:
        raise Unprintable("x")

    retry = FailureRetry(1, 1.0, initial=0.001, jitter=0.0, table="T")
    with pytest.raises(LookupFailedError, match="last error: Unprintable: <str"):
        retry.call((1,), attempt, sleep=lambda _: None)


def test_os_errors_no_retry_fixes_fail_at_once() -> None:
    import ssl

    from asyncio_lookup.lookup.retry import is_transient

    assert is_transient(ConnectionResetError()) and is_transient(TimeoutError())
    assert is_transient(OSError(113, "No route to host"))
    assert is_transient(TransientError("x"))
    for error in (
        FileNotFoundError("dim.csv"),
        PermissionError("dim.csv"),
        IsADirectoryError("dims"),
        ssl.SSLCertVerificationError("certificate verify failed"),
    ):
        assert not is_transient(error), error
    calls: list[int] = []

    def scan() -> list[Row]:
        calls.append(1)
        raise FileNotFoundError("dim.csv")

    with pytest.raises(FileNotFoundError):
        FailureRetry(3, 1.0, initial=5.0).call((), scan, sleep=lambda _: None)
    assert len(calls) == 1


async def test_a_miss_retry_the_deadline_cancels_in_its_wait_is_not_counted() -> None:
    """numLookupMissRetries counted a retry when its wait began: one the operator's deadline
    cancelled during the wait was counted, never made."""

    class Misses(AsyncLookupFunction):
        """Every key a miss; a call is counted when it starts (a deadline may cancel it at
        its first await, after the chain counted it as made)."""

        def __init__(self) -> None:
            self.calls: list[Key] = []

        async def async_lookup(self, key: Key) -> Collection[Row]:
            self.calls.append(key)
            await asyncio.sleep(0)
            return []

    table = Misses()
    chain = LookupChain.create(
        Source(Table({}), async_=table),
        LookupOptions.from_dict({}),
        prefer_async=True,
        miss_retry=MissRetry(delay=0.03, max_attempts=20),
        name="T",
        key_columns=("id",),
    )
    await chain.open()
    try:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(chain.async_lookup((1,)), 0.1)
    finally:
        await chain.close()
    assert len(table.calls) >= 2
    assert chain.metrics.snapshot()["numLookupMissRetries"] == len(table.calls) - 1
