"""Error output of the lookup join runner (docs/semantics.md §2.10) over real lookup chains."""

from __future__ import annotations

import asyncio
import pickle
from collections import Counter
from collections.abc import Collection
from decimal import Decimal
from typing import Any

import pytest

from asyncio_lookup.errors import (
    ConfigurationError,
    DataFormatError,
    HintError,
    LookupFailedError,
    TransientError,
)
from asyncio_lookup.lookup.chain import LookupChain
from asyncio_lookup.lookup.failed_rows import OnError, RowFailure, key_text
from asyncio_lookup.lookup.functions import AsyncLookupFunction, Key, LookupFunction, Row
from asyncio_lookup.lookup.hint_resolve import resolve_lookup
from asyncio_lookup.lookup.hints import LookupHint
from asyncio_lookup.lookup.join import (
    JoinedBatch,
    JoinSpec,
    JoinType,
    KeyBinding,
    LookupJoinRunner,
    ProbeBatch,
)
from asyncio_lookup.lookup.options import LookupOptions

KEYS = (KeyBinding("id", left_column="cid"),)
KEEP = "LOOKUP('table'='T', 'on-error'='keep', 'timeout'='2s')"


class Flaky:
    """Key 3 raises a data error, key 5 fails transiently forever, key 7 hangs, key 9 returns
    two rows, every other key up to 20 one row, and keys above 20 none."""

    key_columns = ("id",)

    def __init__(self) -> None:
        self.calls: Counter[Any] = Counter()

    def rows(self, key: Key) -> Collection[Row]:
        self.calls[key[0]] += 1
        if key[0] == 3:
            raise DataFormatError("value of key 3 is not JSON: 'oops'")
        if key[0] == 5:
            raise TransientError("connection reset")
        if key[0] == 9:
            return [{"id": 9, "name": "n9a"}, {"id": 9, "name": "n9b"}]
        return [{"id": key[0], "name": f"n{key[0]}"}] if key[0] <= 20 else []

    def lookup_function(self) -> LookupFunction:
        source = self

        class Sync(LookupFunction):
            def lookup(self, key: Key) -> Collection[Row]:
                return source.rows(key)

        return Sync()

    def async_lookup_function(self) -> AsyncLookupFunction:
        source = self

        class Async(AsyncLookupFunction):
            async def async_lookup(self, key: Key) -> Collection[Row]:
                if key[0] == 7:
                    await asyncio.sleep(3600)
                await asyncio.sleep(0.001 * (key[0] % 3))
                return source.rows(key)

        return Async()

    def scan(self) -> None:
        return None


async def opened(source: Any, *, prefer_async: bool) -> LookupChain:
    chain = LookupChain.create(
        source,
        LookupOptions.from_dict({"lookup.max-retries": "2", "lookup.max-retry-backoff": "5ms"}),
        prefer_async=prefer_async,
        name="T",
        key_columns=("id",),
    )
    await chain.open()
    return chain


def probe(ids: list[Any], payload: str) -> ProbeBatch[str]:
    return ProbeBatch(payload, JoinSpec(JoinType.INNER, KEYS).build_keys({"cid": ids}, len(ids)))


def rows_of(batches: list[JoinedBatch[str]]) -> list[tuple[str, int, Any]]:
    out = []
    for batch in batches:
        listed = set(batch.failures)
        for position, (index, dim) in enumerate(zip(batch.indices, batch.dim_rows, strict=True)):
            assert (position in listed) == isinstance(dim, RowFailure)
            value = dim if isinstance(dim, RowFailure) else None if dim is None else dim["name"]
            out.append((batch.payload, index, value))
    return out


def test_on_error_parses_and_names_what_is_allowed() -> None:
    assert OnError.of("KEEP ") is OnError.KEEP and OnError.of(OnError.FAIL) is OnError.FAIL
    with pytest.raises(ConfigurationError, match=r"'skip' for 'on_error'.*'fail'.*'keep'"):
        OnError.of("skip")
    with pytest.raises(ConfigurationError, match="on_error"):
        OnError.of(True)


def test_the_hint_option_on_error() -> None:
    hint = LookupHint.parse("LOOKUP('table'='T', 'on-error'='Keep')")
    assert hint.on_error == "keep"
    assert "'on-error'='keep'" in hint.to_text()
    assert resolve_lookup(hint, "T").on_error is OnError.KEEP
    assert resolve_lookup("LOOKUP('table'='T')", "T").on_error is OnError.FAIL
    assert resolve_lookup(None, "T").on_error is OnError.FAIL
    with pytest.raises(HintError, match=r"'ignore' for 'on-error'; allowed: 'fail'"):
        LookupHint.parse("LOOKUP('table'='T', 'on-error'='ignore')")
    with pytest.raises(HintError, match="on-error"):
        LookupHint.parse("LOOKUP('table'='T', 'on_error'='keep')")  # unknown: suggests on-error


