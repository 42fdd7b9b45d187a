"""The rate-limit acceptance jobs, run in a Spark session of their own (``local[4]``: four
tasks at once, which the shared test session's two cores do not give).

``python -m tests.spark.rate_limit_job MODE LIMITED_URL THROTTLING_URL ROWS RATE`` prints one
JSON line per job: the rows joined correctly, the table's metrics and what the driver gave
each task.
"""

from __future__ import annotations

import json
import os
import sys

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

from pyspark.sql import SparkSession

from asyncio_lookup.connectors import HttpConnector
from asyncio_lookup.spark import LookupTable, lookup_join
from asyncio_lookup.spark.join import LookupJoinArgs, plan_lookup_join
from tests.spark.job_session import exact_rows, job_session

MASTER = "local[4]"


def session(mode: str) -> tuple[SparkSession, SparkSession]:
    return job_session(mode, "rate-limit", MASTER, reuse_workers=True)


def run(spark: SparkSession, url: str, rows: int, options: dict[str, str]) -> dict[str, object]:
    table = LookupTable(
        "Items", "id BIGINT, v STRING", HttpConnector(f"{url}/items/{{id}}"), options
    )
    keys = spark.range(0, rows, 1, numPartitions=4)
    task, _ = plan_lookup_join(keys, table, LookupJoinArgs("id", columns=["v"]))
    joined = lookup_join(keys, table, "id", how="left", columns=["v"])
    joined_rows, exact = exact_rows(joined)
    return {
        "rows": joined_rows,
        "exact": exact,
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
