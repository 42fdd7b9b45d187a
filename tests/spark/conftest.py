"""One local SparkSession for every Spark test, and a real HTTP dim service on 127.0.0.1.

Spark's Python workers run this interpreter (``PYSPARK_PYTHON`` / ``spark.pyspark.python``),
so they have pyarrow and the package. Worker processes are reused across tasks.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Iterator

import pytest

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

from pyspark import SparkContext, cloudpickle
from pyspark.sql import SparkSession
from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

from tests import services
from tests.spark import helpers

# Workers cannot import the tests package: ship the helpers' classes by value.
cloudpickle.register_pickle_by_value(helpers)
cloudpickle.register_pickle_by_value(services)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


#: The OTLP receiver of test_otel_export.py listens here. Spark's Python workers get their
#: environment from the JVM, which a session started by this process inherits: the OTEL_*
#: variables are set before any session starts, as a user sets them for the executors.
#: The port stays bound from now until the receiver listens on this very socket: a port only
#: probed here could meanwhile become the ephemeral port of one of the many connections the
#: tests before it open (seen in CI: "address already in use").
OTLP_SOCKET = socket.socket()
OTLP_SOCKET.bind(("127.0.0.1", 0))
OTLP_PORT = int(OTLP_SOCKET.getsockname()[1])
os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{OTLP_PORT}"
os.environ["OTEL_EXPORTER_OTLP_PROTOCOL"] = "http/protobuf"
os.environ["OTEL_METRICS_EXPORTER"] = "otlp"

#: ``local[2,2]``: two cores, and a failed task is run once more (tests of counted-once metrics).
MASTER = "local[2,2]"
#: Classic first: once a Connect session has started, PySpark stays in Connect mode.
MODES = ("classic", "connect")


def _connect_server_conf() -> dict[str, str]:
    """What ``remote("local[...]")`` sets to start a Connect server in this process, but on a
    free loopback port instead of the fixed 15002 (so test runs on one machine do not collide)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return {
        "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
        "spark.sql.artifact.isolation.enabled": "true",
        "spark.sql.artifact.isolation.alwaysApplyClassloader": "true",
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
    }


@pytest.fixture(scope="session", params=MODES)
def spark(request: pytest.FixtureRequest) -> Iterator[SparkSession]:
    """A classic ``local`` session, then a Spark Connect session on a local server (the
    server runs in this process, as ``remote("local[...]")`` starts it, on a free port).
    Every test that uses it runs in both modes."""
    builder = SparkSession.builder.appName(f"asyncio-lookup-tests-{request.param}").master(MASTER)
    server = _connect_server_conf() if request.param == "connect" else {}
    for key, value in server.items():
        builder = builder.config(key, value)
    session = (
        builder.config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    local_context().setLogLevel("ERROR")
    if server:
        os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"  # as remote() sets it
        port = server["spark.connect.grpc.binding.port"]
        session = RemoteSparkSession.builder.remote(f"sc://127.0.0.1:{port}").getOrCreate()
    yield session
    session.stop()
    if request.param == "connect":
        context = SparkContext._active_spark_context
        if context is not None:  # the local Connect server's
            context.stop()


def local_context() -> SparkContext:
    """The SparkContext in this process: the classic session's, or the local Connect server's
    (test hooks only; the library never uses one)."""
    context = SparkContext._active_spark_context
    assert context is not None, "no SparkContext in this process"
    return context


def is_connect(spark: SparkSession) -> bool:
    return not hasattr(spark, "sparkContext") or type(spark).__module__.startswith(
        "pyspark.sql.connect"
    )


@pytest.fixture(autouse=True)
def _test_module_by_value(request: pytest.FixtureRequest) -> None:
    """Functions defined in a test module go to the workers by value: a Connect server runs
    Python workers in a per-session directory, where ``tests`` is not importable."""
    cloudpickle.register_pickle_by_value(request.module)


@pytest.fixture(scope="session")
def dim_service(spark: SparkSession) -> Iterator[helpers.DimService]:
    """The counting HTTP customer service (one per Spark session, so per mode; tests use their
    own key ranges)."""
    service = helpers.DimService()
    service.start()
    yield service
    service.stop()


@contextlib.contextmanager
def no_spark_job(spark: SparkSession) -> Iterator[None]:
    """Assert that the block starts no Spark job (driver-side validation runs before any task).

    Reads the job counter of the SparkContext in this process, which a local Connect server
    has too (every job of either mode is numbered by its DAGScheduler)."""
    scheduler = local_context()._jsc.sc().dagScheduler()
    before = scheduler.numTotalJobs()
    try:
        yield
    finally:
        after = scheduler.numTotalJobs()
    assert after == before, f"a Spark job ran: {list(range(before, after))}"


@pytest.fixture
def no_job(spark: SparkSession):  # type: ignore[no-untyped-def]
    return lambda: no_spark_job(spark)
