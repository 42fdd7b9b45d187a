"""What a Spark Python worker imports to run a task: the task code of ``lookup_join`` and
``async_map`` and the HTTP connector, without the driver-only SQL layer (sqlglot) or the Redis
and PostgreSQL clients it does not use. Each costs every fresh worker CPU before its first row
(about 0.3 s together); they are imported on first use instead."""

from __future__ import annotations

import json
import subprocess
import sys

WORKER_MODULES = (
    "asyncio_lookup.spark.task",
    "asyncio_lookup.spark.async_map_task",
    "asyncio_lookup.connectors.http_connector",
    "asyncio_lookup.connectors.memory",
)
UNUSED = ("sqlglot", "redis", "asyncpg")


def _in_fresh_interpreter(code: str) -> object:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(done.stdout)


def test_task_code_imports_neither_the_sql_layer_nor_unused_clients() -> None:
    code = (
        "import importlib, json, sys\n"
        f"for name in {WORKER_MODULES!r}: importlib.import_module(name)\n"
        f"print(json.dumps([m for m in {UNUSED!r} if m in sys.modules]))\n"
    )
    assert _in_fresh_interpreter(code) == []


def test_the_lazy_names_import_on_first_use() -> None:
    code = (
        "import json, sys\n"
        "from asyncio_lookup.spark import *\n"
        "from asyncio_lookup.connectors import *\n"
        "import asyncio_lookup.spark as spark, asyncio_lookup.connectors as connectors\n"
        "print(json.dumps([LookupSQL.__module__, RedisConnector.__module__,\n"
        "    PostgresConnector.__module__, spark.LookupSQL is LookupSQL,\n"
        "    hasattr(connectors, 'NoSuchConnector')]))\n"
    )
    assert _in_fresh_interpreter(code) == [
        "asyncio_lookup.spark.sql.session",
        "asyncio_lookup.connectors.redis_connector",
        "asyncio_lookup.connectors.postgres_connector",
        True,
        False,
    ]
