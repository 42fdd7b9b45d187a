"""Key-ordered mode (FLIP-519, docs/semantics.md §1.2 and §1.6): hypothesis properties on
virtual time, and proof that they catch an implementation that lets two records of a key run.

Random keys, per-attempt latencies and outcomes (result, empty result, retryable error, fatal
error, hang, no collection), capacities, timeouts, retries, watermarks, an error output or none.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from asyncio_lookup.errors import ConfigurationError, ResultTypeError
from asyncio_lookup.runtime import (
    AsyncBatchWaitOperator,
    AsyncDataStream,
    AsyncWaitOperator,
    OutputMode,
    RetryPredicates,
    RetryStrategies,
    Watermark,
    keyed,
)
from asyncio_lookup.runtime.keyed import KeyedHandler, KeyOrder

from .support import HANG, Call, Scripted, WithTimeoutHook, collect, const, keys
from .test_properties import (
    ATTEMPT,
    Fatal,
    Retryable,
    check_calls_and_cleanup,
    observe,
    outcome_of,
    retry_strategy,
)
from .test_properties import Observed as PlainObserved
from .virtual_time import run_virtual


@dataclass(frozen=True)
class Case:
    items: list[Any]  # record ids (int) and Watermarks
    key_of: dict[int, int]
    scripts: dict[int, list[tuple[float, str]]]
    capacity: int
    timeout: float | None
    max_attempts: int  # 0 = no retry
    retry_delay: float
    hook: bool
    error_output: bool
    now: frozenset[int] = frozenset()  # records whose first attempt is answered at admission


@st.composite
def cases(draw: Any) -> Case:
    n = draw(st.integers(0, 16))
    distinct = draw(st.integers(1, 4))
    items: list[Any] = []
    key_of: dict[int, int] = {}
    scripts: dict[int, list[tuple[float, str]]] = {}
    watermarks = 0
    for record in range(n):
        if draw(st.integers(0, 5)) == 0:
            watermarks += 1
            items.append(Watermark(watermarks))
        key_of[record] = draw(st.integers(0, distinct - 1))
        scripts[record] = draw(st.lists(ATTEMPT, min_size=1, max_size=4))
        items.append(record)
    max_attempts = draw(st.integers(0, 3))
    timeout = (
        draw(st.sampled_from([None, 1.0, 2.5, 5.0]))
        if max_attempts == 0
        else draw(st.sampled_from([1.0, 2.5, 5.0]))
    )
    if timeout is None:  # a hang would never end: make it slow instead
        scripts = {r: [(d, "ok" if o == "hang" else o) for d, o in a] for r, a in scripts.items()}
    return Case(
        items=items,
        key_of=key_of,
        scripts=scripts,
        capacity=draw(st.integers(1, 6)),
        timeout=timeout,
        max_attempts=max_attempts,
        retry_delay=draw(st.sampled_from([0.1, 0.5, 1.3])),
        hook=draw(st.booleans()),
        error_output=draw(st.booleans()),
        now=frozenset(r for r in range(n) if draw(st.integers(0, 3)) == 0),
    )


class PerKey:
    """Counts the calls of each key running at once (an attempt runs until it returns, raises
    or has taken its cancellation)."""

    def __init__(self, key_of: dict[int, int]) -> None:
        self.key_of = key_of
        self.running: dict[int, int] = {}
        self.most = 0

    def enter(self, element: int) -> None:
        key = self.key_of[element]
        self.running[key] = self.running.get(key, 0) + 1
        self.most = max(self.most, self.running[key])

    def leave(self, element: int) -> None:
        self.running[self.key_of[element]] -= 1


class _Tracking:
    """Counts each key's calls in flight; answers the first attempt of the records in ``now``
    at once through ``invoke_now`` (a cache hit: the path where a record frees its key inside
    its own start)."""

    per_key: PerKey
    now: frozenset[int] = frozenset()
    calls: list[Call]
    script: Any

    async def async_invoke(self, element: Any) -> Any:
        self.per_key.enter(element)
        try:
            return await super().async_invoke(element)  # type: ignore[misc]
        finally:
            self.per_key.leave(element)

    def invoke_now(self, element: Any) -> Any:
        if element not in self.now:
            return None
        _, outcome = self.script(element, 1)
        if outcome == HANG or outcome is None:
            return None  # not at hand: the first attempt runs async_invoke
        self.per_key.enter(element)
        self.per_key.leave(element)
        self.calls.append(Call(element, 1, asyncio.get_running_loop().time()))
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


class Tracked(_Tracking, Scripted):
    pass


class TrackedWithHook(_Tracking, WithTimeoutHook):
    pass


@dataclass
class Observed(PlainObserved):
    most_per_key: int = 0  # records of one key in flight at once, at most


def run_case(case: Case) -> Observed:
    def script(record: int, attempt: int) -> tuple[float, Any]:
        attempts = case.scripts[record]
        delay, kind = attempts[min(attempt, len(attempts)) - 1]
        return delay, outcome_of(record, kind)

    fn: Tracked | TrackedWithHook = (
        TrackedWithHook(script, timeout_result=["T"]) if case.hook else Tracked(script)
    )
    per_key = fn.per_key = PerKey(case.key_of)
    fn.now = case.now
    op = AsyncWaitOperator(
        fn,
        timeout=case.timeout,
        capacity=case.capacity,
        output_mode=OutputMode.KEY_ORDERED,
        retry_strategy=retry_strategy(case.max_attempts, case.retry_delay),
        key_selector=case.key_of.__getitem__,
        on_error=(lambda element, error, attempts: ["E"]) if case.error_output else None,
    )
    seen = observe(op, fn, case.items)
    return Observed(**vars(seen), most_per_key=per_key.most)


def check_invariants(case: Case, seen: Observed) -> None:
    records = [i for i in case.items if not isinstance(i, Watermark)]
    # exactly once (at most once, together; every record when the stream ends normally)
    assert all(count == 1 for count in seen.emit_counts.values())
    for record, out in seen.outputs.items():
        possible = [outcome_of(record, kind) for _, kind in case.scripts[record]]
        assert out in [list(p) for p in possible if isinstance(p, list)] + [["T"], ["E"]]
    if seen.error is None:
        assert sorted(seen.emit_counts) == records
        assert [i for i in seen.emitted if isinstance(i, Watermark)] == [
            i for i in case.items if isinstance(i, Watermark)
        ]
    else:
        assert not case.error_output or isinstance(seen.error, (Fatal, Retryable))
        assert isinstance(seen.error, (Retryable, Fatal, TimeoutError, ResultTypeError))
    # per key: output order = input order, and what was emitted is a prefix of the key's input
    for key in set(case.key_of.values()):
        of_key = [r for r in records if case.key_of[r] == key]
        out_of_key = [
            i for i in seen.emitted if not isinstance(i, Watermark) and case.key_of[i] == key
        ]
        assert out_of_key == of_key[: len(out_of_key)]
    # at most one call of a key in flight
    assert seen.most_per_key <= 1
    # watermark barriers: nothing crosses a watermark, watermarks in order
    position = {item: n for n, item in enumerate(case.items)}
    marks_before = 0
    for item in seen.emitted:
        input_marks = sum(1 for i in case.items[: position[item]] if isinstance(i, Watermark))
        if isinstance(item, Watermark):
            assert item.timestamp == marks_before + 1
            marks_before += 1
        else:
            assert input_marks == marks_before
    # capacity counts the records waiting for their key
    assert seen.max_occupied <= case.capacity
    # calls per record, and always: nothing left running, close() ran
    check_calls_and_cleanup(seen, case.max_attempts)


PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(cases())
def test_key_ordered_invariants_hold_with_random_outcomes(case: Case) -> None:
    check_invariants(case, run_case(case))


class TwoInFlight(KeyOrder):
    """Deliberately wrong: starts every record at once, so two records of a key run together
    (and may complete, and be emitted, out of order)."""

    def admit(self, handler: KeyedHandler, key: Any) -> bool:
        handler.key = key
        handler.segment = handler.slot  # reports straight to its segment: nothing waits
        return True


def test_the_properties_catch_two_records_of_a_key_in_flight(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(keyed, "KeyOrder", TwoInFlight)
    falsified = settings(
        PROPERTY,
        database=None,
        max_examples=500,
        print_blob=False,
        report_multiple_bugs=False,
        phases=[Phase.generate],  # finding a counterexample is enough: no shrinking
    )
    with pytest.raises(AssertionError):
        falsified(given(cases())(lambda case: check_invariants(case, run_case(case))))()


def test_the_wrong_implementation_is_caught_on_a_two_record_case(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    case = Case(
        items=[0, 1],
        key_of={0: 7, 1: 7},
        scripts={0: [(2.0, "ok")], 1: [(0.5, "ok")]},
        capacity=4,
        timeout=None,
        max_attempts=0,
        retry_delay=0.1,
        hook=False,
        error_output=False,
    )
    check_invariants(case, run_case(case))  # the real one
    monkeypatch.setattr(keyed, "KeyOrder", TwoInFlight)
    seen = run_case(case)
    assert seen.most_per_key == 2 and seen.emitted == [1, 0]
    with pytest.raises(AssertionError):
        check_invariants(case, seen)


# ------------------------------------------------------------------ examples that state the rule


def test_a_slow_record_holds_only_its_own_key() -> None:
    """Key a's slow head delays a's second record only; key b's records pass it."""
    delays = {"a1": 5.0, "a2": 0.1, "b1": 0.2, "b2": 0.2}
    op = AsyncWaitOperator(
        Scripted(lambda e, n: (delays[e], [e])),
        timeout=None,
        output_mode="key_ordered",
        key_selector=lambda e: e[0],
    )
    timed = run_virtual(collect(op, ["a1", "a2", "b1", "b2"]))
    assert keys(timed) == ["b1", "b2", "a1", "a2"]
    assert [round(t, 6) for t, _ in timed] == [0.2, 0.4, 5.0, 5.1]


