"""CPU per row of the lookup-join path outside the HTTP client, without Spark.

Runs exactly what a Spark task of a lookup join runs (``LookupJoinTask.__call__`` over Arrow
record batches of ``order_id BIGINT, customer_id INT, amount DOUBLE``, on the process loop, with
the reader thread and the metrics trailer) against a connector whose ``async_lookup`` answers
one customer row from memory after a loop timer (``latency``, 100 lookups in flight), and a
minimal hand-written equivalent (``asyncio`` + ``Semaphore(100)`` per row, the same connector,
the output built column-wise in Arrow). Prints the median CPU µs/row of each and the ratio,
interleaved runs in one process.

    .venv/bin/python -m benchmarks.join_path [--rows N] [--runs R] [--latency S] [--only path]

With ``--server latency|aiohttp`` the connector is the real ``HttpConnector`` (default client,
100 connections) against that server in its own process (:mod:`benchmarks.server_process`),
and the two variants are ``path`` (the task, as above) and ``client`` (the lookup function
alone, ``CAPACITY`` coroutines each looking up the next key: one process of
:mod:`benchmarks.ceiling`): rows/s and CPU µs/row of each, so what the task adds to the client
shows without Spark's JVM and without two workers sharing the cores.
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
from asyncio_lookup.spark.worker_gc import DEFAULT_GC_YOUNG_THRESHOLD

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
    batches: list[pa.RecordBatch] = table.to_batches(max_chunksize=BATCH_ROWS)
    return batches


def lookup_join_task(
    latency: float, *, connector: Any = None, mode: str = "ordered"
) -> LookupJoinTask:
    """The join's task: over the timer connector (``latency``), or ``connector``."""
    hint = (f"LOOKUP('table'='Customers', 'async'='true', 'capacity'='{CAPACITY}', "
            f"'output-mode'='{mode}')")
    return LookupJoinTask(
        table_id=uuid.uuid4().hex,
        table_name="Customers",
        connector=TimerSource(latency) if connector is None else connector,
        options=LookupOptions(),
        hint=resolve_lookup(hint, "Customers"),
        spec=JoinSpec(JoinType.INNER, (KeyBinding("id", left_column="customer_id"),)),
        dim_columns=DIM_COLUMNS,
    )


def joined_rows(task: LookupJoinTask, batches: list[pa.RecordBatch]) -> int:
    """``task`` over ``batches``; the number of output rows (trailer rows carry metrics in the
    last column, data rows a null)."""
    return sum(out.column(-1).null_count for out in task(iter(batches)))


def run_path(batches: list[pa.RecordBatch], latency: float) -> int:
    """The lookup join's task over ``batches``; the number of output rows."""
    return joined_rows(lookup_join_task(latency), batches)


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


def http_variants(base_url: str, mode: str) -> dict[str, Callable[[list[pa.RecordBatch]], int]]:
    """``path``: the task (its connector opened once, kept across runs, as a worker keeps it);
    ``client``: the lookup function alone, ``CAPACITY`` coroutines."""
    from asyncio_lookup.connectors import HttpConnector

    connector = HttpConnector(f"{base_url}/customers/{{id}}", ["id"], max_connections=CAPACITY,
                              timeout=60)
    task = lookup_join_task(0.0, connector=connector, mode=mode)
    function = connector.async_lookup_function()  # its own, as each process of the ceiling
    loop = process_loop()
    loop.run_until_complete(function.open())

    def path(batches: list[pa.RecordBatch]) -> int:
        return joined_rows(task, batches)

    def client(batches: list[pa.RecordBatch]) -> int:
        keys = iter([k for b in batches for k in b.column("customer_id").to_pylist()])
        found = 0

        async def worker() -> None:
            nonlocal found
            for key in keys:
                rows = await function.async_lookup((key,))
                found += len(rows)  # (not `found += len(await ...)`: read before the await)

        async def main() -> None:
            await asyncio.gather(*(worker() for _ in range(CAPACITY)))

        loop.run_until_complete(main())
        return found

    return {"path": path, "client": client}


def main_http(server_kind: str, rows: int, runs: int, latency: float, mode: str) -> None:
    import gc

    from benchmarks.server_process import ServerProcess

    gc.set_threshold(DEFAULT_GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])  # as a worker runs
    batches = orders(rows)
    with ServerProcess(server_kind, latency, 100_000) as server:
        variants = http_variants(server.base_url, mode)
        for run in variants.values():  # warm-up: connections, imports
            run(batches[:1])
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
        for _ in range(runs):
            for name, run in variants.items():
                cpu0, wall0 = time.process_time(), time.perf_counter()
                found = run(batches)
                assert found == rows, (name, found, rows)
                wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
                samples[name].append((rows / wall, cpu / rows * 1e6))
    print(f"{server_kind} server, {latency * 1e3:g} ms, capacity {CAPACITY}, {mode}, "
          f"{rows:,} rows, medians of {runs}:")
    medians = {}
    for name, values in samples.items():
        rate = statistics.median(v[0] for v in values)
        cpu = medians[name] = statistics.median(v[1] for v in values)
        spread = ", ".join(f"{v[1]:.1f}" for v in values)
        print(f"  {name:>6}: {rate:8,.0f} rows/s  {cpu:5.1f} µs/row CPU (runs: {spread})")
    print(f"  path - client: {medians['path'] - medians['client']:+.1f} µs/row")


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
    parser.add_argument("--server", choices=("latency", "aiohttp"),
                        help="the real HttpConnector against this server: path vs client")
    parser.add_argument("--output-mode", default="ordered",
                        choices=("ordered", "allow_unordered"))
    args = parser.parse_args(argv)
    if args.server:
        main_http(args.server, args.rows, args.runs, args.latency, args.output_mode)
        return
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
