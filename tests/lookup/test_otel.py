"""The OpenTelemetry export (asyncio_lookup.lookup.otel): names, units, values, temporality,
the exporter the OTEL_* variables choose, and that nothing imports opentelemetry unless asked."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics import Counter, Histogram
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    ConsoleMetricExporter,
    MetricExporter,
    MetricExportResult,
    MetricsData,
)
from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation
from opentelemetry.sdk.resources import Resource

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.lookup import otel
from asyncio_lookup.lookup.otel_names import COUNTERS, HISTOGRAMS
from asyncio_lookup.runtime.sketch import LatencySketch


class Captured(MetricExporter):
    """An SDK exporter that keeps what it is given (what OTLP would send)."""

    def __init__(
        self,
        delta: bool = False,
        result: MetricExportResult | None = None,
        exponential: bool = False,
    ) -> None:
        temporality = AggregationTemporality.DELTA if delta else AggregationTemporality.CUMULATIVE
        super().__init__(
            preferred_temporality={Counter: temporality, Histogram: temporality},
            preferred_aggregation=(
                {Histogram: ExponentialBucketHistogramAggregation()} if exponential else None
            ),
        )
        self.batches: list[MetricsData] = []
        self.result = result or MetricExportResult.SUCCESS

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **_: Any) -> Any:
        self.batches.append(metrics_data)
        return self.result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **_: Any) -> None:
        pass

    def metrics(self, batch: int = -1) -> dict[str, Any]:
        """Metric name -> Metric of one exported batch."""
        (resource_metrics,) = self.batches[batch].resource_metrics
        (scope_metrics,) = resource_metrics.scope_metrics
        assert scope_metrics.scope.name == "asyncio_lookup"
        return {metric.name: metric for metric in scope_metrics.metrics}


def sketch_of(values_ms: Sequence[float]) -> LatencySketch:
    sketch = LatencySketch()
    for ms in values_ms:
        sketch.add(ms)
    return sketch


RESOURCE = Resource({"service.name": "test", "service.instance.id": "one"})
# 95 records of 20 ms and 5 of 300 ms; calls of 2 ms and 0.5 µs (below the sketch's 1 µs)
RECORDS = [20.0] * 95 + [300.0] * 5
CALLS = [2.0] * 10 + [0.0005] * 2
COUNTS = {
    "numLookups": 100,
    "numExternalCalls": 12,
    "hitCount": 7,
    "numRetries": 3,
    "numCachedRecords": 40,  # a gauge: not exported
    "latencyP99Ms": 300.0,  # a figure of the sketch: not exported
}


def test_counters_and_histograms_have_their_names_units_and_values() -> None:
    captured = Captured()
    exporter = otel.TaskExporter(captured, RESOURCE)
    latency = {"record": sketch_of(RECORDS), "call": sketch_of(CALLS)}
    assert exporter.export("customers", "lookup_join", COUNTS, latency)
    metrics = captured.metrics()
    assert set(metrics) == {
        "asyncio_lookup.lookups",
        "asyncio_lookup.calls",
        "asyncio_lookup.cache.hits",
        "asyncio_lookup.retries",
        "asyncio_lookup.record.duration",
        "asyncio_lookup.call.duration",
    }
    lookups = metrics["asyncio_lookup.lookups"]
    assert lookups.unit == "{lookup}"
    assert lookups.data.is_monotonic
    assert lookups.data.aggregation_temporality is AggregationTemporality.CUMULATIVE
    (point,) = lookups.data.data_points
    assert point.value == 100 and isinstance(point.value, int)
    assert dict(point.attributes) == {
        "asyncio_lookup.table": "customers",
        "asyncio_lookup.operation": "lookup_join",
    }
    assert metrics["asyncio_lookup.calls"].data.data_points[0].value == 12
    assert metrics["asyncio_lookup.calls"].unit == "{call}"
    assert metrics["asyncio_lookup.retries"].unit == "{retry}"

    record = metrics["asyncio_lookup.record.duration"]
    assert record.unit == "s"
    (hist,) = record.data.data_points
    assert hist.count == 100
    assert hist.sum == pytest.approx(95 * 0.020 + 5 * 0.300)
    assert (hist.min, hist.max) == (pytest.approx(0.020), pytest.approx(0.300))
    assert list(hist.explicit_bounds) == list(otel.BOUNDS_S)
    buckets = dict(zip([*otel.BOUNDS_S, float("inf")], hist.bucket_counts, strict=True))
    assert buckets[0.025] == 95  # (0.01, 0.025]
    assert buckets[0.5] == 5  # (0.25, 0.5]
    assert sum(hist.bucket_counts) == 100

    (call,) = metrics["asyncio_lookup.call.duration"].data.data_points
    assert call.count == 12
    assert call.bucket_counts[0] == 2  # below 1 µs: the first bucket
    assert call.min == pytest.approx(0.0005 / 1000)
    # the SDK's OTLP encoder (what the OTLP exporters send) takes it as it takes its own points
    (encoded,) = encode_metrics(captured.batches[-1]).resource_metrics
    by_name = {m.name: m for m in encoded.scope_metrics[0].metrics}
    otlp = by_name["asyncio_lookup.record.duration"]
    assert otlp.unit == "s"
    assert otlp.histogram.aggregation_temporality == 2  # cumulative
    (otlp_point,) = otlp.histogram.data_points
    assert (otlp_point.count, list(otlp_point.bucket_counts)) == (100, list(hist.bucket_counts))
    assert otlp_point.sum == pytest.approx(3.4)
    assert by_name["asyncio_lookup.lookups"].sum.data_points[0].as_int == 100


def test_cumulative_points_add_up_tasks_of_a_process() -> None:
    captured = Captured()
    exporter = otel.TaskExporter(captured, RESOURCE)
    exporter.export("t", "lookup_join", {"numLookups": 10}, {"record": sketch_of([5.0] * 10)})
    exporter.export("t", "lookup_join", {"numLookups": 4}, {"record": sketch_of([50.0] * 4)})
    exporter.export("other", "async_map", {"numLookups": 1}, {})
    first, second = captured.metrics(0), captured.metrics(1)
    one = first["asyncio_lookup.lookups"].data.data_points[0]
    two = second["asyncio_lookup.lookups"].data.data_points[0]
    assert (one.value, two.value) == (10, 14)
    assert one.start_time_unix_nano == two.start_time_unix_nano < two.time_unix_nano
    hist = second["asyncio_lookup.record.duration"].data.data_points[0]
    assert (hist.count, hist.min, hist.max) == (14, 0.005, 0.05)
    # every series of the process, one metric per name with a point per series
    points = captured.metrics(2)["asyncio_lookup.lookups"].data.data_points
    by_table = {p.attributes["asyncio_lookup.table"]: p for p in points}
    assert (by_table["t"].value, by_table["other"].value) == (14, 1)
    assert by_table["other"].attributes["asyncio_lookup.operation"] == "async_map"


def test_delta_points_carry_each_task_since_the_previous_export() -> None:
    captured = Captured(delta=True)
    exporter = otel.TaskExporter(captured, RESOURCE)
    exporter.export("t", "lookup_join", {"numLookups": 10}, {"record": sketch_of([5.0] * 10)})
    exporter.export("t", "lookup_join", {"numLookups": 4}, {"record": sketch_of([50.0] * 4)})
    one = captured.metrics(0)["asyncio_lookup.lookups"].data
    two = captured.metrics(1)["asyncio_lookup.lookups"].data
    assert two.aggregation_temporality is AggregationTemporality.DELTA
    assert (one.data_points[0].value, two.data_points[0].value) == (10, 4)
    assert two.data_points[0].start_time_unix_nano == one.data_points[0].time_unix_nano
    hist = captured.metrics(1)["asyncio_lookup.record.duration"].data.data_points[0]
    assert (hist.count, hist.min) == (4, 0.05)


@pytest.mark.parametrize("delta", [False, True])
def test_a_failed_export_pauses_exports_and_the_next_one_makes_it_good(delta: bool) -> None:
    captured = Captured(delta=delta, result=MetricExportResult.FAILURE)
    now = [0.0]
    exporter = otel.TaskExporter(captured, RESOURCE, clock=lambda: now[0])
    record = {"record": sketch_of([5.0])}
    assert not exporter.export("t", "lookup_join", {"numLookups": 3}, record)
    captured.result = MetricExportResult.SUCCESS
    now[0] = otel.BACKOFF_S - 1  # paused: a collector that is down costs one task, not each
    assert not exporter.export("t", "lookup_join", {"numLookups": 2}, record)
    assert len(captured.batches) == 1
    now[0] = otel.BACKOFF_S
    assert exporter.export("t", "lookup_join", {"numLookups": 1}, record)
    metrics = captured.metrics()
    assert metrics["asyncio_lookup.lookups"].data.data_points[0].value == 6
    assert metrics["asyncio_lookup.record.duration"].data.data_points[0].count == 3
    assert exporter.export("t", "lookup_join", {"numLookups": 1}, {})
    after = captured.metrics()["asyncio_lookup.lookups"].data.data_points[0].value
    assert after == (1 if delta else 7)


@pytest.mark.parametrize("delta", [False, True])
def test_what_a_paused_export_kept_goes_with_the_next_one_of_any_table(delta: bool) -> None:
    """The next export sent only the ending task's table: another table's data waited for a
    task of that table in that process, usually never (workers exit)."""
    captured = Captured(delta=delta, result=MetricExportResult.FAILURE)
    now = [0.0]
    exporter = otel.TaskExporter(captured, RESOURCE, clock=lambda: now[0])
    assert not exporter.export("A", "lookup_join", {"numLookups": 11}, {})
    captured.result = MetricExportResult.SUCCESS
    assert not exporter.export("B", "lookup_join", {"numLookups": 7}, {})  # paused
    now[0] = otel.BACKOFF_S
    assert exporter.export("A", "lookup_join", {"numLookups": 1}, {})
    points = captured.metrics()["asyncio_lookup.lookups"].data.data_points
    assert {p.attributes["asyncio_lookup.table"]: p.value for p in points} == {"A": 12, "B": 7}
    assert exporter.export("A", "lookup_join", {"numLookups": 1}, {})
    points = captured.metrics()["asyncio_lookup.lookups"].data.data_points
    sent = {p.attributes["asyncio_lookup.table"]: p.value for p in points}
    assert sent == ({"A": 1} if delta else {"A": 13, "B": 7})


def test_an_exporter_that_raises_pauses_and_the_task_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Raising(Captured):
        def export(
            self, metrics_data: MetricsData, timeout_millis: float = 10_000, **_: Any
        ) -> Any:
            raise ConnectionError("collector down")

    exporter = otel.TaskExporter(Raising(), RESOURCE, clock=lambda: 0.0)
    with caplog.at_level(logging.WARNING):
        assert not exporter.export("t", "lookup_join", {"numLookups": 1}, {})
    assert "ConnectionError: collector down" in caplog.text


def test_otel_variables_this_export_cannot_use_turn_it_off_in_the_worker(
    clean_env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """OTEL_METRICS_EXPORTER=prometheus (set for another agent) failed every task."""
    clean_env.setenv("OTEL_METRICS_EXPORTER", "prometheus")
    with otel._process_lock:
        saved = list(otel._process)
        otel._process.clear()
    try:
        with caplog.at_level(logging.WARNING):
            otel.export_task("t", "lookup_join", {"numLookups": 1}, {})
        assert otel.process_exporter() is None
        assert "OTEL_METRICS_EXPORTER" in caplog.text
    finally:
        with otel._process_lock:
            otel._process[:] = saved


def test_exponential_histograms_when_the_exporter_asks_for_them() -> None:
    captured = Captured(exponential=True)
    exporter = otel.TaskExporter(captured, RESOURCE)
    assert exporter.export("t", "lookup_join", {}, {"record": sketch_of(RECORDS)})
    metric = captured.metrics()["asyncio_lookup.record.duration"]
    assert metric.unit == "s"
    (point,) = metric.data.data_points
    assert (point.count, point.zero_count, point.scale) == (100, 0, otel.MAX_SCALE)
    assert point.sum == pytest.approx(3.4)
    base = 2 ** (2**-point.scale)
    held = {}
    for i, n in enumerate(point.positive.bucket_counts):
        if n:
            held[n] = (base ** (point.positive.offset + i), base ** (point.positive.offset + i + 1))
    assert set(held) == {95, 5}
    for n, value in ((95, 0.020), (5, 0.300)):  # each bucket within 1 % of its values
        lower, upper = held[n]
        assert lower * 0.99 < value <= upper * 1.01
    (encoded,) = encode_metrics(captured.batches[-1]).resource_metrics
    otlp = encoded.scope_metrics[0].metrics[0].exponential_histogram.data_points[0]
    assert (otlp.count, otlp.scale, sum(otlp.positive.bucket_counts)) == (100, 5, 100)


def test_a_wide_exponential_histogram_is_coarsened_to_at_most_160_buckets() -> None:
    wide = sketch_of([0.0005, 0.002, 1.0, 60_000.0])  # below 1 µs to a minute
    scale, offset, counts, zero = otel.exponential_buckets(wide)
    assert zero == 1 and sum(counts) == 3
    assert len(counts) <= otel.MAX_EXPONENTIAL_BUCKETS
    assert scale < otel.MAX_SCALE
    base = 2 ** (2**-scale)
    assert base**offset < 0.002 / 1000 <= base ** (offset + 1) * 1.01  # the first value's bucket


def test_every_name_follows_the_conventions() -> None:
    names = [m.name for m in [*COUNTERS.values(), *HISTOGRAMS.values()]]
    assert len(set(names)) == len(names)
    for metric in COUNTERS.values():
        assert metric.name.startswith("asyncio_lookup.")
        assert metric.unit.startswith("{") and metric.unit.endswith("}")
    for metric in HISTOGRAMS.values():
        assert metric.name.endswith(".duration") and metric.unit == "s"


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for name in (
        "OTEL_METRICS_EXPORTER",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "OTEL_SERVICE_NAME",
        "OTEL_RESOURCE_ATTRIBUTES",
        "OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION",
    ):
        monkeypatch.delenv(name, raising=False)
    yield monkeypatch


def test_the_otel_variables_choose_the_exporter(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    chosen = otel.exporter_from_env()
    assert isinstance(chosen, OTLPMetricExporter)
    assert chosen._endpoint == "http://collector:4318/v1/metrics"
    assert not otel.TaskExporter(chosen, RESOURCE).exponential
    clean_env.setenv(
        "OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION",
        "base2_exponential_bucket_histogram",
    )
    exponential = otel.exporter_from_env()
    assert exponential is not None
    assert otel.TaskExporter(exponential, RESOURCE).exponential
    clean_env.setenv("OTEL_METRICS_EXPORTER", "console")
    assert isinstance(otel.exporter_from_env(), ConsoleMetricExporter)
    clean_env.setenv("OTEL_METRICS_EXPORTER", "none")
    assert otel.exporter_from_env() is None
    clean_env.setenv("OTEL_METRICS_EXPORTER", "prometheus")
    with pytest.raises(ConfigurationError, match=r"OTEL_METRICS_EXPORTER.*'otlp', 'console'"):
        otel.exporter_from_env()
    clean_env.setenv("OTEL_METRICS_EXPORTER", "otlp")
    clean_env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    with pytest.raises(ConfigurationError, match=r"'http/json'.*'http/protobuf'"):
        otel.exporter_from_env()


def test_each_process_is_an_instance_of_its_service(clean_env: pytest.MonkeyPatch) -> None:
    here = otel.process_resource()
    assert here.attributes["service.name"] == "asyncio-lookup"
    elsewhere = run_python(
        "from asyncio_lookup.lookup.otel import process_resource\n"
        "print(process_resource().attributes['service.instance.id'])"
    )
    assert here.attributes["service.instance.id"] != elsewhere != ""
    clean_env.setenv("OTEL_SERVICE_NAME", "enrich-orders")
    clean_env.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod")
    named = otel.process_resource()
    assert named.attributes["service.name"] == "enrich-orders"
    assert named.attributes["deployment.environment"] == "prod"


def test_export_task_uses_the_exporter_set_for_the_process() -> None:
    captured = Captured()
    otel.set_exporter(captured)
    try:
        otel.export_task("t", "lookup_join", {"numExternalCalls": 2}, {})
        assert captured.metrics()["asyncio_lookup.calls"].data.data_points[0].value == 2
        otel.set_exporter(None)
        otel.export_task("t", "lookup_join", {"numExternalCalls": 2}, {})
        assert len(captured.batches) == 1
    finally:
        otel._process.clear()


# An executor's lookup join task, run in this process over one Arrow batch.
JOIN = textwrap.dedent(
    """
    import pyarrow as pa
    from asyncio_lookup.connectors.memory import InMemoryConnector
    from asyncio_lookup.lookup.hint_resolve import resolve_lookup
    from asyncio_lookup.lookup.join import JoinSpec, JoinType, KeyBinding
    from asyncio_lookup.lookup.options import LookupOptions
    from asyncio_lookup.spark.task import DimColumn, LookupJoinTask

    def run_join(otel):
        rows = [{"id": i, "name": f"n{i}"} for i in range(50)]
        task = LookupJoinTask(
            table_id="t1",
            table_name="customers",
            connector=InMemoryConnector(rows, key_columns=("id",)),
            options=LookupOptions(),
            hint=resolve_lookup(None, "customers"),
            spec=JoinSpec(JoinType.INNER, (KeyBinding("id", left_column="cid"),)),
            dim_columns=(DimColumn("name", "name", pa.string()),),
            otel=otel,
        )
        batch = pa.RecordBatch.from_pydict({"cid": list(range(40))})
        return sum(b.num_rows for b in task(iter([batch])))
    """
)


def run_python(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_a_join_task_exports_its_counters_when_switched_on() -> None:
    captured = Captured()
    otel.set_exporter(captured)
    try:
        namespace: dict[str, Any] = {}
        exec(JOIN, namespace)
        assert namespace["run_join"](True) == 42  # 40 rows, a trailer before them, one at the end
    finally:
        otel._process.clear()
    metrics = captured.metrics()
    assert metrics["asyncio_lookup.lookups"].data.data_points[0].value == 40
    assert metrics["asyncio_lookup.records"].data.data_points[0].value == 40
    assert metrics["asyncio_lookup.calls"].data.data_points[0].value == 1  # one batch call
    point = metrics["asyncio_lookup.lookups"].data.data_points[0]
    assert point.attributes["asyncio_lookup.table"] == "customers"


def test_without_the_switch_no_library_code_imports_opentelemetry() -> None:
    """A join task with the switch off: no module of the library imports ``opentelemetry``
    (redis-py 7 imports its SDK by itself when it is installed, so the test watches who asks)."""
    code = (
        textwrap.dedent(
            """
            import sys, traceback
            asked = []

            class Watch:
                def find_spec(self, name, path=None, target=None):
                    if name.split(".")[0] == "opentelemetry":
                        frames = traceback.extract_stack()[:-1]  # without this one
                        while frames and frames[-1].filename.startswith("<frozen"):
                            frames.pop()
                        asked.append(f"{frames[-1].filename} imports {name}")
                    return None

            sys.meta_path.insert(0, Watch())
            """
        )
        + JOIN
        + textwrap.dedent(
            """
            import asyncio_lookup, asyncio_lookup.spark.otel_switch
            assert run_join(False) == 42
            print(sorted({a for a in asked if "asyncio_lookup" in a}))
            """
        )
    )
    assert run_python(code) == "[]"


def test_without_the_extra_a_join_runs_and_the_switch_names_the_extra() -> None:
    code = (
        "import sys\nsys.modules['opentelemetry'] = None  # as if not installed\n"
        + JOIN
        + textwrap.dedent(
            """
            from asyncio_lookup.errors import ConfigurationError
            from asyncio_lookup.spark.otel_switch import otel_from_conf
            assert run_join(False) == 42

            class Conf:
                def __init__(self, value):
                    self.value = value
                def get(self, key, default=None):
                    return self.value if key == "asyncio_lookup.otel.enabled" else default

            assert otel_from_conf(Conf(None)) is False
            assert otel_from_conf(Conf("false")) is False
            try:
                otel_from_conf(Conf("true"))
            except ConfigurationError as error:
                print(error)
            try:  # an executor without the extra, asked to export
                run_join(True)
            except ImportError as error:
                print(error)
            """
        )
    )
    driver, executor = run_python(code).splitlines()
    assert "'asyncio_lookup.otel.enabled'" in driver
    assert "pip install 'asyncio-lookup[otel]'" in driver
    assert "on every executor: pip install 'asyncio-lookup[otel]'" in executor


def test_the_switch_takes_true_or_false() -> None:
    from asyncio_lookup.spark.otel_switch import otel_from_conf

    class Conf:
        def get(self, key: str, default: Any = None) -> Any:
            return "yes"

    with pytest.raises(ConfigurationError, match=r"'yes' for 'asyncio_lookup.otel.enabled'"):
        otel_from_conf(Conf())

    class Submitted:  # spark-submit --conf keeps spark.* keys only
        def get(self, key: str, default: Any = None) -> Any:
            return {"spark.asyncio_lookup.otel.enabled": "true"}.get(key, default)

    assert otel_from_conf(Submitted())
