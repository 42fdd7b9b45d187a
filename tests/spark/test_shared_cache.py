"""The shared cache end to end (docs/semantics.md "The shared cache"): options on the driver,
and the acceptance jobs of tests/spark/shared_cache_job.py (``local[4]``, 8 tasks, fresh
Python workers) against counting HTTP services and a Redis.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from aiohttp import web
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from asyncio_lookup.connectors import HttpConnector, InMemoryConnector
from asyncio_lookup.errors import ConfigurationError, HintError
from asyncio_lookup.lookup.l2.settings import namespace_pattern
from asyncio_lookup.lookup.l2.stores import open_admin
from asyncio_lookup.spark import LookupTable
from tests.lookup.test_shared_cache import _free_port, private_redis
from tests.spark.job_session import classic_env
from tests.spark.rate_servers import CountingService
from tests.spark.test_rate_limit import REPO

KEYS = 500
TASKS = 8
#: The store is killed after 500 calls: with 2,000 keys, well before the job's last call.
KILL_KEYS = 2000


# -- the driver's checks -----------------------------------------------------------------------


def _table(options: dict[str, str], v: Any = None, connector: Any = None) -> LookupTable:
    schema = StructType([StructField("id", LongType()), StructField("v", v or StringType())])
    return LookupTable(
        "Items",
        schema,
        connector or HttpConnector("http://127.0.0.1:1/items/{id}"),
        {"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "10", **options},
        verify_target=False,
    )


def test_options_are_checked_on_the_driver() -> None:
    with pytest.raises(ConfigurationError, match=r"did you mean 'lookup\.shared-cache\.ttl'"):
        _table({"lookup.shared-cache.tll": "1 h"})
    with pytest.raises(ConfigurationError, match="redis://"):
        _table({"lookup.shared-cache.url": "memcached://x"})
    with pytest.raises(ConfigurationError, match=r"lookup\.shared-cache\.url"):
        _table({"lookup.shared-cache.ttl": "1 h"})


def test_the_default_namespace_changes_with_the_schema() -> None:
    url = {"lookup.shared-cache.url": "redis://127.0.0.1:6379/15"}
    a, b = _table(url), _table(url)
    assert a.shared_namespace == b.shared_namespace
    assert _table(url, IntegerType()).shared_namespace != a.shared_namespace
    named = _table({**url, "lookup.shared-cache.namespace": "items.v2"})
    assert named.shared_namespace == "items.v2"


def test_the_default_namespace_changes_with_what_the_answers_depend_on() -> None:
    """Two tables of one name over different sources never read each other's entries."""
    url = {"lookup.shared-cache.url": "redis://127.0.0.1:6379/15"}
    base = "http://127.0.0.1:1/items/{id}"
    tenants = [
        HttpConnector(base, headers={"X-Tenant": "acme"}),
        HttpConnector(base, headers={"X-Tenant": "globex"}),
        HttpConnector(base, bearer_token="token-a"),
        HttpConnector(base, bearer_token="token-b"),
        HttpConnector(base, rows_field="data"),
        HttpConnector(base + "?region=eu"),
        HttpConnector(base, batch_url="http://127.0.0.1:1/items:batch"),
        InMemoryConnector([{"id": 1, "v": "a"}], ["id"]),
        InMemoryConnector([{"id": 1, "v": "b"}], ["id"]),
    ]
    namespaces = [_table(url, connector=c).shared_namespace for c in tenants]
    assert len(set(namespaces)) == len(tenants)
    again = HttpConnector(base, headers={"X-Tenant": "acme"})
    assert _table(url, connector=again).shared_namespace == namespaces[0]
    assert "token-a" not in tenants[2].cache_identity


def test_a_connector_that_cannot_say_what_its_answers_depend_on_needs_a_namespace() -> None:
    class Plain(InMemoryConnector):
        cache_identity = None  # type: ignore[assignment]

    url = {"lookup.shared-cache.url": "redis://127.0.0.1:6379/15"}
    with pytest.raises(ConfigurationError, match=r"lookup\.shared-cache\.namespace.*Plain"):
        _table(url, connector=Plain([], ["id"])).shared_namespace  # noqa: B018
    named = {**url, "lookup.shared-cache.namespace": "items.v3"}
    assert _table(named, connector=Plain([], ["id"])).shared_namespace == "items.v3"


