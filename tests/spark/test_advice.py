"""The backlog scenario of issue 25: a stock ThreadingHTTPServer whose listen backlog is 5,
looked up at the default capacity 100 by 2 tasks, makes connects wait (Linux drops the SYNs a
full accept queue gets, and the client tries again 1 s later): the retries are logged as one
warning per task and cause on the executor, and the driver's summary names them
(docs/reference.md "Troubleshooting")."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from asyncio_lookup.connectors import HttpConnector
from asyncio_lookup.errors import TransientError
from asyncio_lookup.lookup.functions import AsyncLookupFunction
from asyncio_lookup.runtime import AsyncFunction, RetryStrategies
from asyncio_lookup.spark import LookupTable, RateLimit, async_map, async_map_metrics, lookup_join
from asyncio_lookup.spark.advice import summary, warnings_of

pytestmark = pytest.mark.spark

KEYS = 600
#: The connector's timeout: 2 s lets a connect held back by the full backlog time out (the
#: SYN is resent after 1 s, then 3 s); with the default 10 s, few do on this machine.
CONNECT_TIMEOUT = 2.0


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        key = self.path.rsplit("/", 1)[-1]
        body = json.dumps({"id": int(key), "name": f"c{key}"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(OSError):  # the client timed out and left
            self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class _Backlog5(ThreadingHTTPServer):
    request_queue_size = 5
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that timed out closed its connection: not this test's subject


@pytest.fixture
def backlog5() -> Iterator[str]:
    server = _Backlog5(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class _LoggedHttp(HttpConnector):
    """An HttpConnector whose executor also writes the library's advice log to ``log_path``."""

    log_path = ""

    def async_lookup_function(self) -> AsyncLookupFunction:
        logger = logging.getLogger("asyncio_lookup.lookup.advice")
        if not any(getattr(h, "baseFilename", None) == self.log_path for h in logger.handlers):
            handler = logging.FileHandler(self.log_path)
            handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
            logger.addHandler(handler)
        return super().async_lookup_function()


def test_a_full_listen_backlog_is_one_warning_per_task_and_cause(
    spark: SparkSession, backlog5: str, tmp_path: Path
) -> None:
    connector = _LoggedHttp(backlog5 + "/c/{id}", "id", timeout=CONNECT_TIMEOUT)
    connector.log_path = str(tmp_path / "executor.log")
    name = f"Backlog{uuid.uuid4().hex[:8]}"
    table = LookupTable(name, "id INT, name STRING", connector)
    orders = spark.range(0, KEYS, 1, 2).selectExpr("CAST(id AS INT) AS cid")
    joined = lookup_join(orders, table, on=[("cid", "id")])
    assert joined.count() == KEYS

    metrics = table.metrics()
    assert metrics["numLookups"] == KEYS and metrics["numFailureRetries"] > 0
    warnings = [w for w in warnings_of(table) if w.code == "retry-storm"]
    assert warnings, summary(table)
    lines = [
        line for line in Path(connector.log_path).read_text().splitlines() if f"'{name}'" in line
    ]
    for warning in warnings:
        said = [line for line in lines if f"after {warning.cause} " in line]
        assert len(said) == warning.tasks  # once per task that saw it
        assert all(line.startswith("WARNING ") for line in said)
        assert "lower 'capacity'" in said[0] and "accept backlog" in said[0]
        assert "'capacity' 100 per task" in said[0]
    text = summary(table)
    print(text)  # the captured text of docs/reference.md "Troubleshooting"
    print("\n".join(lines))
    first = warnings[0]
    assert f"of {KEYS:,} lookups were retried" in text
    assert f"after {first.cause}" in text and "lower 'capacity'" in text
    assert f"cause {first.cause}:" in text


class _ResetOnce(AsyncFunction[dict[str, Any], dict[str, Any]]):
    """Each row's first call fails as a reset connection would; its retry succeeds."""

    def __init__(self) -> None:
        self.seen: set[int] = set()

    async def async_invoke(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        if row["id"] not in self.seen:
            self.seen.add(row["id"])
            raise ConnectionResetError(104, f"reset by http://user:s3cret@svc/{row['id']}")
        return [{"id": row["id"]}]


def test_async_map_retries_are_summarised_by_cause(
    spark: SparkSession, caplog: pytest.LogCaptureFixture
) -> None:
    metrics_id = f"reset-{uuid.uuid4().hex[:8]}"
    retry = RetryStrategies.fixed_delay(2, 0.001, None, lambda e: isinstance(e, OSError))
    rows = spark.range(0, 200, 1, 2).selectExpr("CAST(id AS INT) AS id")
    caplog.set_level(logging.WARNING, logger="asyncio_lookup.summary")
    out = async_map(rows, _ResetOnce(), "id INT", 30.0, retry_strategy=retry, metrics_id=metrics_id)
    assert out.count() == 200
    # the driver logs the summary by itself after the action (spark/action_summary.py)
    deadline = time.monotonic() + 30
    while metrics_id not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.1)
    (logged,) = [
        r
        for r in caplog.records
        if r.name == "asyncio_lookup.summary" and metrics_id in r.getMessage()
    ]
    assert logged.levelno == logging.WARNING
    assert f"'{metrics_id}': 1 warning(s)" in logged.getMessage()
    assert "after ConnectionResetError" in logged.getMessage()
    (warning,) = warnings_of(metrics_id)
    assert (warning.code, warning.cause, warning.tasks) == (
        "retry-storm",
        "ConnectionResetError",
        2,
    )
    text = summary(metrics_id)
    assert "200 of 200 records were retried (200 retries) after ConnectionResetError" in text
    assert "s3cret" not in text and "http://user:***@svc/" in text


class _ThrottledOnce(AsyncFunction[dict[str, Any], dict[str, Any]]):
    """Answers 429 to the first call of each row, then its row."""

    def __init__(self) -> None:
        self.seen: set[int] = set()

    async def async_invoke(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        if row["id"] not in self.seen:
            self.seen.add(row["id"])
            raise TransientError("quota", status=429)
        return [{"id": row["id"]}]


def test_async_map_held_back_by_its_rate_limit_is_told_so(spark: SparkSession) -> None:
    """``async_map``'s limiter counts ``throttledTimeMs`` and ``numThrottledCalls`` as a lookup
    table's does; its 'held back by the rate limit' warning names ``rate_limit``."""
    metrics_id = f"paced-{uuid.uuid4().hex[:8]}"
    retry = RetryStrategies.fixed_delay(2, 0.001, None, lambda e: isinstance(e, TransientError))
    rows = spark.range(0, 30, 1, 1).selectExpr("CAST(id AS INT) AS id")
    out = async_map(
        rows,
        _ThrottledOnce(),
        "id INT",
        60.0,
        retry_strategy=retry,
        rate_limit=RateLimit(30, parallelism=1),
        metrics_id=metrics_id,
    )
    assert sorted(r.id for r in out.collect()) == list(range(30))
    figures = async_map_metrics(metrics_id)
    assert figures["numThrottledCalls"] == 30
    # 60 calls at 30/s from an empty bucket: about 2 s of waiting for tokens
    assert 1500 <= figures["throttledTimeMs"] <= 60_000
    warnings = [w for w in warnings_of(metrics_id) if w.code == "rate-limited"]
    assert len(warnings) == 1
    assert "calls waited for rate_limit tokens" in summary(metrics_id)
