"""Operator metrics as plain counters and latency sketches, exported with Flink-style names."""

from __future__ import annotations

from typing import ClassVar

from asyncio_lookup.runtime.causes import Causes
from asyncio_lookup.runtime.sketch import LatencySketch

#: The quantiles a snapshot reports, by name suffix (``latencyP50Ms`` ... ``latencyP999Ms``).
QUANTILES: tuple[tuple[str, float], ...] = (
    ("P50", 0.50),
    ("P90", 0.90),
    ("P99", 0.99),
    ("P999", 0.999),
)


def ms(value: float) -> float:
    """A duration in ms rounded to the µs (no float noise such as 17.000000000280124)."""
    return round(value, 3)


def latency_names(prefix: str, sketch: LatencySketch) -> dict[str, int | float]:
    """``{prefix}Count`` / ``{prefix}SumMs`` always; quantiles and ``{prefix}MaxMs`` of a
    non-empty sketch (an empty one has no quantile to report)."""
    values: dict[str, int | float] = {
        f"{prefix}Count": sketch.count,
        f"{prefix}SumMs": ms(sketch.sum_ms),
    }
    if sketch.count:
        for suffix, q in QUANTILES:
            values[f"{prefix}{suffix}Ms"] = ms(sketch.quantile(q))
        values[f"{prefix}MaxMs"] = ms(sketch.max_ms)
    return values


class OperatorMetrics:
    """Counters and latency sketches of one or more operator runs; not thread-safe (one event
    loop updates them).

    ``in_flight`` is a gauge (records admitted and not yet final); the other counters only grow.
    ``completed`` counts records whose final outcome is a result (including a timeout hook's),
    ``errors`` records that failed, ``failed`` those of them emitted through the error output
    (``on_error``) instead of failing the stream, ``timeouts`` records whose deadline expired,
    ``retries`` retry attempts started. ``latency`` holds every completed record's latency
    (admission to result); ``calls``, when set (None by default), every attempt's call of the
    function that returned or raised (a call cancelled by a timeout has no latency).
    """

    GAUGES: ClassVar[frozenset[str]] = frozenset(
        {"numInFlight", "latencyMaxMs", "callLatencyMaxMs"}
    )
    """Snapshot names to merge by max across tasks; every other name is summed (quantiles are
    not merged: they are computed from merged sketches)."""

    COUNTERS: ClassVar[tuple[tuple[str, str], ...]] = (
        ("numCompleted", "completed"),
        ("numRetries", "retries"),
        ("numTimeouts", "timeouts"),
        ("numErrors", "errors"),
        ("numFailedRows", "failed"),
    )
    """Counter names and the attributes they read."""

    __slots__ = (
        "_reported",
        "calls",
        "calls_timed_by_function",
        "causes",
        "completed",
        "errors",
        "failed",
        "in_flight",
        "latency",
        "retries",
        "timeouts",
    )

    def __init__(self) -> None:
        self.in_flight = 0
        self.completed = 0
        self.retries = 0
        self.timeouts = 0
        self.errors = 0
        self.failed = 0
        self.latency = LatencySketch()
        self.calls: LatencySketch | None = None
        #: The function adds its calls to ``calls`` itself (a rate limiter's wrapper, which
        #: leaves out the wait for a token): the operator does not time them.
        self.calls_timed_by_function = False
        self._reported: dict[str, int] = {}
        self.causes = Causes()  # failures, retries and timeouts by cause (runtime/causes.py)

    def record_latency(self, ms: float) -> None:
        """Add one completed record's latency in milliseconds (the handler inlines this)."""
        self.latency.add(ms)

    def counters(self) -> dict[str, int]:
        """The counters and the ``numInFlight`` gauge under their Flink-style names."""
        values = {name: getattr(self, attribute) for name, attribute in self.COUNTERS}
        values["numInFlight"] = self.in_flight
        return values

    def snapshot(self) -> dict[str, int | float]:
        """Counters, gauges and latency figures of everything recorded (names as documented
        in docs/reference.md "Metrics")."""
        values: dict[str, int | float] = dict(self.counters())
        values.update(latency_names("latency", self.latency))
        if self.calls is not None:
            values.update(latency_names("callLatency", self.calls))
        return values

    def take_delta(self) -> tuple[dict[str, int], LatencySketch, LatencySketch | None]:
        """Counters since the previous ``take_delta`` (``numInFlight``: its current value) and
        the record and call sketches drained: for reports of successive parts of a run, whose
        deltas sum to the totals. The sketches' figures then restart empty."""
        current = self.counters()
        delta: dict[str, int] = {}
        for name, value in current.items():
            if name == "numInFlight":
                delta[name] = value
            else:
                delta[name] = value - self._reported.get(name, 0)
                self._reported[name] = value
        calls = self.calls.drain() if self.calls is not None else None
        return delta, self.latency.drain(), calls

    def __repr__(self) -> str:
        return f"OperatorMetrics({self.snapshot()})"
