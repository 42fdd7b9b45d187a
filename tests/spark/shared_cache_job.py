"""The shared-cache acceptance jobs, run in a Spark session of their own: ``local[4]`` with
Python workers not reused, so each of the 8 tasks runs in a fresh process with an empty L1,
as 8 executors would (the shared test session's two cores give neither).

``python -m tests.spark.shared_cache_job MODE REDIS_URL NAMESPACE KEYS TASKS URL...`` prints one
JSON line per job (one per service URL): the rows joined and joined exactly, the table's
metrics. ``calls``: the first URL without the shared cache, the others with it (one namespace,
so the second job finds what the first wrote). ``kill``: one job with the shared cache.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

from asyncio_lookup.connectors import HttpConnector
from asyncio_lookup.spark import LookupTable, lookup_join

MASTER = "local[4]"


def session(mode: str) -> tuple[SparkSession, SparkSession]:
    """A classic ``local[4]`` session; for ``connect``, a Spark Connect client of a server
    this process starts on a free loopback port."""
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.pyspark.python": sys.executable,
        "spark.python.worker.reuse": "false",
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
    builder = SparkSession.builder.appName(f"shared-cache-{mode}").master(MASTER)
    for key, value in conf.items():
        builder = builder.config(key, value)
    classic = builder.getOrCreate()
    classic.sparkContext.setLogLevel("ERROR")
    if mode == "connect":
        os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
        remote = RemoteSparkSession.builder.remote(f"sc://127.0.0.1:{port}").getOrCreate()
        return remote, classic
    return classic, classic


def run(
    spark: SparkSession, url: str, keys: int, tasks: int, options: dict[str, str]
) -> dict[str, object]:
    table = LookupTable(
        "Items", "id BIGINT, v STRING", HttpConnector(f"{url}/items/{{id}}"), options
    )
    rows = spark.range(0, keys * tasks, 1, numPartitions=tasks).select(
        (F.col("id") % keys).alias("id")
    )
    joined = lookup_join(rows, table, "id", how="left", columns=["v"])
    started = time.monotonic()
    got = joined.agg(
        F.count("*").alias("rows"),
        F.sum((F.col("v") == F.concat(F.lit("v"), F.col("id").cast("string"))).cast("int")).alias(
            "exact"
        ),
    ).collect()[0]
    return {
        "rows": got["rows"],
        "exact": got["exact"],
        "seconds": time.monotonic() - started,
        "metrics": table.metrics(),
    }


def main() -> None:
    mode, session_mode, redis_url, namespace, keys, tasks, *urls = sys.argv[1:]
    spark, server = session(session_mode)
    l1 = {"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "100000"}
    shared = {
        **l1,
        "lookup.shared-cache.url": redis_url,
        "lookup.shared-cache.namespace": namespace,
        # This machine is shared and loaded (two cores): a 100 ms store call may stall behind
        # a busy worker loop, which by design sends its batch to the service (counted in
        # l2ErrorCount); the job counts calls exactly, so it allows its store calls more.
        "lookup.shared-cache.timeout": "500 ms",
    }
    try:
        for index, url in enumerate(urls):
            options = l1 if mode == "calls" and index == 0 else shared
            result = run(spark, url, int(keys), int(tasks), options)
            print("JOB " + json.dumps(result), flush=True)
    finally:
        spark.stop()
        if server is not spark:
            server.stop()


if __name__ == "__main__":
    main()
