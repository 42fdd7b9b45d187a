"""docs/semantics.md §1.1 capacity/backpressure and §1.2 output order, on virtual time."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from asyncio_lookup.runtime import AsyncWaitOperator, OutputMode, Watermark

from .support import HANG, Reads, Scripted, WithTimeoutHook, collect, const, keys
from .virtual_time import run_virtual

ORDERED, UNORDERED = OutputMode.ORDERED, OutputMode.UNORDERED


def by_element(delays: dict[Any, float]) -> Any:
    return lambda element, attempt: (delays[element], [element])


def test_concurrent_calls_never_exceed_capacity() -> None:
    for mode in (ORDERED, UNORDERED):
        fn = Scripted(lambda e, a: ((e * 7) % 5 * 0.1, [e]))
        op = AsyncWaitOperator(fn, timeout=None, capacity=3, output_mode=mode)
        out = run_virtual(collect(op, range(30)))
        assert sorted(keys(out)) == list(range(30))
        assert fn.max_concurrent == 3


def test_ordered_finished_records_behind_slow_head_keep_their_slots() -> None:
    fn = Scripted(by_element({0: 10.0, 1: 0.1, 2: 0.1}))
    source = Reads([0, 1, 2])
    op = AsyncWaitOperator(fn, timeout=None, capacity=2, output_mode=ORDERED)
    out = run_virtual(collect(op, source))
    # record 1 finished at 0.1 but waits behind the head, so record 2 is read only at 10.
    assert source.at == {0: 0.0, 1: 0.0, 2: 10.0}
    assert keys(out) == [0, 1, 2]


def test_unordered_emitted_record_frees_its_slot_at_once() -> None:
    fn = Scripted(by_element({0: 10.0, 1: 0.1, 2: 0.1}))
    source = Reads([0, 1, 2])
    op = AsyncWaitOperator(fn, timeout=None, capacity=2, output_mode=UNORDERED)
    run_virtual(collect(op, source))
    assert source.at[2] == 0.1


def test_watermarks_take_a_slot() -> None:
    for mode in (ORDERED, UNORDERED):
        fn = Scripted(by_element({0: 5.0, 1: 0.0}))
        wm = Watermark(1)
        source = Reads([0, wm, 1])
        op = AsyncWaitOperator(fn, timeout=None, capacity=2, output_mode=mode)
        out = run_virtual(collect(op, source))
        assert source.at[1] == 5.0, mode  # record 0 and the watermark fill both slots
        assert keys(out) == [0, wm, 1]


def test_retrying_record_keeps_its_slot_and_position() -> None:
    from asyncio_lookup.runtime import RetryPredicates, RetryStrategies

    fn = Scripted(lambda e, a: (0.0, [] if (e == 0 and a < 3) else [e]))
    strategy = RetryStrategies.fixed_delay(5, 1.0, result_predicate=RetryPredicates.EMPTY_RESULT)
    source = Reads([0, 1])
    op = AsyncWaitOperator(fn, timeout=100, capacity=1, retry_strategy=strategy)
    out = run_virtual(collect(op, source))
    assert source.at[1] == 2.0  # read only after record 0's third attempt at t=2
    assert keys(out) == [0, 1]


def test_full_queue_stops_input_while_timers_still_fire() -> None:
    fn = WithTimeoutHook(const(0.0, HANG), timeout_result=["late"])
    source = Reads([0, 1, 2, 3])
    op = AsyncWaitOperator(fn, timeout=3.0, capacity=2)
    out = run_virtual(collect(op, source))
    assert source.at == {0: 0.0, 1: 0.0, 2: 3.0, 3: 3.0}
    assert [t for _, t in fn.timeout_calls] == [3.0, 3.0, 6.0, 6.0]
    assert [(t, item) for t, item in out] == [
        (3.0, (0, ["late"])),
        (3.0, (1, ["late"])),
        (6.0, (2, ["late"])),
        (6.0, (3, ["late"])),
    ]


def test_timeout_starts_at_admission_not_at_stream_start() -> None:
    fn = Scripted(const(0.9))
    op = AsyncWaitOperator(fn, timeout=1.0, capacity=1)
    out = run_virtual(collect(op, [0, 1, 2]))
    assert keys(out) == [0, 1, 2]  # 2.7 s in total, each record within its own 1 s budget
    assert out[-1][0] == 2.7 or abs(out[-1][0] - 2.7) < 1e-9


def test_ordered_output_follows_input_order_and_slow_head_holds_the_rest() -> None:
    fn = Scripted(by_element({0: 3.0, 1: 1.0, 2: 2.0}))
    op = AsyncWaitOperator(fn, timeout=None, capacity=10, output_mode=ORDERED)
    out = run_virtual(collect(op, [0, 1, 2]))
    assert out == [(3.0, (0, [0])), (3.0, (1, [1])), (3.0, (2, [2]))]


def test_unordered_output_follows_completion_order() -> None:
    fn = Scripted(by_element({0: 3.0, 1: 1.0, 2: 2.0}))
    op = AsyncWaitOperator(fn, timeout=None, capacity=10, output_mode=UNORDERED)
    out = run_virtual(collect(op, [0, 1, 2]))
    assert out == [(1.0, (1, [1])), (2.0, (2, [2])), (3.0, (0, [0]))]


def test_unordered_never_crosses_a_watermark() -> None:
    fn = Scripted(by_element({0: 3.0, 1: 1.0, 2: 0.5, 3: 0.1, 4: 2.0}))
    wm1, wm2 = Watermark(1), Watermark(2)
    op = AsyncWaitOperator(fn, timeout=None, capacity=10, output_mode=UNORDERED)
    out = run_virtual(collect(op, [0, 1, wm1, 2, 3, wm2, 4]))
    # segment [0, 1] drains at 3.0; then wm1; then 3 and 2 (finished earlier, in completion
    # order); then wm2; record 4 (done at 2.0) follows it.
    assert keys(out) == [1, 0, wm1, 3, 2, wm2, 4]
    assert [t for t, _ in out] == [1.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0]


def test_watermark_with_nothing_ahead_is_emitted_at_once() -> None:
    for mode in (ORDERED, UNORDERED):
        fn = Scripted(by_element({0: 5.0}))
        wm = Watermark(7)
        op = AsyncWaitOperator(fn, timeout=None, capacity=10, output_mode=mode)
        out = run_virtual(collect(op, [wm, 0]))
        assert out == [(0.0, wm), (5.0, (0, [0]))], mode


def test_consecutive_watermarks_in_unordered_mode() -> None:
    fn = Scripted(by_element({0: 1.0, 1: 0.5}))
    a, b = Watermark(1), Watermark(2)
    op = AsyncWaitOperator(fn, timeout=None, capacity=10, output_mode=UNORDERED)
    out = run_virtual(collect(op, [0, a, b, 1]))
    assert keys(out) == [0, a, b, 1]


def test_outputs_of_a_record_are_emitted_together_in_collection_order() -> None:
    from asyncio_lookup.runtime import AsyncDataStream

    async def fan_out(e: int) -> list[str]:
        await asyncio.sleep(0.01 * (3 - e))
        return [f"{e}a", f"{e}b", f"{e}c"]

    async def run() -> list[Any]:
        stream = AsyncDataStream.unordered_wait([0, 1, 2], fan_out, None)
        return [x async for x in stream]

    assert run_virtual(run()) == ["2a", "2b", "2c", "1a", "1b", "1c", "0a", "0b", "0c"]


def test_empty_collection_emits_nothing_and_frees_the_slot() -> None:
    from asyncio_lookup.runtime import AsyncDataStream

    fn = Scripted(lambda e, a: (0.1, [] if e % 2 else [e]))
    source = Reads(range(6))

    async def run() -> list[Any]:
        return [x async for x in AsyncDataStream.ordered_wait(source, fn, None, capacity=1)]

    assert run_virtual(run()) == [0, 2, 4]
    assert source.at[5] == 0.5  # each empty record freed its slot when it finished


@pytest.mark.parametrize("mode", [ORDERED, UNORDERED])
def test_capacity_holds_while_a_slow_consumer_takes_a_batch(mode: OutputMode) -> None:
    """Entries handed over in one batch count until the consumer has taken each of them."""

    async def instant(element: int) -> list[int]:
        return [element]

    state = {"read": 0, "emitted": 0, "max": 0}

    def source() -> Any:
        for item in range(40):
            state["read"] += 1
            state["max"] = max(state["max"], state["read"] - state["emitted"])
            yield item

    async def consume(op: AsyncWaitOperator[int, int]) -> None:
        async for _ in op.process(source()):
            state["emitted"] += 1
            await asyncio.sleep(0)  # a consumer that does I/O per output
            await asyncio.sleep(0)

    op = AsyncWaitOperator(instant, timeout=None, capacity=3, output_mode=mode)
    run_virtual(consume(op))
    assert state["emitted"] == 40
    assert state["max"] <= 3
