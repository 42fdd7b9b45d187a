"""A Python worker killed mid-task (SIGKILL) under ``local[2,4]``: Spark runs the task again
and the output is exactly the plain join's, with the killed attempt's metrics not counted."""

from __future__ import annotations

import contextlib
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


def workers_talking_to(port: int) -> list[int]:
    """The pids of this test's Python workers that have a connection open to ``port``.

    Workers are reused and keep their shared connection pool between tasks, so a worker with a
    connection may be idle; every worker running a lookup task is among them."""
    pids = []
    for process in psutil.Process().children(recursive=True):
        try:
            if "pyspark.daemon" not in " ".join(process.cmdline()):
                continue
            for connection in process.net_connections(kind="tcp"):
                if connection.raddr and connection.raddr.port == port:
                    pids.append(process.pid)
                    break
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return pids


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
        fault.wait(lambda: _found(pids, workers_talking_to(proxy.port)), "a worker mid-task")
        for pid in pids:  # all of them: an idle worker's death fails no task
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        fault.marks["killed"] = pids

    with Fault(kill) as fault:
        rows = harness.run_join(spark, table, group)
    assert "killed" in fault.marks, "the job finished before a worker was killed"
    # The status tracker learns of task ends from an asynchronous listener: give it a moment.
    assert harness.wait_for(lambda: harness.failed_tasks(spark, group) >= 1, 10), (
        "Spark saw no failed task"
    )
    harness.assert_exact(rows, expected)
    harness.assert_counted_once(table)


def _found(into: list[int], pids: list[int]) -> bool:
    into[:] = pids
    return bool(pids)
