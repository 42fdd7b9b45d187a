"""RedisConnector against the machine's Redis (database 15, unique key prefix per test)."""

from __future__ import annotations

import asyncio
import json
import logging
import pickle
import re
import time
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
import redis

from asyncio_lookup.connectors import RedisConnector
from asyncio_lookup.errors import ConfigurationError, DataFormatError, TransientError
from asyncio_lookup.lookup.functions import FailedKey
from tests.connectors.conftest import (
    RetryRecorder,
    blocking,
    kill_redis_clients,
    lookups_across_restart,
)
from tests.connectors.proxy import TcpProxy

pytestmark = pytest.mark.redis


async def _both(c: RedisConnector, keys: list[tuple]) -> list[list[dict]]:
    """Point lookups sync and async and one batched lookup; all three must agree."""
    sync = c.lookup_function()
    sync.open()
    fn = c.async_lookup_function()
    await fn.open()
    try:
        s = [list(await blocking(sync.lookup, k)) for k in keys]
        a = [list(await fn.async_lookup(k)) for k in keys]
        b = [list(r) for r in await fn.async_lookup_batch(keys)]
    finally:
        sync.close()
        await fn.close()
    assert s == a == b
    return a


async def test_json_point_batch_missing_null(
    redis_url: str, redis_prefix: str, redis_client: redis.Redis
) -> None:
    redis_client.set(f"{redis_prefix}c:1", json.dumps({"name": "Ada", "country": None}))
    redis_client.set(f"{redis_prefix}c:2", json.dumps({"id": 2, "name": "Grace"}))
    c = RedisConnector(redis_url, redis_prefix + "c:{id}")
    rows = await _both(c, [(1,), (2,), (3,), (None,), (1,)])
    assert rows == [
        [{"name": "Ada", "country": None, "id": 1}],
        [{"id": 2, "name": "Grace"}],
        [],
        [],
        [{"name": "Ada", "country": None, "id": 1}],
    ]


async def test_hash_values_with_pipeline(
    redis_url: str, redis_prefix: str, redis_client: redis.Redis
) -> None:
    redis_client.hset(f"{redis_prefix}h:1", mapping={"name": "Ada", "tier": "gold"})
    redis_client.set(f"{redis_prefix}h:9", "not a hash")  # another type: an error, its own
    c = RedisConnector(redis_url, redis_prefix + "h:{id}", value_format="hash")
    assert (await _both(c, [("1",), ("2",)])) == [
        [{"name": "Ada", "tier": "gold", "id": "1"}],
        [],
    ]
    fn = c.async_lookup_function()
    await fn.open()
    try:
        ok, wrong = await fn.async_lookup_batch([("1",), ("9",)])
    finally:
        await fn.close()
    assert list(ok) == [{"name": "Ada", "tier": "gold", "id": "1"}]
    assert isinstance(wrong, DataFormatError)  # for that key only
    assert [r async for r in c.scan()] == [{"name": "Ada", "tier": "gold", "id": "1"}]


async def test_json_list_multi_row_and_composite_key(
    redis_url: str, redis_prefix: str, redis_client: redis.Redis
) -> None:
    rows = [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}]
    redis_client.set(f"{redis_prefix}o:7:EU", json.dumps(rows))
    redis_client.set(f"{redis_prefix}o:7:US", json.dumps([]))
    c = RedisConnector(
        redis_url, redis_prefix + "o:{cid}:{region}", ["cid", "region"], value_format="json_list"
    )
    result = await _both(c, [(7, "EU"), (7, "US"), (8, "EU"), (7, None)])
    assert result == [[{**r, "cid": 7, "region": "EU"} for r in rows], [], [], []]


async def test_bad_values_are_data_format_errors(
    redis_url: str, redis_prefix: str, redis_client: redis.Redis
) -> None:
    redis_client.set(f"{redis_prefix}b:1", "{not json")
    redis_client.set(f"{redis_prefix}b:2", json.dumps([{"a": 1}]))
    redis_client.set(f"{redis_prefix}b:3", json.dumps({"a": 3}))
    c = RedisConnector(redis_url, redis_prefix + "b:{id}")
    with pytest.raises(DataFormatError, match="does not hold JSON"):
        await blocking(c.lookup_function().lookup, (1,))
    fn = c.async_lookup_function()
    await fn.open()
    try:
        r1, r2, r3 = await fn.async_lookup_batch([(1,), (2,), (3,)])
    finally:
        await fn.close()
    assert isinstance(r1, DataFormatError) and isinstance(r2, DataFormatError)
    assert list(r3) == [{"a": 3, "id": 3}]