def test_a_waiting_record_holds_its_slot_and_its_timeout_starts_when_it_starts() -> None:
    """Three records of one key, 0.6 s each, timeout 1 s: none times out (each one's budget
    starts when the one before it is final); with capacity 2 the third is read only when the
    first is emitted."""
    fn = Scripted(const(0.6))
    op = AsyncWaitOperator(
        fn, timeout=1.0, capacity=2, output_mode="key_ordered", key_selector=lambda e: "k"
    )
    timed = run_virtual(collect(op, [1, 2, 3]))
    assert keys(timed) == [1, 2, 3]
    assert [round(c.at, 6) for c in fn.calls] == [0.0, 0.6, 1.2]
    assert op.metrics.timeouts == 0


def test_retries_keep_the_key_busy() -> None:
    script = {("x", 1): (0.5, []), ("x", 2): (0.5, ["x!"]), ("y", 1): (0.1, ["y"])}
    fn = Scripted(lambda e, n: script[(e[0], n)] if e[0] == "x" else (0.1, [e]))
    stream = AsyncDataStream.key_ordered_wait_with_retry(
        ["x1", "x2"],
        fn,
        lambda e: e[0],
        timeout=10.0,
        retry_strategy=RetryStrategies.fixed_delay(
            2, 1.0, result_predicate=RetryPredicates.EMPTY_RESULT
        ),
    )

    async def run() -> list[Any]:
        return [item async for item in stream]

    assert run_virtual(run()) == ["x!", "x!"]
    assert [(c.element, c.attempt, round(c.at, 6)) for c in fn.calls] == [
        ("x1", 1, 0.0),
        ("x1", 2, 1.5),
        ("x2", 1, 2.0),
        ("x2", 2, 3.5),
    ]


