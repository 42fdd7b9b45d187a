"""One local SparkSession for every Spark test, and a real HTTP dim service on 127.0.0.1.

Spark's Python workers run this interpreter (``PYSPARK_PYTHON`` / ``spark.pyspark.python``),
so they have pyarrow and the package. Worker processes are reused across tasks.
"""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
from collections.abc import Iterator

import pytest

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

from pyspark import cloudpickle
from pyspark.sql import SparkSession

from tests.spark import helpers

# Workers cannot import the tests package: ship the helpers' classes by value.
cloudpickle.register_pickle_by_value(helpers)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = (
        SparkSession.builder.master("local[2]")
        .appName("asyncio-lookup-tests")
        .config("spark.ui.enabled", "false")
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
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def dim_service() -> Iterator[helpers.DimService]:
    """The counting HTTP customer service (one per session; tests use their own key ranges)."""
    service = helpers.DimService()
    service.start()
    yield service
    service.stop()


@contextlib.contextmanager
def no_spark_job(spark: SparkSession) -> Iterator[None]:
    """Assert that the block starts no Spark job (driver-side validation runs before any task)."""
    sc = spark.sparkContext
    group = f"no-job-{uuid.uuid4().hex}"
    sc.setJobGroup(group, "driver-side validation must not run a job")
    try:
        yield
    finally:
        jobs = list(sc.statusTracker().getJobIdsForGroup(group))
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        sc.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]
    assert jobs == [], f"a Spark job ran: {jobs}"


@pytest.fixture
def no_job(spark: SparkSession):  # type: ignore[no-untyped-def]
    return lambda: no_spark_job(spark)
