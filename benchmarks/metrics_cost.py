"""The per-row cost of issue 25's metrics recording on the lookup-join path, without Spark.

The join path of :mod:`benchmarks.join_path` (``LookupJoinTask`` over Arrow batches, a timer
connector, 100 lookups in flight) runs in child processes, interleaved, with two versions of
the package: this checkout (every record's and every call's latency into sketches, a trailer
before each output batch) and the baseline commit before the recording (a 1,024-sample ring,
one trailer per task), extracted with ``git archive``. The figure is CPU µs per row, median of
the runs; the difference is what the recording costs per row. A micro-benchmark of
``LatencySketch.add`` (per call) completes it.

    .venv/bin/python -m benchmarks.metrics_cost [--rows N] [--runs R]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import timeit
from io import BytesIO
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: The last commit before the recording (main when branch metrics-core began).
BASELINE = "4cde95b"
LATENCY_S = 0.010


def child(rows: int, runs: int) -> dict[str, Any]:
    """In a child process: CPU µs/row of the join path with the package on ``sys.path``."""
    import pyarrow as pa

    import asyncio_lookup
    from asyncio_lookup.spark.metrics import METRICS_COLUMN
    from benchmarks.join_path import lookup_join_task, orders

    def once(n: int) -> float:
        batches = orders(n)
        task = lookup_join_task(LATENCY_S)
        started = time.process_time()
        data_rows = 0
        for out in task(iter(batches)):
            column: pa.Array = out.column(METRICS_COLUMN)
            data_rows += column.null_count  # trailer rows carry metrics, data rows null
        cpu = time.process_time() - started
        assert data_rows == n, (data_rows, n)
        return cpu / n * 1e6

    once(2_000)  # warm-up: imports, the loop, the reader thread
    samples = [once(rows) for _ in range(runs)]
    return {"package": asyncio_lookup.__file__, "samples": samples}


def _baseline_tree(target: Path) -> Path:
    """The baseline's ``asyncio_lookup`` package extracted under ``target``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", BASELINE, "asyncio_lookup"],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    return target


def _run_child(path_first: Path | None, rows: int, runs: int) -> list[float]:
    env = dict(os.environ)
    paths = [str(path_first)] if path_first is not None else []
    env["PYTHONPATH"] = os.pathsep.join([*paths, str(ROOT)])
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.metrics_cost", "--child", str(rows), str(runs)],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        cwd=str(path_first) if path_first is not None else str(ROOT),
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    expected = (path_first or ROOT) / "asyncio_lookup"
    assert Path(result["package"]).parent == expected, (result["package"], expected)
    return [float(s) for s in result["samples"]]


def micro_us() -> dict[str, float]:
    """µs per recording step, best of 5 (the hot path's own statements, in isolation):
    ``record``: a record's latency (a clock read and the sketch's add, inlined as the handler
    runs them; the admission's clock read under uvloop adds one more); ``call``: a connector
    call's (two clock reads and ``CacheMetricGroup.record_call``); ``trailer``: one per
    trailer (the deltas drained and encoded as JSON, with a sketch of 100 distinct buckets)."""
    from asyncio_lookup.lookup.metrics import CacheMetricGroup
    from asyncio_lookup.runtime.metrics import OperatorMetrics
    from asyncio_lookup.runtime.sketch import FOLD_EVERY, LatencySketch
    from asyncio_lookup.spark.job_metrics import encode

    sketch = LatencySketch()
    group = CacheMetricGroup()
    operator = OperatorMetrics()
    clock = time.perf_counter

    started = clock()

    def record() -> None:  # the statements ResultHandler.complete runs per record
        pending = sketch.pending
        pending.append((clock() - started) * 1000.0)
        if len(pending) >= FOLD_EVERY:
            sketch.fold()

    def counters() -> None:  # for scale: what the baseline did per call (two counters)
        group.inc2("numExternalCalls", "numExternalKeys")

    def call() -> None:
        started = clock()
        group.record_call((clock() - started) * 1000.0)

    def trailer() -> None:
        for i in range(100):
            operator.latency.add(1.0 + i)
            group.record_call(1.0 + i)
        values = dict(group.take_delta())
        counters, records, _ = operator.take_delta()
        values.update(counters)
        encode("0" * 16, values, {"record": records, "call": group.drain_calls()}, final=False)

    def best(fn: Any, n: int) -> float:
        return min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6

    return {
        "record": best(record, 200_000),
        "call": best(call, 200_000),
        "trailer": best(trailer, 200),
        "empty call": best(lambda: None, 200_000),
        "two counters": best(counters, 200_000),
    }