def test_a_base_exception_from_a_waiting_records_invoke_now_ends_the_stream() -> None:
    """Record b waits for a's key; a times out and its timeout hook frees the key, which starts
    b, whose invoke_now raises a BaseException (a test framework's outcome). It escaped into
    the hook's task: the stream hung with a's result unread."""

    class Outcome(BaseException):
        pass

    class Fn(WithTimeoutHook):
        def invoke_now(self, element: Any) -> Any:
            if element == "b":
                raise Outcome("from b")
            return None

    op = AsyncWaitOperator(
        Fn(lambda e, n: (0.0, HANG), timeout_result=["T"]),
        timeout=1.0,
        output_mode="key_ordered",
        key_selector=lambda e: "k",
    )
    with pytest.raises(Outcome, match="from b"):
        run_virtual(collect(op, ["a", "b"]))


def test_records_waiting_for_their_key_count_in_flight() -> None:
    """numInFlight: records admitted and not final; one waiting for its key is admitted."""
    seen: list[int] = []
    fn = Scripted(const(1.0))
    op = AsyncWaitOperator(
        fn, timeout=None, capacity=10, output_mode="key_ordered", key_selector=lambda e: "k"
    )

    async def run() -> None:
        async def peek() -> None:
            await asyncio.sleep(0.5)
            seen.append(op.metrics.in_flight)

        task = asyncio.ensure_future(peek())
        await collect(op, list(range(5)))
        await task

    run_virtual(run())
    assert seen == [5]
    assert op.metrics.in_flight == 0
    # a stream that fails with records still waiting for their key leaves none counted
    failing = AsyncWaitOperator(
        Scripted(lambda e, n: (1.0, ValueError("down"))),
        timeout=None,
        output_mode="key_ordered",
        key_selector=lambda e: "k",
    )
    with pytest.raises(ValueError, match="down"):
        run_virtual(collect(failing, list(range(5))))
    assert failing.metrics.in_flight == 0
    # another key's record completing between the failure and stop() frees its lane's next
    keys = {0: "B", 1: "A", 2: "A", 3: "A"}
    racing = AsyncWaitOperator(
        Scripted(lambda e, n: (1.0, ValueError("down") if e == 0 else [e])),
        timeout=None,
        output_mode="key_ordered",
        key_selector=keys.__getitem__,
    )
    with pytest.raises(ValueError, match="down"):
        run_virtual(collect(racing, [0, 1, 2, 3]))
    assert racing.metrics.in_flight == 0


