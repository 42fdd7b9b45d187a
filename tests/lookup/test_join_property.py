"""Property: the runner emits exactly what docs/semantics.md §2.1 says, whatever the batching,
capacity, output mode, latencies and flush size (ordered: in input order; unordered: same
multiset)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Collection
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asyncio_lookup.lookup.chain import LookupChain
from asyncio_lookup.lookup.functions import AsyncLookupFunction, Key, LookupFunction, Row
from asyncio_lookup.lookup.hint_resolve import resolve_lookup
from asyncio_lookup.lookup.join import JoinSpec, JoinType, KeyBinding, LookupJoinRunner, ProbeBatch
from asyncio_lookup.lookup.options import LookupOptions


class Jittery:
    """Rows by key; each async lookup sleeps a key-dependent 0-3 ms so completions reorder."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.by_key: dict[Any, list[Row]] = {}
        for row in rows:
            self.by_key.setdefault(row["id"], []).append(row)

    def lookup_function(self) -> LookupFunction:
        source = self

        class Sync(LookupFunction):
            def lookup(self, key: Key) -> Collection[Row]:
                return list(source.by_key.get(key[0], ()))

        return Sync()

    def async_lookup_function(self) -> AsyncLookupFunction:
        source = self

        class Async(AsyncLookupFunction):
            async def async_lookup(self, key: Key) -> Collection[Row]:
                await asyncio.sleep((key[0] * 7 % 4) / 1000)
                return list(source.by_key.get(key[0], ()))

        return Async()

    def scan(self) -> None:
        return None


def reference(
    batches: list[list[Any]], dim: list[dict[str, Any]], how: JoinType, min_v: int
) -> list[tuple[int, int, Any]]:
    out: list[tuple[int, int, Any]] = []
    for b, ids in enumerate(batches):
        for i, cid in enumerate(ids):
            matches = [d for d in dim if cid is not None and d["id"] == cid and d["v"] >= min_v]
            out.extend((b, i, d["v"]) for d in matches)
            if not matches and how is JoinType.LEFT:
                out.append((b, i, None))
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batches=st.lists(
        st.lists(st.one_of(st.none(), st.integers(0, 8)), max_size=25), min_size=0, max_size=5
    ),
    dim=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 9)), max_size=20),
    how=st.sampled_from([JoinType.INNER, JoinType.LEFT]),
    mode=st.sampled_from(["ordered", "allow_unordered", "sync"]),
    capacity=st.integers(1, 12),
    flush_rows=st.integers(1, 10),
    min_v=st.integers(0, 3),
)
def test_runner_matches_the_reference(
    batches: list[list[Any]],
    dim: list[tuple[int, int]],
    how: JoinType,
    mode: str,
    capacity: int,
    flush_rows: int,
    min_v: int,
) -> None:
    dim_rows = [{"id": i, "v": v} for i, v in dim]
    spec = JoinSpec(
        how, (KeyBinding("id", left_column="cid"),), dim_filter=lambda d: d["v"] >= min_v
    )
    async_mode = mode != "sync"
    hint = (  # a sync join takes no output mode or capacity (a warning)
        "LOOKUP('table'='T', 'async'='false')"
        if mode == "sync"
        else f"LOOKUP('table'='T', 'async'='true', 'output-mode'='{mode}', 'capacity'='{capacity}')"
    )
    settings_ = resolve_lookup(hint, "T")
    probes = [
        ProbeBatch(b, spec.build_keys({"cid": ids}, len(ids))) for b, ids in enumerate(batches)
    ]

    async def run() -> list[tuple[int, int, Any]]:
        chain = LookupChain.create(
            Jittery(dim_rows), LookupOptions(), prefer_async=async_mode, key_columns=("id",)
        )
        await chain.open()
        try:
            runner: LookupJoinRunner[int] = LookupJoinRunner(
                chain, spec, settings_, flush_rows=flush_rows
            )
            if async_mode:
                joined = [j async for j in runner.run_async(probes)]
            else:
                joined = list(runner.run_sync(probes))
        finally:
            await chain.close()
        # an output batch is flushed as soon as it reaches flush_rows
        widest = max([1, *Counter(i for i, _ in dim).values()])
        assert all(len(j.indices) <= flush_rows - 1 + widest for j in joined)
        return [
            (j.payload, i, None if d is None else d["v"])
            for j in joined
            for i, d in zip(j.indices, j.dim_rows, strict=True)
        ]

    got = asyncio.run(run())
    want = reference(batches, dim_rows, how, min_v)
    if mode == "allow_unordered":
        assert Counter(got) == Counter(want)
    else:
        assert got == want
