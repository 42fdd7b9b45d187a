"""Rate limits end to end (docs/semantics.md §2.12): the driver's share per task, validation on
the driver, the SQL DDL path, ``async_map``, and the acceptance jobs against a service that
counts requests per 100 ms window.

A rate limit is an upper bound, so "no 1 s window above 1.1 R" holds however loaded the machine
is, as the client sends; the service, timing requests when its own loop reads them, allows for
its stalls (rate_servers.py). R is chosen low (200/s over four tasks) so that the floor, an
average of at least 0.8 R, holds under load too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from asyncio_lookup.connectors import HttpConnector
from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.spark import LookupSQL, LookupTable, RateLimit, async_map, lookup_join
from asyncio_lookup.spark.rate_share import task_rate, task_slots
from tests.spark.conftest import is_connect
from tests.spark.job_session import classic_env
from tests.spark.rate_servers import CountingService, windows

REPO = Path(__file__).resolve().parents[2]
R = 200.0  # requests per second for the whole job
ROWS = 1600  # 8 s at R over four tasks of 400 rows


# -- the driver's share -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("conf", "slots"),
    [
        ({"spark.master": "local"}, 1),
        ({"spark.master": "local[4]"}, 4),
        ({"spark.master": "local[2,2]"}, 2),
        ({"spark.master": "local[8]", "spark.task.cpus": "2"}, 4),
        ({"spark.master": "local-cluster[2, 3, 1024]"}, 6),
        (
            {
                "spark.master": "yarn",
                "spark.executor.instances": "10",
                "spark.executor.cores": "4",
            },
            40,
        ),
        (
            {
                "spark.master": "k8s://h",
                "spark.dynamicAllocation.enabled": "true",
                "spark.dynamicAllocation.maxExecutors": "5",
                "spark.executor.instances": "2",
                "spark.executor.cores": "2",
            },
            10,
        ),
        ({"spark.master": "spark://h:7077", "spark.cores.max": "12"}, 12),
        ({"spark.master": "yarn", "spark.default.parallelism": "64"}, 64),
        ({"spark.master": "yarn"}, None),
        ({"spark.master": "yarn", "spark.dynamicAllocation.enabled": "true"}, None),
        # dynamic allocation without a maximum: a default partition count bounds no task slots
        (
            {
                "spark.master": "yarn",
                "spark.dynamicAllocation.enabled": "true",
                "spark.default.parallelism": "8",
            },
            None,
        ),
    ],
)
def test_task_slots_from_the_conf(conf: dict[str, str], slots: int | None) -> None:
    assert task_slots(conf)[0] == slots


def test_local_star_counts_the_cpus_this_process_may_run_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """os.cpu_count() ignores CPU affinity, which the JVM's core count honours: under
    `taskset -c 0` local[*] runs one task at once, not the machine's two."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert task_slots({"spark.master": "local[*]"}) == (1, "spark.master=local[*]")


def test_local_star_behind_spark_connect_is_not_counted_on_the_client() -> None:
    class ConnectConf(dict):  # what RuntimeConf is to the driver: only its module tells
        pass

    ConnectConf.__module__ = "pyspark.sql.connect.conf"
    slots, source = task_slots(ConnectConf({"spark.master": "local[*]"}))
    assert slots is None and "Spark Connect" in source
    assert task_slots(ConnectConf({"spark.master": "local[3]"}))[0] == 3


def test_local_star_behind_spark_connect_is_asked_of_the_server(spark: SparkSession) -> None:
    """Without the session the client cannot count the server's cores: a hash lookup join
    on Connect took 200 coalesced partitions where classic took one per core."""
    if not is_connect(spark):
        pytest.skip("the server's cores are asked only on Spark Connect")

    class ConnectConf(dict):
        pass

    ConnectConf.__module__ = "pyspark.sql.connect.conf"
    slots, _ = task_slots(ConnectConf({"spark.master": "local[*]"}), spark)
    assert slots == 2  # the tests' server: local[2, 2]


