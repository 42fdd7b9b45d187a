"""Hypothesis properties of the async batch wait operator (docs/semantics.md §1.8), on virtual
time: random inputs with watermarks, sync and async sources with random gaps, batch sizes,
batch timeouts, capacities, per-batch latencies, per-batch retries, both output modes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asyncio_lookup.runtime import (
    AsyncBatchFunction,
    AsyncBatchWaitOperator,
    OutputMode,
    RetryPredicates,
    RetryStrategies,
    Watermark,
)

from .virtual_time import VirtualTimeLoop


class Retryable(Exception):
    pass


@dataclass(frozen=True)
class Case:
    items: list[Any]  # record ids (int) and Watermarks
    gaps: list[float]  # virtual seconds before each item is read (async source)
    async_source: bool
    batch_size: int
    batch_timeout: float | None
    capacity: int
    ordered: bool
    latencies: list[float]  # per call, cycled
    fail_first: frozenset[int]  # batches (by first record) whose first attempt fails
    retry: bool


@st.composite
def cases(draw: Any) -> Case:
    n = draw(st.integers(0, 30))
    items: list[Any] = []
    marks = 0
    for record in range(n):
        if draw(st.integers(0, 6)) == 0:
            marks += 1
            items.append(Watermark(marks))
        items.append(record)
    async_source = draw(st.booleans())
    retry = draw(st.booleans())
    return Case(
        items=items,
        gaps=draw(
            st.lists(
                st.sampled_from([0.0, 0.0, 0.1, 0.4, 1.0, 2.5]),
                min_size=len(items),
                max_size=len(items),
            )
        ),
        async_source=async_source,
        batch_size=draw(st.integers(1, 6)),
        batch_timeout=draw(st.sampled_from([None, 0.3, 1.0])) if async_source else None,
        capacity=draw(st.integers(1, 4)),
        ordered=draw(st.booleans()),
        latencies=draw(st.lists(st.sampled_from([0.0, 0.2, 1.0, 3.0]), min_size=1, max_size=5)),
        fail_first=frozenset(draw(st.sets(st.integers(0, 30), max_size=6)))
        if retry
        else frozenset(),
        retry=retry,
    )


@dataclass
class Recorder(AsyncBatchFunction[int, Any]):
    case: Case
    calls: list[tuple[list[int], float]] = field(default_factory=list)  # (batch, time)
    batch_ids: dict[int, set[tuple[int, ...]]] = field(default_factory=dict)  # first -> records
    rows_in_calls: int = 0  # rows handed to the function (first attempts) and not emitted
    max_rows_in_calls: int = 0
    concurrent: int = 0
    max_concurrent: int = 0
    closed: int = 0

    async def close(self) -> None:
        self.closed += 1

    async def async_invoke_batch(self, elements: list[int]) -> list[list[Any]]:
        loop = asyncio.get_running_loop()
        first = elements[0]
        attempts = self.batch_ids.setdefault(first, set())
        if not attempts:
            self.rows_in_calls += len(elements)
            self.max_rows_in_calls = max(self.max_rows_in_calls, self.rows_in_calls)
        attempts.add(tuple(elements))
        self.calls.append((list(elements), loop.time()))
        self.concurrent += 1
        self.max_concurrent = max(self.max_concurrent, self.concurrent)
        try:
            await asyncio.sleep(self.case.latencies[len(self.calls) % len(self.case.latencies)])
        finally:
            self.concurrent -= 1
        if first in self.case.fail_first and len(attempts) == 1 and self.attempt(first) == 1:
            raise Retryable(first)
        return [[("out", e)] for e in elements]

    def attempt(self, first: int) -> int:
        return sum(1 for batch, _ in self.calls if batch[0] == first)


@dataclass
class Observed:
    emitted: list[Any]
    read_at: dict[int, float]
    max_read_ahead: int
    error: BaseException | None
    leftover_tasks: int
    leftover_timers: int


def run_case(case: Case, fn: Recorder) -> Observed:
    op = AsyncBatchWaitOperator(
        fn,
        batch_size=case.batch_size,
        batch_timeout=case.batch_timeout,
        timeout=100.0 if case.retry else None,
        capacity=case.capacity,
        output_mode=OutputMode.ORDERED if case.ordered else OutputMode.UNORDERED,
        retry_strategy=RetryStrategies.fixed_delay(
            1, 0.5, exception_predicate=RetryPredicates.exception_type(Retryable)
        )
        if case.retry
        else RetryStrategies.NO_RETRY,
    )
    read_at: dict[int, float] = {}
    state = {"read": 0, "emitted": 0, "max": 0}

    def note_read(item: Any) -> None:
        if not isinstance(item, Watermark):
            read_at[item] = asyncio.get_running_loop().time()
            state["read"] += 1
            state["max"] = max(state["max"], state["read"] - state["emitted"])

    async def async_source() -> Any:
        for gap, item in zip(case.gaps, case.items, strict=True):
            if gap:
                await asyncio.sleep(gap)
            note_read(item)
            yield item

    def sync_source() -> Any:
        for item in case.items:
            note_read(item)
            yield item

    emitted: list[Any] = []

    async def consume() -> tuple[BaseException | None, int]:
        error: BaseException | None = None
        source = async_source() if case.async_source else sync_source()
        try:
            async for item in op.process(source):
                if isinstance(item, Watermark):
                    emitted.append(item)
                    continue
                record, outputs = item
                assert list(outputs) == [("out", record)]
                emitted.append(record)
                state["emitted"] += 1
                fn.rows_in_calls -= 1
        except Exception as raised:
            error = raised
        return error, len(asyncio.all_tasks()) - 1

    loop = VirtualTimeLoop()
    try:
        error, leftover = loop.run_until_complete(consume())
        timers = len(loop.pending_timers())
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()
    return Observed(emitted, read_at, state["max"], error, leftover, timers)


EPS = 1e-6  # virtual time is a sum of float gaps: 5.0 + 0.1 + 0.1 + 0.1 < 5.0 + 0.3
PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(cases())
def test_batches_keep_order_capacity_and_every_row_exactly_once(case: Case) -> None:
    fn = Recorder(case)
    seen = run_case(case, fn)
    assert seen.error is None
    records = [i for i in case.items if not isinstance(i, Watermark)]
    marks = [i for i in case.items if isinstance(i, Watermark)]
    # exactly once per row, every watermark once, in order
    assert sorted(r for r in seen.emitted if not isinstance(r, Watermark)) == records
    assert [w for w in seen.emitted if isinstance(w, Watermark)] == marks
    position = {item: n for n, item in enumerate(case.items)}
    if case.ordered:  # ordered mode keeps input order
        assert seen.emitted == case.items
    else:  # nothing crosses a watermark; a batch's rows stay together and in order
        for item in seen.emitted:
            before = sum(1 for i in case.items[: position[item]] if isinstance(i, Watermark))
            done = sum(
                1 for i in seen.emitted[: seen.emitted.index(item)] if isinstance(i, Watermark)
            )
            assert before == done
        for batch, _ in fn.calls:
            at = seen.emitted.index(batch[0])
            assert seen.emitted[at : at + len(batch)] == batch
    # capacity applies per batch: calls in flight, and rows in calls not yet emitted
    assert fn.max_concurrent <= case.capacity
    assert fn.max_rows_in_calls <= case.capacity * case.batch_size
    # read ahead of emission: capacity batches, one flushed batch, the batch being filled
    assert seen.max_read_ahead <= (case.capacity + 2) * case.batch_size
    # retries: at most max_attempts + 1 calls per batch, each with the same records
    assert all(len(ids) == 1 for ids in fn.batch_ids.values())
    assert all(fn.attempt(first) <= 2 for first in fn.batch_ids)
    assert seen.leftover_tasks == 0 and seen.leftover_timers == 0
    assert fn.closed == 1


@PROPERTY
@given(cases())
def test_a_partial_batch_is_flushed_only_by_its_timeout_a_watermark_or_the_end(
    case: Case,
) -> None:
    fn = Recorder(case)
    seen = run_case(case, fn)
    assert seen.error is None
    first_calls: dict[int, list[int]] = {}
    for batch, _ in fn.calls:
        first_calls.setdefault(batch[0], batch)
    batches = sorted(first_calls.values(), key=lambda b: b[0])
    # the batches partition the input: consecutive records, none across a watermark
    assert [r for b in batches for r in b] == [
        i for i in case.items if not isinstance(i, Watermark)
    ]
    for batch in batches:
        assert 1 <= len(batch) <= case.batch_size
        start = case.items.index(batch[0])
        assert case.items[start : start + len(batch)] == batch
        if case.batch_timeout is not None:  # the time trigger: no batch spans more than it
            assert seen.read_at[batch[-1]] - seen.read_at[batch[0]] <= case.batch_timeout + EPS
        if len(batch) == case.batch_size:
            continue
        after = start + len(batch)
        if after == len(case.items) or isinstance(case.items[after], Watermark):
            continue  # the end of the input, or a watermark, flushed it
        # else only its timeout can have flushed it: the next record came later than that
        assert case.batch_timeout is not None
        assert seen.read_at[case.items[after]] >= seen.read_at[batch[0]] + case.batch_timeout - EPS