def test_hint_options_override_the_tables() -> None:
    from asyncio_lookup.lookup.hint_resolve import resolve_lookup
    from asyncio_lookup.spark.join import join_options

    table = _table({"lookup.shared-cache.url": "redis://127.0.0.1:6379/15"})
    hint = resolve_lookup("LOOKUP('table'='Items', 'lookup.shared-cache.ttl'='5 min')", "Items")
    assert join_options(table, hint).shared_ttl == 300.0
    with pytest.raises(HintError, match="did you mean"):
        resolve_lookup("LOOKUP('table'='Items', 'lookup.shared-cache.leese'='1s')", "Items")


def test_invalidate_shared_cache(redis_url: str) -> None:
    namespace = "test-" + uuid.uuid4().hex[:8]
    table = _table(
        {"lookup.shared-cache.url": redis_url, "lookup.shared-cache.namespace": namespace}
    )
    client = redis.Redis.from_url(redis_url)
    client.set(f"alk:{{{namespace}}}:x:1".encode(), b"v")
    client.set(f"alk:{{{namespace}x}}:x:1".encode(), b"v")  # another namespace: kept
    assert table.invalidate_shared_cache() == 1
    assert client.delete(f"alk:{{{namespace}x}}:x:1".encode()) == 1
    # a store the driver cannot reach: redis-py's bare error named neither table nor option
    unreachable = _table(
        {
            "lookup.shared-cache.url": "redis://:s3cret@127.0.0.1:1/0",
            "lookup.shared-cache.namespace": namespace,
        }
    )
    with pytest.raises(ConfigurationError) as raised:
        unreachable.invalidate_shared_cache()
    said = str(raised.value)
    assert "lookup.shared-cache.url" in said and "'Items'" in said and "ConnectionError" in said
    assert "s3cret" not in said


# -- acceptance ---------------------------------------------------------------------------------