def test_each_task_gets_its_share_and_an_unknown_cluster_asks_for_the_parallelism() -> None:
    local = {"spark.master": "local[4]"}
    assert task_rate(R, False, None, local, what="t").rate == R / 4
    assert task_rate(R, True, None, local, partitions=2, what="t").rate == R / 2
    assert task_rate(R, False, 10, {"spark.master": "yarn"}, what="t").rate == R / 10
    with pytest.raises(ConfigurationError) as raised:
        task_rate(R, False, None, {"spark.master": "yarn"}, what="lookup table 'Items'")
    message = str(raised.value)
    assert "'lookup.rate-limit.parallelism'" in message and "'Items'" in message
    assert "spark.master=yarn without executor counts" in message


def test_bad_rate_options_fail_on_the_driver(spark: SparkSession, no_job: Any) -> None:
    connector = HttpConnector("http://127.0.0.1:9/items/{id}")
    with no_job():
        with pytest.raises(
            ConfigurationError, match=r"'12/day' for 'lookup\.rate-limit'.*unit 'day'"
        ):
            LookupTable("Items", "id BIGINT, v STRING", connector, {"lookup.rate-limit": "12/day"})
        with pytest.raises(ConfigurationError, match=r"'lookup\.rate-limit'.*required when"):
            LookupTable(
                "Items", "id BIGINT, v STRING", connector, {"lookup.rate-limit.adaptive": "true"}
            )
        with pytest.raises(ConfigurationError, match=r"'fast' for 'rate_limit'"):
            async_map(spark.range(3), _echo, "id BIGINT", timeout=5, rate_limit="fast")


async def _echo(row: dict[str, Any]) -> list[dict[str, Any]]:
    return [row]


# -- in the shared session (both modes) -------------------------------------------------------


@pytest.fixture(scope="module")
def service() -> Iterator[CountingService]:
    with CountingService() as running:
        yield running


def test_sql_ddl_rate_limit_bounds_the_join(spark: SparkSession, service: CountingService) -> None:
    service.reset()
    rate = 40.0
    lookup = LookupSQL(spark)
    lookup.sql(
        "CREATE TEMPORARY TABLE RatedItems (id BIGINT, v STRING) WITH ('connector' = 'http', "
        f"'url' = '{service.url}/items/{{id}}', 'lookup.rate-limit' = '{rate * 60:g}/min')"
    )
    spark.range(0, 120, 1, numPartitions=2).withColumn(
        "proc_time", F.lit("2026-01-01")
    ).createOrReplaceTempView("rated_keys")
    df = lookup.sql(
        "SELECT k.id, i.v FROM rated_keys AS k "
        "JOIN RatedItems FOR SYSTEM_TIME AS OF k.proc_time AS i ON k.id = i.id"
    )
    assert sorted((r.id, r.v) for r in df.collect()) == [(i, f"v{i}") for i in range(120)]
    seen = service.windows()
    # two slots (local[2,2]): 20/s per task, a burst of 1 each, 2 more for network jitter, and
    # what the service's own stalls bunched into one window (rate_servers.py)
    assert seen.total == 120
    assert seen.max_per_second <= rate + 4 + rate * seen.stall, (seen.stall, seen.counts)


def test_async_map_rate_limit(spark: SparkSession, service: CountingService) -> None:
    service.reset()
    url = service.url

    async def fetch(row: dict[str, Any]) -> list[dict[str, Any]]:
        started = time.time()  # when the limiter let the call go
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{url}/items/{row['id']}") as response,
        ):
            body = await response.json()
        return [{"id": row["id"], "v": body["v"], "started": started}]

    out = async_map(
        spark.range(0, 90, 1, numPartitions=2),
        fetch,
        "id BIGINT, v STRING, started DOUBLE",
        timeout=60,
        rate_limit=RateLimit("1800/min", adaptive=True),
    )
    rows = out.collect()
    assert sorted((r.id, r.v) for r in rows) == [(i, f"v{i}") for i in range(90)]
    assert len(service.times) == 90
    # Counted where the limiter acts, when each call starts: on a loaded machine a stalled
    # worker's requests can reach the server bunched (one run saw 16 in 100 ms after a 1.7 s
    # stall) although they left on time.
    seen = windows([r.started for r in rows])
    assert seen.total == 90 and seen.max_per_second <= 30 + 4, seen.counts


