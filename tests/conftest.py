"""Shared fixtures: the machine's real Redis and PostgreSQL.

Outside CI a missing server skips its tests; with ``CI=true`` it fails them, so CI can never
pass by skipping. ``.ci/run`` starts both servers when they are down.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import pytest

REDIS_HOST, REDIS_PORT = "127.0.0.1", int(os.environ.get("REDIS_PORT", "6379"))
POSTGRES_HOST, POSTGRES_PORT = "127.0.0.1", int(os.environ.get("POSTGRES_PORT", "5432"))
POSTGRES_DSN = os.environ.get(
    "ASYNCIO_LOOKUP_TEST_DSN", f"postgresql://postgres@{POSTGRES_HOST}:{POSTGRES_PORT}/test"
)
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


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


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``make test`` runs on pytest-xdist workers: the classic Spark tests as one unit on one
    worker, the Connect ones as one unit on another (PySpark stays in Connect mode once a
    Connect session started, and one Connect server per machine), the HTTP conformance suite
    as one unit (its servers start once, on one worker), every other test alone, spread over
    the workers as they free up."""
    from xdist.scheduler import LoadScopeScheduling

    class SparkSessionScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith("tests/connectors/conformance/"):
                return "http-conformance"
            kind = spark_session_kind(nodeid)
            return f"spark-{kind}" if kind else nodeid

    return SparkSessionScheduling(config, log)
