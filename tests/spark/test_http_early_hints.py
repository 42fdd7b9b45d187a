"""Issue 21's acceptance: a lookup join of 3,000 rows over a server that sends ``103 Early
Hints`` (and 100, 102) before every answer is exact, on both HTTP clients.

The server is Node's ``http`` module with ``writeEarlyHints`` (the issue's reproduction: 0 of
200 lookups right before the fix), or ``http.server``'s HTTP/1.1 handler where ``node`` is not
on PATH (with ``CI=true`` Node must be there). Every answer echoes the key it was asked for.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from asyncio_lookup.connectors.http_connector import HttpConnector
from asyncio_lookup.spark import LookupTable, lookup_join
from tests.connectors.conformance.servers import IN_CI, NODE, SERVERS, Server

pytestmark = pytest.mark.spark

ROWS = 3000


@pytest.fixture(scope="module")
def early_hints_server() -> Iterator[Server]:
    if NODE is None and IN_CI:
        pytest.fail("node is not on PATH (CI=true: the acceptance test runs on Node's server)")
    name = "node" if NODE else "stdlib-1.1"
    server = Server(name, SERVERS[name][0]).start().wait_ready()
    yield server
    server.stop()


@pytest.mark.parametrize("client", ["asyncio", "aiohttp"])
def test_a_lookup_join_over_early_hints_is_exact(
    spark: SparkSession, early_hints_server: Server, client: str
) -> None:
    server = early_hints_server
    connector = HttpConnector(f"{server.base}/early/{{id}}", client=client, max_connections=20)
    table = LookupTable("Hinted", "id STRING, server STRING, method STRING", connector)
    df = spark.createDataFrame(
        [(n, f"key-{n}") for n in range(ROWS)], "n INT, key STRING"
    ).repartition(2)
    out = lookup_join(
        df,
        table,
        on=[("key", "id")],
        how="left",
        columns=["id", "server", "method"],
        hints="LOOKUP('table'='Hinted', 'async'='true', 'capacity'='200')",
    )
    got = sorted(tuple(r) for r in out.collect())
    assert len(got) == ROWS
    wrong = [r for r in got if r != (r[0], f"key-{r[0]}", f"key-{r[0]}", server.name, "GET")]
    assert not wrong, f"{len(wrong)} of {ROWS} rows wrong, e.g. {wrong[:5]}"
