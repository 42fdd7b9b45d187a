"""``Rebatcher``: batches in, elements through the operator, each batch's outputs back out."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Collection
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.runtime import AsyncWaitOperator, OutputMode
from asyncio_lookup.runtime.rebatch import Rebatched, Rebatcher


class Item:
    """An element: distinct objects even for equal values (the rebatcher finds them by id)."""

    def __init__(self, value: int) -> None:
        self.value = value


async def fan_out(item: Item) -> Collection[str]:
    """``value % 3`` outputs per element, after a delay that reorders completions."""
    await asyncio.sleep(0.001 * ((item.value * 7) % 5))
    return [f"{item.value}.{i}" for i in range(item.value % 3)]


def items(batch: list[int]) -> list[Item]:
    return [Item(v) for v in batch]


def rebatcher(
    mode: OutputMode = OutputMode.ORDERED, capacity: int = 4, flush_rows: int = 100
) -> Rebatcher[list[int], Item, str]:
    operator: AsyncWaitOperator[Item, str] = AsyncWaitOperator(
        fan_out, timeout=5.0, capacity=capacity, output_mode=mode
    )
    return Rebatcher(operator, items, flush_rows=flush_rows)


async def collect(stream: AsyncIterator[Rebatched[list[int], str]]) -> list[Any]:
    return [(out.batch, list(out.indices), list(out.outputs)) async for out in stream]


def expected(batch: list[int]) -> list[tuple[int, str]]:
    return [(i, f"{v}.{k}") for i, v in enumerate(batch) for k in range(v % 3)]


async def test_ordered_each_batch_out_whole_in_input_order() -> None:
    batches = [[1, 2, 3, 4, 5], [], [0, 3, 6], [8, 2]]
    got = await collect(rebatcher().run(batches))
    # the all-zero-output batch [0, 3, 6] and the empty batch give no output batch
    assert [b for b, _, _ in got] == [[1, 2, 3, 4, 5], [8, 2]]
    for batch, indices, outputs in got:
        assert list(zip(indices, outputs, strict=True)) == expected(batch)


async def test_unordered_keeps_outputs_with_their_batch_and_index() -> None:
    batches = [list(range(b * 10, b * 10 + 10)) for b in range(4)]
    got = await collect(rebatcher(OutputMode.UNORDERED, capacity=7).run(batches))
    pairs: Counter[tuple[int, int, str]] = Counter()
    for batch, indices, outputs in got:
        batch_number = batches.index(batch)
        pairs.update((batch_number, i, o) for i, o in zip(indices, outputs, strict=True))
    assert pairs == Counter((n, i, o) for n, b in enumerate(batches) for i, o in expected(b))


async def test_large_outputs_come_in_pieces_of_flush_rows() -> None:
    batch = [2] * 10  # two outputs each: 20 outputs
    got = await collect(rebatcher(flush_rows=6).run([batch]))
    assert [len(outputs) for _, _, outputs in got] == [6, 6, 6, 2]
    indices = [i for _, chunk, _ in got for i in chunk]
    assert indices == [i for i in range(10) for _ in range(2)]


async def test_reads_an_async_source_and_closes_it() -> None:
    closed = []

    async def source() -> AsyncIterator[list[int]]:
        try:
            yield [1, 4]
            await asyncio.sleep(0.01)
            yield [7]
        finally:
            closed.append(True)

    got = await collect(rebatcher().run(source()))
    assert [(b, i) for b, i, _ in got] == [([1, 4], [0, 1]), ([7], [0])]
    assert closed == [True]


async def test_stopping_early_closes_the_input_and_leaves_no_task() -> None:
    closed = []
    before = set(asyncio.all_tasks())

    async def endless() -> AsyncIterator[list[int]]:
        try:
            while True:
                yield [1, 2, 4, 5]
        finally:
            closed.append(True)

    stream = rebatcher(flush_rows=1).run(endless())
    first = await anext(stream)
    assert first.outputs == ["1.0"]
    await stream.aclose()  # type: ignore[attr-defined]
    assert closed == [True]
    assert set(asyncio.all_tasks()) - before == set()


async def test_elements_must_match_the_batch_size() -> None:
    operator: AsyncWaitOperator[Item, str] = AsyncWaitOperator(fan_out, timeout=5.0)
    short: Rebatcher[list[int], Item, str] = Rebatcher(operator, lambda b: items(b[:-1]))
    with pytest.raises(ValueError, match="a batch of 3 gave 2 elements"):
        await collect(short.run([[1, 2, 3]]))


@pytest.mark.parametrize("flush_rows", [0, -1, True, 2.5])
def test_flush_rows_is_checked(flush_rows: Any) -> None:
    with pytest.raises(ConfigurationError, match="flush_rows"):
        rebatcher(flush_rows=flush_rows)


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 12), min_size=1, max_size=6),
    capacity=st.integers(1, 6),
    ordered=st.booleans(),
)
def test_capacity_bounds_what_is_in_flight_and_each_element_is_out_once(
    sizes: list[int], capacity: int, ordered: bool
) -> None:
    """The consumer admits the rest of a chunk as it frees slots: never past ``capacity``,
    every element exactly once, each batch in input order when ordered."""
    batches = [[b * 100 + i for i in range(n)] for b, n in enumerate(sizes)]
    in_flight, most = 0, 0

    async def tracked(item: Item) -> Collection[str]:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0.0005 * ((item.value * 7) % 3))
        in_flight -= 1
        return [str(item.value)]

    mode = OutputMode.ORDERED if ordered else OutputMode.UNORDERED
    operator: AsyncWaitOperator[Item, str] = AsyncWaitOperator(
        tracked, timeout=5.0, capacity=capacity, output_mode=mode
    )
    got = asyncio.run(collect(Rebatcher(operator, items, flush_rows=5).run(batches)))
    assert most <= capacity
    if sum(sizes) >= capacity:
        assert most == capacity, "the operator fills its capacity"
    seen = Counter((tuple(b), i) for b, indices, _ in got for i in indices)
    assert seen == Counter((tuple(b), i) for b in batches for i in range(len(b)))
    if ordered:
        for batch, indices, outputs in got:
            assert outputs == [str(batch[i]) for i in indices]
            assert indices == sorted(indices)


@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=6), min_size=2, max_size=5),
    delays=st.lists(st.integers(0, 3), min_size=1, max_size=30),
    mode=st.sampled_from([OutputMode.KEY_ORDERED, OutputMode.UNORDERED, OutputMode.ORDERED]),
    capacity=st.integers(2, 8),
)
def test_no_output_overtakes_one_the_operator_emitted_earlier(
    keys: list[list[int]], delays: list[int], mode: OutputMode, capacity: int
) -> None:
    """A batch read later that finished first was yielded before what an earlier, unfinished
    batch had gathered: in key-ordered mode a key's later row came out before its earlier one.
    Now the rebatched outputs, in order, are exactly the operator's emission order."""
    batches = [[b * 100 + k for k in batch_keys] for b, batch_keys in enumerate(keys)]

    async def slow(item: Item) -> Collection[int]:
        position = (item.value // 100) * 10 + item.value % 100
        await asyncio.sleep(0.001 * delays[position % len(delays)])
        return [item.value]

    operator: AsyncWaitOperator[Item, int] = AsyncWaitOperator(
        slow,
        timeout=5.0,
        capacity=capacity,
        output_mode=mode,
        key_selector=(lambda item: item.value % 100) if mode is OutputMode.KEY_ORDERED else None,
    )

    async def run() -> list[int]:
        out: list[int] = []
        async for rebatched in Rebatcher(operator, items, flush_rows=100).run(batches):
            out.extend(rebatched.outputs)
        return out

    got = asyncio.run(run())
    assert sorted(got) == sorted(v for b in batches for v in b)
    if mode is not OutputMode.UNORDERED:  # each key's values in input order
        for key in range(4):
            of_key = [v for v in got if v % 100 == key]
            assert of_key == sorted(of_key), (mode, key, got)
