"""Test helpers shipped to Spark workers by value: a real HTTP dim service and odd connectors."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Collection, Iterable
from typing import Any

from aiohttp import web

from asyncio_lookup.lookup.functions import AsyncLookupFunction, Key, LookupFunction, Row
from asyncio_lookup.runtime import AsyncFunction
from tests.services import BackgroundService


class DimService(BackgroundService):
    """A customer service on 127.0.0.1 (random port) that counts calls per key.

    ``GET /customers/{id}`` returns the rows of ``id`` (404 when none). A *late* row is only
    returned from the ``after_calls``-th call for its key on (it "arrives late"). ``?delay=s``
    makes the answer take that long. Runs its own event loop in a background thread.
    """

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, list[dict[str, Any]]] = {}
        self.late: dict[str, tuple[int, list[dict[str, Any]]]] = {}
        self.counts: Counter[str] = Counter()

    def add(self, key: Any, rows: Iterable[dict[str, Any]]) -> None:
        with self.lock:
            self.rows[str(key)] = list(rows)

    def add_late(self, key: Any, rows: Iterable[dict[str, Any]], after_calls: int) -> None:
        with self.lock:
            self.late[str(key)] = (after_calls, list(rows))

    def calls(self, key: Any) -> int:
        with self.lock:
            return self.counts[str(key)]

    async def _customer(self, request: web.Request) -> web.Response:
        key = request.match_info["id"]
        delay = float(request.query.get("delay", "0"))
        with self.lock:
            self.counts[key] += 1
            count = self.counts[key]
            rows = list(self.rows.get(key, ()))
            late = self.late.get(key)
        if late is not None and count >= late[0]:
            rows = rows + late[1]
        if delay:
            await asyncio.sleep(delay)
        if not rows:
            return web.json_response(None, status=404)
        return web.json_response(rows)

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/customers/{id}", self._customer)


class BoomError(RuntimeError):
    """The error a failing lookup function raises."""


class FailingConnector:
    """Looks keys up in ``rows`` but raises :class:`BoomError` for ``bad_key``."""

    def __init__(self, rows: dict[Any, list[Row]], bad_key: Any) -> None:
        self.rows = rows
        self.bad_key = bad_key

    def lookup_function(self) -> LookupFunction:
        return _FailingSync(self)

    def async_lookup_function(self) -> AsyncLookupFunction:
        return _FailingAsync(self)

    def scan(self) -> None:
        return None

    def get(self, key: Key) -> Collection[Row]:
        if key[0] == self.bad_key:
            raise BoomError(f"boom: the dim store rejected key {key[0]!r}")
        return [dict(r) for r in self.rows.get(key[0], ())]


class _FailingSync(LookupFunction):
    def __init__(self, connector: FailingConnector) -> None:
        self.connector = connector

    def lookup(self, key: Key) -> Collection[Row]:
        return self.connector.get(key)


class _FailingAsync(AsyncLookupFunction):
    def __init__(self, connector: FailingConnector) -> None:
        self.connector = connector

    async def async_lookup(self, key: Key) -> Collection[Row]:
        await asyncio.sleep(0)
        return self.connector.get(key)


class SyncOnly:
    """Wraps a connector, hiding its async capability."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.key_columns = getattr(inner, "key_columns", None)

    def lookup_function(self) -> LookupFunction | None:
        return self.inner.lookup_function()

    def async_lookup_function(self) -> None:
        return None

    def scan(self) -> Any:
        return self.inner.scan()


class ScanOnly:
    """A FULL-cache source: ``scan()`` serves the rows; a point lookup is a test failure."""

    def __init__(self, rows: list[Row]) -> None:
        self.rows = rows

    def lookup_function(self) -> LookupFunction:
        return _NoPointLookup()

    def async_lookup_function(self) -> None:
        return None

    def scan(self) -> list[Row]:
        return [dict(r) for r in self.rows]


class _NoPointLookup(LookupFunction):
    def lookup(self, key: Key) -> Collection[Row]:
        raise AssertionError(f"a FULL cache must not call the point lookup (key {key!r})")


class FlakyError(RuntimeError):
    """A first attempt's failure that a retry fixes."""


