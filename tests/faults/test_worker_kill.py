"""A Python worker killed mid-task (SIGKILL) under ``local[2,4]``: Spark runs the task again
and the output is exactly the plain join's, with the killed attempt's metrics not counted."""

from __future__ import annotations

import os
import signal
import uuid
from collections import Counter
from typing import Any

import psutil
import pytest
from pyspark.sql import SparkSession

from tests.faults import harness
from tests.faults.harness import Fault, Target

pytestmark = [pytest.mark.faults, pytest.mark.spark]


def worker_talking_to(port: int) -> int | None:
    """The pid of a Python worker of this test's Spark that has a connection open to ``port``
    (so it is running a lookup join task), or None."""
    for process in psutil.Process().children(recursive=True):
        try:
            if "pyspark.daemon" not in " ".join(process.cmdline()):
                continue
            for connection in process.net_connections(kind="tcp"):
                if connection.raddr and connection.raddr.port == port:
                    return process.pid
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return None


def test_python_worker_killed_mid_task(
    spark_retrying: SparkSession, expected: Counter[tuple[Any, ...]], target: Target
) -> None:
    spark = spark_retrying
    table = target.table()
    proxy = target.proxy
    group = f"worker-kill-{uuid.uuid4().hex}"

    def kill(fault: Fault) -> None:
        fault.wait(harness.requests_over(proxy, harness.MID_JOB[target.kind]), "mid-job")
        pids: list[int] = []
        fault.wait(lambda: _found(pids, worker_talking_to(proxy.port)), "a worker mid-task")
        os.kill(pids[0], signal.SIGKILL)
        fault.marks["killed"] = pids[0]

    with Fault(kill) as fault:
        rows = harness.run_join(spark, table, group)
    assert "killed" in fault.marks, "the job finished before a worker was killed"
    assert harness.failed_tasks(spark, group) >= 1, "Spark saw no failed task"
    harness.assert_exact(rows, expected)
    harness.assert_counted_once(table)


def _found(into: list[int], pid: int | None) -> bool:
    if pid is not None:
        into.append(pid)
    return pid is not None
