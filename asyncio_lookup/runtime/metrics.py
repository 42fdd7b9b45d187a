"""Operator metrics as plain counters, exported with Flink-style names by :meth:`snapshot`."""

from __future__ import annotations

from typing import ClassVar

from asyncio_lookup.runtime.causes import Causes

SAMPLES = 1024  # latency samples kept for the percentiles (the most recent ones); a power of 2


class OperatorMetrics:
    """Counters of one or more operator runs; not thread-safe (one event loop updates them).

    ``in_flight`` is a gauge (records admitted and not yet final); the rest only grow.
    ``completed`` counts records whose final outcome is a result (including a timeout hook's),
    ``errors`` records that failed, ``failed`` those of them emitted through the error output
    (``on_error``) instead of failing the stream, ``timeouts`` records whose deadline expired,
    ``retries`` retry attempts started. Latency is admission-to-result of completed records.
    """

    GAUGES: ClassVar[frozenset[str]] = frozenset(
        {"numInFlight", "latencyMaxMs", "latencyP50Ms", "latencyP99Ms"}
    )
    """Snapshot names to merge by max across tasks; every other name is summed."""

    __slots__ = (
        "causes",
        "completed",
        "errors",
        "failed",
        "in_flight",
        "latency_count",
        "latency_max_ms",
        "latency_sum_ms",
        "retries",
        "samples",
        "timeouts",
    )

    def __init__(self) -> None:
        self.in_flight = 0
        self.completed = 0
        self.retries = 0
        self.timeouts = 0
        self.errors = 0
        self.failed = 0
        self.latency_count = 0
        self.latency_sum_ms = 0.0
        self.latency_max_ms = 0.0
        self.samples: list[float] = [0.0] * SAMPLES  # a ring: sample n at n % SAMPLES
        self.causes = Causes()  # failures, retries and timeouts by cause (runtime/causes.py)

    def record_latency(self, ms: float) -> None:
        """Add one completed record's latency in milliseconds."""
        self.samples[self.latency_count % SAMPLES] = ms
        self.latency_count += 1
        self.latency_sum_ms += ms
        if ms > self.latency_max_ms:
            self.latency_max_ms = ms

    def percentile(self, q: float) -> float:
        """The ``q``-quantile (0..1) of the most recent latencies (up to 1024), 0.0 if none."""
        samples = sorted(self.samples[: min(self.latency_count, SAMPLES)])
        if not samples:
            return 0.0
        return samples[min(len(samples) - 1, int(q * len(samples)))]

    def snapshot(self) -> dict[str, float]:
        """The counters under Flink-style camelCase names."""
        return {
            "numInFlight": float(self.in_flight),
            "numCompleted": float(self.completed),
            "numRetries": float(self.retries),
            "numTimeouts": float(self.timeouts),
            "numErrors": float(self.errors),
            "numFailedRows": float(self.failed),
            "latencyCount": float(self.latency_count),
            "latencySumMs": self.latency_sum_ms,
            "latencyMaxMs": self.latency_max_ms,
            "latencyP50Ms": self.percentile(0.50),
            "latencyP99Ms": self.percentile(0.99),
        }

    def __repr__(self) -> str:
        return f"OperatorMetrics({self.snapshot()})"
