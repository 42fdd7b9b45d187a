"""The fault tests' scenario: one dim table behind each connector, one probe DataFrame, the
expected output (a plain Spark join), and a fault run in the background on an event.

Every test joins ``ROWS`` probe rows (``n``, ``cid``) with the dim table ``id, name, score``
(``DIM_KEYS`` ids; a fifth of the probe keys miss) through a :class:`~tests.connectors.proxy.
TcpProxy` in front of a private server, while a :class:`Fault` thread breaks something once the
job has gone far enough (counted by the proxy, not timed).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyspark import SparkContext
from pyspark.sql import DataFrame, SparkSession

from asyncio_lookup.connectors import HttpConnector, PostgresConnector, RedisConnector
from asyncio_lookup.spark import LookupTable, lookup_join
from tests.connectors.proxy import TcpProxy
from tests.faults.servers import HttpLookupService, PostgresServer, RedisServer

ROWS = 20_000
PARTITIONS = 4
DIM_KEYS = 4_000
KEY_SPACE = 5_000
SCHEMA = "id INT, name STRING, score BIGINT"
KINDS = ("redis", "postgres", "http")
# Requests through the proxy (client chunks) a third or so into a job of each kind: the event
# that starts a mid-job fault. A whole job makes about 400 (Redis, HTTP) or 800 (PostgreSQL).
MID_JOB = {"redis": 130, "postgres": 260, "http": 130}


def dim_row(i: int) -> dict[str, Any]:
    return {"id": i, "name": f"name-{i}", "score": i * 1_000_003}


def dim_rows() -> list[dict[str, Any]]:
    return [dim_row(i) for i in range(DIM_KEYS)]


def probe(spark: SparkSession) -> DataFrame:
    """``ROWS`` rows in ``PARTITIONS`` partitions; ``cid`` cycles through ``KEY_SPACE`` keys."""
    return spark.range(0, ROWS, numPartitions=PARTITIONS).selectExpr(
        "CAST(id AS INT) AS n", f"CAST((id * 7919) % {KEY_SPACE} AS INT) AS cid"
    )


def plain_join(spark: SparkSession) -> Counter[tuple[Any, ...]]:
    """The expected output: the same left join done by Spark itself, as a multiset of rows."""
    dim = spark.createDataFrame([tuple(r.values()) for r in dim_rows()], SCHEMA)
    left = probe(spark)
    joined = left.join(dim, left.cid == dim.id, "left").select("n", "cid", "id", "name", "score")
    return Counter(tuple(r) for r in joined.collect())


# -- Spark -------------------------------------------------------------------------------------


class SparkSessions:
    """One local SparkSession at a time: ``local[2]`` (a failed task fails the job) or
    ``local[2,4]`` (a task is tried up to 4 times); switching stops the other one."""

    def __init__(self) -> None:
        self.session: SparkSession | None = None
        self.master: str | None = None

    def get(self, master: str) -> SparkSession:
        if self.session is not None and self.master == master:
            return self.session
        self.stop()
        active = SparkContext._active_spark_context
        if active is not None:  # another fixture's session, with another master
            active.stop()
        self.session = (
            SparkSession.builder.master(master)
            .appName(f"asyncio-lookup-fault-tests-{master}")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.default.parallelism", "2")
            .config("spark.pyspark.python", sys.executable)
            .config("spark.pyspark.driver.python", sys.executable)
            .config("spark.python.worker.reuse", "true")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .getOrCreate()
        )
        self.session.sparkContext.setLogLevel("OFF")
        self.master = master
        return self.session

    def current(self) -> SparkSession:
        """The running session, ``local[2]`` if none runs."""
        return self.session if self.session is not None else self.get("local[2]")

    def stop(self) -> None:
        if self.session is not None:
            self.session.stop()
            self.session = None
            self.master = None


def wait_for(condition: Callable[[], bool], seconds: float) -> bool:
    """Poll ``condition`` until it holds or ``seconds`` pass; its last value."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def failed_tasks(spark: SparkSession, group: str) -> int:
    """Failed task attempts of the jobs run in job group ``group``."""
    tracker = spark.sparkContext.statusTracker()
    failed = 0
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        for stage_id in job.stageIds if job is not None else ():
            stage = tracker.getStageInfo(stage_id)
            failed += stage.numFailedTasks if stage is not None else 0
    return failed


# -- targets -----------------------------------------------------------------------------------