def test_options_that_fail_every_lookup_later_are_refused_on_the_driver() -> None:
    # the URL's pool size won over the connector's: 48 of 50 lookups failed "Too many
    # connections"; a client name with a space failed every lookup (CLIENT SETNAME)
    for query in ("max_connections=2", "socket_timeout=1", "client_name=x"):
        with pytest.raises(ConfigurationError, match=query.split("=")[0]) as error:
            RedisConnector(f"redis://:s3cret@127.0.0.1:6379/0?{query}", "c:{id}")
        assert error.value.option == "url" and "s3cret" not in str(error.value)
    with pytest.raises(ConfigurationError, match="client_name"):
        RedisConnector("redis://127.0.0.1:6379/0", "c:{id}", client_name="my lookup job")
    # every field of a hash is text: an INT field failed every row in the tasks
    hashed = RedisConnector("redis://127.0.0.1:6379/0", "c:{id}", value_format="hash")
    hashed.check_schema([("id", "int"), ("name", "string")])
    with pytest.raises(ConfigurationError, match="'qty' is int") as error:
        hashed.check_schema({"id": "int", "qty": "INT"})
    assert error.value.option == "value_format"


def test_configuration_errors(redis_url: str) -> None:
    with pytest.raises(ConfigurationError, match="value_format"):
        RedisConnector(redis_url, "c:{id}", value_format="xml")
    with pytest.raises(ConfigurationError, match="url"):
        RedisConnector("http://127.0.0.1:6379", "c:{id}")
    with pytest.raises(ConfigurationError, match="key_types"):
        RedisConnector(redis_url, "c:{id}", key_types={"other": int})
    with pytest.raises(ConfigurationError, match="key_types"):  # a name, not a function
        RedisConnector(redis_url, "c:{id}", key_types={"id": "int"})
    # a key column outside the template: ('10', 'EU') and ('10', 'US') would read one key
    with pytest.raises(ConfigurationError, match=r"\['region'\] would not be in the key_t"):
        RedisConnector(redis_url, "c:{id}", ["id", "region"])
    with pytest.raises(ConfigurationError, match="distinct column names"):
        RedisConnector(redis_url, "c:{id}", ["id", "id"])
    # a database redis-py cannot read is database 0 there: another table's keys
    for url in ("redis://127.0.0.1:6379/1x", "redis://127.0.0.1:6379/-1", "redis://h:99999"):
        with pytest.raises(ConfigurationError) as info:
            RedisConnector(url, "c:{id}")
        assert info.value.option == "url" and info.value.reason
    RedisConnector("redis://127.0.0.1:6379/3", "c:{id}")
    RedisConnector("unix:///tmp/redis.sock?db=2", "c:{id}")
    # as redis-py reads them: slashes dropped, percent-decoded; the scheme in lower case only
    RedisConnector("redis://127.0.0.1:6379/0/", "c:{id}")
    RedisConnector("redis://127.0.0.1/%31", "c:{id}")
    with pytest.raises(ConfigurationError, match="scheme 'REDIS'"):
        RedisConnector("REDIS://127.0.0.1:6379/0", "c:{id}")


async def test_full_scan_100k(redis_url: str, redis_prefix: str, redis_client: redis.Redis) -> None:
    n = 100_000
    pipe = redis_client.pipeline(transaction=False)
    for i in range(n):
        pipe.set(f"{redis_prefix}s:{i}", json.dumps({"v": i * 2}))
        if i % 10_000 == 9_999:
            pipe.execute()
    pipe.execute()
    redis_client.set(f"{redis_prefix}other:1", "{}")  # outside the template: not scanned
    c = RedisConnector(redis_url, redis_prefix + "s:{id}", key_types={"id": int}, scan_count=2000)
    scan = c.scan()
    rows = [r async for r in scan]
    assert len(rows) == n
    assert sorted(r["id"] for r in rows) == list(range(n))  # no loss, no duplicate
    assert all(r["v"] == r["id"] * 2 for r in rows)
    again = sorted([r["id"] async for r in scan])  # each pass opens its own client
    assert again == list(range(n))


async def test_scan_hash_glob_escaping_and_key_parsing(
    redis_url: str, redis_prefix: str, redis_client: redis.Redis
) -> None:
    redis_client.hset(f"{redis_prefix}[x]*:a:1", mapping={"f": "1"})
    redis_client.hset(f"{redis_prefix}[x]*:b:2", mapping={"f": "2", "g": "x"})
    redis_client.hset(f"{redis_prefix}[y]*:b:2", mapping={"f": "no"})  # literal must match
    c = RedisConnector(
        redis_url,
        redis_prefix + "[x]*:{g}:{n}",
        ["g", "n"],
        value_format="hash",
        key_types={"n": int},
    )
    rows = sorted([r async for r in c.scan()], key=lambda r: r["n"])
    assert rows == [{"f": "1", "g": "a", "n": 1}, {"f": "2", "g": "b", "n": 2}]  # the key wins


