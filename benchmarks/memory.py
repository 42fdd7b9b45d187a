"""Memory stays flat: peak RSS of the Python workers for 1M vs 10M input rows through lookup_join.

The join runs async (capacity 100) against a cheap source: an in-memory dim table of 1,000
customers behind a FULL cache, so the run is dominated by the adapter and operator, whose
buffers must not grow with the input. Two measurements of the same worker processes:

- from inside each worker: the join's ``dim_filter`` is a :class:`PeakRssRecorder` that keeps
  every row and, every 0.2 s and at the end of each batch of rows it sees, writes
  ``getrusage(RUSAGE_SELF).ru_maxrss`` (the process's peak RSS since it started) to a per-pid
  file the driver reads after the job;
- a psutil sampler on the driver (every 50 ms) watching this run's forked Python workers.

Each size runs in a fresh Spark session (fresh workers). Target: 10M-row peak within 15% of 1M.
"""

from __future__ import annotations

import os
import resource
import tempfile
import threading
import time
from typing import Any

from benchmarks import plots
from benchmarks.data import customer_row
from benchmarks.harness import Context, ScenarioResult, Target
from benchmarks.tables import lookup_hint, lookup_table

N_CUSTOMERS = 1_000
FULL_CACHE = {
    "lookup.cache": "FULL",
    "lookup.full-cache.reload-strategy": "PERIODIC",
    "lookup.full-cache.periodic-reload.interval": "1 h",
}


class PeakRssRecorder:
    """A ``dim_filter`` that keeps every row and records the worker's peak RSS in ``directory``.

    Picklable; in the worker it writes ``<directory>/<pid>`` (KiB) at most every ``interval`` s.
    """

    def __init__(self, directory: str, interval: float = 0.2) -> None:
        self.directory = directory
        self.interval = interval
        self._next = 0.0

    def __getstate__(self) -> dict[str, Any]:
        return {"directory": self.directory, "interval": self.interval, "_next": 0.0}

    def __call__(self, row: Any) -> bool:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.interval
            self.write()
        return True

    def write(self) -> None:
        peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        path = os.path.join(self.directory, str(os.getpid()))
        with open(path + ".tmp", "w") as out:
            out.write(str(peak_kb))
        os.replace(path + ".tmp", path)

    @staticmethod
    def read(directory: str) -> dict[int, int]:
        """{pid: peak KiB} as last written by the workers."""
        peaks = {}
        for name in os.listdir(directory):
            if name.isdigit():
                with open(os.path.join(directory, name)) as f:
                    peaks[int(name)] = int(f.read())
        return peaks


class WorkerSampler:
    """Samples the RSS of Spark's forked Python workers (children of ``pyspark.daemon``)."""

    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        self.peaks: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> WorkerSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stop.is_set():
            # Our JVM's Python daemon forks the workers: driver -> java -> daemon -> worker.
            for proc in me.children(recursive=True):
                try:
                    if "pyspark" not in " ".join(proc.cmdline()):
                        continue
                    parent = proc.parent()
                    if parent is None or "pyspark.daemon" not in " ".join(parent.cmdline()):
                        continue  # the daemon itself, not a worker
                    rss = proc.memory_info().rss
                except psutil.Error:
                    continue
                self.peaks[proc.pid] = max(self.peaks.get(proc.pid, 0), rss)
            time.sleep(self.interval)


def _input(spark: Any, n_rows: int) -> Any:
    from pyspark.sql import functions as F

    return spark.range(0, n_rows, numPartitions=2).select(
        F.col("id").alias("order_id"),
        (F.col("id") % N_CUSTOMERS).cast("int").alias("customer_id"),
        (F.col("id") % 97).cast("double").alias("amount"),
    )


