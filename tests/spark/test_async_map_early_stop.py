"""``async_map``'s task with the OpenTelemetry switch on exports its figures when Spark stops
reading its output early (limit, show, take close the generator), as a lookup join's task
does. Driven without Spark: the mapInArrow function, closed after its first output."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult

from asyncio_lookup.lookup import otel
from asyncio_lookup.runtime import RetryStrategies
from asyncio_lookup.spark.async_map_task import AsyncMapTask


class Recording(MetricExporter):
    def __init__(self) -> None:
        super().__init__()
        self.exports: list[Any] = []

    def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kw: Any) -> Any:
        self.exports.append(metrics_data)
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kw: Any) -> None:
        pass


@pytest.fixture
def recording() -> Iterator[Recording]:
    before = list(otel._process)
    exporter = Recording()
    otel.set_exporter(exporter)
    try:
        yield exporter
    finally:
        otel._process[:] = before


async def double(row: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"y": row["x"] * 2}]


def _records(exports: list[Any]) -> int:
    total = 0
    for data in exports:
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == "asyncio_lookup.records":
                        total += sum(int(point.value) for point in metric.data.data_points)
    return total


@pytest.mark.parametrize("metrics_id", ["early_stop", None])
def test_a_task_read_partly_exports_its_figures(
    recording: Recording, metrics_id: str | None
) -> None:
    task = AsyncMapTask(
        double,
        pa.schema([("y", pa.int64())]),
        None,
        10,
        "ordered",
        RetryStrategies.NO_RETRY,
        metrics_id,
        flush_rows=10,
        otel=True,
    )
    batches = iter([pa.record_batch({"x": list(range(i, i + 10))}) for i in range(0, 100, 10)])
    outputs = task(batches)
    next(outputs)  # Spark reads a little...
    outputs.close()  # ...and stops
    assert len(recording.exports) == 1
    assert _records(recording.exports) > 0