async def test_scan_keeps_only_the_names_a_lookup_of_the_key_reads(
    redis_url: str, redis_prefix: str, redis_client: redis.Redis
) -> None:
    # int('007') == int('+7') == int(' 7') == 7, but a lookup of 7 reads "...:7": the other
    # spellings would give key 7 (and 10, 3) rows no point lookup returns.
    spellings = ["7", "007", "+7", " 7", "1_0", "\u0663", "-0", "7.0"]
    for name in spellings:
        redis_client.set(f"{redis_prefix}sp:{name}", json.dumps({"name": name}))
    redis_client.set(f"{redis_prefix}fp:7.0", json.dumps({"name": "7.0"}))
    redis_client.set(f"{redis_prefix}fp:7", json.dumps({"name": "7"}))
    redis_client.set(f"{redis_prefix}fp:-0.0", json.dumps({"name": "-0.0"}))
    ints = RedisConnector(redis_url, redis_prefix + "sp:{id}", key_types={"id": int})
    assert [r async for r in ints.scan()] == [{"name": "7", "id": 7}]
    floats = RedisConnector(redis_url, redis_prefix + "fp:{x}", key_types={"x": float})
    assert [r async for r in floats.scan()] == [{"name": "7.0", "x": 7.0}]
    fn = ints.async_lookup_function()
    await fn.open()
    try:  # the same answer as a point lookup
        assert await fn.async_lookup((7,)) == [{"name": "7", "id": 7}]
        assert await fn.async_lookup((10,)) == []
    finally:
        await fn.close()


async def test_a_scan_skips_another_table_s_binary_value_under_the_prefix(
    redis_url: str, redis_prefix: str, redis_client: redis.Redis
) -> None:
    # the value was decoded (and its error raised) before the name was found not to be ours:
    # a PNG under "...:1:avatar" failed every FULL load of "...:{id}" with int ids
    redis_client.set(f"{redis_prefix}bin:1", json.dumps({"v": 1}))
    redis_client.set(f"{redis_prefix}bin:1:avatar", b"\x89PNG\r\n\x1a\n\x00")
    c = RedisConnector(redis_url, redis_prefix + "bin:{id}", key_types={"id": int})
    assert [r async for r in c.scan()] == [{"v": 1, "id": 1}]
    redis_client.set(f"{redis_prefix}bin:2", b"\xff\xfe")  # ours, not text: its key fails
    scanned = [r async for r in c.scan()]
    failed = [r for r in scanned if isinstance(r, FailedKey)]
    assert [dict(r) for r in failed] == [{"id": 2}] and "bin:2" in str(failed[0].error)


async def test_restart_mid_run_recovers_without_loss_or_duplicates(
    redis_url: str, redis_prefix: str, redis_client: redis.Redis
) -> None:
    """The server goes away mid-wave (connections cut, refused for a while) behind a proxy;
    batched and point lookups recover through the failure retry with every row exactly once."""
    n, batch = 4000, 50
    redis_client.mset({f"{redis_prefix}r:{i}": json.dumps({"v": i}) for i in range(n)})
    retry = RetryRecorder(max_retries=20)
    with TcpProxy("127.0.0.1", 6379) as proxy:
        c = RedisConnector(
            f"redis://127.0.0.1:{proxy.port}/15", redis_prefix + "r:{id}", max_connections=8
        )
        fn = c.async_lookup_function()
        await fn.open()
        try:
            results = await lookups_across_restart(
                fn, retry, lambda: proxy.restart(0.3), n, batch, point_every=100, settle=0.01
            )
        finally:
            await fn.close()
    assert any(isinstance(e, TransientError) for e in retry.errors), "restart must be seen"
    assert sorted(results) == list(range(n))
    assert all(results[i] == [{"v": i, "id": i}] for i in range(n))


def test_killed_connections_are_replaced(
    redis_url: str, redis_prefix: str, redis_client: redis.Redis
) -> None:
    """CLIENT KILL on our own (named) connections: the next lookup runs on a new connection."""
    redis_client.set(f"{redis_prefix}q:1", json.dumps({"v": 1}))
    name = f"alt-test-{uuid.uuid4().hex[:8]}"
    c = RedisConnector(redis_url, redis_prefix + "q:{id}", client_name=name)
    fn = c.lookup_function()
    fn.open()
    retry = RetryRecorder(max_retries=3)
    try:
        assert list(fn.lookup((1,))) == [{"v": 1, "id": 1}]
        assert kill_redis_clients(redis_url, name) == 1
        assert list(retry.call(lambda: fn.lookup((1,)))) == [{"v": 1, "id": 1}]
        assert kill_redis_clients(redis_url, name) == 1  # a fresh connection served it
    finally:
        fn.close()