def measure_peak(ctx: Context, n_rows: int, mode: str) -> dict[str, Any]:
    """Join ``n_rows`` rows (``mode`` 'sync' or 'async') in a fresh Spark session and report
    the workers' peak RSS."""
    from asyncio_lookup.connectors import InMemoryConnector

    ctx.stop_spark()
    spark = ctx.spark()
    source = InMemoryConnector([customer_row(i) for i in range(N_CUSTOMERS)], ["id"])
    table = lookup_table("Customers", source, FULL_CACHE)
    hint = lookup_hint("Customers", **{"async": str(mode == "async").lower(), "capacity": 100})
    with tempfile.TemporaryDirectory(prefix="bench-rss-") as directory:
        recorder = PeakRssRecorder(directory)
        start = time.perf_counter()
        with WorkerSampler() as sampler:
            from benchmarks.tables import require

            (join,) = require("asyncio_lookup.spark", "lookup_join")
            joined = join(_input(spark, n_rows), table, on=[("customer_id", "id")],
                          hints=[hint], dim_filter=recorder)
            out_rows = joined.count()
            elapsed = time.perf_counter() - start
        inside = {pid: kb / 1024 for pid, kb in PeakRssRecorder.read(directory).items()}
    if out_rows != n_rows:
        raise AssertionError(f"lookup_join emitted {out_rows:,} rows for {n_rows:,} input rows")
    sampled = {pid: rss / 2**20 for pid, rss in sampler.peaks.items()}
    return {
        "mode": mode,
        "rows": n_rows,
        "seconds": elapsed,
        "rows_per_s": n_rows / elapsed,
        "workers": len(inside),
        "peak_rss_mb": max(inside.values(), default=float("nan")),
        "psutil_peak_rss_mb": max(sampled.values(), default=float("nan")),
        "ru_maxrss_mb_by_pid": {str(k): round(v, 1) for k, v in inside.items()},
        "psutil_mb_by_pid": {str(k): round(v, 1) for k, v in sampled.items()},
        "metrics": table.metrics(),
    }


def _plan(ctx: Context) -> list[tuple[str, int, int]]:
    """(mode, smaller size, larger size) pairs."""
    if ctx.quick:
        return [("async", 100_000, 1_000_000)]
    return [("async", 1_000_000, 10_000_000)]


def run(ctx: Context) -> ScenarioResult:
    result = ScenarioResult("memory", "Memory: peak worker RSS, 1M vs 10M rows")
    plan = _plan(ctx)
    ctx.begin("memory", 2 * len(plan))
    bars: dict[str, dict[str, float]] = {}
    try:
        for mode, *sizes in plan:
            peaks = []
            for n_rows in sizes:
                peak = measure_peak(ctx, n_rows, mode)
                peaks.append(peak)
                ctx.advance(f"memory {mode} {n_rows:,} rows")
                ctx.log(
                    f"  {mode:<5} {n_rows:>12,} rows: {peak['seconds']:.1f} s, "
                    f"{peak['rows_per_s']:,.0f} rows/s, peak worker RSS "
                    f"{peak['peak_rss_mb']:.1f} MB (psutil {peak['psutil_peak_rss_mb']:.1f} MB)"
                )
            small, large = peaks
            for peak in peaks:
                result.add_row(
                    mode=mode, input_rows=peak["rows"], seconds=peak["seconds"],
                    rows_per_s=peak["rows_per_s"], workers=peak["workers"],
                    peak_rss_mb=peak["peak_rss_mb"], psutil_peak_rss_mb=peak["psutil_peak_rss_mb"],
                    vs_smaller=peak["peak_rss_mb"] / small["peak_rss_mb"],
                )
                bars.setdefault(f"{mode} {peak['rows']:,} rows", {}).update(
                    {"ru_maxrss": peak["peak_rss_mb"], "psutil": peak["psutil_peak_rss_mb"]})
            result.data.setdefault("peaks", []).extend(peaks)
            result.targets.append(Target(
                f"{mode}: peak RSS {large['rows']:,} rows / {small['rows']:,} rows",
                large["peak_rss_mb"] / small["peak_rss_mb"], maximum=1.15,
                detail=f"{large['peak_rss_mb']:.1f} MB vs {small['peak_rss_mb']:.1f} MB "
                       "(max over the workers of getrusage ru_maxrss)",
            ))
    finally:
        ctx.stop_spark()  # the next scenario gets a fresh session
    result.notes.append(
        "Each run is one job in a fresh local[2] session (2 partitions, fresh Python workers): "
        f"lookup_join (capacity 100) over {N_CUSTOMERS:,} in-memory customers behind a FULL "
        "cache, count() as the action, async path (the operator, ordered output). "
        "peak_rss_mb: max over the join's workers of getrusage "
        "ru_maxrss recorded inside them (by the join's dim_filter); psutil_peak_rss_mb: the "
        "driver's 50 ms sampling of this session's Python workers."
    )
    result.plots.append(plots.grouped_bars(
        ctx.out_dir / "memory.png", "Peak RSS of a Python worker (MB)", bars, "MB",
    ))
    return result
