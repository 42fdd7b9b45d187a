"""AsyncDataStream on real event loops: ``for``, ``async for``, chaining, uvloop on/off."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.runtime import (
    AsyncDataStream,
    AsyncFunction,
    RetryPredicates,
    RetryStrategies,
    Watermark,
)
from asyncio_lookup.runtime.loop import uvloop_available

loop_types: list[str] = []
needs_uvloop = pytest.mark.skipif(not uvloop_available(), reason="uvloop not installed")


async def double(x: int) -> list[int]:
    loop_types.append(type(asyncio.get_running_loop()).__module__)
    await asyncio.sleep(0.001 * (x % 3))
    return [x * 2]


def test_for_runs_its_own_loop_and_preserves_order() -> None:
    assert list(AsyncDataStream.ordered_wait(range(50), double, 5.0, capacity=7)) == [
        x * 2 for x in range(50)
    ]


def test_unordered_for_yields_every_output_once() -> None:
    out = list(AsyncDataStream.unordered_wait(range(50), double, 5.0, capacity=7))
    assert sorted(out) == [x * 2 for x in range(50)]


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"stream": "yes"}, "stream"),  # was three records: 'y', 'e', 's'
        ({"stream": b"yes"}, "stream"),
        ({"stream": 5}, "stream"),  # failed only when iterated
        ({"use_uvloop": "yes"}, "use_uvloop"),
        ({"use_uvloop": 1}, "use_uvloop"),
    ],
)
def test_a_stream_or_loop_choice_that_cannot_be_is_refused_when_called(
    kwargs: dict[str, Any], option: str
) -> None:
    arguments: dict[str, Any] = {"stream": [1, 2], "use_uvloop": None, **kwargs}
    for wait in (AsyncDataStream.ordered_wait, AsyncDataStream.unordered_wait):
        with pytest.raises(ConfigurationError) as info:
            wait(arguments["stream"], double, 1.0, use_uvloop=arguments["use_uvloop"])
        assert info.value.option == option


@pytest.mark.skipif(not uvloop_available(), reason="uvloop not installed")
def test_uvloop_by_default_and_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    loop_types.clear()
    list(AsyncDataStream.ordered_wait([1], double, 1.0))
    assert loop_types == ["uvloop"]
    loop_types.clear()
    list(AsyncDataStream.ordered_wait([1], double, 1.0, use_uvloop=False))
    assert loop_types[0].startswith("asyncio")
    loop_types.clear()
    monkeypatch.setenv("ASYNCIO_LOOKUP_UVLOOP", "0")
    list(AsyncDataStream.ordered_wait([1], double, 1.0))
    assert loop_types[0].startswith("asyncio")


async def test_async_for_with_async_source_and_watermarks() -> None:
    async def source() -> Any:
        for i in range(5):
            yield i
            if i == 2:
                yield Watermark(100)

    out = [x async for x in AsyncDataStream.unordered_wait(source(), double, 5.0)]
    assert out[3] == Watermark(100)
    assert sorted(out[:3]) == [0, 2, 4] and sorted(out[4:]) == [6, 8]


async def test_a_stream_is_the_input_of_another() -> None:
    async def plus_one(x: int) -> list[int]:
        await asyncio.sleep(0)
        return [x + 1]

    first = AsyncDataStream.unordered_wait(range(20), double, 5.0, capacity=4)
    second = AsyncDataStream.ordered_wait(first, plus_one, 5.0, capacity=3)
    out = [x async for x in second]
    assert sorted(out) == [x * 2 + 1 for x in range(20)]


def test_chained_streams_with_for() -> None:
    async def plus_one(x: int) -> list[int]:
        return [x + 1]

    chained = AsyncDataStream.ordered_wait(
        AsyncDataStream.ordered_wait(range(10), double, 1.0), plus_one, 1.0
    )
    assert list(chained) == [x * 2 + 1 for x in range(10)]


async def test_for_inside_a_running_loop_is_refused() -> None:
    with pytest.raises(RuntimeError, match="async for"):
        list(AsyncDataStream.ordered_wait([1], double, 1.0))


class Tracked(AsyncFunction[int, int]):
    def __init__(self) -> None:
        self.opened = self.closed = 0
        self.cancelled = 0

    async def open(self) -> None:
        self.opened += 1

    async def async_invoke(self, element: int) -> list[int]:
        try:
            await asyncio.sleep(0 if element < 3 else 10)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return [element]

    async def close(self) -> None:
        self.closed += 1


def test_breaking_out_of_for_cancels_outstanding_calls_and_closes() -> None:
    fn = Tracked()
    for x in AsyncDataStream.ordered_wait(range(10), fn, 60.0, capacity=5):
        if x == 2:
            break
    # 0-2 came out as one batch and keep their slots until taken: only 3 and 4 were in flight
    assert fn.opened == 1 and fn.closed == 1 and fn.cancelled == 2


def test_retry_in_real_time() -> None:
    attempts: dict[int, int] = {}

    async def flaky(x: int) -> list[int]:
        attempts[x] = attempts.get(x, 0) + 1
        if attempts[x] == 1 and x % 2:
            raise ConnectionError("try again")
        return [] if attempts[x] == 1 and x % 3 == 0 else [x]

    strategy = RetryStrategies.fixed_delay(
        2,
        0.005,
        result_predicate=RetryPredicates.EMPTY_RESULT,
        exception_predicate=RetryPredicates.HAS_EXCEPTION,
    )
    stream = AsyncDataStream.unordered_wait_with_retry(range(12), flaky, 5.0, strategy)
    assert sorted(stream) == list(range(12))
    assert stream.metrics.retries == sum(1 for x in range(12) if x % 2 or x % 3 == 0)
    ordered = AsyncDataStream.ordered_wait_with_retry(range(12), flaky, 5.0, strategy)
    attempts.clear()
    assert list(ordered) == list(range(12))


def test_error_propagates_through_for() -> None:
    async def broken(x: int) -> list[int]:
        if x == 3:
            await asyncio.sleep(0.05)
            raise KeyError(x)
        return [x]

    seen: list[int] = []
    with pytest.raises(KeyError):
        for x in AsyncDataStream.ordered_wait(range(10), broken, 5.0):
            seen.append(x)
    assert seen == [0, 1, 2]


class HangsOnOdd(AsyncFunction[int, str]):
    async def async_invoke(self, element: int) -> list[str]:
        await asyncio.sleep(60 if element % 2 else 0)
        return [f"{element} ok"]

    async def timeout(self, element: int) -> list[str]:
        return [f"{element} timed out"]


@pytest.mark.parametrize("use_uvloop", [False, True] if uvloop_available() else [False])
@pytest.mark.parametrize("ordered", [True, False])
def test_timeouts_on_real_loops(use_uvloop: bool, ordered: bool) -> None:
    wait = AsyncDataStream.ordered_wait if ordered else AsyncDataStream.unordered_wait
    # a timeout far above a loaded machine's stalls: an even element must never time out
    stream = wait(range(40), HangsOnOdd(), 0.3, capacity=8, use_uvloop=use_uvloop)
    out = list(stream)
    expected = [f"{x} timed out" if x % 2 else f"{x} ok" for x in range(40)]
    assert out == expected if ordered else sorted(out) == sorted(expected)
    assert stream.metrics.timeouts == 20 and stream.metrics.completed == 40


@pytest.mark.skipif(not uvloop_available(), reason="uvloop not installed")
def test_the_timeout_timer_does_not_spin_under_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    # uvloop's clock and timers step by 1 ms: the timer may fire a fraction of a ms before the
    # deadline; re-arming at that same deadline would spin until the clock ticks.
    import uvloop

    from asyncio_lookup.runtime import AsyncWaitOperator
    from asyncio_lookup.runtime.deadlines import DeadlineQueue

    calls = 0
    on_timer = DeadlineQueue._fire

    def counting(self: DeadlineQueue[Any]) -> None:
        nonlocal calls
        calls += 1
        on_timer(self)

    monkeypatch.setattr(DeadlineQueue, "_fire", counting)

    async def slow(x: int) -> list[int]:
        await asyncio.sleep(1)
        return [x]

    async def main() -> None:
        operator = AsyncWaitOperator(slow, timeout=0.0504, capacity=5)
        with pytest.raises(TimeoutError):
            async for _ in operator.process([1]):
                pass

    loop = uvloop.new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert calls <= 3, f"{calls} timer callbacks for one timeout"


_INTERRUPTED = """
import asyncio, sys
from asyncio_lookup.runtime import AsyncDataStream, AsyncFunction

closed = []

class Interrupted(AsyncFunction):
    async def async_invoke(self, element):
        await asyncio.sleep(0.001)
        if element == 3:
            raise KeyboardInterrupt
        return [element]

    async def close(self):
        closed.append(True)

stream = AsyncDataStream.ordered_wait(
    range(6), Interrupted(), 5.0, capacity=2, use_uvloop=sys.argv[1] == "uvloop"
)
try:
    list(stream)
except BaseException as error:
    print(type(error).__name__, closed)
"""


@pytest.mark.parametrize("loop", ["asyncio", pytest.param("uvloop", marks=needs_uvloop)])
def test_a_keyboard_interrupt_in_the_function_goes_out_and_the_stream_is_closed(
    loop: str,
) -> None:
    """uvloop stops the next run at once after a KeyboardInterrupt escaped it: the clean-up
    raised RuntimeError('Event loop stopped before Future completed.') in its place, and the
    function's close() ran only on the loop's next use. (In a process of its own: an
    interrupt's task is logged at exit.)"""
    done = subprocess.run(
        [sys.executable, "-c", _INTERRUPTED, loop], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "KeyboardInterrupt [True]", done.stderr[-2000:]