def test_row_failure_text() -> None:
    failure = RowFailure.of("T", (1, "EU", Decimal("2.50")), ValueError("bad"), 1)
    assert failure.key == '[1, "EU", "2.50"]'
    assert failure.as_dict() == {
        "table": "T",
        "key": '[1, "EU", "2.50"]',
        "error_class": "ValueError",
        "message": "bad",
        "attempts": 1,
    }
    assert key_text({"order_id": 4, "note": "é"}) == '{"order_id": 4, "note": "é"}'
    assert RowFailure.of("T", None, TimeoutError(), 2).message == "TimeoutError()"
    exhausted = LookupFailedError("gave up", attempts=4)
    assert RowFailure.of("T", (5,), exhausted).attempts == 4
    copy = pickle.loads(pickle.dumps(exhausted))
    assert copy.attempts == 4 and str(copy) == "gave up"


@pytest.mark.parametrize("prefer_async", [False, True])
async def test_failed_rows_are_kept_once_each_and_good_rows_joined(prefer_async: bool) -> None:
    source = Flaky()
    chain = await opened(source, prefer_async=prefer_async)
    ids = [1, 3, None, 5, 9, 30, 2] + ([] if not prefer_async else [7, 4])
    try:
        runner: LookupJoinRunner[str] = LookupJoinRunner(
            chain, JoinSpec(JoinType.INNER, KEYS), resolve_lookup(KEEP, "T"), flush_rows=2
        )
        batches = [probe(ids[:4], "b0"), probe(ids[4:], "b1")]
        if prefer_async:
            got = rows_of([b async for b in runner.run_async(batches)])
        else:
            got = rows_of(await asyncio.to_thread(lambda: list(runner.run_sync(batches))))
    finally:
        await chain.close()
    assert runner.operator is None or runner.operator.metrics.failed == runner.failed_rows
    failures = {(p, i): v for p, i, v in got if isinstance(v, RowFailure)}
    good = [(p, i, v) for p, i, v in got if not isinstance(v, RowFailure)]
    expected = [("b0", 0, "n1"), ("b1", 0, "n9a"), ("b1", 0, "n9b"), ("b1", 2, "n2")]
    assert sorted(good) == expected + ([("b1", 4, "n4")] if prefer_async else [])
    if not prefer_async:
        assert got == sorted(got, key=lambda t: (t[0], t[1]))  # sync: input order
    data = failures.pop(("b0", 1))
    assert (data.table, data.key, data.error_class, data.attempts) == (
        "T",
        "[3]",
        "DataFormatError",
        1,
    )
    assert "not JSON" in data.message
    exhausted = failures.pop(("b0", 3))
    assert (exhausted.key, exhausted.error_class, exhausted.attempts) == (
        "[5]",
        "LookupFailedError",
        3,
    )
    assert "connection reset" in exhausted.message and source.calls[5] == 3
    if prefer_async:
        timed_out = failures.pop(("b1", 3))
        assert (timed_out.key, timed_out.error_class) == ("[7]", "TimeoutError")
        assert "did not finish within 2 s" in timed_out.message
    assert failures == {}
    assert runner.failed_rows == (3 if prefer_async else 2)


@pytest.mark.parametrize("prefer_async", [False, True])
async def test_without_error_output_the_first_failure_fails_the_run(prefer_async: bool) -> None:
    chain = await opened(Flaky(), prefer_async=prefer_async)
    try:
        runner: LookupJoinRunner[str] = LookupJoinRunner(
            chain, JoinSpec(JoinType.LEFT, KEYS), resolve_lookup("LOOKUP('table'='T')", "T")
        )
        with pytest.raises(DataFormatError):
            if prefer_async:
                [b async for b in runner.run_async([probe([1, 3, 4], "b0")])]
            else:
                await asyncio.to_thread(lambda: list(runner.run_sync([probe([1, 3], "b0")])))
    finally:
        await chain.close()


async def test_a_raising_condition_is_a_failed_row_and_left_misses_stay_plain() -> None:
    chain = await opened(Flaky(), prefer_async=True)

    def condition(left: Row, dim: Row) -> bool:
        if dim["id"] == 2:
            raise KeyError("total")
        return True

    spec = JoinSpec(JoinType.LEFT, KEYS, condition=condition)
    try:
        runner: LookupJoinRunner[str] = LookupJoinRunner(chain, spec, resolve_lookup(KEEP, "T"))
        batch = ProbeBatch("b0", spec.build_keys({"cid": [1, 2, 30]}, 3, [{}, {}, {}]), [{}] * 3)
        got = rows_of([b async for b in runner.run_async([batch])])
    finally:
        await chain.close()
    assert got[0] == ("b0", 0, "n1") and got[2] == ("b0", 2, None)
    assert isinstance(got[1][2], RowFailure) and got[1][2].error_class == "KeyError"


def test_a_wrapped_foreign_error_reports_its_own_class() -> None:
    from asyncio_lookup.errors import LookupFailedError, TransientError
    from asyncio_lookup.lookup.failed_rows import RowFailure

    class UndefinedTableError(Exception):
        pass

    wrapped = LookupFailedError("lookup table 'T', key (1,): relation missing")
    wrapped.__cause__ = UndefinedTableError('relation "t" does not exist')
    assert RowFailure.of("T", (1,), wrapped).error_class == "UndefinedTableError"
    exhausted = LookupFailedError("lookup table 'T', key (1,): retries exhausted")
    exhausted.__cause__ = TransientError("503")
    assert RowFailure.of("T", (1,), exhausted).error_class == "LookupFailedError"
    assert RowFailure.of("T", (1,), ValueError("x")).error_class == "ValueError"
