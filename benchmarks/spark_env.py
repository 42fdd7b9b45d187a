"""Local Spark for the benchmarks: ``local[2]``, the project's interpreter on the workers, no UI."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import numpy as np

from benchmarks.paths import REPO_ROOT

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

PARTITIONS = 2


def spark_session(app_name: str = "asyncio-lookup-benchmarks") -> SparkSession:
    """A fresh (or the active) local Spark session set up for benchmarking."""
    # Python workers must run this interpreter (pyarrow, the package) and import `benchmarks`.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # everything stays on loopback
    paths = [str(REPO_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(f"local[{PARTITIONS}]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.sql.shuffle.partitions", str(PARTITIONS))
        .config("spark.default.parallelism", str(PARTITIONS))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", "3g")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def orders_frame(spark: SparkSession, keys: np.ndarray, partitions: int = PARTITIONS) -> DataFrame:
    """An ``orders`` DataFrame (order_id, customer_id, amount) over ``keys``, cached in memory."""
    import pandas as pd

    n = len(keys)
    pdf = pd.DataFrame(
        {
            "order_id": np.arange(n, dtype=np.int64),
            "customer_id": keys.astype(np.int32),
            "amount": (np.arange(n, dtype=np.int64) % 1000).astype(np.float64) / 10.0,
        }
    )
    frame = spark.createDataFrame(pdf).repartition(partitions).cache()
    frame.count()
    return frame


def run_to_noop(frame: DataFrame) -> None:
    """Run ``frame`` to completion and throw the rows away (the `noop` sink)."""
    frame.write.format("noop").mode("overwrite").save()
