"""Failures, retries and timeouts by cause (asyncio_lookup/runtime/causes.py)."""

from __future__ import annotations

import asyncio
import pickle
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from asyncio_lookup.errors import HttpStatusError, LookupFailedError, TransientError
from asyncio_lookup.runtime import AsyncWaitOperator, OperatorMetrics, RetryStrategies
from asyncio_lookup.runtime.causes import (
    FAILURES,
    KINDS,
    MAX_CAUSES,
    MAX_MESSAGE,
    OTHER,
    RETRIED,
    RETRIES,
    TIMEOUTS,
    Causes,
    cause_of,
    merge,
    total,
)


def _raised(error: BaseException, cause: BaseException | None) -> BaseException:
    try:
        try:
            if cause is not None:
                raise cause
        except BaseException as inner:
            raise error from inner
        raise error
    except BaseException as caught:
        return caught


def test_the_cause_is_the_status_else_the_innermost_foreign_class() -> None:
    refused = _raised(TransientError("HTTP GET failed"), ConnectionRefusedError(111, "refused"))
    assert cause_of(refused) == "ConnectionRefusedError"
    assert cause_of(LookupFailedError("gave up")) == "LookupFailedError"
    assert cause_of(TransientError("busy", status=503)) == "HTTP 503"
    assert cause_of(_raised(LookupFailedError("gave up"), HttpStatusError("no", 500))) == "HTTP 500"
    assert cause_of(ValueError("bad")) == "ValueError"


def test_a_timeout_raised_while_cancelling_is_a_timeout() -> None:
    try:
        try:
            raise asyncio.CancelledError
        except asyncio.CancelledError:
            timeout = TimeoutError()
            raise TransientError("no response within 2 s (timeout)") from timeout
    except TransientError as error:
        assert cause_of(error) == "TimeoutError"


def test_first_message_kept_and_secrets_masked() -> None:
    causes = Causes()
    causes.record(RETRIES, ConnectionError("GET http://u:hunter2@db:80/x?token=abc failed"))
    causes.record(RETRIES, ConnectionError("second"))
    causes.record(FAILURES, ValueError("dsn host=db password=hunter2 port=5432"))
    data = causes.to_json()
    assert data["ConnectionError"][RETRIES] == 2
    message = data["ConnectionError"]["message"]
    assert "hunter2" not in message and "abc" not in message
    assert message.startswith("ConnectionError: GET http://u:***@db:80/x?token=***")
    assert "password=***" in data["ValueError"]["message"]
    causes.record(FAILURES, ValueError("x" * 1000))
    assert len(causes.to_json()["ValueError"]["message"]) <= MAX_MESSAGE


def test_distinct_causes_are_capped_and_the_rest_counted_as_other() -> None:
    causes = Causes()
    for n in range(MAX_CAUSES + 5):
        causes.add(f"E{n:02d}", {RETRIES: 1}, f"m{n}")
    data = causes.to_json()
    assert len(data) == MAX_CAUSES + 1
    assert data[OTHER][RETRIES] == 5
    assert total(data, RETRIES) == MAX_CAUSES + 5


def test_take_leaves_it_empty_and_causes_pickle() -> None:
    causes = Causes()
    causes.record(TIMEOUTS, TimeoutError())
    taken = causes.take()
    assert taken.count("TimeoutError", TIMEOUTS) == 1 and not causes
    assert pickle.loads(pickle.dumps(taken)).to_json() == taken.to_json()
    assert pickle.loads(pickle.dumps(OperatorMetrics())).causes.to_json() == {}


names = st.sampled_from([f"E{n}" for n in range(MAX_CAUSES + 6)] + [OTHER, "HTTP 503"])
entries = st.fixed_dictionaries(
    {kind: st.integers(0, 50) for kind in KINDS}, optional={"message": st.text(max_size=8)}
)


@st.composite
def sections(draw: Any) -> dict[str, dict[str, Any]]:
    raw = draw(st.dictionaries(names, entries, max_size=MAX_CAUSES + 6))
    return merge({}, raw)  # a value a task could send: capped


@settings(max_examples=200, deadline=None)
@given(sections(), sections(), sections())
def test_merge_is_associative_and_commutative_and_capped(
    a: dict[str, Any], b: dict[str, Any], c: dict[str, Any]
) -> None:
    assert merge(a, b) == merge(b, a)
    assert merge(merge(a, b), c) == merge(a, merge(b, c))
    merged = merge(merge(a, b), c)
    assert len([name for name in merged if name != OTHER]) <= MAX_CAUSES
    for kind in KINDS:
        assert total(merged, kind) == total(a, kind) + total(b, kind) + total(c, kind)
    assert Causes.from_json(merged).to_json() == merged


def test_the_operator_counts_retries_failures_and_timeouts_by_cause() -> None:
    async def fn(element: int) -> list[int]:
        if element == 0:
            await asyncio.sleep(10)
        if element < 3:
            raise ConnectionResetError(104, "reset by peer")
        return [element]

    async def run() -> OperatorMetrics:
        metrics = OperatorMetrics()
        strategy = RetryStrategies.fixed_delay(2, 0.001, None, lambda e: isinstance(e, OSError))
        operator = AsyncWaitOperator(
            fn,
            timeout=0.2,
            output_mode="unordered",
            retry_strategy=strategy,
            metrics=metrics,
            on_error=lambda element, error, attempts: [],
        )
        async for _ in operator.process(range(5)):
            pass
        return metrics

    data = asyncio.run(run()).causes.to_json()
    assert data["ConnectionResetError"][RETRIES] == 4  # elements 1 and 2, two retries each
    assert data["ConnectionResetError"][RETRIED] == 2
    assert data["ConnectionResetError"][FAILURES] == 2
    assert data["TimeoutError"][TIMEOUTS] == 1  # element 0's deadline
    assert data["TimeoutError"][FAILURES] == 1


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("cannot render")


def test_an_error_that_cannot_be_printed_fails_its_record_and_is_counted() -> None:
    # counting the error once raised inside the attempt: the record was never settled (a hang)
    async def fn(element: int) -> list[int]:
        raise _Unprintable()

    async def run(retry: bool) -> list[Any]:
        metrics = OperatorMetrics()
        operator = AsyncWaitOperator(fn, timeout=5, metrics=metrics)
        if retry:
            strategy = RetryStrategies.fixed_delay(1, 0.001, None, lambda e: True)
            operator = AsyncWaitOperator(fn, timeout=5, retry_strategy=strategy, metrics=metrics)
        try:
            return [item async for item in operator.process(range(2))]
        except _Unprintable as error:
            return [error, metrics.causes.to_json()]

    for retry in (False, True):
        error, causes = asyncio.run(asyncio.wait_for(run(retry), 10))
        assert isinstance(error, _Unprintable)
        assert causes["_Unprintable"][FAILURES] >= 1
        assert (
            causes["_Unprintable"]["message"]
            == "_Unprintable: <str() of _Unprintable raised RuntimeError>"
        )
        if retry:
            assert causes["_Unprintable"][RETRIES] >= 1


def test_a_lookup_context_names_an_error_that_cannot_be_printed() -> None:
    from asyncio_lookup.errors import in_lookup_context

    named = in_lookup_context(_Unprintable(), "lookup of key (1,)")
    assert (
        str(named)
        == "lookup of key (1,): _Unprintable: <str() of _Unprintable raised RuntimeError>"
    )