def test_cache_hits_do_not_count(spark: SparkSession, service: CountingService) -> None:
    service.reset()
    table = LookupTable(
        "Items",
        "id BIGINT, v STRING",
        HttpConnector(f"{service.url}/items/{{id}}"),
        {
            "lookup.cache": "PARTIAL",
            "lookup.partial-cache.max-rows": "100",
            "lookup.rate-limit": "20",
            "lookup.rate-limit.parallelism": "1",
        },
    )
    keys = spark.range(0, 2000, 1, numPartitions=1).select((F.col("id") % 10).alias("id"))
    joined = lookup_join(keys, table, "id", columns=["v"])
    assert joined.count() == 2000
    metrics = table.metrics()
    assert len(service.times) == metrics["numExternalCalls"] == 10
    # the other lookups were answered by the cache or shared a call already in flight
    assert metrics["hitCount"] + metrics["numCoalescedLookups"] == 1990


# -- acceptance: four tasks at once, in a session of their own --------------------------------


@pytest.fixture(scope="module", params=["classic", "connect"])
def jobs(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """Runs tests/spark/rate_limit_job.py (``local[4]``) against a counting service and one
    answering 429 above R; returns both jobs' results and what each service saw."""
    with CountingService() as limited, CountingService(limit=R) as throttling:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.spark.rate_limit_job",
                request.param,
                limited.url,
                throttling.url,
                str(ROWS),
                str(R),
            ],
            cwd=REPO,
            env=classic_env(),
            capture_output=True,
            text=True,
            timeout=500,
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
        runs = [json.loads(line[4:]) for line in result.stdout.splitlines() if line[:4] == "JOB "]
        yield {
            "limited": (runs[0], limited.windows()),
            "adaptive": (runs[1], throttling.windows(), len(throttling.rejected)),
        }


@pytest.mark.timeout(600)
def test_job_wide_limit_over_four_tasks(jobs: dict[str, Any]) -> None:
    run, seen = jobs["limited"]
    assert run["task_rate"] == R / 4  # local[4]: four slots share the budget
    assert run["rows"] == run["exact"] == ROWS
    assert seen.total == ROWS
    # the limiter's bound, and what the service's stalls bunched into one window (rate_servers.py)
    assert seen.max_per_second <= 1.1 * R + R * seen.stall, (seen.stall, seen.counts)
    # not far below the limit either: each task paces its share (R / 4), so on a loaded machine
    # a task that starts or ends late stretches the job (CI saw 152/s for R = 200: four tasks
    # started 0.3 s apart, one ended 0.5 s after the others); half the limit is a bound such
    # stragglers stay above, a limiter twice too slow does not
    assert seen.average >= 0.5 * R, (seen.average, seen.counts)
    print(
        f"limited: max 1 s window {seen.max_per_second}, average {seen.average:.1f}/s, "
        f"longest service stall {seen.stall * 1000:.0f} ms"
    )


@pytest.mark.timeout(600)
def test_adaptive_job_finishes_under_a_429_service(jobs: dict[str, Any]) -> None:
    run, seen, rejected = jobs["adaptive"]
    assert run["rows"] == run["exact"] == ROWS  # every row joined, none lost or repeated
    assert seen.total == ROWS + rejected  # each 429 was retried once more
    assert run["metrics"]["numThrottledCalls"] == rejected
    assert rejected <= 0.05 * seen.total, (rejected, seen.counts)
    print(f"adaptive: {rejected} of {seen.total} requests answered 429, {seen.average:.1f}/s")