def measure(rows: int, rounds: int, runs: int) -> dict[str, Any]:
    """Interleaved child runs of the baseline and this checkout: their per-row samples."""
    samples: dict[str, list[float]] = {"baseline": [], "recording": []}
    with tempfile.TemporaryDirectory(prefix="metrics-cost-") as tmp:
        baseline = _baseline_tree(Path(tmp))
        for _ in range(rounds):
            samples["baseline"] += _run_child(baseline, rows, runs)
            samples["recording"] += _run_child(None, rows, runs)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    minima = {name: min(values) for name, values in samples.items()}
    return {"samples": samples, "medians": medians, "minima": minima, "micro": micro_us()}


def run(ctx: Any) -> Any:
    """The ``metrics-cost`` scenario."""
    from benchmarks.harness import ScenarioResult, Target

    result = ScenarioResult("metrics-cost", "Metrics recording: join-path cost per row")
    rows = 20_000 if ctx.quick else 50_000
    rounds = 2 if ctx.quick else 3
    ctx.begin("metrics recording cost", 1)
    measured = measure(rows, rounds, runs=3)
    ctx.advance("join path, baseline and recording")
    base, now = measured["medians"]["baseline"], measured["medians"]["recording"]
    low_base, low_now = measured["minima"]["baseline"], measured["minima"]["recording"]
    for label, median, low in (
        (f"baseline {BASELINE}", base, low_base),
        ("with recording", now, low_now),
        ("difference", now - base, low_now - low_base),
    ):
        result.add_row(path=label, cpu_us_per_row=round(median, 3), best_us_per_row=round(low, 3))
        ctx.log(f"  {label:<18} {median:6.2f} µs/row CPU (best {low:6.2f})")
    micro = measured["micro"]
    per_row = micro["record"] + micro["call"] + micro["trailer"] / 10_000
    # (timeit's own call overhead is included in each micro figure: an upper bound)
    for label, value in (
        ("record latency (per record)", micro["record"]),
        ("call latency (per call)", micro["call"]),
        ("trailer (per 10,000-row batch)", micro["trailer"]),
        ("recording per row: record + call + trailer/10,000", per_row),
    ):
        result.add_row(path=label, cpu_us_per_row=round(value, 3))
        ctx.log(f"  {label:<50} {value:7.3f} µs")
    result.targets.append(
        Target(
            "record latency per record, micro-measured (µs CPU)",
            micro["record"],
            maximum=0.3,
            detail=f"two counters (the baseline's per-call work) took {micro['two counters']:.3f}",
        )
    )
    load = os.getloadavg()
    empty = micro["empty call"]
    result.data = {
        "samples": measured["samples"],
        "rows": rows,
        "latency_s": LATENCY_S,
        "micro_us": micro,
        "load_average": load,
    }
    result.notes.append(
        f"Load average while measuring: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} on "
        f"{os.cpu_count()} cores; timeit's cost of an empty call was "
        f"{empty:.3f} µs (about 0.03 µs on an idle core): "
        "scale the micro figures by that."
    )
    result.notes.append(
        f"benchmarks/join_path.py's task over {rows:,} rows (10 ms timer connector, capacity "
        f"100, no cache: one record and one call timed per row), {rounds} interleaved rounds "
        f"of 3 runs per version in child processes; baseline: the package at {BASELINE} "
        "(before the recording). CPU time per row, medians; the machine is shared, so the "
        "difference is within the runs' spread when it is small."
    )
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, type=int, metavar=("ROWS", "RUNS"))
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    measured = measure(args.rows, args.rounds, runs=3)
    for name, value in measured["medians"].items():
        spread = ", ".join(f"{v:.2f}" for v in measured["samples"][name])
        print(f"{name:>10}: {value:6.2f} µs/row CPU (runs: {spread})")
    medians, minima = measured["medians"], measured["minima"]
    print(
        f"difference: {medians['recording'] - medians['baseline']:+.2f} µs/row (medians), "
        f"{minima['recording'] - minima['baseline']:+.2f} (best runs)"
    )
    for name, value in measured["micro"].items():
        print(f"micro {name}: {value:.3f} µs")


if __name__ == "__main__":
    main()
