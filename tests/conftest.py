"""Shared fixtures: the machine's real Redis and PostgreSQL.

Outside CI a missing server skips its tests; with ``CI=true`` it fails them, so CI can never
pass by skipping. ``.ci/run`` starts both servers when they are down.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import pytest

from tests.jvm_archive import jvm_options

REDIS_HOST, REDIS_PORT = "127.0.0.1", int(os.environ.get("REDIS_PORT", "6379"))
POSTGRES_HOST, POSTGRES_PORT = "127.0.0.1", int(os.environ.get("POSTGRES_PORT", "5432"))
POSTGRES_DSN = os.environ.get(
    "ASYNCIO_LOOKUP_TEST_DSN", f"postgresql://postgres@{POSTGRES_HOST}:{POSTGRES_PORT}/test"
)
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# Every JVM the tests start (the Spark sessions here and in subprocesses, spark-submit, the
# Connect and standalone servers) lives seconds to minutes and runs tiny jobs, and the suite is
# CPU-bound on two cores: C1 alone and the serial collector cut a Spark program's machine CPU
# by a third (22 -> 15 s for a session, a 2,000-row lookup join and its stop), a class-data-
# sharing archive of Spark's classes (tests/jvm_archive.py) by half again (13.5 -> 7 s for a
# session, two small jobs and a stop).
# Semantics do not change with the JIT tier or the archive. A JDK_JAVA_OPTIONS of the caller's
# is kept.
os.environ.setdefault("JDK_JAVA_OPTIONS", jvm_options())


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def _require(host: str, port: int, what: str) -> None:
    if _reachable(host, port):
        return
    message = f"{what} is not reachable on {host}:{port}"
    if IN_CI:
        pytest.fail(message + " (CI=true: these tests must run, see .ci/run)")
    pytest.skip(message)


@pytest.fixture(scope="session")
def redis_url() -> str:
    """URL of the machine's Redis; tests use database 15 and clean up their own keys."""
    _require(REDIS_HOST, REDIS_PORT, "Redis")
    return f"redis://{REDIS_HOST}:{REDIS_PORT}/15"


@pytest.fixture(scope="session")
def postgres_dsn() -> str:
    """DSN of the machine's PostgreSQL (database ``test``, trust auth)."""
    _require(POSTGRES_HOST, POSTGRES_PORT, "PostgreSQL")
    return POSTGRES_DSN


# Modules under tests/spark/ whose tests hold no session in the test process: their Spark
# jobs run in subprocesses, each on free ports (tests/spark/job_session.py).
_NO_SESSION_IN_PROCESS = ("tests/spark/test_shared_cache.py",)


def spark_session_kind(nodeid: str) -> str | None:
    """Which Spark session a test holds in the test process: ``'connect'`` (a local Connect
    server in the test process), ``'classic'`` (the Spark tests' classic
    session, and the fault tests, which stop and start classic sessions of their own), or None
    (no session in this process; Spark in a subprocess at most)."""
    if nodeid.startswith(_NO_SESSION_IN_PROCESS):
        return None
    if nodeid.startswith("tests/spark/") and ("[connect-" in nodeid or "[connect]" in nodeid):
        return "connect"
    if nodeid.startswith(("tests/spark/", "tests/faults/")):
        return "classic"
    return None


# The units started first, one per worker, before the rest by size: the longest ones.
_FIRST = ("spark-classic", "spark-connect", "spark-faults")


def xdist_unit(nodeid: str) -> str:
    """The xdist work unit of a test: its Spark session's unit, the HTTP conformance suite (its
    servers start once), or the test alone."""
    if nodeid.startswith("tests/connectors/conformance/"):
        return "http-conformance"
    kind = spark_session_kind(nodeid)
    if kind == "classic" and nodeid.startswith("tests/faults/"):
        return "spark-faults"  # classic sessions of its own: a worker of its own if one is free
    return f"spark-{kind}" if kind else nodeid


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``make test`` runs on pytest-xdist workers: the classic Spark tests, the fault tests and
    the Connect ones as one unit each, started first on workers of their own; the HTTP
    conformance suite as one unit; every other test alone, spread over the workers as they free
    up. A worker never runs units of both session kinds (:func:`spark_session_kind`) unless it is
    the only worker."""
    from xdist.scheduler import LoadScopeScheduling

    class SparkSessionScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def __init__(self, config: pytest.Config, log: Any = None) -> None:
            super().__init__(config, log)
            self.kinds: dict[Any, set[str]] = {}  # worker -> the session kinds it ran
            self.ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return xdist_unit(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            """The first unit in the queue that ``node`` may run (PySpark stays in Connect mode
            in a process once a Connect session started there), or none."""
            if not self.ordered:  # the first assignment: the work queue is complete
                self.ordered = True
                for scope in reversed(_FIRST):
                    if scope in self.workqueue:
                        self.workqueue.move_to_end(scope, last=False)
            ran = self.kinds.setdefault(node, set())
            alone = len(self.nodes) < 2

            def kind_of(scope: str) -> str | None:
                return spark_session_kind(next(iter(self.workqueue[scope])))

            def may_run(scope: str) -> bool:
                kind = kind_of(scope)
                return alone or kind is None or not ran - {kind}

            scope = next((scope for scope in self.workqueue if may_run(scope)), None)
            if scope is None:
                return  # only units of the other kind are left: a worker that may run them will
            kind = kind_of(scope)
            if kind is not None:
                ran.add(kind)
            self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    return SparkSessionScheduling(config, log)