def test_server_down_is_transient_then_recovers(
    redis_prefix: str, redis_client: redis.Redis
) -> None:
    redis_client.set(f"{redis_prefix}d:1", json.dumps({"v": 1}))
    with TcpProxy("127.0.0.1", 6379) as proxy:
        c = RedisConnector(f"redis://127.0.0.1:{proxy.port}/15", redis_prefix + "d:{id}")
        fn = c.lookup_function()
        fn.open()
        try:
            assert list(fn.lookup((1,))) == [{"v": 1, "id": 1}]
            proxy._call(proxy._stop())  # down, no restart yet
            with pytest.raises(TransientError) as info:
                fn.lookup((1,))
            assert isinstance(info.value.__cause__, (redis.exceptions.ConnectionError, OSError))
            proxy._call(proxy._listen())
            assert list(fn.lookup((1,))) == [{"v": 1, "id": 1}]
        finally:
            fn.close()


async def test_password_never_shown(redis_prefix: str, caplog: pytest.LogCaptureFixture) -> None:
    secret = "s3cr3t-Redis-pw"
    url = f"redis://alice:{secret}@127.0.0.1:6379/15"
    c = RedisConnector(url, redis_prefix + "c:{id}")
    caplog.set_level(logging.DEBUG)
    texts = [repr(c), repr(pickle.loads(pickle.dumps(c))), repr(c.scan())]
    errors: list[BaseException] = []
    with pytest.raises(redis.exceptions.RedisError) as info:
        await blocking(c.lookup_function().lookup, (1,))
    errors.append(info.value)
    fn = c.async_lookup_function()
    with pytest.raises(redis.exceptions.RedisError) as ainfo:
        await fn.async_lookup((1,))
    await fn.close()
    errors.append(ainfo.value)
    refused = RedisConnector(f"redis://:{secret}@127.0.0.1:9/0", "c:{id}", socket_timeout=2)
    with pytest.raises(TransientError) as rinfo:
        await blocking(refused.lookup_function().lookup, (1,))
    errors.append(rinfo.value)
    for error in errors:
        while error is not None:
            texts += [str(error), repr(error)]
            error = error.__cause__ or error.__context__
    texts += [r.getMessage() for r in caplog.records]
    assert "***" in texts[0]
    for text in texts:
        assert secret not in text, text


async def test_more_concurrent_calls_than_connections_wait_for_one(
    redis_url: str, redis_prefix: str, redis_client: redis.Redis
) -> None:
    redis_client.mset({f"{redis_prefix}p:{i}": json.dumps({"v": i}) for i in range(200)})
    c = RedisConnector(redis_url, redis_prefix + "p:{id}", max_connections=2)
    fn = c.async_lookup_function()
    await fn.open()
    try:
        found = await asyncio.gather(*(fn.async_lookup((i,)) for i in range(200)))
        batches = await asyncio.gather(
            *(fn.async_lookup_batch([(i,), (i + 1,)]) for i in range(0, 200, 2))
        )
    finally:
        await fn.close()
    assert [list(r) for r in found] == [[{"v": i, "id": i}] for i in range(200)]
    assert [list(r) for b in batches for r in b] == [[{"v": i, "id": i}] for i in range(200)]


async def test_pool_timeout_bounds_the_wait_for_a_connection(
    redis_prefix: str, redis_client: redis.Redis
) -> None:
    redis_client.set(f"{redis_prefix}p:1", json.dumps({"v": 1}))
    with TcpProxy("127.0.0.1", 6379) as proxy:
        c = RedisConnector(
            f"redis://127.0.0.1:{proxy.port}/15",
            redis_prefix + "p:{id}",
            max_connections=1,
            pool_timeout=0.2,
        )
        fn = c.async_lookup_function()
        await fn.open()
        try:
            assert list(await fn.async_lookup((1,))) == [{"v": 1, "id": 1}]
            proxy.blackhole(True)
            stuck = asyncio.ensure_future(fn.async_lookup((1,)))  # holds the only connection
            await asyncio.sleep(0.05)
            started = time.monotonic()
            with pytest.raises(TransientError, match="pool_timeout"):
                await fn.async_lookup((1,))
            assert time.monotonic() - started < 1.0
            proxy.blackhole(False)
            assert list(await stuck) == [{"v": 1, "id": 1}]
        finally:
            await fn.close()


# -- keys: unambiguous, typed from the key, -0.0, odd values -----------------------------------


