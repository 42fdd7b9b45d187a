"""Hypothesis property tests for docs/semantics.md §1.6 invariants 1-5, on virtual time.

Random per-attempt latencies and outcomes (result, empty result, retryable error, fatal error,
hang), capacities, timeouts, retry settings, watermarks, and both output modes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asyncio_lookup.errors import ResultTypeError
from asyncio_lookup.runtime import (
    AsyncRetryStrategy,
    AsyncWaitOperator,
    OutputMode,
    RetryPredicates,
    RetryStrategies,
    Watermark,
)

from .support import HANG, Scripted, WithTimeoutHook
from .virtual_time import VirtualTimeLoop


class Retryable(Exception):
    pass


class Fatal(Exception):
    pass


OUTCOMES = st.sampled_from(
    ["ok", "ok", "ok", "multi", "empty", "retryable", "fatal", "hang", "none"]
)
ATTEMPT = st.tuples(st.integers(0, 30).map(lambda n: n / 10), OUTCOMES)


@dataclass(frozen=True)
class Case:
    items: list[Any]  # record ids (int) and Watermarks
    scripts: dict[int, list[tuple[float, str]]]
    capacity: int
    ordered: bool
    timeout: float | None
    max_attempts: int  # 0 = no retry
    retry_delay: float
    hook: bool


@st.composite
def cases(draw: Any, allow_failures: bool = True) -> Case:
    n = draw(st.integers(0, 14))
    items: list[Any] = []
    scripts: dict[int, list[tuple[float, str]]] = {}
    watermarks = 0
    for record in range(n):
        if draw(st.integers(0, 4)) == 0:
            watermarks += 1
            items.append(Watermark(watermarks))
        attempts = draw(st.lists(ATTEMPT, min_size=1, max_size=4))
        if not allow_failures:  # errors only where a retry follows; the last attempt succeeds
            attempts = [
                (d, o if o in ("ok", "multi", "empty", "retryable", "hang") else "ok")
                for d, o in attempts
            ]
            attempts[-1] = (attempts[-1][0], "ok")
        scripts[record] = attempts
        items.append(record)
    max_attempts = draw(st.integers(0, 3))
    timeout = (
        draw(st.sampled_from([None, 1.0, 2.5, 5.0]))
        if max_attempts == 0
        else draw(st.sampled_from([1.0, 2.5, 5.0]))
    )
    hook = draw(st.booleans())
    if not allow_failures:  # a retryable error only on attempts that may be retried
        scripts = {
            r: [
                (d, "ok" if o == "retryable" and n >= max_attempts else o)
                for n, (d, o) in enumerate(a)
            ]
            for r, a in scripts.items()
        }
    if timeout is None:  # a hang would never end: make it slow instead
        scripts = {r: [(d, "ok" if o == "hang" else o) for d, o in a] for r, a in scripts.items()}
    if not allow_failures and not hook and timeout is not None:
        hook = True
    return Case(
        items=items,
        scripts=scripts,
        capacity=draw(st.integers(1, 6)),
        ordered=draw(st.booleans()),
        timeout=timeout,
        max_attempts=max_attempts,
        retry_delay=draw(st.sampled_from([0.1, 0.5, 1.3])),
        hook=hook,
    )


def outcome_of(record: int, kind: str) -> Any:
    if kind == "ok":
        return [record]
    if kind == "multi":
        return [record, f"{record}b", f"{record}c"]
    if kind == "empty":
        return []
    if kind == "retryable":
        return Retryable(record)
    if kind == "fatal":
        return Fatal(record)
    if kind == "none":
        return None
    return HANG


@dataclass
class Observed:
    emitted: list[Any]  # record ids and watermarks, in emission order
    outputs: dict[int, list[Any]]
    emit_counts: dict[int, int]
    max_occupied: int
    error: BaseException | None
    calls: dict[int, int]
    leftover_tasks: int
    leftover_timers: int
    closed: int


def run_case(case: Case) -> Observed:
    def script(record: int, attempt: int) -> tuple[float, Any]:
        attempts = case.scripts[record]
        delay, kind = attempts[min(attempt, len(attempts)) - 1]
        return delay, outcome_of(record, kind)

    fn: Scripted = WithTimeoutHook(script, timeout_result=["T"]) if case.hook else Scripted(script)
    op = AsyncWaitOperator(
        fn,
        timeout=case.timeout,
        capacity=case.capacity,
        output_mode=OutputMode.ORDERED if case.ordered else OutputMode.UNORDERED,
        retry_strategy=retry_strategy(case.max_attempts, case.retry_delay),
    )
    return observe(op, fn, case.items)


def retry_strategy(max_attempts: int, retry_delay: float) -> AsyncRetryStrategy:
    """Retry an empty result or a :class:`Retryable` error up to ``max_attempts`` (0: none)."""
    if not max_attempts:
        return RetryStrategies.NO_RETRY
    return RetryStrategies.fixed_delay(
        max_attempts,
        retry_delay,
        result_predicate=RetryPredicates.EMPTY_RESULT,
        exception_predicate=RetryPredicates.exception_type(Retryable),
    )


def observe(op: AsyncWaitOperator[Any, Any], fn: Scripted, items: Sequence[Any]) -> Observed:
    """Run ``op`` over ``items`` on virtual time and record what a property checks."""
    state = {"read": 0, "emitted": 0, "max": 0}

    def source() -> Any:
        for item in items:
            state["read"] += 1
            # this item is about to be admitted: admitted-but-not-emitted after admission
            state["max"] = max(state["max"], state["read"] - state["emitted"])
            yield item

    emitted: list[Any] = []
    outputs: dict[int, list[Any]] = {}
    counts: dict[int, int] = {}

    async def consume() -> tuple[BaseException | None, int]:
        error: BaseException | None = None
        try:
            async for item in op.process(source()):
                state["emitted"] += 1
                if isinstance(item, Watermark):
                    emitted.append(item)
                else:
                    record, out = item
                    emitted.append(record)
                    outputs[record] = list(out)
                    counts[record] = counts.get(record, 0) + 1
        except Exception as raised:
            error = raised
        return error, len(asyncio.all_tasks()) - 1

    loop = VirtualTimeLoop()
    try:
        error, leftover = loop.run_until_complete(consume())
        timers = len(loop.pending_timers())
    finally:
        loop.close()
    calls: dict[int, int] = {}
    for call in fn.calls:
        calls[call.element] = calls.get(call.element, 0) + 1
    return Observed(
        emitted, outputs, counts, state["max"], error, calls, leftover, timers, fn.closed
    )


def check_invariants(case: Case, seen: Observed) -> None:
    records = [i for i in case.items if not isinstance(i, Watermark)]
    # 1. at most once, together (and the outputs are one attempt's collection or the hook's)
    assert all(count == 1 for count in seen.emit_counts.values())
    for record, out in seen.outputs.items():
        possible = [outcome_of(record, kind) for _, kind in case.scripts[record]] + [["T"]]
        assert out in [list(p) for p in possible if isinstance(p, list)]
    # 2. order
    position = {item: n for n, item in enumerate(case.items)}
    if case.ordered:
        assert [position[i] for i in seen.emitted] == sorted(position[i] for i in seen.emitted)
    else:
        marks_before = 0
        for item in seen.emitted:
            input_marks = sum(1 for i in case.items[: position[item]] if isinstance(i, Watermark))
            if isinstance(item, Watermark):
                assert item.timestamp == marks_before + 1  # watermarks in order
                marks_before += 1
            else:
                assert input_marks == marks_before  # nothing crosses a watermark
    # 3. capacity
    assert seen.max_occupied <= case.capacity
    # 4. a normal end means everything admitted is final and emitted
    if seen.error is None:
        assert seen.emitted == [i for i in seen.emitted]  # (list, not a generator)
        assert sorted(seen.emit_counts) == records
        assert [i for i in seen.emitted if isinstance(i, Watermark)] == [
            i for i in case.items if isinstance(i, Watermark)
        ]
    else:
        assert isinstance(seen.error, (Retryable, Fatal, TimeoutError, ResultTypeError))
    # 5. calls per record, and always: nothing left running, close() ran
    check_calls_and_cleanup(seen, case.max_attempts)


def check_calls_and_cleanup(seen: Observed, max_attempts: int) -> None:
    """At most the first call and its retries per record; no task or timer left; closed once."""
    assert all(n <= max_attempts + 1 for n in seen.calls.values())
    assert seen.leftover_tasks == 0 and seen.leftover_timers == 0
    assert seen.closed == 1


PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(cases())
def test_invariants_hold_with_random_outcomes(case: Case) -> None:
    check_invariants(case, run_case(case))


@PROPERTY
@given(cases(allow_failures=False))
def test_streams_without_failures_end_normally_with_every_record(case: Case) -> None:
    seen = run_case(case)
    assert seen.error is None
    check_invariants(case, seen)
