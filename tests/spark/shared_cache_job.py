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
import sys
import time

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from asyncio_lookup.connectors import HttpConnector
from asyncio_lookup.spark import LookupTable, lookup_join
from tests.spark.job_session import exact_rows, job_session

MASTER = "local[4]"


def session(mode: str) -> tuple[SparkSession, SparkSession]:
    return job_session(mode, "shared-cache", MASTER, reuse_workers=False)


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
    joined_rows, exact = exact_rows(joined)
    return {
        "rows": joined_rows,
        "exact": exact,
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
