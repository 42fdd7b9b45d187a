"""Per-table counters and latency histograms to OpenTelemetry (extra ``[otel]``).

Imported only where export is switched on (Spark conf ``asyncio_lookup.otel.enabled``): nothing
else in the library imports ``opentelemetry``. A task calls :func:`export_task` once, when it
ends, with its counter deltas and latency sketches; this module keeps the process's running
totals and hands one batch of metric points to the process's exporter — OTLP over HTTP unless
the standard ``OTEL_*`` variables say otherwise — synchronously, so nothing is pending when a
reused Python worker exits.

Why not ``Meter.create_histogram().record()``: the SDK's ``record`` costs 15-20 µs per value
here (attribute cleaning and hashing, locks, a measurement object), 60x the sketch's ``add``;
replaying a task's record and call latencies into it cost 20-40 µs per row
(``benchmarks/otel_export.py``), more than a whole lookup join's row. The
task's sketch already holds its histogram, so its buckets become the OTel data point directly:
count, sum, min and max exact, each value in the bucket its sketch bucket's midpoint falls in
(within 1 % of the value). The points go through the SDK's data model
(:mod:`opentelemetry.sdk.metrics.export`) to its exporters, as a ``MetricReader`` hands them.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import math
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

try:
    from opentelemetry.sdk.metrics import Counter as SdkCounter
    from opentelemetry.sdk.metrics import Histogram as SdkHistogram
    from opentelemetry.sdk.metrics.export import (
        AggregationTemporality,
        Buckets,
        ConsoleMetricExporter,
        ExponentialHistogram,
        ExponentialHistogramDataPoint,
        Histogram,
        HistogramDataPoint,
        Metric,
        MetricExporter,
        MetricsData,
        NumberDataPoint,
        ResourceMetrics,
        ScopeMetrics,
        Sum,
    )
    from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
except ImportError as error:  # an executor without the extra
    raise ImportError(
        "asyncio_lookup.otel.enabled needs the OpenTelemetry extra on every executor: "
        "pip install 'asyncio-lookup[otel]' (" + str(error) + ")"
    ) from error

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.lookup.otel_names import (
    COUNTERS,
    HISTOGRAMS,
    PROCESS_START_NS,
    SCOPE,
    TABLE,
    TABLE_KIND,
)
from asyncio_lookup.runtime.sketch import GAMMA, LatencySketch

_log = logging.getLogger(__name__)

#: Histogram bucket bounds in seconds: the HTTP semantic conventions' bounds, with finer ones
#: below 5 ms for cache hits and fast services, and 30 s / 60 s for retry storms.
BOUNDS_S: tuple[float, ...] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075, 0.1,
    0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 30.0, 60.0,
)  # fmt: skip


def histogram_buckets(sketch: LatencySketch, bounds: tuple[float, ...] = BOUNDS_S) -> list[int]:
    """The sketch's counts in OTel explicit buckets (``(bounds[i-1], bounds[i]]``, seconds):
    each sketch bucket counts where its midpoint falls."""
    counts = [0] * (len(bounds) + 1)
    for lower, upper, n in sketch.bins():
        midpoint_s = (2 * upper / (GAMMA + 1) if lower else 0.0) / 1000
        counts[bisect.bisect_left(bounds, midpoint_s)] += n
    return counts


#: The finest scale of exponential histogram points: base 2^(1/32), buckets 2.2 % wide (the
#: sketch's are 2 %); coarser while a point would need more than :data:`MAX_EXPONENTIAL_BUCKETS`.
MAX_SCALE = 5
MAX_EXPONENTIAL_BUCKETS = 160  # the SDK's default for its own exponential histograms


def exponential_buckets(sketch: LatencySketch) -> tuple[int, int, list[int], int]:
    """The sketch as an OTel base-2 exponential histogram in seconds: ``(scale, offset,
    counts, zero_count)``; bucket ``offset + i`` holds ``(base^(offset+i), base^(offset+i+1)]``
    with ``base = 2^(2^-scale)``, each sketch bucket counted where its midpoint falls."""
    zero = 0
    by_index: dict[int, int] = {}
    for lower, upper, n in sketch.bins():
        if not lower:
            zero += n
            continue
        midpoint_s = 2 * upper / (GAMMA + 1) / 1000
        index = math.ceil(math.log2(midpoint_s) * 2**MAX_SCALE) - 1
        by_index[index] = by_index.get(index, 0) + n
    scale = MAX_SCALE
    while by_index and max(by_index) - min(by_index) >= MAX_EXPONENTIAL_BUCKETS:
        scale -= 1  # half the resolution: buckets 2i and 2i+1 become bucket i
        merged: dict[int, int] = {}
        for index, n in by_index.items():
            merged[index >> 1] = merged.get(index >> 1, 0) + n
        by_index = merged
    if not by_index:
        return scale, 0, [], zero
    first, last = min(by_index), max(by_index)
    return scale, first, [by_index.get(i, 0) for i in range(first, last + 1)], zero


@dataclass
class _Series:
    """What one (table, kind) has recorded in this process: totals since ``start_ns``, and
    what no export has taken yet (since ``sent_ns``)."""

    start_ns: int
    sent_ns: int
    totals: dict[str, int] = field(default_factory=dict)
    unsent: dict[str, int] = field(default_factory=dict)
    latency: dict[str, LatencySketch] = field(default_factory=dict)
    unsent_latency: dict[str, LatencySketch] = field(default_factory=dict)

    def add(self, counters: Mapping[str, float], latency: Mapping[str, LatencySketch]) -> None:
        for key, value in counters.items():
            if key in COUNTERS:
                self.totals[key] = self.totals.get(key, 0) + int(value)
                self.unsent[key] = self.unsent.get(key, 0) + int(value)
        for key, sketch in latency.items():
            if key in HISTOGRAMS:
                self.latency.setdefault(key, LatencySketch()).merge(sketch)
                self.unsent_latency.setdefault(key, LatencySketch()).merge(sketch)

    def sent(self, now: int) -> None:
        self.unsent, self.unsent_latency, self.sent_ns = {}, {}, now

    @property
    def pending(self) -> bool:
        """Whether something was recorded that no export has taken yet."""
        return bool(self.unsent) or any(s.count for s in self.unsent_latency.values())


#: After a failed export a process skips exporting for this long (s): a collector that is
#: down costs one task its exporter's timeout, not every task. What was skipped goes with the
#: next export (cumulative totals, or delta points since the last export that went through).
BACKOFF_S = 60.0


class TaskExporter:
    """Turns tasks' deltas into metric points and exports them through ``exporter``.

    Cumulative (the SDK's default) unless the exporter prefers delta temporality
    (``OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE=delta``): cumulative points carry the
    process's totals since its first task of that table; delta points what the process recorded
    since its last export that went through. Either way a failed export is made good by the
    next one; after one, exports pause for :data:`BACKOFF_S`.
    """

    def __init__(
        self,
        exporter: MetricExporter,
        resource: Resource | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.exporter = exporter
        self.resource = resource if resource is not None else process_resource()
        preferred = getattr(exporter, "_preferred_temporality", None) or {}
        self.delta = preferred.get(SdkCounter) is AggregationTemporality.DELTA
        self.delta_histograms = preferred.get(SdkHistogram) is AggregationTemporality.DELTA
        aggregation = (getattr(exporter, "_preferred_aggregation", None) or {}).get(SdkHistogram)
        # OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION =
        # base2_exponential_bucket_histogram: the histograms as exponential ones
        self.exponential = isinstance(aggregation, ExponentialBucketHistogramAggregation)
        self._series: dict[tuple[str, str], _Series] = {}
        self._lock = threading.Lock()
        self._scope = InstrumentationScope(SCOPE, _version())
        self._clock = clock
        self._paused_until = -math.inf

    def export(
        self,
        table: str,
        kind: str,
        counters: Mapping[str, float],
        latency: Mapping[str, LatencySketch],
    ) -> bool:
        """Record one task's ``counters`` (deltas, by metric name) and ``latency`` sketches
        (``'record'``, ``'call'``) and export every series of this process that has something
        to send (cumulative: all of them; delta: those with unsent data), so what a paused
        export kept goes with the next one whatever its table; True if the exporter took them
        (False while paused after a failure, or when it failed or raised)."""
        with self._lock:
            series = self._series.get((table, kind))
            if series is None:  # a delta point of the first task starts with the process
                series = _Series(PROCESS_START_NS, PROCESS_START_NS)
                self._series[(table, kind)] = series
            series.add(counters, latency)
            if self._clock() < self._paused_until:
                return False
            now = time.time_ns()
            chosen = [(key, s) for key, s in self._series.items() if s.pending or not self.delta]
            metrics = _one_per_name(m for (t, k), s in chosen for m in self._metrics(t, k, s, now))
            scopes = [ScopeMetrics(self._scope, metrics, "")]
            try:
                result = self.exporter.export(
                    MetricsData([ResourceMetrics(self.resource, scopes, "")])
                )
            except Exception as error:  # an exporter that raises: as one that fails
                result, reason = None, f"{type(error).__name__}: {error}"
            else:
                reason = type(self.exporter).__name__
            if getattr(result, "name", "") == "SUCCESS":
                for _, s in chosen:
                    s.sent(now)
                return True
            self._paused_until = self._clock() + BACKOFF_S
        _log.warning(
            "OpenTelemetry export of %r failed (%s); this worker tries again after %.0f s, "
            "with the next task that ends then, and sends what it recorded meanwhile",
            table,
            reason,
            BACKOFF_S,
        )
        return False

    def _metrics(self, table: str, kind: str, series: _Series, now: int) -> list[Metric]:
        attributes = {TABLE: table, TABLE_KIND: kind}
        metrics: list[Metric] = []
        counters = series.unsent if self.delta else series.totals
        start = series.sent_ns if self.delta else series.start_ns
        for key, value in counters.items():
            spec = COUNTERS[key]
            point = NumberDataPoint(attributes, start, now, value)
            data = Sum([point], _temporality(self.delta), is_monotonic=True)
            metrics.append(Metric(spec.name, spec.description, spec.unit, data))
        sketches = series.unsent_latency if self.delta_histograms else series.latency
        start = series.sent_ns if self.delta_histograms else series.start_ns
        for key, sketch in sketches.items():
            if not sketch.count:
                continue
            spec = HISTOGRAMS[key]
            if self.exponential:
                exponential = self._exponential(sketch, attributes, start, now)
                metrics.append(Metric(spec.name, spec.description, spec.unit, exponential))
                continue
            bucketed = HistogramDataPoint(
                attributes,
                start,
                now,
                bucket_counts=histogram_buckets(sketch),
                explicit_bounds=BOUNDS_S,
                **_exact_seconds(sketch),
            )
            histogram = Histogram([bucketed], _temporality(self.delta_histograms))
            metrics.append(Metric(spec.name, spec.description, spec.unit, histogram))
        return metrics

    def _exponential(
        self, sketch: LatencySketch, attributes: dict[str, str], start: int, now: int
    ) -> ExponentialHistogram:
        scale, offset, counts, zero = exponential_buckets(sketch)
        point = ExponentialHistogramDataPoint(
            attributes,
            start,
            now,
            scale=scale,
            zero_count=zero,
            positive=Buckets(offset, counts),
            negative=Buckets(0, []),
            flags=0,
            **_exact_seconds(sketch),
        )
        return ExponentialHistogram([point], _temporality(self.delta_histograms))


def _one_per_name(metrics: Iterable[Metric]) -> list[Metric]:
    """One metric per name, with the data points of every series (table) that has it, as the
    OpenTelemetry data model wants (a point per attribute set)."""
    by_name: dict[str, Metric] = {}
    for metric in metrics:
        first = by_name.get(metric.name)
        if first is None:
            by_name[metric.name] = metric
            continue
        points = [*first.data.data_points, *metric.data.data_points]
        data = dataclasses.replace(first.data, data_points=points)  # type: ignore[arg-type]
        by_name[metric.name] = Metric(first.name, first.description, first.unit, data)
    return list(by_name.values())


def _exact_seconds(sketch: LatencySketch) -> dict[str, Any]:
    """A point's exact figures in seconds: count, sum, min and max."""
    return {
        "count": sketch.count,
        "sum": sketch.sum_ms / 1000,
        "min": sketch.min_ms / 1000,
        "max": sketch.max_ms / 1000,
    }


def _temporality(delta: bool) -> AggregationTemporality:
    return AggregationTemporality.DELTA if delta else AggregationTemporality.CUMULATIVE


def process_resource() -> Resource:
    """The ``OTEL_RESOURCE_ATTRIBUTES`` / ``OTEL_SERVICE_NAME`` resource, with a
    ``service.instance.id`` of this process (each Python worker reports its own cumulative
    series) and ``service.name`` ``asyncio-lookup`` when none is given."""
    resource = Resource.create()
    extra: dict[str, str] = {}
    if "service.instance.id" not in resource.attributes:
        extra["service.instance.id"] = uuid.uuid4().hex
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        extra["service.name"] = "asyncio-lookup"
    return resource.merge(Resource(extra)) if extra else resource


def exporter_from_env() -> MetricExporter | None:
    """The exporter the standard variables choose: ``OTEL_METRICS_EXPORTER`` ``otlp`` (default)
    with ``OTEL_EXPORTER_OTLP_[METRICS_]PROTOCOL`` ``http/protobuf`` (default) or ``grpc``;
    ``console``; ``none`` (None: nothing is exported)."""
    chosen = os.environ.get("OTEL_METRICS_EXPORTER", "otlp").split(",")[0].strip().lower()
    if chosen == "none":
        return None
    if chosen == "console":
        return ConsoleMetricExporter()
    if chosen != "otlp":
        raise ConfigurationError(
            "OTEL_METRICS_EXPORTER", chosen, "'otlp', 'console' or 'none' (asyncio-lookup's export)"
        )
    protocol = os.environ.get(
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
        os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
    ).strip()
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
                OTLPMetricExporter as GrpcExporter,
            )
        except ImportError as error:
            raise ImportError(
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs opentelemetry-exporter-otlp-proto-grpc "
                "on the executors (pip install opentelemetry-exporter-otlp-proto-grpc)"
            ) from error
        return GrpcExporter()  # type: ignore[no-any-return]
    if protocol not in ("http/protobuf", ""):
        raise ConfigurationError(
            "OTEL_EXPORTER_OTLP_PROTOCOL", protocol, "'http/protobuf' (the default) or 'grpc'"
        )
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    except ImportError as error:
        raise ImportError(
            "OTLP over HTTP needs opentelemetry-exporter-otlp-proto-http on the executors: "
            f"pip install 'asyncio-lookup[otel]' ({error})"
        ) from error
    return OTLPMetricExporter()


