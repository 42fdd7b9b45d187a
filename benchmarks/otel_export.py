"""What the OpenTelemetry export costs a task (issue 25), and the per-value path it replaced.

A task ends with its counter deltas and two latency sketches (record and call) of ``rows``
values each. Measured, interleaved, medians of ``repeats``:

- ``points``: :meth:`TaskExporter.export` into an exporter that drops them (building the
  points from the sketches: the CPU the export adds to a task);
- ``otlp``: the same through the OTLP/HTTP exporter to a receiver in another process (wall
  time, one POST per task);
- ``record``: the alternative, every latency replayed into two SDK ``Histogram``s with
  ``record`` (what recording per call, or per value at task end, costs).

Run: ``python -m benchmarks.otel_export [--rows 10000] [--repeats 5]``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import statistics
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    InMemoryMetricReader,
    MetricExporter,
    MetricExportResult,
    MetricsData,
)

from asyncio_lookup.lookup.otel import BOUNDS_S, TaskExporter
from asyncio_lookup.lookup.otel_names import COUNTERS
from asyncio_lookup.runtime.sketch import LatencySketch


class Dropped(MetricExporter):
    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **_: Any) -> Any:
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **_: Any) -> None:
        pass


class _Ok(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        pass


def _serve(port: Any) -> None:
    server = HTTPServer(("127.0.0.1", 0), _Ok)
    port.value = server.server_address[1]
    server.serve_forever()


def latencies(rows: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [rng.lognormvariate(2.3, 0.6) for _ in range(rows)]  # ~10 ms, a long tail


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000, help="rows (latencies) per task")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    values = latencies(args.rows, 1)
    sketches = {"record": LatencySketch(), "call": LatencySketch()}
    for ms in values:
        sketches["record"].add(ms)
        sketches["call"].add(ms * 0.8)
    counters = {name: args.rows for name in COUNTERS}

    port: Any = multiprocessing.Value("i", 0)
    server = multiprocessing.Process(target=_serve, args=(port,), daemon=True)
    server.start()
    while not port.value:
        time.sleep(0.01)
    otlp = TaskExporter(OTLPMetricExporter(endpoint=f"http://127.0.0.1:{port.value}/v1/metrics"))
    dropped = TaskExporter(Dropped())

    provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    meter = provider.get_meter("bench")
    histograms = [
        meter.create_histogram(name, unit="s", explicit_bucket_boundaries_advisory=BOUNDS_S)
        for name in ("record", "call")
    ]
    attributes = {"asyncio_lookup.table": "t", "asyncio_lookup.operation": "lookup_join"}

    def replay() -> None:
        for histogram in histograms:
            record = histogram.record
            for ms in values:
                record(ms / 1000, attributes)

    variants = {
        "points": lambda: dropped.export("t", "lookup_join", counters, sketches),
        "otlp": lambda: otlp.export("t", "lookup_join", counters, sketches),
        "record": replay,
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, run in variants.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    server.terminate()
    print(f"{args.rows:,} rows per task; medians of {args.repeats}")
    for name, taken in times.items():
        task = statistics.median(taken)
        print(f"  {name:7} {task * 1e3:9.3f} ms per task  {task / args.rows * 1e6:8.3f} µs per row")


if __name__ == "__main__":
    main()