def test_datastream_key_ordered_wait_runs_with_for() -> None:
    async def double(x: int) -> list[int]:
        await asyncio.sleep(0.001 * (10 - x))
        return [2 * x]

    out = list(AsyncDataStream.key_ordered_wait(range(10), double, lambda x: x % 2, timeout=5))
    assert [v for v in out if v % 4 == 0] == [0, 4, 8, 12, 16]
    assert [v for v in out if v % 4 == 2] == [2, 6, 10, 14, 18]


def test_answers_at_admission_free_their_key_without_recursion() -> None:
    """A long lane of records answered by the fast path (a cache hit) runs in a loop."""

    class Hit(Scripted):
        def invoke_now(self, element: Any) -> Any:
            return None if element == 0 else [element]

    fn = Hit(const(1.0))
    op = AsyncWaitOperator(
        fn, timeout=5, capacity=5000, output_mode="key_ordered", key_selector=lambda e: 0
    )
    timed = run_virtual(collect(op, range(5000)))
    assert keys(timed) == list(range(5000))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"output_mode": "key_ordered"}, "key_selector"),
        ({"output_mode": "key_ordered", "key_selector": "id"}, "key_selector"),
        ({"output_mode": "unordered", "key_selector": lambda e: e}, "KEY_ORDERED"),
        ({"output_mode": "sorted"}, "key_ordered"),
    ],
)
def test_bad_key_settings_are_configuration_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        AsyncWaitOperator(Scripted(const(0.1)), timeout=1, **kwargs)


def test_the_batch_operator_refuses_key_ordered() -> None:
    async def batch(rows: list[Any]) -> list[list[Any]]:
        return [[r] for r in rows]

    with pytest.raises(ConfigurationError, match="per record"):
        AsyncBatchWaitOperator(batch, batch_size=2, timeout=1, output_mode="key_ordered")


def test_an_unhashable_key_fails_the_stream_with_a_clear_error() -> None:
    op = AsyncWaitOperator(
        Scripted(const(0.1)), timeout=1, output_mode="key_ordered", key_selector=lambda e: [e]
    )
    with pytest.raises(TypeError, match="not hashable"):
        run_virtual(collect(op, [1]))
    assert op.metrics.in_flight == 0  # the record never took its slot


def test_a_timed_out_call_unwinds_before_the_next_call_of_its_key() -> None:
    """Record 1's call outlives its deadline (1 s) and takes 0.5 s to unwind its cancellation;
    record 1 is final (error output) at 1 s, but record 2 of the same key is called at 1.5 s."""

    class SlowToCancel(Scripted):
        async def async_invoke(self, element: Any) -> Any:
            if element != 1:
                return await super().async_invoke(element)
            self.calls.append(Call(element, 1, asyncio.get_running_loop().time()))
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                await asyncio.sleep(0.5)  # cleanup before the cancellation goes through
                raise
            return [element]

    fn = SlowToCancel(const(0.1))
    op = AsyncWaitOperator(
        fn,
        timeout=1.0,
        output_mode="key_ordered",
        key_selector=lambda e: "k",
        on_error=lambda element, error, attempts: ["E"],
    )
    timed = run_virtual(collect(op, [1, 2]))
    assert [(round(t, 6), item) for t, item in timed] == [(1.0, (1, ["E"])), (1.6, (2, [2]))]
    assert [(c.element, round(c.at, 6)) for c in fn.calls] == [(1, 0.0), (2, 1.5)]


def test_a_deadline_armed_while_others_expire_keeps_every_later_deadline_on_time() -> None:
    """A's deadline passes in its retry backoff (final at once, on_error), which starts its
    key's next record B inside the deadline timer's callback; C's deadline must still fire on
    time (the compiled timer callback once raised there and left C to B's deadline)."""

    async def invoke(item: tuple[str, int]) -> list[str]:
        if item[0] == "A":
            return []  # retried after 5 s: the deadline comes first
        await asyncio.Event().wait()  # B and C hang until their deadlines
        return []

    async def source() -> Any:
        yield ("A", 0)
        yield ("B", 0)
        await asyncio.sleep(0.5)
        yield ("C", 1)

    async def run() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        operator = AsyncWaitOperator(
            invoke,
            timeout=1.0,
            capacity=10,
            output_mode=OutputMode.KEY_ORDERED,
            key_selector=lambda item: item[1],
            retry_strategy=RetryStrategies.fixed_delay(
                3, 5.0, result_predicate=RetryPredicates.EMPTY_RESULT
            ),
            on_error=lambda _item, error, _attempts: [type(error).__name__],
        )
        return [(item[0], loop.time()) async for item, _ in operator.process(source())]

    ended = dict(run_virtual(run()))
    assert ended["A"] == pytest.approx(1.0, abs=0.01)
    assert ended["C"] == pytest.approx(1.5, abs=0.01)  # admitted at 0.5, timeout 1 s
    assert ended["B"] == pytest.approx(2.0, abs=0.01)  # started at A's deadline
