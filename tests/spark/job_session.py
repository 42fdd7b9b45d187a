"""The Spark session of a test job run in its own process (``python -m tests.spark.<job>``):
classic ``local[N]``, or a Spark Connect client of a server the job starts on a free loopback
port (``remote("local[N]")`` would take the fixed port 15002, which another process may hold)."""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.connect.session import SparkSession as RemoteSparkSession


def classic_env() -> dict[str, str]:
    """This environment without the variables a local Connect session in this process leaves
    set (they would put a subprocess's classic session in Connect mode)."""
    env = dict(os.environ)
    for name in [n for n in env if n.startswith(("SPARK_CONNECT", "SPARK_LOCAL_REMOTE"))]:
        del env[name]
    env.pop("SPARK_REMOTE", None)
    return env


def job_session(
    mode: str, app_name: str, master: str, *, reuse_workers: bool
) -> tuple[SparkSession, SparkSession]:
    """``(session, classic)``: the session to run the job on (classic or Connect) and the
    classic one under it (its SparkContext: the test hooks')."""
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.pyspark.python": sys.executable,
        "spark.python.worker.reuse": "true" if reuse_workers else "false",
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
    builder = SparkSession.builder.appName(f"{app_name}-{mode}").master(master)
    for key, value in conf.items():
        builder = builder.config(key, value)
    classic = builder.getOrCreate()
    classic.sparkContext.setLogLevel("ERROR")
    if mode != "connect":
        return classic, classic
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"  # as remote() sets it: Connect's classes
    return RemoteSparkSession.builder.remote(f"sc://127.0.0.1:{port}").getOrCreate(), classic


def exact_rows(joined: Any) -> tuple[int, int]:
    """(rows, rows whose ``v`` is the one the counting service gives their ``id``) of a join."""
    got = joined.agg(
        F.count("*").alias("rows"),
        F.sum((F.col("v") == F.concat(F.lit("v"), F.col("id").cast("string"))).cast("int")).alias(
            "exact"
        ),
    ).collect()[0]
    return got["rows"], got["exact"]
