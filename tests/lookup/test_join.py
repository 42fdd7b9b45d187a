"""The engine-agnostic lookup join runner (docs/semantics.md §2.1) over real lookup chains."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable, Collection, Iterable
from typing import Any

import pytest

from asyncio_lookup.connectors.memory import InMemoryConnector
from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.lookup.chain import LookupChain
from asyncio_lookup.lookup.functions import AsyncLookupFunction, Key, LookupFunction, Row
from asyncio_lookup.lookup.hint_resolve import ResolvedLookup, resolve_lookup
from asyncio_lookup.lookup.join import (
    JoinedBatch,
    JoinSpec,
    JoinType,
    KeyBinding,
    LookupJoinRunner,
    ProbeBatch,
)
from asyncio_lookup.lookup.options import LookupOptions

DIM = [
    {"id": 1, "name": "a1", "score": 10},
    {"id": 2, "name": "b", "score": 20},
    {"id": 1, "name": "a2", "score": 30},
    {"id": 3, "name": "c", "score": 40},
]
SPEC = JoinSpec(JoinType.INNER, (KeyBinding("id", left_column="cid"),))


async def opened(source: Any, *, prefer_async: bool, hint: str | None = None) -> LookupChain:
    settings = resolve_lookup(hint, "T")
    chain = LookupChain.create(
        source,
        LookupOptions(),
        prefer_async=prefer_async,
        miss_retry=settings.miss_retry(),
        name="T",
        key_columns=("id",),
    )
    await chain.open()
    return chain


def probe(ids: list[Any], spec: JoinSpec = SPEC, payload: str = "b0") -> ProbeBatch[str]:
    rows = [{"cid": i} for i in ids]
    return ProbeBatch(
        payload,
        spec.build_keys({"cid": ids}, len(ids), rows if spec.needs_left_rows else None),
        rows if spec.needs_left_rows else None,
    )


def flat(batches: Iterable[JoinedBatch[str]]) -> list[tuple[str, int, Any]]:
    return [
        (b.payload, i, None if d is None else d["name"])
        for b in batches
        for i, d in zip(b.indices, b.dim_rows, strict=True)
    ]


async def blocking(run: Callable[[Any], Iterable[JoinedBatch[str]]], arg: Any) -> list[Any]:
    """A sync run from an async test: on a thread, as Spark's task thread runs it (a blocking
    lookup on the thread running the loop it waits for is refused)."""
    return await asyncio.to_thread(lambda: list(run(arg)))


async def collect(stream: AsyncIterator[JoinedBatch[str]]) -> list[JoinedBatch[str]]:
    return [b async for b in stream]


# ---------------------------------------------------------------------------- keys and spec


def test_keys_in_dim_order_with_literals_and_nulls() -> None:
    spec = JoinSpec(
        JoinType.LEFT,
        (KeyBinding("region", literal="EU"), KeyBinding("id", left_column="cid")),
    )
    assert spec.key_columns == ("region", "id")
    assert spec.left_key_columns == ("cid",)
    assert spec.build_keys({"cid": [1, None, 3]}, 3) == [("EU", 1), None, ("EU", 3)]


def test_left_condition_turns_keys_off() -> None:
    spec = JoinSpec(
        JoinType.LEFT,
        (KeyBinding("id", left_column="cid"),),
        left_condition=lambda row: row["cid"] != 2,
    )
    batch = probe([1, 2, None], spec)
    assert batch.keys == [(1,), None, None]
    with pytest.raises(ValueError, match="left_rows"):
        spec.build_keys({"cid": [1]}, 1)


def test_finish_applies_filters_then_join_type() -> None:
    rows = [{"name": "x", "score": 1}, {"name": "y", "score": 5}]
    inner = JoinSpec(JoinType.INNER, SPEC.keys, dim_filter=lambda d: d["score"] > 2)
    assert inner.finish(rows, None) == [rows[1]]
    assert inner.finish([rows[0]], None) == []
    left = JoinSpec(JoinType.LEFT, SPEC.keys, condition=lambda lr, d: lr["limit"] > d["score"])
    assert left.finish(rows, {"limit": 3}) == [rows[0]]
    assert left.finish(rows, {"limit": 0}) == [None]


def test_spec_validation() -> None:
    with pytest.raises(ConfigurationError, match="'how'"):
        JoinType.of("full")
    assert JoinType.of("LEFT_OUTER") is JoinType.LEFT
    with pytest.raises(ConfigurationError, match="'on'"):
        JoinSpec(JoinType.INNER, ())
    with pytest.raises(ConfigurationError, match="bound twice"):
        JoinSpec(JoinType.INNER, (KeyBinding("id", "a"), KeyBinding("id", "b")))
    with pytest.raises(ConfigurationError, match="dim_filter"):
        JoinSpec(JoinType.INNER, SPEC.keys, dim_filter="x > 1")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="flush_rows"):
        LookupJoinRunner(None, SPEC, ResolvedLookup("T"), flush_rows=0)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- sync


async def test_sync_inner_and_left_with_multiple_matches_in_connector_order() -> None:
    chain = await opened(InMemoryConnector(DIM, ["id"]), prefer_async=False)
    assert not chain.is_async
    try:
        runner: LookupJoinRunner[str] = LookupJoinRunner(chain, SPEC, ResolvedLookup("T"))
        batches = [probe([1, 9, None, 2]), probe([3], payload="b1")]
        out = flat(await blocking(runner.run_sync, batches))
        assert out == [("b0", 0, "a1"), ("b0", 0, "a2"), ("b0", 3, "b"), ("b1", 0, "c")]
        left = JoinSpec(JoinType.LEFT, SPEC.keys)
        runner = LookupJoinRunner(chain, left, ResolvedLookup("T"))
        out = flat(await blocking(runner.run_sync, [probe([1, 9, None, 2])]))
        assert out == [
            ("b0", 0, "a1"),
            ("b0", 0, "a2"),
            ("b0", 1, None),
            ("b0", 2, None),
            ("b0", 3, "b"),
        ]
        # NULL keys were never looked up: 4 + 3 non-NULL keys in the two runs.
        assert chain.metrics.snapshot()["numLookups"] == 4 + 3
        assert runner.operator_metrics() == {}
    finally:
        await chain.close()


async def test_sync_flushes_large_outputs_in_pieces() -> None:
    chain = await opened(InMemoryConnector(DIM, ["id"]), prefer_async=False)
    try:
        runner: LookupJoinRunner[str] = LookupJoinRunner(
            chain, SPEC, ResolvedLookup("T"), flush_rows=3
        )
        batches = await blocking(runner.run_sync, [probe([1, 1, 1, 2])])
        assert [len(b.indices) for b in batches] == [4, 3]
        assert flat(batches)[-1] == ("b0", 3, "b")
    finally:
        await chain.close()


# ---------------------------------------------------------------------------- async


@pytest.mark.parametrize("mode", ["ordered", "allow_unordered"])
async def test_async_matches_sync(mode: str) -> None:
    ids = [(i * 7) % 5 if i % 6 else None for i in range(60)]
    connector = InMemoryConnector(DIM, ["id"], latency=0.001)
    sync_chain = await opened(connector, prefer_async=False)
    async_chain = await opened(connector, prefer_async=True)
    hint = f"LOOKUP('table'='T', 'output-mode'='{mode}', 'capacity'='4')"
    spec = JoinSpec(JoinType.LEFT, SPEC.keys)
    try:
        batches = [
            probe(ids[:25], spec, "b0"),
            probe([], spec, "empty"),
            probe(ids[25:], spec, "b1"),
        ]
        expected = flat(
            await blocking(
                LookupJoinRunner(sync_chain, spec, resolve_lookup(hint, "T")).run_sync, batches
            )
        )
        runner: LookupJoinRunner[str] = LookupJoinRunner(
            async_chain, spec, resolve_lookup(hint, "T")
        )
        assert runner.is_async
        got = flat(await collect(runner.run_async(batches)))
        if mode == "ordered":
            assert got == expected
        else:
            assert Counter(got) == Counter(expected)
        metrics = runner.operator_metrics()
        assert metrics["numCompleted"] == 60
        assert metrics["numInFlight"] == 0
    finally:
        await sync_chain.close()
        await async_chain.close()


async def test_async_reads_an_async_source() -> None:
    chain = await opened(InMemoryConnector(DIM, ["id"]), prefer_async=True)

    async def source() -> AsyncIterator[ProbeBatch[str]]:
        yield probe([2, 3])
        await asyncio.sleep(0.01)
        yield probe([1], payload="b1")

    try:
        runner: LookupJoinRunner[str] = LookupJoinRunner(chain, SPEC, ResolvedLookup("T"))
        got = flat(await collect(runner.run_async(source())))
        assert got == [("b0", 0, "b"), ("b0", 1, "c"), ("b1", 0, "a1"), ("b1", 0, "a2")]
    finally:
        await chain.close()


class Late:
    """Rows for key 1 appear from the ``after``-th call on; counts calls per key."""

    def __init__(self, after: int, delay: float = 0.0) -> None:
        self.after = after
        self.delay = delay
        self.calls: Counter[Any] = Counter()
        self.key_columns = ("id",)

    def rows(self, key: Key) -> Collection[Row]:
        self.calls[key[0]] += 1
        if key[0] == 1 and self.calls[key[0]] >= self.after:
            return [{"id": 1, "name": "late", "score": 0}]
        if key[0] == 2:
            return [{"id": 2, "name": "filtered", "score": 0}]
        return []

    def lookup_function(self) -> LookupFunction:
        late = self

        class Sync(LookupFunction):
            def lookup(self, key: Key) -> Collection[Row]:
                return late.rows(key)

        return Sync()

    def async_lookup_function(self) -> AsyncLookupFunction:
        late = self

        class Async(AsyncLookupFunction):
            async def async_lookup(self, key: Key) -> Collection[Row]:
                await asyncio.sleep(late.delay)
                return late.rows(key)

        return Async()

    def scan(self) -> None:
        return None


RETRY = (
    "'retry-predicate'='lookup_miss', 'retry-strategy'='fixed_delay', "
    "'fixed-delay'='10ms', 'max-attempts'='{n}'"
)


@pytest.mark.parametrize("prefer_async", [False, True])
async def test_miss_retry_finds_a_late_row_and_filters_never_retry(prefer_async: bool) -> None:
    source = Late(after=3)
    hint = f"LOOKUP('table'='T', {RETRY.format(n=3)})"
    chain = await opened(source, prefer_async=prefer_async, hint=hint)
    spec = JoinSpec(JoinType.LEFT, SPEC.keys, dim_filter=lambda d: d["name"] != "filtered")
    try:
        runner: LookupJoinRunner[str] = LookupJoinRunner(chain, spec, resolve_lookup(hint, "T"))
        batches = [probe([1, 2, 7])]
        if prefer_async:
            got = flat(await collect(runner.run_async(batches)))
        else:
            got = flat(runner.run_sync(batches))
        assert got == [("b0", 0, "late"), ("b0", 1, None), ("b0", 2, None)]
        # found on the 3rd call; the filtered row is a connector hit, never retried; a key
        # that never appears gets max-attempts + 1 calls.
        assert source.calls == Counter({1: 3, 2: 1, 7: 4})
    finally:
        await chain.close()


async def test_async_timeout_fails_with_a_clear_error() -> None:
    source = Late(after=1, delay=5.0)
    chain = await opened(source, prefer_async=True)
    try:
        runner: LookupJoinRunner[str] = LookupJoinRunner(
            chain, SPEC, resolve_lookup("LOOKUP('table'='T', 'timeout'='50ms')", "T")
        )
        with pytest.raises(
            TimeoutError, match=r"lookup table 'T' \(.*\), key \(1,\): did not finish within 50 ms"
        ):
            await collect(runner.run_async([probe([1, 2])]))
        assert runner.operator_metrics()["numTimeouts"] >= 1
        assert runner.operator_metrics()["numInFlight"] == 0
    finally:
        await chain.close()


class Boom(RuntimeError):
    pass


async def test_a_raising_lookup_fails_the_run_with_the_original_error() -> None:
    class Source(Late):
        def rows(self, key: Key) -> Collection[Row]:
            if key[0] == 3:
                raise Boom("no such shard for 3")
            return super().rows(key)

    chain = await opened(Source(after=1), prefer_async=True)
    before = set(asyncio.all_tasks())
    try:
        runner: LookupJoinRunner[str] = LookupJoinRunner(chain, SPEC, ResolvedLookup("T"))
        with pytest.raises(Exception) as error:
            await collect(runner.run_async([probe(list(range(10)))]))
        chain_of_errors = []
        current: BaseException | None = error.value
        while current is not None:
            chain_of_errors.append(current)
            current = current.__cause__
        assert any(isinstance(e, Boom) and "no such shard for 3" in str(e) for e in chain_of_errors)
        assert set(asyncio.all_tasks()) - before == set()
    finally:
        await chain.close()


@pytest.mark.parametrize("mode", ["async", "cached", "sync"])
@pytest.mark.parametrize("hook", ["dim_filter", "condition"])
async def test_a_raising_filter_names_its_table_and_key(mode: str, hook: str) -> None:
    """An error of ``dim_filter`` / ``condition`` reached the user bare (``ValueError: bad``),
    unlike a lookup's: it now names the table, its target and the key, the original kept as
    its cause and as the failed row's class (docs/semantics.md §2.11)."""

    def bad(*_rows: Row) -> bool:
        raise ValueError("bad")

    spec = JoinSpec(JoinType.INNER, SPEC.keys, **{hook: bad})  # type: ignore[arg-type]
    options = LookupOptions.from_dict(
        {"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "10"}
        if mode == "cached"
        else {}
    )
    chain = LookupChain.create(
        InMemoryConnector(DIM, ["id"]),
        options,
        prefer_async=mode != "sync",
        name="T",
        key_columns=("id",),
    )
    await chain.open()
    try:
        runner: LookupJoinRunner[str] = LookupJoinRunner(chain, spec, ResolvedLookup("T"))
        with pytest.raises(Exception) as error:
            if mode == "sync":
                await blocking(runner.run_sync, [probe([2])])
            else:
                if mode == "cached":  # the row's lookup is a hit, answered at admission
                    await chain.async_lookup((2,))
                await collect(runner.run_async([probe([2])]))
        assert (
            str(error.value) == "lookup table 'T' (in-memory rows (4)), key (2,): ValueError: bad"
        )
        assert type(error.value.__cause__) is ValueError
    finally:
        await chain.close()


def test_an_async_dim_filter_is_refused() -> None:
    async def keep_none(dim: Row) -> bool:
        return False

    with pytest.raises(ConfigurationError, match="`async def`") as error:
        JoinSpec(JoinType.INNER, SPEC.keys, dim_filter=keep_none)
    assert error.value.option == "dim_filter"
