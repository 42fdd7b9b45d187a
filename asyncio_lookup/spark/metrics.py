"""Metrics from executors to the driver: one accumulator per SparkContext, keyed by table id.

Each task adds its deltas (cache counters since the task started, and its operator's counters);
the driver sums them with :func:`merge_metrics` (counters summed, gauges by max). Spark applies
a task's accumulator updates once, when the task succeeds.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from pyspark import SparkContext
from pyspark.accumulators import Accumulator, AccumulatorParam

from asyncio_lookup.lookup.metrics import CacheMetricGroup, merge_metrics
from asyncio_lookup.runtime.metrics import OperatorMetrics

GAUGES: frozenset[str] = CacheMetricGroup.GAUGES | OperatorMetrics.GAUGES

MetricsByTable = dict[str, dict[str, float]]


class MetricsParam(AccumulatorParam[MetricsByTable]):
    """Sums ``{table_id: {metric: value}}`` dicts (gauges merged by max)."""

    def zero(self, value: MetricsByTable) -> MetricsByTable:
        return {}

    def addInPlace(self, value1: MetricsByTable, value2: MetricsByTable) -> MetricsByTable:
        for table_id, metrics in value2.items():
            value1[table_id] = merge_metrics(value1.get(table_id, {}), metrics, GAUGES)
        return value1


_lock = threading.Lock()
_accumulators: dict[int, tuple[SparkContext, Accumulator[MetricsByTable]]] = {}


def metrics_accumulator(sc: SparkContext) -> Accumulator[MetricsByTable]:
    """The metrics accumulator of ``sc`` (created on first use, on the driver)."""
    with _lock:
        entry = _accumulators.get(id(sc))
        if entry is None or entry[0] is not sc:
            entry = (sc, sc.accumulator({}, MetricsParam()))
            _accumulators[id(sc)] = entry
        return entry[1]


def table_metrics(table_id: str) -> dict[str, float]:
    """The summed metrics of one table in the active SparkContext ({} before any action)."""
    sc = SparkContext._active_spark_context
    if sc is None:
        return {}
    with _lock:
        entry = _accumulators.get(id(sc))
    if entry is None or entry[0] is not sc:
        return {}
    return dict(entry[1].value.get(table_id, {}))


def report(accumulator: Any, table_id: str, metrics: Mapping[str, float]) -> None:
    """On an executor: add one task's metric deltas for ``table_id``."""
    if metrics:
        accumulator.add({table_id: dict(metrics)})