_process_lock = threading.Lock()
_process: list[TaskExporter | None] = []  # [] before the first export of this process


def set_exporter(exporter: MetricExporter | None) -> None:
    """Use ``exporter`` for this process's exports from now on (None: export nothing); before
    any call the ``OTEL_*`` variables choose (:func:`exporter_from_env`). For tests, or a
    worker start-up hook that wants another exporter."""
    with _process_lock:
        _process[:] = [None if exporter is None else TaskExporter(exporter)]


def process_exporter() -> TaskExporter | None:
    """The process's :class:`TaskExporter`, made on first use from the ``OTEL_*`` variables;
    None when they choose none, or one this export cannot use (an ``OTEL_METRICS_EXPORTER``
    set for another agent, say): logged once, and this process exports nothing."""
    with _process_lock:
        if not _process:
            try:
                exporter = exporter_from_env()
            except (ConfigurationError, ImportError) as error:
                _log.warning("OpenTelemetry export off in this worker: %s", error)
                exporter = None
            _process.append(None if exporter is None else TaskExporter(exporter))
        return _process[0]


def export_task(
    table: str,
    kind: str,
    counters: Mapping[str, float],
    latency: Mapping[str, LatencySketch],
) -> None:
    """The hook where a task ends: its counter deltas and latency sketches of ``table`` (a
    lookup table's name, or ``async_map``'s name; ``kind`` ``'lookup_join'`` or ``'async_map'``)
    to the process's exporter. An exporter that fails logs and returns; the task goes on."""
    exporter = process_exporter()
    if exporter is not None:
        exporter.export(table, kind, counters, latency)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("asyncio-lookup")
    except PackageNotFoundError:
        return "0"


__all__ = [
    "BOUNDS_S",
    "TaskExporter",
    "export_task",
    "exporter_from_env",
    "histogram_buckets",
    "process_exporter",
    "process_resource",
    "set_exporter",
]