async def test_composite_keys_that_would_collide_are_refused(
    redis_url: str, redis_prefix: str, redis_client: redis.Redis
) -> None:
    """('x:y', 'z') and ('x', 'y:z') used to be one Redis key under 'c:{a}:{b}': the first is
    now an error for that key alone, the second reads its own row, and a scan agrees."""
    redis_client.set(f"{redis_prefix}c:x:y:z", json.dumps({"v": "row of ('x', 'y:z')"}))
    c = RedisConnector(redis_url, redis_prefix + "c:{a}:{b}", ["a", "b"])
    with pytest.raises(DataFormatError, match=r"':'.*separator"):
        c.redis_key(("x:y", "z"))
    with pytest.raises(DataFormatError, match="'x:y'"):
        await blocking(c.lookup_function().lookup, ("x:y", "z"))
    fn = c.async_lookup_function()
    await fn.open()
    try:
        with pytest.raises(DataFormatError):
            await fn.async_lookup(("x:y", "z"))
        refused, found, absent = await fn.async_lookup_batch(
            [("x:y", "z"), ("x", "y:z"), ("q", "r")]
        )
    finally:
        await fn.close()
    assert isinstance(refused, DataFormatError)
    assert list(found) == [{"v": "row of ('x', 'y:z')", "a": "x", "b": "y:z"}]
    assert list(absent) == []
    assert [r async for r in c.scan()] == [{"v": "row of ('x', 'y:z')", "a": "x", "b": "y:z"}]
    with pytest.raises(ConfigurationError, match=r"key_template.*adjacent"):
        RedisConnector(redis_url, redis_prefix + "n:{a}{b}", ["a", "b"])  # (1, 23) vs (12, 3)


async def test_rows_take_their_key_columns_from_the_key(
    redis_url: str, redis_prefix: str, redis_client: redis.Redis
) -> None:
    """A hash (or JSON) value holding the key column as a string, or a different one: point,
    batch and FULL-cache lookups all give the key's typed value, never the value's."""
    from asyncio_lookup.lookup.chain import LookupChain
    from asyncio_lookup.lookup.options import LookupOptions

    redis_client.hset(f"{redis_prefix}h:1", mapping={"id": "1", "name": "Ada"})
    redis_client.hset(f"{redis_prefix}h:2", mapping={"id": "7", "name": "Grace"})  # disagrees
    redis_client.set(f"{redis_prefix}j:1", json.dumps({"id": "1", "name": "Ada"}))
    redis_client.set(f"{redis_prefix}j:2", json.dumps({"id": 7, "name": "Grace"}))
    expected = [[{"id": 1, "name": "Ada"}], [{"id": 2, "name": "Grace"}], []]
    for fmt, letter in (("hash", "h"), ("json", "j")):
        c = RedisConnector(
            redis_url, f"{redis_prefix}{letter}:{{id}}", value_format=fmt, key_types={"id": int}
        )
        assert await _both(c, [(1,), (2,), (7,)]) == expected
        assert sorted([r async for r in c.scan()], key=lambda r: r["id"]) == [
            {"id": 1, "name": "Ada"},
            {"id": 2, "name": "Grace"},
        ]
        options = LookupOptions.from_dict(
            {"lookup.cache": "FULL", "lookup.full-cache.periodic-reload.interval": "1h"}
        )
        chain = LookupChain.create(c, options, prefer_async=True, key_columns=["id"], name="T")
        await chain.open()
        try:
            assert [list(await chain.async_lookup((k,))) for k in (1, 2, 7)] == expected
        finally:
            await chain.close()


@pytest.mark.parametrize(
    ("names", "convert", "keys"),
    [
        # names whose converted values are equal in Python: 7 == 7.0, 1.5 == 1.50, one instant
        # (float for an INT key: the name 7 converts to 7.0, whose name is 7.0: not scanned,
        # a miss where a point lookup of 7 reads it; never the row of 7.0)
        (["7", "7.0"], float, [(7.0,), (8,)]),
        (["1.5", "1.50", "1E+1"], Decimal, [(Decimal("1.50"),), (Decimal("10.00"),)]),
        (
            ["2024-01-01 00:00:00+00:00", "2024-01-01 01:00:00+01:00"],
            datetime.fromisoformat,
            [(datetime(2024, 1, 1, tzinfo=UTC),), (datetime(2024, 1, 1, 1, tzinfo=UTC),)],
        ),
        (["7", "007"], None, [(7,), ("7",), ("007",)]),  # no key_types: names as text
    ],
)
async def test_a_full_cache_joins_what_point_lookups_join(
    redis_url: str,
    redis_prefix: str,
    redis_client: redis.Redis,
    names: list[str],
    convert: Any,
    keys: list[tuple[Any, ...]],
) -> None:
    """FULL indexed rows by their converted key values: a lookup of 7 found the row named
    ``7.0`` (7 == 7.0), of 1.50 both ``1.5`` and ``1.50``; a point lookup reads one name."""
    from asyncio_lookup.lookup.chain import LookupChain
    from asyncio_lookup.lookup.options import LookupOptions

    for name in names:
        redis_client.set(f"{redis_prefix}k:{name}", json.dumps({"v": f"under {name}"}))
    c = RedisConnector(
        redis_url, redis_prefix + "k:{k}", key_types=None if convert is None else {"k": convert}
    )
    points = await _both(c, keys)
    assert any(points)
    if convert is float:
        assert await _both(c, [(7,)]) == [[{"v": "under 7", "k": 7}]]
    options = LookupOptions.from_dict(
        {"lookup.cache": "FULL", "lookup.full-cache.periodic-reload.interval": "1h"}
    )
    chain = LookupChain.create(c, options, prefer_async=True, key_columns=["k"], name="T")
    await chain.open()
    try:
        assert [list(await chain.async_lookup(k)) for k in keys] == points
        if convert is float:
            assert list(await chain.async_lookup((7,))) == []
    finally:
        await chain.close()


