"""OpenTelemetry export from the executors (Spark conf ``asyncio_lookup.otel.enabled``): the
workers' OTLP/HTTP exporter posts to a receiver in this test, which decodes the protobuf."""

from __future__ import annotations

import gzip
import socket
import uuid
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from asyncio_lookup.connectors import InMemoryConnector
from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.spark import LookupTable, async_map, lookup_join
from asyncio_lookup.spark.otel_switch import CONF_OTEL_ENABLED
from tests.services import BackgroundService
from tests.spark.conftest import OTLP_PORT, OTLP_SOCKET

SCHEMA = "id INT, name STRING"
DIM = [{"id": i, "name": f"c{i}"} for i in range(0, 60, 2)]


class OtlpReceiver(BackgroundService):
    """An OTLP/HTTP metrics receiver on the port the workers' OTEL_* variables name."""

    name = "otlp-receiver"

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(sock)
        self.requests: list[ExportMetricsServiceRequest] = []

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/metrics", self._metrics)

    async def _metrics(self, request: web.Request) -> web.Response:
        body = await request.read()
        coding = request.headers.get("Content-Encoding", "")
        if coding == "gzip":
            body = gzip.decompress(body)
        elif coding == "deflate":
            body = zlib.decompress(body)
        parsed = ExportMetricsServiceRequest()
        parsed.ParseFromString(body)
        with self.lock:
            self.requests.append(parsed)
        return web.Response(
            body=ExportMetricsServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    def points(self, table: str) -> dict[str, dict[str, Any]]:
        """Metric name -> {worker process (service.instance.id): its latest data point} of
        ``table``: each worker exports its cumulative totals, so the latest counts."""
        found: dict[str, dict[str, Any]] = {}
        with self.lock:
            requests = list(self.requests)
        for request in requests:
            for resource_metrics in request.resource_metrics:
                resource = {
                    a.key: a.value.string_value for a in resource_metrics.resource.attributes
                }
                worker = resource["service.instance.id"]
                for scope_metrics in resource_metrics.scope_metrics:
                    assert scope_metrics.scope.name == "asyncio_lookup"
                    for metric in scope_metrics.metrics:
                        data = getattr(metric, metric.WhichOneof("data"))
                        for point in data.data_points:
                            attributes = {a.key: a.value.string_value for a in point.attributes}
                            if attributes["asyncio_lookup.table"] != table:
                                continue
                            latest = found.setdefault(metric.name, {})
                            kept = latest.get(worker)
                            if kept is None or kept[1].time_unix_nano < point.time_unix_nano:
                                latest[worker] = (metric, point, attributes)
        return found

    def total(self, table: str, name: str) -> int:
        """A counter of ``table`` summed over the workers."""
        return sum(int(point.as_int) for _, point, _ in self.points(table)[name].values())


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver(OTLP_SOCKET) as service:
        assert service.port == OTLP_PORT
        yield service


@pytest.fixture
def otel_on(spark: SparkSession) -> Iterator[None]:
    spark.conf.set(CONF_OTEL_ENABLED, "true")
    try:
        yield
    finally:
        spark.conf.unset(CONF_OTEL_ENABLED)


def _probe(spark: SparkSession) -> Any:
    return (
        spark.range(120)
        .select(F.col("id").cast("int").alias("n"), (F.col("id") % 60).cast("int").alias("k"))
        .repartition(4)
    )


def test_executors_export_a_join_s_counters_over_otlp(
    spark: SparkSession, receiver: OtlpReceiver, otel_on: None
) -> None:
    name = f"otel_{uuid.uuid4().hex[:8]}"
    table = LookupTable(name, SCHEMA, InMemoryConnector(DIM, key_columns=("id",)))
    rows = lookup_join(_probe(spark), table, on=[("k", "id")], how="left").collect()
    assert len(rows) == 120
    points = receiver.points(name)
    assert receiver.total(name, "asyncio_lookup.lookups") == 120
    assert receiver.total(name, "asyncio_lookup.records") == 120
    metrics = table.metrics()
    assert receiver.total(name, "asyncio_lookup.calls") == metrics["numExternalCalls"]
    for metric, point, attributes in points["asyncio_lookup.lookups"].values():
        assert metric.unit == "{lookup}"
        assert metric.sum.is_monotonic
        assert metric.sum.aggregation_temporality == 2  # cumulative
        assert attributes == {
            "asyncio_lookup.table": name,
            "asyncio_lookup.operation": "lookup_join",
        }
        assert point.start_time_unix_nano < point.time_unix_nano
    for kind, prefix in (("record", "latency"), ("call", "callLatency")):
        histograms = points[f"asyncio_lookup.{kind}.duration"].values()
        assert sum(int(point.count) for _, point, _ in histograms) == metrics[f"{prefix}Count"]
        seconds = sum(point.sum for _, point, _ in histograms)
        assert seconds == pytest.approx(metrics[f"{prefix}SumMs"] / 1000, rel=1e-3, abs=1e-5)
        assert {metric.unit for metric, _, _ in histograms} == {"s"}
    assert metrics["latencyCount"] == 120


def test_executors_export_async_map_s_counters(
    spark: SparkSession, receiver: OtlpReceiver, otel_on: None
) -> None:
    name = f"otel_map_{uuid.uuid4().hex[:8]}"

    async def double(row: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"n": row["n"], "twice": row["n"] * 2}]

    out = async_map(_probe(spark), double, "n INT, twice INT", timeout=30, metrics_id=name)
    assert out.count() == 120
    assert receiver.total(name, "asyncio_lookup.records") == 120
    histograms = receiver.points(name)["asyncio_lookup.call.duration"].values()
    assert sum(int(point.count) for _, point, _ in histograms) == 120  # every call of double
    (_, _, attributes), *_ = receiver.points(name)["asyncio_lookup.records"].values()
    assert attributes["asyncio_lookup.operation"] == "async_map"


def test_without_the_switch_nothing_is_exported(
    spark: SparkSession, receiver: OtlpReceiver
) -> None:
    name = f"otel_off_{uuid.uuid4().hex[:8]}"
    table = LookupTable(name, SCHEMA, InMemoryConnector(DIM, key_columns=("id",)))
    assert lookup_join(_probe(spark), table, on=[("k", "id")]).count() == 60
    assert table.metrics()["numLookups"] == 120
    assert receiver.points(name) == {}


def test_a_bad_switch_value_fails_on_the_driver(spark: SparkSession) -> None:
    spark.conf.set(CONF_OTEL_ENABLED, "yes")
    try:
        table = LookupTable("t", SCHEMA, InMemoryConnector(DIM, key_columns=("id",)))
        with pytest.raises(ConfigurationError, match=r"'yes' for 'asyncio_lookup.otel.enabled'"):
            lookup_join(_probe(spark), table, on=[("k", "id")])
    finally:
        spark.conf.unset(CONF_OTEL_ENABLED)