class SlowService(CountingService):
    """:class:`CountingService` whose answers take ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    async def _item(self, request: web.Request) -> web.Response:
        await asyncio.sleep(self.delay)
        return await super()._item(request)


def _job(
    mode: str, session: str, redis_url: str, namespace: str, *urls: str, keys: int = KEYS
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.spark.shared_cache_job",
            mode,
            session,
            redis_url,
            namespace,
            str(keys),
            str(TASKS),
            *urls,
        ],
        cwd=REPO,
        env=classic_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _results(job: subprocess.Popen[str]) -> list[dict[str, Any]]:
    out, err = job.communicate(timeout=500)
    assert job.returncode == 0, out[-3000:] + err[-5000:]
    return [json.loads(line[4:]) for line in out.splitlines() if line[:4] == "JOB "]


@pytest.fixture
def namespace(redis_url: str) -> Iterator[str]:
    name = "accept-" + uuid.uuid4().hex[:8]
    yield name
    admin = open_admin(redis_url, 5.0)
    admin.clear(namespace_pattern(name))
    admin.close()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("session", ["classic", "connect"])
def test_external_calls_follow_distinct_keys(session: str, redis_url: str, namespace: str) -> None:
    with CountingService() as l1, CountingService() as first, CountingService() as second:
        started = time.monotonic()
        runs = _results(_job("calls", session, redis_url, namespace, l1.url, first.url, second.url))
        wall = time.monotonic() - started
        calls = (len(l1.times), len(first.times), len(second.times))
    for run in runs:
        assert run["rows"] == run["exact"] == KEYS * TASKS
    print(
        f"\n{session}: external calls L1 only / shared / shared again: {calls} for {KEYS} keys;"
        f" job seconds {[round(r['seconds'], 1) for r in runs]}; wall {wall:.0f} s"
    )
    levels = [{k: v for k, v in r["metrics"].items() if k.startswith("l2")} for r in runs]
    print(f"per-level metrics, shared / shared again: {levels[1]} / {levels[2]}")
    assert calls[0] >= 6 * KEYS  # each fresh worker process fetches every key
    assert calls[1] <= 1.1 * KEYS, levels
    assert calls[2] == 0, levels
    shared, again = runs[1]["metrics"], runs[2]["metrics"]
    assert shared["numExternalKeys"] == calls[1]
    assert shared["l2HitCount"] + shared["l2MissCount"] + shared["hitCount"] == shared["numLookups"]
    assert again["l2HitCount"] > 0 and again["l2MissCount"] == 0 and again["l2ErrorCount"] == 0
    # each task is a fresh process reading each key once: every lookup is an L2 hit
    assert again["l2HitCount"] == KEYS * TASKS and again["l1HitCount"] == again["hitCount"] == 0
    assert again["l2BytesRead"] > 0 and shared["l2BytesWritten"] > 0


@pytest.mark.timeout(600)
def test_the_store_killed_mid_job(namespace: str) -> None:
    port = _free_port()
    url = f"redis://127.0.0.1:{port}/0"
    with SlowService(0.2) as service:
        with private_redis(port) as store:
            job = _job("kill", "classic", url, namespace, service.url, keys=KILL_KEYS)
            deadline = time.monotonic() + 300
            while len(service.times) < 500 and time.monotonic() < deadline and job.poll() is None:
                time.sleep(0.05)
            before = len(redis.Redis(port=port).keys("*"))
            store.terminate()
            store.wait(10)
            killed_at = len(service.times)
        time.sleep(1.5)
        with private_redis(port):
            runs = _results(job)
            after = redis.Redis(port=port).dbsize()
        calls = len(service.times)
    (run,) = runs
    print(
        f"\nkilled after {killed_at} calls ({before} entries); {calls} calls in all; "
        f"{after} entries written after the restart; metrics {run['metrics']}"
    )
    assert run["rows"] == run["exact"] == KILL_KEYS * TASKS
    assert killed_at < calls  # it was killed mid-job
    assert run["metrics"]["l2ErrorCount"] > 0
    assert after > 0  # back to L2 when the store returned


def test_sql_ddl_takes_the_options_and_masks_the_password() -> None:
    import sqlglot

    from asyncio_lookup.spark.sql.ddl import definition_from_ddl, describe_options

    def ddl(options: str) -> Any:
        text = (
            "CREATE TEMPORARY TABLE Items (id BIGINT, v STRING) WITH ('connector'='http', "
            "'url'='http://127.0.0.1:1/items/{id}', 'lookup.cache'='PARTIAL', "
            f"'lookup.partial-cache.max-rows'='10', {options})"
        )
        return definition_from_ddl(sqlglot.parse_one(text, dialect="spark"))

    ddl("'lookup.shared-cache.url'='redis://:pw@127.0.0.1:6379/15', 'lookup.shared-cache.ttl'='1h'")
    with pytest.raises(ConfigurationError, match="did you mean"):
        ddl("'lookup.shared-cache.url'='redis://127.0.0.1', 'lookup.shared-cache.lese'='1s'")
    shown = describe_options({"lookup.shared-cache.url": "redis://:pw@h:6379/0"})
    assert "pw" not in shown["lookup.shared-cache.url"]


def test_joins_with_other_shared_cache_options_get_chains_of_their_own() -> None:
    from asyncio_lookup.lookup.hint_resolve import resolve_lookup
    from asyncio_lookup.lookup.join import JoinSpec, JoinType, KeyBinding
    from asyncio_lookup.spark.join import join_options
    from asyncio_lookup.spark.task import LookupJoinTask

    table = _table({"lookup.shared-cache.url": "redis://127.0.0.1:6379/15"})
    spec = JoinSpec(JoinType.LEFT, (KeyBinding("id", "id"),))

    def task(hint_text: str | None, of: LookupTable = table) -> LookupJoinTask:
        hint = resolve_lookup(hint_text, "Items")
        options = join_options(of, hint)
        return LookupJoinTask(of.table_id, "Items", of.connector, options, hint, spec, ())

    plain = task(None)
    assert task(None).chain_id() == plain.chain_id()
    assert task(None).cache_scope() == plain.cache_scope()
    # The L1 cache too: a hint's join with a shorter TTL, another namespace or no cached
    # misses was served, from the L1 it shared, rows the table's other joins read from L2.
    for option, value in [
        ("lookup.shared-cache.ttl", "5 min"),
        ("lookup.shared-cache.namespace", "n2"),
        ("lookup.shared-cache.cache-missing-key", "false"),
    ]:
        hinted = task(f"LOOKUP('table'='Items', '{option}'='{value}')")
        assert hinted.chain_id() != plain.chain_id(), option
        assert hinted.cache_scope() != plain.cache_scope(), option
    without_l2 = _table({})
    assert task(None, without_l2).cache_scope() == without_l2.table_id