@pytest.mark.parametrize(
    ("declared", "convert", "refused"),
    [
        ("int", int, False),
        ("int", float, True),  # '7' read as 7.0, whose name is '7.0'
        ("decimal(10,2)", Decimal, False),
        ("decimal(10,2)", lambda t: Decimal(t).normalize(), True),  # '7.00' read as 7
        ("timestamp", datetime.fromisoformat, False),
        ("date", datetime.fromisoformat, True),  # a datetime, not a date
        ("double", float, False),
        ("bigint", lambda t: 1 / 0, True),
        ("string", str, False),
        ("boolean", bool, True),  # 'False' read as True
        ("decimal(38,30)", Decimal, False),  # beyond the decimal context's 28 digits
        ("int", lambda t: abs(int(t)), True),  # fine for 7, not for -7
    ],
)
def test_a_converter_that_does_not_read_back_a_lookups_name_is_refused_for_full(
    declared: str, convert: Any, refused: bool
) -> None:
    c = RedisConnector("redis://127.0.0.1:6379/0", "p:{k}", key_types={"k": convert})
    if not refused:
        c.check_full_cache([("k", declared), ("v", "string")])
        return
    with pytest.raises(
        ConfigurationError, match=rf"'key_types'.*{re.escape(declared)}.*FULL cache"
    ):
        c.check_full_cache([("k", declared), ("v", "string")])


async def test_scan_skips_other_tables_keys_sharing_the_prefix(
    redis_url: str, redis_prefix: str, redis_client: redis.Redis
) -> None:
    redis_client.set(f"{redis_prefix}cu:1", json.dumps({"name": "Ada"}))
    redis_client.set(f"{redis_prefix}cu:1:orders", json.dumps({"name": "orders of 1"}))
    redis_client.hset(f"{redis_prefix}cu:2", mapping={"name": "a hash"})  # another type
    c = RedisConnector(redis_url, redis_prefix + "cu:{id}", key_types={"id": int})
    assert [r async for r in c.scan()] == [{"name": "Ada", "id": 1}]


async def test_negative_zero_and_zero_are_one_key(
    redis_url: str, redis_prefix: str, redis_client: redis.Redis
) -> None:
    redis_client.set(f"{redis_prefix}z:0.0", json.dumps({"v": "zero"}))
    c = RedisConnector(redis_url, redis_prefix + "z:{x}")
    assert c.redis_key((-0.0,)) == c.redis_key((0.0,)) == f"{redis_prefix}z:0.0"
    rows = await _both(c, [(-0.0,), (0.0,)])
    assert [[r["v"] for r in found] for found in rows] == [["zero"], ["zero"]]


async def test_a_key_of_another_type_is_an_error_where_redis_says_so(
    redis_url: str, redis_prefix: str, redis_client: redis.Redis
) -> None:
    """GET and a hash pipeline answer WRONGTYPE: an error naming the key (value_format is
    likely wrong). MGET answers such a key as missing, so a string batch missed it (the key
    failed alone and missed in company); it is asked about, and fails there too. A scan skips
    it (another table's key under the prefix)."""
    redis_client.hset(f"{redis_prefix}o:h", mapping={"v": "hash"})
    redis_client.set(f"{redis_prefix}o:1", json.dumps({"v": 1}))
    c = RedisConnector(redis_url, redis_prefix + "o:{id}")
    fn = c.async_lookup_function()
    await fn.open()
    try:
        with pytest.raises(DataFormatError, match=rf"{redis_prefix}o:h.*value_format='json'"):
            await fn.async_lookup(("h",))
        wrong, found, missing = await fn.async_lookup_batch([("h",), ("1",), ("none",)])
        assert isinstance(wrong, DataFormatError) and f"{redis_prefix}o:h" in str(wrong)
        assert list(found) == [{"v": 1, "id": "1"}] and list(missing) == []
    finally:
        await fn.close()
    with pytest.raises(DataFormatError, match="value_format='json'"):
        await blocking(c.lookup_function().lookup, ("h",))
    assert [r async for r in c.scan()] == [{"v": 1, "id": "1"}]
    hashes = RedisConnector(redis_url, redis_prefix + "o:{id}", value_format="hash")
    fn = hashes.async_lookup_function()
    await fn.open()
    try:
        wrong, right = await fn.async_lookup_batch([("1",), ("h",)])
        assert isinstance(wrong, DataFormatError) and "value_format='hash'" in str(wrong)
        assert list(right) == [{"v": "hash", "id": "h"}]
    finally:
        await fn.close()