class FlakyDouble(AsyncFunction[dict[str, Any], dict[str, Any]]):
    """Fails the first attempt for every row, then returns the row doubled (for async_map)."""

    def __init__(self) -> None:
        self.attempts: Counter[int] = Counter()

    async def async_invoke(self, element: dict[str, Any]) -> Collection[dict[str, Any]]:
        n = element["n"]
        self.attempts[n] += 1
        await asyncio.sleep(0)
        if self.attempts[n] == 1:
            raise FlakyError(f"first attempt for row {n} failed")
        return [{"n": n, "double": 2 * n, "attempts": self.attempts[n]}]


class PartitionRecorder:
    """Looks ids up in ``rows`` and adds ``pid``: the Spark partition the lookup ran in (the
    task side's view of where a key was routed). Optionally brings its own ``partitioner``."""

    def __init__(self, rows: list[Row], partitioner: Any = None) -> None:
        self.rows = rows
        self.key_columns = ("id",)
        self._partitioner = partitioner

    def partitioner(self, key_columns: tuple[str, ...]) -> Any:
        return self._partitioner

    def lookup_function(self) -> None:
        return None

    def async_lookup_function(self) -> AsyncLookupFunction:
        return _RecordingLookup(self.rows)

    def scan(self) -> list[Row]:
        return [dict(r) for r in self.rows]


class _RecordingLookup(AsyncLookupFunction):
    def __init__(self, rows: list[Row]) -> None:
        self.rows = rows
        self.index: dict[Any, list[Row]] = {}

    async def open(self) -> None:
        for row in self.rows:
            self.index.setdefault(row["id"], []).append(row)

    async def async_lookup(self, key: Key) -> Collection[Row]:
        from pyspark import TaskContext

        context = TaskContext.get()
        pid = context.partitionId() if context is not None else -1
        return [{**r, "pid": pid} for r in self.index.get(key[0], ())]


class ReversedModPartitioner:
    """A connector-supplied partitioner: id ``k`` goes to partition ``n - 1 - k mod n``.

    With ``with_column`` it also gives the probe side a Spark expression for it; without, the
    probe side calls :meth:`partition` in a UDF."""

    def __init__(self, with_column: bool) -> None:
        self.with_column = with_column

    def __repr__(self) -> str:
        return f"ReversedModPartitioner({self.with_column})"

    def partition(self, key: Key, num_partitions: int) -> int:
        return num_partitions - 1 - key[0] % num_partitions

    def spark_column(self, columns: list[Any], num_partitions: int) -> Any:
        if not self.with_column:
            return None
        from pyspark.sql import functions as F

        return F.lit(num_partitions - 1) - F.pmod(columns[0], F.lit(num_partitions))


def physical_plan(df: Any, extended: bool = False) -> str:
    """The physical plan as ``explain()`` prints it (classic and Connect alike); with
    ``extended`` the logical plans too."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        df.explain(extended)
    return out.getvalue()


class FailOnceConnector:
    """Looks keys up in ``rows``; the very first lookup (across every process: a marker file
    is created atomically) raises :class:`BoomError`, so exactly one task attempt fails."""

    def __init__(self, rows: dict[Any, list[Row]], marker: str) -> None:
        self.rows = rows
        self.marker = marker

    def lookup_function(self) -> LookupFunction | None:
        return None

    def async_lookup_function(self) -> AsyncLookupFunction:
        return _FailOnceAsync(self)

    def scan(self) -> None:
        return None

    def get(self, key: Key) -> Collection[Row]:
        import os

        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return [dict(r) for r in self.rows.get(key[0], ())]
        raise BoomError("boom: the first lookup of the job fails its task once")


class _FailOnceAsync(AsyncLookupFunction):
    def __init__(self, connector: FailOnceConnector) -> None:
        self.connector = connector

    async def async_lookup(self, key: Key) -> Collection[Row]:
        await asyncio.sleep(0)
        return self.connector.get(key)


class NoCapability:
    """A connector with neither a lookup nor a scan (and no key columns)."""

    def lookup_function(self) -> None:
        return None

    def async_lookup_function(self) -> None:
        return None

    def scan(self) -> None:
        return None
