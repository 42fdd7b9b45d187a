"""A 5 s outage of each connector, at job start and mid-job, with default options: the job
rides it out and its output is exactly the plain join's (issue 11, parts 3 and 5)."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest
from pyspark.sql import SparkSession

from tests.faults import harness
from tests.faults.harness import Fault, Target

pytestmark = [pytest.mark.faults, pytest.mark.spark]

OUTAGE = 5.0  # seconds: a restart, a failover


def test_refused_for_5s_at_job_start(
    spark: SparkSession, expected: Counter[tuple[Any, ...]], target: Target
) -> None:
    """The job's first request cuts every connection and connections are refused for 5 s:
    the tasks are opening their clients (a pool, a schema probe, the first batch)."""
    table = target.table()
    proxy = target.proxy

    def outage(fault: Fault) -> None:
        fault.wait(harness.requests_over(proxy, 1), "the job's first request")
        proxy.refuse(cut=True)
        fault.mark("refusing")
        fault.sleep(OUTAGE)
        proxy.accept()
        fault.mark("accepting")
        fault.marks["requests when accepting"] = proxy.requests

    with Fault(outage) as fault:
        rows = harness.run_join(spark, table)
    assert "accepting" in fault.marks, "the job finished while its connector refused connections"
    assert proxy.requests > fault.marks["requests when accepting"]
    harness.assert_exact(rows, expected)
    harness.assert_counted_once(table)


def test_server_restart_mid_job(
    spark: SparkSession, expected: Counter[tuple[Any, ...]], target: Target
) -> None:
    """A third into the job the server stops; it is serving again 5 s later (same port)."""
    table = target.table()
    proxy = target.proxy

    def restart(fault: Fault) -> None:
        fault.wait(harness.requests_over(proxy, harness.MID_JOB[target.kind]), "mid-job")
        down = fault.mark("server down")
        target.stop()
        startup = target.server.startup_seconds
        fault.sleep(OUTAGE - (time.monotonic() - down) - startup)
        target.start()
        fault.mark("server up")
        fault.marks["requests when up"] = proxy.requests

    with Fault(restart) as fault:
        rows = harness.run_join(spark, table)
    assert "server up" in fault.marks, "the job finished during the outage"
    assert proxy.requests > fault.marks["requests when up"], "no lookup after the restart"
    harness.assert_exact(rows, expected)
    metrics = harness.assert_counted_once(table)
    assert metrics["numFailureRetries"] > 0, "the outage must have made lookups retry"