async def test_value_that_is_not_utf8_fails_only_its_key(
    redis_url: str, redis_prefix: str, redis_client: redis.Redis
) -> None:
    raw = redis.Redis.from_url(redis_url)
    try:
        raw.set(f"{redis_prefix}u:bin", b'{"v": "\xff\xfe"}')
        raw.hset(f"{redis_prefix}hu:bin", mapping={"v": b"\xff"})
    finally:
        raw.close()
    redis_client.set(f"{redis_prefix}u:1", json.dumps({"v": 1}))
    redis_client.hset(f"{redis_prefix}hu:1", mapping={"v": "1"})
    for template, fmt, one in (("u:{id}", "json", 1), ("hu:{id}", "hash", "1")):
        c = RedisConnector(redis_url, redis_prefix + template, value_format=fmt, max_connections=1)
        key = f"{redis_prefix}{template.split(':')[0]}:bin"
        with pytest.raises(DataFormatError, match=f"{key!r}.*UTF-8"):
            await blocking(c.lookup_function().lookup, ("bin",))
        fn = c.async_lookup_function()
        await fn.open()
        try:
            with pytest.raises(DataFormatError, match=f"{key!r}.*UTF-8"):
                await fn.async_lookup(("bin",))
            bad, good = await fn.async_lookup_batch([("bin",), ("1",)])
            assert isinstance(bad, DataFormatError) and repr(key) in str(bad)
            assert list(good) == [{"v": one, "id": "1"}]
            assert [list(r) for r in await fn.async_lookup_batch([("1",)])] == [
                [{"v": one, "id": "1"}]
            ]  # the pool still answers each key with its own value
        finally:
            await fn.close()
        # A scan gives the key's error in its place: a FULL cache fails that key's lookups
        # alone (one bad value failed every lookup of the table, at each reload).
        scanned = [r async for r in c.scan()]
        failed = [r for r in scanned if isinstance(r, FailedKey)]
        assert [dict(r) for r in failed] == [{"id": "bin"}]
        assert isinstance(failed[0].error, DataFormatError) and repr(key) in str(failed[0].error)
        assert [r for r in scanned if not isinstance(r, FailedKey)] == [{"v": one, "id": "1"}]
        await _full_cache_fails_only(c, ("bin",), ("1",), [{"v": one, "id": "1"}], key)


async def _full_cache_fails_only(
    c: RedisConnector, bad: tuple[Any, ...], good: tuple[Any, ...], rows: Any, named: str
) -> None:
    from asyncio_lookup.lookup.chain import LookupChain
    from asyncio_lookup.lookup.options import LookupOptions

    options = LookupOptions.from_dict(
        {"lookup.cache": "FULL", "lookup.full-cache.periodic-reload.interval": "1h"}
    )
    chain = LookupChain.create(c, options, prefer_async=True, key_columns=["id"], name="T")
    await chain.open()
    try:
        assert list(await chain.async_lookup(good)) == rows
        for _ in range(2):  # each lookup raises afresh
            with pytest.raises(DataFormatError, match=re.escape(repr(named))):
                await chain.async_lookup(bad)
    finally:
        await chain.close()


async def test_a_value_that_is_not_json_fails_only_its_key_in_a_full_cache(
    redis_url: str, redis_prefix: str, redis_client: redis.Redis
) -> None:
    redis_client.set(f"{redis_prefix}j:1", json.dumps({"v": 1}))
    redis_client.set(f"{redis_prefix}j:bad", "{not json")
    c = RedisConnector(redis_url, redis_prefix + "j:{id}")
    with pytest.raises(DataFormatError, match="JSON"):
        await blocking(c.lookup_function().lookup, ("bad",))
    await _full_cache_fails_only(c, ("bad",), ("1",), [{"v": 1, "id": "1"}], f"{redis_prefix}j:bad")


async def test_scan_skips_key_names_that_are_not_utf8(
    redis_url: str, redis_prefix: str, redis_client: redis.Redis
) -> None:
    raw = redis.Redis.from_url(redis_url)
    try:
        raw.set(redis_prefix.encode() + b"k:\xff", b"{}")
    finally:
        raw.close()
    redis_client.set(f"{redis_prefix}k:1", json.dumps({"v": 1}))
    c = RedisConnector(redis_url, redis_prefix + "k:{id}")
    assert [r async for r in c.scan()] == [{"v": 1, "id": "1"}]


