"""The shared cache level (L2) against the machine's Redis: exact round trips, unambiguous
keys, per-batch round trips, the stampede lease, failure isolation and invalidation.

Two chains with the same namespace stand for two processes (two executors, or two jobs)."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Collection, Iterator, Sequence
from datetime import date, datetime, timedelta, timezone
from datetime import time as dtime
from decimal import Decimal
from typing import Any

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncio_lookup.lookup.chain import LookupChain
from asyncio_lookup.lookup.functions import AsyncLookupFunction, Key, Row
from asyncio_lookup.lookup.l2.codec import (
    EntryMismatch,
    NotEncodable,
    StaleEntry,
    decode_entry,
    encode_entry,
    encode_key,
)
from asyncio_lookup.lookup.l2.settings import namespace_pattern
from asyncio_lookup.lookup.l2.store import ReadResult, SharedStore
from asyncio_lookup.lookup.l2.stores import open_admin, open_store
from asyncio_lookup.lookup.options import LookupOptions
from tests.lookup.support import AsyncFn, BatchFn, Source, Table

# -- the codec ---------------------------------------------------------------------------------

VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    -(2**80),
    1.5,
    -0.0,
    float("inf"),
    "",
    'a:b\n"]',
    "ünïcødé ✓ 🚀",
    "\ud800",
    Decimal("1.20"),
    Decimal("-0.000001"),
    date(2024, 2, 29),
    datetime(2024, 1, 1, 12, 30, 15, 123456),
    datetime(2024, 1, 1, 12, 30, tzinfo=timezone(timedelta(hours=5, minutes=30))),
    dtime(23, 59, 59, 999999),
    timedelta(days=-1, seconds=5, microseconds=7),
    b"\x00\xff",
    [1, "1", [None, []]],
    (1, 2),
    {"nested": {"a": [Decimal("1"), {"b": None}]}},
    {1: "int key", "1": "str key"},
    # what asyncpg returns for uuid, inet and cidr columns
    uuid.UUID("12345678-1234-5678-1234-567812345678"),
    ipaddress.ip_address("10.0.0.1"),
    ipaddress.ip_address("fe80::1%eth0"),
    ipaddress.ip_interface("10.0.0.1/24"),
    ipaddress.ip_network("2001:db8::/32"),
]


def test_values_round_trip_exactly() -> None:
    rows = [{"v": v} for v in VALUES] + [{"all": list(VALUES)}]
    data = encode_entry(b"ns", b'["x"]', rows)
    back = decode_entry(b"ns", b'["x"]', data)
    assert back == rows
    for row, got in zip(rows, back, strict=True):
        assert [type(v) for v in row.values()] == [type(v) for v in got.values()]
    nan = decode_entry(b"ns", b"k", encode_entry(b"ns", b"k", [{"v": float("nan")}]))
    assert nan[0]["v"] != nan[0]["v"]


def test_a_missing_key_is_a_marker_distinct_from_absence_and_from_a_null_row() -> None:
    assert decode_entry(b"ns", b"k", encode_entry(b"ns", b"k", [])) == []
    assert decode_entry(b"ns", b"k", encode_entry(b"ns", b"k", [{"v": None}])) == [{"v": None}]
    assert decode_entry(b"ns", b"k", encode_entry(b"ns", b"k", [{}])) == [{}]


KEYS: list[Key] = [
    (1,),
    ("1",),
    (1.0,),
    (True,),
    (Decimal("1"),),
    (None,),
    ("None",),
    ("",),
    ("a:b", "c"),
    ("a", "b:c"),
    ('a","b',),
    ("a", "b"),
    ("a\nb",),
    ("ü",),
    ("u\u0308",),
    (1, None),
    (None, 1),
    ((1, 2),),
    (date(2024, 1, 1),),
    ("2024-01-01",),
    (b"1",),
]


def test_key_encoding_is_unambiguous() -> None:
    encoded = [encode_key(k) for k in KEYS]
    assert len(set(encoded)) == len(KEYS)


def test_an_entry_of_another_key_namespace_or_format_is_never_a_value() -> None:
    data = encode_entry(b"ns", encode_key((1,)), [{"v": 1}])
    with pytest.raises(EntryMismatch):
        decode_entry(b"ns", encode_key(("1",)), data)
    with pytest.raises(EntryMismatch):
        decode_entry(b"other", encode_key((1,)), data)
    with pytest.raises(EntryMismatch):
        decode_entry(b"ns", encode_key((1,)), b"alk0" + data[4:])
    with pytest.raises(EntryMismatch):
        decode_entry(b"ns", encode_key((1,)), data[:-3])
    # damaged bodies behind a right header: a decimal's text, nesting deeper than Python's stack
    head = data[: data.rindex(b"\n") + 1]
    for body in (b'[{"p":["D","12,5"]}]', b'[{"p":' + b'["L",' * 3000 + b"1" + b"]" * 3000 + b"}]"):
        with pytest.raises(EntryMismatch):
            decode_entry(b"ns", encode_key((1,)), head + body)


def test_values_that_cannot_round_trip_are_refused() -> None:
    class Mine(int):
        pass

    with pytest.raises(NotEncodable):
        encode_entry(b"ns", b"k", [{"v": Mine(1)}])
    with pytest.raises(NotEncodable):
        encode_entry(b"ns", b"k", [{"v": object()}])
    with pytest.raises(NotEncodable):  # json refuses ints over 4,300 digits
        encode_entry(b"ns", b"k", [{"v": 10**5000}])
    with pytest.raises(NotEncodable):
        encode_key((10**5000,))


def test_a_row_with_other_than_text_column_names_is_not_encodable() -> None:
    # it was written and then never read back (a damaged entry on every read)
    with pytest.raises(NotEncodable, match="text column names"):
        encode_entry(b"ns", b"k", [{1: "a"}])


def test_an_entry_older_than_the_readers_ttl_is_stale() -> None:
    data = encode_entry(b"ns", b"k", [{"v": 1}], written_ms=int(time.time() * 1000) - 5_000)
    assert decode_entry(b"ns", b"k", data, max_age_ms=60_000) == [{"v": 1}]
    assert decode_entry(b"ns", b"k", data) == [{"v": 1}]
    with pytest.raises(StaleEntry):
        decode_entry(b"ns", b"k", data, max_age_ms=1_000)


# -- the tier against Redis --------------------------------------------------------------------


@pytest.fixture
def namespace(redis_url: str) -> Iterator[str]:
    name = "test-" + uuid.uuid4().hex[:12]
    yield name
    admin = open_admin(redis_url, 1.0)
    admin.clear(namespace_pattern(name))
    admin.close()


class CountingStore:
    """A real store that counts its round trips (and can be made slow)."""

    def __init__(self, inner: SharedStore) -> None:
        self.inner = inner
        self.reads: list[int] = []
        self.writes: list[int] = []
        self.delay = 0.0

    async def connect(self) -> None:
        await self.inner.connect()

    async def read(self, keys: Sequence[bytes], lease_ms: int, token: bytes) -> list[ReadResult]:
        self.reads.append(len(keys))
        if self.delay:
            await asyncio.sleep(self.delay)
        return await self.inner.read(keys, lease_ms, token)

    async def write(
        self,
        entries: Sequence[tuple[bytes, bytes]],
        ttl_ms: int,
        release: Sequence[bytes],
        token: bytes,
    ) -> int:
        self.writes.append(len(entries))
        return await self.inner.write(entries, ttl_ms, release, token)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _options(url: str, namespace: str, **extra: str) -> LookupOptions:
    return LookupOptions.from_dict(
        {
            "lookup.cache": "PARTIAL",
            "lookup.partial-cache.max-rows": "10000",
            "lookup.shared-cache.url": url,
            "lookup.shared-cache.namespace": namespace,
            **extra,
        }
    )


def _chain(
    table: Table,
    options: LookupOptions,
    *,
    batch: bool = False,
    function: AsyncLookupFunction | None = None,
) -> LookupChain:
    """One process's chain over ``table`` (``function``: its lookups, else ``table``'s)."""
    fn = function or (BatchFn(table) if batch else AsyncFn(table))
    return LookupChain.create(
        Source(table, async_=fn), options, prefer_async=True, name="T", key_columns=("id",)
    )


def _counting(chain: LookupChain) -> CountingStore:
    assert chain.shared is not None
    store = CountingStore(open_store(chain.shared.settings.url, chain.shared.settings.timeout))
    chain.shared._store_factory = lambda url, timeout: store
    return store


async def test_a_second_process_reads_what_the_first_fetched(
    redis_url: str, namespace: str
) -> None:
    rows = {
        (i,): [{"id": i, "price": Decimal(f"{i}.10"), "d": date(2024, 1, 1)}] for i in range(50)
    }
    table = Table(rows)
    options = _options(redis_url, namespace)
    first, second = _chain(table, options), _chain(table, options)
    await first.open()
    await second.open()
    try:
        got = await asyncio.gather(*(first.async_lookup((i,)) for i in range(60)))
        assert got == [rows.get((i,), []) for i in range(60)]
        assert len(table.calls) == 60
        again = await asyncio.gather(*(second.async_lookup((i,)) for i in range(60)))
        assert again == got
        assert len(table.calls) == 60  # every key, found or missing, came from L2
        m = second.metrics.snapshot()
        assert (m["l2HitCount"], m["l2MissCount"], m["l1HitCount"]) == (60, 0, 0)
        assert m["loadCount"] == 0 and m["l2BytesRead"] > 0
        assert first.metrics.snapshot()["l2MissCount"] == 60
        assert first.metrics.snapshot()["l2BytesWritten"] > 0
        await second.async_lookup((1,))
        assert second.metrics.snapshot()["l1HitCount"] == 1  # the L2 hit filled L1
    finally:
        await first.close()
        await second.close()


async def test_reads_and_writes_go_per_batch(redis_url: str, namespace: str) -> None:
    table = Table({(i,): [{"id": i}] for i in range(300)})
    chain = _chain(table, _options(redis_url, namespace), batch=True)
    store = _counting(chain)
    await chain.open()
    try:
        await asyncio.gather(*(chain.async_lookup((i,)) for i in range(300)))
        assert store.reads == [300]  # one round trip for the batch's reads
        assert len(store.writes) <= 2 and sum(store.writes) == 300
        assert len(table.batches) <= 5  # the service was still called in batches
    finally:
        await chain.close()


@pytest.mark.parametrize(
    "told",
    [
        {"lookup.shared-cache.cache-missing-key": "false"},
        # unset, it follows L1's: a user who keeps misses out of L1 expects them out of L2
        {"lookup.partial-cache.cache-missing-key": "false"},
    ],
)
async def test_missing_keys_are_shared_unless_told_not_to(
    redis_url: str, namespace: str, told: dict[str, str]
) -> None:
    table = Table()
    off = _options(redis_url, namespace, **told)
    a, b = _chain(table, off), _chain(table, off)
    await a.open()
    await b.open()
    try:
        assert await a.async_lookup(("nope",)) == []
        assert await b.async_lookup(("nope",)) == []
        assert len(table.calls) == 2
    finally:
        await a.close()
        await b.close()


async def test_a_join_that_does_not_cache_misses_reads_another_joins_cached_miss_as_a_miss(
    redis_url: str, namespace: str
) -> None:
    # the key was missing when a join that caches misses looked it up; it exists now. A join
    # with cache-missing-key false must ask the service, not drop the row for up to the TTL.
    table = Table()
    caching = _chain(table, _options(redis_url, namespace))
    await caching.open()
    try:
        assert await caching.async_lookup((7,)) == []
    finally:
        await caching.close()
    table.data[(7,)] = [{"id": 7}]
    off = _chain(
        table, _options(redis_url, namespace, **{"lookup.shared-cache.cache-missing-key": "false"})
    )
    await off.open()
    try:
        assert await off.async_lookup((7,)) == [{"id": 7}]
        m = off.metrics.snapshot()
        assert (m["l2HitCount"], m["l2MissCount"]) == (0, 1)
    finally:
        await off.close()
    again = _chain(table, _options(redis_url, namespace))
    await again.open()
    try:  # the row it loaded replaced the cached miss
        assert await again.async_lookup((7,)) == [{"id": 7}]
        assert again.metrics.snapshot()["l2HitCount"] == 1
    finally:
        await again.close()


async def test_a_join_with_a_shorter_ttl_reads_older_entries_as_misses(
    redis_url: str, namespace: str
) -> None:
    table = Table({(1,): [{"id": 1, "price": 10}]})
    long_lived = _chain(table, _options(redis_url, namespace))  # 1 h
    await long_lived.open()
    try:
        await long_lived.async_lookup((1,))
    finally:
        await long_lived.close()
    await asyncio.sleep(0.3)
    table.data[(1,)] = [{"id": 1, "price": 99}]
    short = _chain(table, _options(redis_url, namespace, **{"lookup.shared-cache.ttl": "200 ms"}))
    await short.open()
    try:
        assert await short.async_lookup((1,)) == [{"id": 1, "price": 99}]
        assert short.metrics.snapshot()["l2MissCount"] == 1
    finally:
        await short.close()
    fresh = _chain(table, _options(redis_url, namespace))
    await fresh.open()
    try:  # a reader with the long TTL reads the entry the short one wrote
        assert await fresh.async_lookup((1,)) == [{"id": 1, "price": 99}]
        assert fresh.metrics.snapshot()["l2HitCount"] == 1
    finally:
        await fresh.close()


async def test_a_lease_under_a_millisecond_is_a_lease(redis_url: str, namespace: str) -> None:
    # int(0.0005 * 1000) was 0, which the read script takes as "no leases": every process
    # loaded the key
    chain = _chain(
        Table(), _options(redis_url, namespace, **{"lookup.shared-cache.lease": "500 us"})
    )
    assert chain.shared is not None
    assert chain.shared._lease_ms == 1


async def test_one_process_fetches_a_key_while_the_others_wait(
    redis_url: str, namespace: str
) -> None:
    gate = asyncio.Event()
    table = Table({("hot",): [{"id": "hot"}]})
    options = _options(redis_url, namespace)
    chains = [_chain(table, options, function=AsyncFn(table, gate)) for _ in range(4)]
    for chain in chains:
        await chain.open()
    try:
        lookups = [asyncio.ensure_future(c.async_lookup(("hot",))) for c in chains]
        await asyncio.sleep(0.05)
        gate.set()
        got = await asyncio.wait_for(asyncio.gather(*lookups), 5)
        assert got == [[{"id": "hot"}]] * 4
        assert len(table.calls) == 1
        waits = sum(c.metrics.snapshot()["l2LeaseWaitCount"] for c in chains)
        assert waits == 3
    finally:
        for chain in chains:
            await chain.close()


async def test_a_key_this_process_is_loading_shares_that_load(
    redis_url: str, namespace: str
) -> None:
    gate = asyncio.Event()
    table = Table({("k",): [{"id": "k"}]})
    chain = _chain(table, _options(redis_url, namespace), function=AsyncFn(table, gate))
    await chain.open()
    try:
        first = asyncio.ensure_future(chain.async_lookup(("k",)))
        await asyncio.sleep(0.05)  # its read is done; it is loading
        second = asyncio.ensure_future(chain.async_lookup(("k",)))
        await asyncio.sleep(0.01)
        gate.set()
        assert await first == await second == [{"id": "k"}]
        m = chain.metrics.snapshot()
        assert len(table.calls) == 1 and m["l2LeaseWaitCount"] == 0 and m["l2MissCount"] == 2
    finally:
        await chain.close()


async def test_values_too_big_or_not_exact_are_served_but_not_shared(
    redis_url: str, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    class Mine(str):
        pass

    table = Table({("big",): [{"v": "x" * 500}], ("odd",): [{"v": Mine("m")}], ("ok",): [{}]})
    options = _options(redis_url, namespace, **{"lookup.shared-cache.max-value-size": "200"})
    a, b = _chain(table, options), _chain(table, options)
    await a.open()
    await b.open()
    try:
        with caplog.at_level(logging.WARNING, logger="asyncio_lookup.shared_cache"):
            for chain in (a, b):
                assert await chain.async_lookup(("big",)) == [{"v": "x" * 500}]
                assert await chain.async_lookup(("odd",)) == [{"v": "m"}]
                assert await chain.async_lookup(("odd",)) == [{"v": "m"}]  # L1
                assert await chain.async_lookup(("ok",)) == [{}]
        assert sorted(table.calls) == [("big",), ("big",), ("odd",), ("odd",), ("ok",)]
        # one warning per process and reason: the type, the size (which was silent)
        warned = [r.getMessage() for r in caplog.records if "not shared" in r.getMessage()]
        assert len(warned) == 4
        assert sum("Mine" in w for w in warned) == 2
        assert sum("max-value-size (200 bytes)" in w for w in warned) == 2
    finally:
        await a.close()
        await b.close()


async def test_a_failed_fetch_frees_the_lease_at_once(redis_url: str, namespace: str) -> None:
    table = Table({("k",): [{"id": "k"}]})
    table.errors[("k",)] = [ValueError("boom")]
    options = _options(redis_url, namespace, **{"lookup.max-retries": "0"})
    a, b = _chain(table, options), _chain(table, options)
    await a.open()
    await b.open()
    try:
        with pytest.raises(Exception, match="boom"):
            await a.async_lookup(("k",))
        started = time.monotonic()
        assert await b.async_lookup(("k",)) == [{"id": "k"}]
        assert time.monotonic() - started < 1.0  # not the 2 s lease
    finally:
        await a.close()
        await b.close()


async def test_a_lease_taken_for_a_cancelled_lookup_is_freed_at_once(
    redis_url: str, namespace: str
) -> None:
    """A lookup cancelled (its row's timeout, its task's end) while its read was in flight:
    the read took the key's lease and nobody loaded it, so every process, this one too,
    waited out the whole lease for the key."""
    table = Table({("k",): [{"id": "k"}]})
    chain = _chain(table, _options(redis_url, namespace))
    store = _counting(chain)
    await chain.open()
    try:
        store.delay = 0.05
        lookup = asyncio.ensure_future(chain.async_lookup(("k",)))
        await asyncio.sleep(0.01)
        lookup.cancel()
        with pytest.raises(asyncio.CancelledError):
            await lookup
        await asyncio.sleep(0.2)  # the read ends, its lease answered to no one
        assert chain.shared is not None
        lease = chain.shared.store_key(encode_key(("k",))) + b"#lease"
        assert redis.Redis.from_url(redis_url).get(lease) is None
        store.delay = 0.0
        started = time.monotonic()
        assert await chain.async_lookup(("k",)) == [{"id": "k"}]
        assert time.monotonic() - started < 1.0  # not the 2 s lease
        assert chain.metrics.snapshot()["l2LeaseWaitCount"] == 0
    finally:
        await chain.close()


async def test_a_full_store_still_answers_its_hits(namespace: str) -> None:
    """A store at its maxmemory under 'noeviction' (Redis's default) refuses the lease's SET:
    that failed the whole read script, so a batch with one new key lost its stored hits too."""
    port = _free_port()
    url = f"redis://127.0.0.1:{port}/0"
    with private_redis(port):
        client = redis.Redis(port=port)
        client.config_set("maxmemory-policy", "noeviction")
        first = _chain(Table({(i,): [{"id": i}] for i in range(100)}), _options(url, namespace))
        await first.open()
        try:
            await asyncio.gather(*(first.async_lookup((i,)) for i in range(50)))
            await first.flush()
        finally:
            await first.close()
        client.config_set("maxmemory", int(client.info("memory")["used_memory"]) - 10_000)
        table = Table({(i,): [{"id": i}] for i in range(100)})
        other = _chain(table, _options(url, namespace))  # another process
        await other.open()
        try:
            found = await asyncio.gather(*(other.async_lookup((i,)) for i in range(25, 75)))
            assert found == [[{"id": i}] for i in range(25, 75)]
            figures = other.metrics.snapshot()
            assert figures["l2HitCount"] == 25 and figures["l2MissCount"] == 25
            assert sorted(table.calls) == [(i,) for i in range(50, 75)]
        finally:
            await other.close()


async def test_a_lease_whose_holder_died_is_waited_for_at_most_the_lease_time(
    redis_url: str, namespace: str
) -> None:
    table = Table({("k",): [{"id": "k"}]})
    chain = _chain(table, _options(redis_url, namespace, **{"lookup.shared-cache.lease": "300 ms"}))
    await chain.open()
    try:
        assert chain.shared is not None
        lease = chain.shared.store_key(encode_key(("k",))) + b"#lease"
        client = redis.Redis.from_url(redis_url)
        client.set(lease, b"a process that died", px=60_000)
        started = time.monotonic()
        assert await chain.async_lookup(("k",)) == [{"id": "k"}]
        assert 0.25 <= time.monotonic() - started < 2.0
        # the load's own time: the lease wait before it is no part of it
        assert chain.metrics.snapshot()["latestLoadTime"] < 250
        assert client.get(lease) == b"a process that died"  # not ours to drop; the value is
        assert await chain.async_lookup(("k",)) == [{"id": "k"}]
        assert len(table.calls) == 1
    finally:
        await chain.close()


async def test_a_load_with_nothing_to_share_sends_its_waiters_to_the_service_together(
    redis_url: str, namespace: str
) -> None:
    """A miss this join does not cache: its loader writes nothing, and each waiter took the
    freed lease in turn and loaded alone (N processes: N service latencies one after another)."""
    running: list[int] = [0, 0]  # now, most at once

    class Missing(AsyncLookupFunction):
        async def async_lookup(self, key: Key) -> Collection[Row]:
            running[0] += 1
            running[1] = max(running)
            await asyncio.sleep(0.3)
            running[0] -= 1
            return []

    options = _options(redis_url, namespace, **{"lookup.partial-cache.cache-missing-key": "false"})
    chains = [_chain(Table(), options, function=Missing()) for _ in range(3)]
    for chain in chains:
        await chain.open()
    try:
        first = asyncio.ensure_future(chains[0].async_lookup(("none",)))
        await asyncio.sleep(0.1)  # it holds the lease, loading
        waiters = [asyncio.ensure_future(c.async_lookup(("none",))) for c in chains[1:]]
        assert await asyncio.wait_for(asyncio.gather(first, *waiters), 5) == [[], [], []]
        assert running[1] == 2  # the two waiters, at once
        assert sum(c.metrics.snapshot()["l2LeaseWaitCount"] for c in chains) == 2
    finally:
        for chain in chains:
            await chain.close()


async def test_without_leases_a_load_with_nothing_to_share_writes_nothing(
    redis_url: str, namespace: str
) -> None:
    # lease 0: a marker with a zero expiry, refused by Redis, counted an error per miss
    options = _options(
        redis_url,
        namespace,
        **{"lookup.shared-cache.lease": "0", "lookup.partial-cache.cache-missing-key": "false"},
    )
    chain = _chain(Table(), options)
    store = _counting(chain)
    await chain.open()
    try:
        assert await asyncio.gather(*(chain.async_lookup((i,)) for i in range(5))) == [[]] * 5
        await chain.shared.flush()  # type: ignore[union-attr]
        m = chain.metrics.snapshot()
        assert m["l2ErrorCount"] == 0 and m["l2MissCount"] == 5 and store.writes == []
    finally:
        await chain.close()


async def test_the_load_time_leaves_out_the_shared_write(redis_url: str, namespace: str) -> None:
    table = Table({("k",): [{"id": "k"}]})
    chain = _chain(table, _options(redis_url, namespace, **{"lookup.shared-cache.timeout": "1s"}))
    store = _counting(chain)
    original = store.inner.write

    async def slow(*args: Any) -> int:
        await asyncio.sleep(0.4)
        return await original(*args)

    store.inner.write = slow  # type: ignore[method-assign]
    await chain.open()
    try:
        started = time.monotonic()
        assert await chain.async_lookup(("k",)) == [{"id": "k"}]
        assert time.monotonic() - started >= 0.4  # the lookup waited for its write
        assert chain.metrics.snapshot()["latestLoadTime"] < 200  # the load did not
    finally:
        await chain.close()


async def test_a_read_that_failed_after_the_store_ran_it_frees_its_leases(
    redis_url: str, namespace: str
) -> None:
    """The read's answer came after the timeout (a loaded host): its leases were taken; the
    rows loaded then are written as their holder's, and another process reads them."""
    table = Table({(i,): [{"id": i}] for i in range(5)})
    options = _options(redis_url, namespace)
    a, b = _chain(table, options), _chain(table, options)
    store = _counting(a)
    original = store.inner.read

    async def late(keys: Sequence[bytes], lease_ms: int, token: bytes) -> list[ReadResult]:
        answer = await original(keys, lease_ms, token)  # run on the store, leases taken
        await asyncio.sleep(0.3)  # past the 100 ms timeout
        return answer

    store.inner.read = late  # type: ignore[method-assign]
    await a.open()
    await b.open()
    try:
        await asyncio.gather(*(a.async_lookup((i,)) for i in range(5)))
        assert a.metrics.snapshot()["l2ErrorCount"] == 1
        await a.shared.flush()  # type: ignore[union-attr]
        assert await asyncio.gather(*(b.async_lookup((i,)) for i in range(5))) == [
            [{"id": i}] for i in range(5)
        ]
        m = b.metrics.snapshot()
        assert m["l2HitCount"] == 5 and m["l2LeaseWaitCount"] == 0
    finally:
        await a.close()
        await b.close()


async def test_a_lease_is_dropped_only_by_its_holder(redis_url: str, namespace: str) -> None:
    """A fetch slower than the lease: the lease passes to another process, and the slow
    fetch's failure must not drop that process's lease (a third would fetch too)."""
    table = Table({("k",): [{"id": "k"}]})
    table.errors[("k",)] = [ValueError("slow and failed")]
    gate = asyncio.Event()
    options = _options(
        redis_url, namespace, **{"lookup.shared-cache.lease": "200 ms", "lookup.max-retries": "0"}
    )
    chain = _chain(table, options, function=AsyncFn(table, gate))
    await chain.open()
    client = redis.Redis.from_url(redis_url)
    try:
        assert chain.shared is not None
        lease = chain.shared.store_key(encode_key(("k",))) + b"#lease"
        lookup = asyncio.ensure_future(chain.async_lookup(("k",)))
        for _ in range(100):
            if client.get(lease) is not None:
                break
            await asyncio.sleep(0.01)
        assert client.get(lease) is not None  # this process took it
        await asyncio.sleep(0.3)
        assert client.set(lease, b"another process", nx=True, px=60_000)  # it expired: taken
        gate.set()
        with pytest.raises(Exception, match="slow and failed"):
            await lookup
        await chain.shared.flush()
        assert client.get(lease) == b"another process"
    finally:
        client.close()
        await chain.close()


async def test_a_wrong_keys_entry_is_a_miss(redis_url: str, namespace: str) -> None:
    table = Table({(1,): [{"id": 1}], ("1",): [{"id": "1"}]})
    chain = _chain(table, _options(redis_url, namespace))
    await chain.open()
    try:
        await chain.async_lookup((1,))
        assert chain.shared is not None
        shared = chain.shared
        stored = redis.Redis.from_url(redis_url).get(shared.store_key(encode_key((1,))))
        assert stored is not None
        # plant int 1's entry under str "1"'s key
        redis.Redis.from_url(redis_url).set(shared.store_key(encode_key(("1",))), stored)
        other = _chain(table, _options(redis_url, namespace))
        await other.open()
        assert await other.async_lookup(("1",)) == [{"id": "1"}]
        await other.close()
    finally:
        await chain.close()


async def test_invalidation_and_ttl(redis_url: str, namespace: str) -> None:
    table = Table({(1,): [{"id": 1}]})
    options = _options(redis_url, namespace, **{"lookup.shared-cache.ttl": "300 ms"})
    for expected_calls in (1, 1):
        chain = _chain(table, options)
        await chain.open()
        await chain.async_lookup((1,))
        await chain.close()
        assert len(table.calls) == expected_calls
    admin = open_admin(redis_url, 1.0)
    assert admin.clear(namespace_pattern(namespace)) >= 1
    chain = _chain(table, options)
    await chain.open()
    await chain.async_lookup((1,))
    await chain.close()
    assert len(table.calls) == 2
    await asyncio.sleep(0.4)
    chain = _chain(table, options)
    await chain.open()
    await chain.async_lookup((1,))
    await chain.close()
    assert len(table.calls) == 3


# -- failure isolation: a private redis-server ------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def private_redis(port: int) -> Iterator[subprocess.Popen[bytes]]:
    """A redis-server of the test's own on ``port`` (stopped by its PID); skips without one."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    process = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--bind",
            "127.0.0.1",
            "--daemonize",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if redis.Redis(port=port).ping():
                    break
            except redis.ConnectionError:
                time.sleep(0.05)
        yield process
    finally:
        process.terminate()
        process.wait(10)


async def test_store_down_slow_and_back(namespace: str) -> None:
    port = _free_port()
    url = f"redis://127.0.0.1:{port}/0"
    table = Table({(i,): [{"id": i}] for i in range(100)})
    options = _options(url, namespace, **{"lookup.partial-cache.max-rows": "1"})
    chain = _chain(table, options)
    await chain.open()
    try:
        # down from the start: every lookup is answered by the service
        got = await asyncio.gather(*(chain.async_lookup((i,)) for i in range(10)))
        assert got == [[{"id": i}] for i in range(10)]
        m = chain.metrics.snapshot()
        assert m["l2ErrorCount"] >= 1 and m["l2HitCount"] == 0
        with private_redis(port):
            # slow: a paused server; no lookup waits more than the timeout on it
            admin = redis.Redis(port=port)
            await asyncio.sleep(1.1)  # RETRY_AFTER: the tier tries the store again
            admin.execute_command("CLIENT", "PAUSE", "1500", "ALL")
            started = time.monotonic()
            await chain.async_lookup((50,))
            assert time.monotonic() - started < 0.5
            assert chain.metrics.snapshot()["l2ErrorCount"] > m["l2ErrorCount"]
            await asyncio.sleep(1.6)  # the pause ends; the tier tries again after RETRY_AFTER
            calls = len(table.calls)
            await asyncio.gather(*(chain.async_lookup((i,)) for i in range(20, 30)))
            await asyncio.gather(*(chain.async_lookup((i,)) for i in range(20, 30)))
            assert len(table.calls) == calls + 10  # back to L2: the second round hit it
            assert chain.metrics.snapshot()["l2HitCount"] >= 9
    finally:
        await chain.close()


# -- the deadline ------------------------------------------------------------------------------


def _delayed_server(delay: float) -> socket.socket:
    """A server on a thread of its own (answers while the test's loop stands still): reads a
    line, waits ``delay`` seconds (forever if < 0), answers ``pong``."""
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                connection, _ = listener.accept()
                connection.recv(100)
                if delay < 0:
                    continue  # never answers
                time.sleep(delay)
                connection.sendall(b"pong\n")

    threading.Thread(target=serve, daemon=True).start()
    return listener


async def test_an_answer_that_came_while_the_loop_stood_still_is_not_a_timeout() -> None:
    from asyncio_lookup.lookup.l2.deadline import bounded

    async def ping(port: int) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"ping\n")
        await writer.drain()
        try:
            return await reader.readline()
        finally:
            writer.close()

    answering, silent = _delayed_server(0.05), _delayed_server(-1)
    try:
        call = asyncio.ensure_future(bounded(ping(answering.getsockname()[1]), 0.1))
        await asyncio.sleep(0.02)  # the request is out
        time.sleep(0.3)  # the loop stands still (as between two Spark batches); pong arrives
        assert await call == b"pong\n"
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await bounded(ping(silent.getsockname()[1]), 0.05)
        assert time.monotonic() - started < 0.5
    finally:
        answering.close()
        silent.close()


async def test_a_failing_store_warns_once_per_task(
    namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"redis://127.0.0.1:{_free_port()}/0"  # nothing listens there
    table = Table({(i,): [{"id": i}] for i in range(20)})
    chain = _chain(table, _options(url, namespace))
    await chain.open()
    assert chain.shared is not None
    try:
        with caplog.at_level("WARNING", logger="asyncio_lookup.shared_cache"):
            for i in range(5):  # one batch each: failed calls in a row, then skips
                assert await chain.async_lookup((i,)) == [{"id": i}]
            assert len(caplog.records) == 1
            await asyncio.sleep(1.1)  # RETRY_AFTER: tried (and failing) again, same task
            for i in range(5, 10):
                await chain.async_lookup((i,))
            assert len(caplog.records) == 1
            chain.shared.new_task()
            await asyncio.sleep(1.1)
            for i in range(10, 15):
                await chain.async_lookup((i,))
            assert len(caplog.records) == 2
        m = chain.metrics.snapshot()
        assert m["l2ErrorCount"] >= 3 and m["l2SkippedCount"] >= 1
        assert len(table.calls) == 15
        # each lookup is one of these (a failed read's lookups went past the store too)
        assert m["l2HitCount"] + m["l2MissCount"] + m["l2SkippedCount"] == m["missCount"] == 15
    finally:
        await chain.close()


# -- properties --------------------------------------------------------------------------------


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(),
    st.text(alphabet=':,[]"\\ \n\x00{}|#'),
    st.decimals(allow_nan=False, allow_infinity=False),
    st.dates(),
    st.binary(max_size=8),
)
_KEYS = st.lists(_SCALARS, min_size=1, max_size=4).map(tuple)


def _identity(key: tuple[Any, ...]) -> list[tuple[type, str]]:
    return [(type(part), repr(part)) for part in key]


@settings(max_examples=400, deadline=None)
@given(_KEYS, _KEYS)
def test_equal_encodings_only_for_identical_keys(a: tuple[Any, ...], b: tuple[Any, ...]) -> None:
    assert (encode_key(a) == encode_key(b)) == (_identity(a) == _identity(b))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.text(), _SCALARS, max_size=4), max_size=3))
def test_rows_round_trip(rows: list[dict[str, Any]]) -> None:
    back = decode_entry(b"ns", b"k", encode_entry(b"ns", b"k", rows))
    assert [_identity(tuple(r.items())) for r in back] == [
        _identity(tuple(r.items())) for r in rows
    ]


async def test_an_entry_of_an_older_format_is_a_quiet_miss(
    redis_url: str, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """After an upgrade, every entry of the old format warned 'not this key's' on each read."""
    table = Table({(1,): [{"id": 1}]})
    chain = _chain(table, _options(redis_url, namespace))
    assert chain.shared is not None
    old = b"\n".join((b"alk1", chain.shared.namespace, encode_key((1,)), b'[{"id":1}]'))
    with redis.Redis.from_url(redis_url) as client:
        client.set(chain.shared.store_key(encode_key((1,))), old)
    await chain.open()
    try:
        with caplog.at_level(logging.WARNING, logger="asyncio_lookup.shared_cache"):
            assert await chain.async_lookup((1,)) == [{"id": 1}]
        assert len(table.calls) == 1 and chain.metrics.snapshot()["l2MissCount"] == 1
        assert not [r for r in caplog.records if "not this key's" in r.getMessage()]
    finally:
        await chain.close()
