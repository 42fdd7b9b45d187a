"""The rate-limit acceptance jobs, run in a Spark session of their own (``local[4]``: four
tasks at once, which the shared test session's two cores do not give).

``python -m tests.spark.rate_limit_job MODE LIMITED_URL THROTTLING_URL ROWS RATE`` prints one
JSON line per job: the rows joined correctly, the table's metrics and what the driver gave
each task.
"""

from __future__ import annotations

import json
import os
import socket
import sys

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

from asyncio_lookup.connectors import HttpConnector
from asyncio_lookup.spark import LookupTable, lookup_join
from asyncio_lookup.spark.join import LookupJoinArgs, plan_lookup_join

MASTER = "local[4]"


def session(mode: str) -> tuple[SparkSession, SparkSession]:
    """A classic ``local[4]`` session; for ``connect``, a Spark Connect client of a server
    this process starts on a free loopback port (``remote("local[4]")`` would take the fixed
    port 15002, which the test process's own Connect session may hold)."""
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.pyspark.python": sys.executable,
        "spark.python.worker.reuse": "true",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
    }
    if mode == "connect":
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        conf["spark.plugins"] = "org.apache.spark.sql.connect.SparkConnectPlugin"
        conf["spark.connect.grpc.binding.address"] = "127.0.0.1"
        conf["spark.connect.grpc.binding.port"] = str(port)
    builder = SparkSession.builder.appName(f"rate-limit-{mode}").master(MASTER)
    for key, value in conf.items():
        builder = builder.config(key, value)
    classic = builder.getOrCreate()
    classic.sparkContext.setLogLevel("ERROR")
    if mode == "classic":
        return classic, classic
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"  # as remote() sets it: Connect's classes
    return RemoteSparkSession.builder.remote(f"sc://127.0.0.1:{port}").getOrCreate(), classic


def run(spark: SparkSession, url: str, rows: int, options: dict[str, str]) -> dict[str, object]:
    table = LookupTable(
        "Items", "id BIGINT, v STRING", HttpConnector(f"{url}/items/{{id}}"), options
    )
    keys = spark.range(0, rows, 1, numPartitions=4)
    task, _ = plan_lookup_join(keys, table, LookupJoinArgs("id", columns=["v"]))
    joined = lookup_join(keys, table, "id", how="left", columns=["v"])
    got = joined.agg(
        F.count("*").alias("rows"),
        F.sum((F.col("v") == F.concat(F.lit("v"), F.col("id").cast("string"))).cast("int")).alias(
            "exact"
        ),
    ).collect()[0]
    return {
        "rows": got["rows"],
        "exact": got["exact"],
        "task_rate": None if task.rate is None else task.rate.rate,
        "metrics": table.metrics(),
    }


def main() -> None:
    mode, limited_url, throttling_url, rows, rate = sys.argv[1:6]
    spark, server = session(mode)
    try:
        print("JOB " + json.dumps(run(spark, limited_url, int(rows), {"lookup.rate-limit": rate})))
        adaptive = {
            "lookup.rate-limit": str(2 * float(rate)),  # twice what the service allows
            "lookup.rate-limit.adaptive": "true",
            "lookup.max-retries": "10",
            "lookup.max-retry-backoff": "2s",
        }
        print("JOB " + json.dumps(run(spark, throttling_url, int(rows), adaptive)), flush=True)
    finally:
        spark.stop()
        if server is not spark:
            server.stop()  # the Connect server's session


if __name__ == "__main__":
    main()
