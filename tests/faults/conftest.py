"""Fixtures of the fault tests: private Redis, PostgreSQL and HTTP servers on free loopback
ports (started and stopped here, never the shared 6379/5432 ones), a fresh fault proxy in
front of one of them per test, and the Spark sessions.

Outside CI a missing ``redis-server`` or PostgreSQL binary skips its tests; with ``CI=true``
it fails them, as ``tests/conftest.py`` does for the shared servers.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

from pyspark.sql import SparkSession

from tests.conftest import IN_CI
from tests.connectors.proxy import TcpProxy
from tests.faults import harness
from tests.faults.servers import (
    HttpLookupService,
    PostgresServer,
    RedisServer,
    find_binary,
)


def _binary(name: str, patterns: tuple[str, ...] = ()) -> str:
    path = find_binary(name, patterns)
    if path is not None:
        return path
    message = f"{name} is not installed (searched PATH and {list(patterns)})"
    if IN_CI:
        pytest.fail(message + " (CI=true: the fault tests must run)")
    pytest.skip(message)


@pytest.fixture(scope="package")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(_binary("redis-server"), tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        harness.load("redis", server)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="package")
def postgres_server() -> Iterator[PostgresServer]:
    initdb = _binary("initdb", ("/usr/lib/postgresql/*/bin/initdb",))
    # not under pytest's base temp: that one is private to this user, and the server may run
    # as the postgres user
    workdir = Path(tempfile.mkdtemp(prefix="faults-postgres-"))
    server = PostgresServer(str(Path(initdb).parent), workdir)
    try:
        server.init()
        server.start()
        harness.load("postgres", server)
        yield server
    finally:
        if server.running():
            server.stop("immediate")
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="package")
def http_service() -> Iterator[HttpLookupService]:
    service = HttpLookupService()
    service.start()
    harness.load("http", service)
    yield service
    service.close()


@pytest.fixture(params=harness.KINDS)
def target(request: pytest.FixtureRequest) -> Iterator[harness.Target]:
    """One connector kind (each test runs for all three), with a fresh proxy in front of its
    server; the server is running again after the test, whatever the test did to it."""
    kind: str = request.param
    server: Any = request.getfixturevalue(
        {"redis": "redis_server", "postgres": "postgres_server", "http": "http_service"}[kind]
    )
    target_port = server.port
    with TcpProxy("127.0.0.1", target_port) as proxy:
        yield harness.Target(kind, server, proxy)
    if not server.running():
        server.start()


@pytest.fixture(scope="package")
def spark_sessions() -> Iterator[harness.SparkSessions]:
    sessions = harness.SparkSessions()
    yield sessions
    sessions.stop()


@pytest.fixture
def spark(spark_sessions: harness.SparkSessions) -> SparkSession:
    """``local[2]``: a task that fails fails the job (no task retry hides a fault)."""
    return spark_sessions.get("local[2]")


@pytest.fixture
def spark_retrying(spark_sessions: harness.SparkSessions) -> SparkSession:
    """``local[2,4]``: Spark tries a failed task up to 4 times."""
    return spark_sessions.get("local[2,4]")


@pytest.fixture(scope="package")
def expected(spark_sessions: harness.SparkSessions) -> Counter[tuple[Any, ...]]:
    """The plain Spark join every lookup join must equal, row for row."""
    return harness.plain_join(spark_sessions.current())
