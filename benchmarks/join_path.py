"""CPU per row of the lookup-join path outside the HTTP client, without Spark.

Runs exactly what a Spark task of a lookup join runs (``LookupJoinTask.__call__`` over Arrow
record batches of ``order_id BIGINT, customer_id INT, amount DOUBLE``, on the process loop, with
the reader thread and the metrics trailer) against a connector whose ``async_lookup`` answers
one customer row from memory after a loop timer (``latency``, 100 lookups in flight), and a
minimal hand-written equivalent (``asyncio`` + ``Semaphore(100)`` per row, the same connector,
the output built column-wise in Arrow). Prints the median CPU µs/row of each and the ratio,
interleaved runs in one process.

    .venv/bin/python -m benchmarks.join_path [--rows N] [--runs R] [--latency S] [--only path]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from asyncio_lookup.lookup.functions import AsyncLookupFunction, Key, Row
from asyncio_lookup.lookup.hint_resolve import resolve_lookup
from asyncio_lookup.lookup.join import JoinSpec, JoinType, KeyBinding
from asyncio_lookup.lookup.options import LookupOptions
from asyncio_lookup.runtime.loop import process_loop
from asyncio_lookup.spark.task import DimColumn, LookupJoinTask

CAPACITY = 100
BATCH_ROWS = 10_000  # spark.sql.execution.arrow.maxRecordsPerBatch
DIM_COLUMNS = (
    DimColumn("id", "id", pa.int32(), "INT"),
    DimColumn("name", "name", pa.string(), "STRING"),
    DimColumn("country", "country", pa.string(), "STRING"),
    DimColumn("segment", "segment", pa.string(), "STRING"),
    DimColumn("credit_limit", "credit_limit", pa.float64(), "DOUBLE"),
)


def customer(customer_id: int) -> dict[str, Any]:
    return {
        "id": customer_id,
        "name": f"customer-{customer_id}",
        "country": ("DE", "FR", "US", "JP")[customer_id % 4],
        "segment": ("retail", "smb", "enterprise")[customer_id % 3],
        "credit_limit": float(customer_id % 5000) * 10.0,
    }


class TimerLookup(AsyncLookupFunction):
    """One row per key, answered from memory after a loop timer (the stand-in for HTTP)."""

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.rows: dict[int, dict[str, Any]] = {}

    def answer(self, key_id: int) -> list[Row]:
        row = self.rows.get(key_id)
        if row is None:
            row = self.rows[key_id] = customer(key_id)
        return [dict(row)]  # a fresh dict per answer, as a decoded JSON body is

    async def async_lookup(self, key: Key) -> list[Row]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Row]] = loop.create_future()
        loop.call_later(self.latency, future.set_result, self.answer(key[0]))
        return await future


class TimerSource:
    """A ``LookupTableSource`` offering only the async lookup."""

    def __init__(self, latency: float) -> None:
        self.function = TimerLookup(latency)

    def lookup_function(self) -> None:
        return None

    def async_lookup_function(self) -> TimerLookup:
        return self.function

    def scan(self) -> None:
        return None


def orders(n: int) -> list[pa.RecordBatch]:
    """Batches of ``order_id BIGINT, customer_id INT, amount DOUBLE`` (uniform keys)."""
    import numpy as np

    rng = np.random.default_rng(11)
    ids = rng.integers(0, 100_000, n).astype(np.int32)
    table = pa.table(
        {
            "order_id": pa.array(np.arange(n, dtype=np.int64)),
            "customer_id": pa.array(ids),
            "amount": pa.array((np.arange(n) % 1000).astype(np.float64) / 10.0),
        }
    )
    return table.to_batches(max_chunksize=BATCH_ROWS)


def lookup_join_task(latency: float) -> LookupJoinTask:
    return LookupJoinTask(
        table_id=uuid.uuid4().hex,
        table_name="Customers",
        connector=TimerSource(latency),
        options=LookupOptions(),
        hint=resolve_lookup(
            f"LOOKUP('table'='Customers', 'async'='true', 'capacity'='{CAPACITY}')", "Customers"
        ),
        spec=JoinSpec(JoinType.INNER, (KeyBinding("id", left_column="customer_id"),)),
        dim_columns=DIM_COLUMNS,
    )


def run_path(batches: list[pa.RecordBatch], latency: float) -> int:
    """The lookup join's task over ``batches``; the number of output rows."""
    task = lookup_join_task(latency)
    rows = 0
    for out in task(iter(batches)):
        rows += out.column(-1).null_count  # data rows; trailer rows carry metrics (not null)
    return rows


def run_hand_written(batches: list[pa.RecordBatch], latency: float) -> int:
    """The least a Python worker does for the same join: the keys to Python once per batch,
    one task per row with at most ``CAPACITY`` in flight, answers taken in input order, the
    dim columns built from the rows column-wise."""
    function = TimerLookup(latency)
    fields = [pa.field(c.name, c.type) for c in DIM_COLUMNS]
    names = [*batches[0].schema.names, *(f.name for f in fields)]
    loop = process_loop()

    async def join(batch: pa.RecordBatch) -> pa.RecordBatch:
        pending: deque[asyncio.Task[list[Row]]] = deque()
        rows: list[Row] = []
        lookup = function.async_lookup
        create_task = loop.create_task
        for customer_id in batch.column("customer_id").to_pylist():
            if len(pending) >= CAPACITY:
                rows.extend(await pending.popleft())
            pending.append(create_task(lookup((customer_id,))))
        while pending:
            rows.extend(await pending.popleft())
        dims = [pa.array([row[f.name] for row in rows], f.type) for f in fields]
        return pa.RecordBatch.from_arrays([*batch.columns, *dims], names=names)

    count = 0
    for batch in batches:
        count += loop.run_until_complete(join(batch)).num_rows
    return count


VARIANTS: dict[str, Callable[[list[pa.RecordBatch], float], int]] = {
    "path": run_path,
    "hand-written": run_hand_written,
}


def cpu_per_row(run: Callable[[list[pa.RecordBatch], float], int], n: int, latency: float) -> float:
    batches = orders(n)
    started = time.process_time()
    out = run(batches, latency)
    cpu = time.process_time() - started
    assert out == n, (out, n)
    return cpu / n * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--latency", type=float, default=0.010)
    parser.add_argument("--only", choices=sorted(VARIANTS))
    args = parser.parse_args(argv)
    chosen = {args.only: VARIANTS[args.only]} if args.only else VARIANTS
    for run in chosen.values():  # warm-up: imports, the loop, the reader thread
        cpu_per_row(run, 2_000, args.latency)
    samples: dict[str, list[float]] = {name: [] for name in chosen}
    for _ in range(args.runs):
        for name, run in chosen.items():
            samples[name].append(cpu_per_row(run, args.rows, args.latency))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    for name, value in medians.items():
        spread = ", ".join(f"{v:.1f}" for v in samples[name])
        print(f"{name:>13}: {value:6.1f} µs/row CPU (runs: {spread})")
    if len(medians) == 2:
        print(f"ratio path / hand-written: {medians['path'] / medians['hand-written']:.2f}")


if __name__ == "__main__":
    main()