def test_cache_identity(redis_url: str) -> None:
    def identity(
        url: str = "redis://127.0.0.1:6379/15", template: str = "c:{id}", **kw: object
    ) -> str:
        return RedisConnector(url, template, **kw).cache_identity  # type: ignore[arg-type]

    base = identity()
    assert base == identity() == identity(max_connections=3, scan_count=10, client_name="x")
    assert (
        base
        == pickle.loads(
            pickle.dumps(RedisConnector("redis://127.0.0.1:6379/15", "c:{id}"))
        ).cache_identity
    )
    assert "0x" not in base
    others = [
        identity(template="d:{id}"),
        identity("redis://127.0.0.1:6379/14"),
        identity("redis://127.0.0.1:6380/15"),
        identity(value_format="hash"),
        identity(key_types={"id": int}),
        identity(key_types={"id": float}),
        identity(template="c:{a}:{b}", key_columns=["a", "b"]),
        identity(template="c:{a}:{b}", key_columns=["b", "a"]),
        identity("redis://:pw1@127.0.0.1:6379/15"),
        identity("redis://:pw2@127.0.0.1:6379/15"),
    ]
    assert len({base, *others}) == len(others) + 1
    assert identity("redis://127.0.0.1:6379") == identity("redis://127.0.0.1:6379/0")
    for text in (
        identity("redis://:s3cr3t-pw@127.0.0.1:6379/15"),
        identity("redis://127.0.0.1/1?password=s3cr3t-pw"),
    ):
        assert "s3cr3t" not in text and "sha256:" in text


@pytest.mark.parametrize(
    "refusal",
    [
        b"-MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        b"-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN.",
        b"-TRYAGAIN Multiple keys request during rehashing of slot",
        b"-CLUSTERDOWN The cluster is down",
    ],
)
@pytest.mark.parametrize("value_format", ["json", "hash"])
async def test_a_failover_s_refusal_is_retried(refusal: bytes, value_format: str) -> None:
    """A replica resyncing, a long script, a slot migrating, a cluster electing: Redis asks
    the client to try again. They failed the row at once (attempts=1)."""
    from asyncio_lookup.lookup.chain import LookupChain
    from asyncio_lookup.lookup.options import LookupOptions

    replies = [refusal + b"\r\n"]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():  # RESP: *<n>, then $<len> and the argument
            parts = []
            for _ in range(int(line[1:])):
                size = int((await reader.readline())[1:])
                parts.append((await reader.readexactly(size + 2))[:-2])
            if parts[0].upper() == b"GET":
                body = json.dumps({"v": "row"}).encode()
                writer.write(replies.pop(0) if replies else b"$%d\r\n%s\r\n" % (len(body), body))
            elif parts[0].upper() == b"MGET":  # a json batch
                body = json.dumps({"v": "row"}).encode()
                values = b"".join(b"$%d\r\n%s\r\n" % (len(body), body) for _ in parts[1:])
                writer.write(replies.pop(0) if replies else b"*%d\r\n" % (len(parts) - 1) + values)
            elif parts[0].upper() == b"HGETALL":  # a hash batch: a pipeline's answers
                hashed = b"*2\r\n$1\r\nv\r\n$3\r\nrow\r\n"
                writer.write(replies.pop(0) if replies else hashed)
            elif parts[0].upper() == b"HELLO":
                writer.write(b"-ERR unknown command 'HELLO'\r\n")
            else:
                writer.write(b"+OK\r\n")
            await writer.drain()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    c = RedisConnector(f"redis://127.0.0.1:{port}/0", "k:{id}", value_format=value_format)
    options = LookupOptions.from_dict({"lookup.batch.max-size": "4"})  # hash: a pipeline
    chain = LookupChain.create(
        c, options, prefer_async=True, key_columns=("id",), async_sleep=_no_wait
    )
    await chain.open()
    try:
        found = await asyncio.gather(*(chain.async_lookup((k,)) for k in (7, 8)))
        assert [list(rows) for rows in found] == [[{"v": "row", "id": k}] for k in (7, 8)]
    finally:
        await chain.close()
        server.close()
    assert chain.metrics.snapshot()["numFailureRetries"] >= 1 and not replies


async def _no_wait(seconds: float) -> None:
    pass


def test_a_full_cache_key_needs_every_column_of_the_template() -> None:
    """A FULL cache over part of a composite key failed its load with a bare KeyError."""
    c = RedisConnector("redis://127.0.0.1:6379/0", "p:{a}:{b}")
    assert c.full_cache_key({"b": 1, "a": "x"}) == "p:x:1"
    with pytest.raises(ConfigurationError, match=r"'key_columns'.*needs \['b'\].*\['a', 'b'\]"):
        c.full_cache_key({"a": "x"})