@dataclass
class Target:
    """One connector kind: its private server and a fault proxy in front of it."""

    kind: str
    server: RedisServer | PostgresServer | HttpLookupService
    proxy: TcpProxy

    def connector(self, timeout: float | None = None) -> Any:
        """The connector of this kind, through the proxy; ``timeout`` sets its I/O timeout
        (``socket_timeout`` / ``command_timeout`` and ``connect_timeout`` / ``timeout``),
        ``None`` keeps the connector's default."""
        port = self.proxy.port
        if self.kind == "redis":
            extra = {} if timeout is None else {"socket_timeout": timeout}
            return RedisConnector(f"redis://127.0.0.1:{port}/0", "dim:{id}", **extra)
        if self.kind == "postgres":
            extra = (
                {} if timeout is None else {"command_timeout": timeout, "connect_timeout": timeout}
            )
            dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"
            return PostgresConnector(dsn, "dim", "id", **extra)
        extra = {} if timeout is None else {"timeout": timeout}
        return HttpConnector(
            f"http://127.0.0.1:{port}/dim/{{id}}",
            batch_url=f"http://127.0.0.1:{port}/dim/batch",
            **extra,
        )

    def table(
        self, options: dict[str, str] | None = None, timeout: float | None = None
    ) -> LookupTable:
        return LookupTable(f"Dim_{self.kind}", SCHEMA, self.connector(timeout), options)

    def stop(self) -> None:
        self.server.stop()

    def start(self) -> None:
        self.server.start()

    def restart(self) -> None:
        self.server.restart()


def load(kind: str, server: RedisServer | PostgresServer | HttpLookupService) -> None:
    """Put the dim rows into a freshly started server."""
    rows = dim_rows()
    if isinstance(server, RedisServer):
        server.load(
            {f"dim:{r['id']}": json.dumps({"name": r["name"], "score": r["score"]}) for r in rows}
        )
    elif isinstance(server, PostgresServer):
        server.execute("CREATE TABLE dim (id int PRIMARY KEY, name text NOT NULL, score bigint)")
        server.execute(
            "INSERT INTO dim VALUES (%s, %s, %s)", [(r["id"], r["name"], r["score"]) for r in rows]
        )
    else:
        server.rows = {r["id"]: r for r in rows}


# -- running a job with a fault ----------------------------------------------------------------


class Cancelled(Exception):
    """The job ended before the fault's trigger: the fault thread stops."""


@dataclass
class Fault:
    """``script(fault)`` run in a thread while the test runs its job: it waits for an event
    with :meth:`wait`, breaks something, and notes when with :meth:`mark`. Leaving the
    ``with`` block cancels what has not happened yet and re-raises the script's errors."""

    script: Callable[[Fault], None]
    marks: dict[str, float] = field(default_factory=dict)
    cancelled: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    thread: threading.Thread | None = None

    def __enter__(self) -> Fault:
        self.thread = threading.Thread(target=self._run, name="fault", daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancelled.set()
        assert self.thread is not None
        self.thread.join(60)
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        try:
            self.script(self)
        except Cancelled:
            pass
        except BaseException as error:
            self.error = error

    def wait(self, condition: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
        """Poll ``condition`` every 5 ms until true (raises :class:`Cancelled` if the job ended)."""
        deadline = time.monotonic() + timeout
        while not condition():
            if self.cancelled.wait(0.005):
                raise Cancelled(what)
            if time.monotonic() > deadline:
                raise AssertionError(f"fault trigger never came: {what}")

    def sleep(self, seconds: float) -> None:
        if self.cancelled.wait(max(0.0, seconds)):
            raise Cancelled("sleep")

    def mark(self, name: str) -> float:
        self.marks[name] = time.monotonic()
        return self.marks[name]


def requests_over(proxy: TcpProxy, n: int) -> Callable[[], bool]:
    return lambda: proxy.requests >= n


def run_join(
    spark: SparkSession, table: LookupTable, group: str = "fault-test"
) -> list[tuple[Any, ...]]:
    """Collect the lookup join of the probe rows with ``table`` in job group ``group``."""
    out = lookup_join(probe(spark), table, on=[("cid", "id")], how="left")
    spark.sparkContext.setJobGroup(group, "fault test")
    try:
        return [tuple(r) for r in out.collect()]
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]


def assert_exact(rows: list[tuple[Any, ...]], expected: Counter[tuple[Any, ...]]) -> None:
    """Row for row the plain join: nothing lost, nothing duplicated, no wrong value."""
    got = Counter(rows)
    lost, extra = expected - got, got - expected
    assert not lost and not extra, (
        f"{sum(lost.values())} rows lost (e.g. {list(lost)[:3]}), "
        f"{sum(extra.values())} rows extra or wrong (e.g. {list(extra)[:3]})"
    )


def assert_counted_once(table: LookupTable) -> dict[str, float]:
    """Each successful task's metrics counted once: one logical lookup per probe row."""
    metrics = table.metrics()
    assert metrics.get("numLookups") == ROWS, metrics
    assert metrics.get("numCompleted") == ROWS, metrics
    return metrics
