"""Key routing for the hash lookup join: Spark's xxhash64 re-implemented, routing with salted
hot keys, and the partition-filtered scan a partitioned FULL cache loads from."""

from __future__ import annotations

import asyncio
import math
import struct
from collections import Counter
from collections.abc import AsyncIterator
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest

from asyncio_lookup.connectors.memory import InMemoryConnector
from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.lookup.functions import Row
from asyncio_lookup.lookup.partitioning import (
    HashPartitioner,
    PartitionFilteredSource,
    PartitionRouting,
    decimal_text,
    key_hash,
    partitioned_source,
    partitioner_of,
    salt_count,
)
from asyncio_lookup.lookup.providers import FullCachingLookupProvider
from asyncio_lookup.lookup.reload import PeriodicCacheReloadTrigger

HASHER = HashPartitioner((0,), ("long",))


def test_key_hash_matches_values_spark_computed() -> None:
    # SELECT xxhash64(CAST(5 AS BIGINT)), xxhash64('héllo'), xxhash64(CAST(5 AS BIGINT), 'a')
    assert key_hash([5], ["long"]) == 6251837290343458373
    assert key_hash(["héllo"], ["string"]) == 501425390238239234
    assert key_hash([5, "a"], ["long", "string"]) == -3908772868537588231
    assert key_hash([None, 5], ["string", "long"]) == key_hash([5], ["long"])  # NULL skipped


def test_key_hash_normalises_negative_zero_and_rejects_unhashable_kinds() -> None:
    assert key_hash([-0.0], ["double"]) == key_hash([0.0], ["double"])
    # every NaN is one value, as Java's doubleToLongBits makes it: SELECT xxhash64(CAST('NaN'
    # AS DOUBLE)); a NaN made by inf - inf has the sign bit set on x86
    negative_nan = struct.unpack("<d", struct.pack("<Q", 0xFFF8000000000000))[0]
    assert key_hash([negative_nan], ["double"]) == key_hash([math.nan], ["double"])
    assert key_hash([math.nan], ["double"]) == -3127944061524951246
    with pytest.raises(TypeError):
        key_hash(["5"], ["long"])
    with pytest.raises(TypeError):
        key_hash([1], ["native"])


def test_canonical_kinds_hash_one_form_per_value_and_refuse_other_types() -> None:
    """The probe side casts these kinds to one form per value (test_hash_lookup_join checks it
    against Spark); the dim side must give equal keys one hash and refuse what it cannot read
    (the row is then kept in every partition, never lost)."""
    assert [decimal_text(Decimal(t)) for t in ("1.50", "-0.00", "0E-18", "1E+2", "-2.5")] == [
        "1.5",
        "0",
        "0",
        "100",
        "-2.5",
    ]
    assert key_hash([Decimal("1.50")], ["decimal"]) == key_hash([Decimal("1.5")], ["decimal"])
    assert key_hash([True], ["boolean"]) == key_hash([1], ["long"])
    assert key_hash([date(1969, 12, 31)], ["date"]) == key_hash([-1], ["long"])
    other_zone = datetime(1970, 1, 1, 1, tzinfo=timezone(timedelta(hours=1)))
    assert key_hash([other_zone], ["timestamp"]) == key_hash([0], ["long"])  # one instant
    assert key_hash([datetime(1970, 1, 1, 0, 0, 1)], ["timestamp_ntz"]) == key_hash(
        [1_000_000], ["long"]
    )
    for value, kind in [
        (1, "boolean"),
        (datetime(1970, 1, 1), "date"),
        (datetime(1970, 1, 1), "timestamp"),  # naive
        (other_zone, "timestamp_ntz"),  # aware
        (1.5, "decimal"),
    ]:
        with pytest.raises(TypeError):
            key_hash([value], [kind])


def test_hash_partitions_are_spark_pmod_and_spread() -> None:
    counts = Counter(HASHER.partition((k,), 8) for k in range(8000))
    assert set(counts) == set(range(8))
    assert max(counts.values()) < 1.2 * 1000
    assert HASHER.partition((5,), 8) == 6251837290343458373 % 8


def test_salt_count() -> None:
    assert salt_count(0.01, 8) == 1
    assert salt_count(0.13, 8) == 3
    assert salt_count(0.9, 8) == 8


def test_routing_spreads_a_hot_key_over_consecutive_partitions() -> None:
    hot = {HASHER.hash_of((7,)): 3}
    routing = PartitionRouting(4, HASHER, HASHER, hot=hot)
    base = HASHER.partition((7,), 4)
    assert routing.partitions((7,)) == {base, (base + 1) % 4, (base + 2) % 4}
    assert routing.partitions((8,)) == {HASHER.partition((8,), 4)}
    assert routing.fingerprint() != PartitionRouting(4, HASHER, HASHER).fingerprint()


def test_accepts_checks_literals_nulls_and_keeps_rows_it_cannot_route() -> None:
    hasher = HashPartitioner((0,), ("long",))
    routing = PartitionRouting(2, hasher, hasher, literals=((1, "EU"),))
    columns = ("id", "region")
    home = hasher.partition((3,), 2)
    assert routing.accepts({"id": 3, "region": "EU"}, columns, home)
    assert not routing.accepts({"id": 3, "region": "EU"}, columns, 1 - home)
    assert not routing.accepts({"id": 3, "region": "US"}, columns, home)
    assert not routing.accepts({"id": None, "region": "EU"}, columns, home)
    assert routing.accepts({"id": "3", "region": "EU"}, columns, 0)  # unroutable: kept
    assert routing.accepts({"id": "3", "region": "EU"}, columns, 1)
    # a NaN literal accepts the dim's NaN rows (NaN != NaN kept them out of every partition)
    nan = PartitionRouting(2, hasher, hasher, literals=((1, float("nan")),))
    assert nan.accepts({"id": 3, "x": float("nan")}, ("id", "x"), home)
    assert not nan.accepts({"id": 3, "x": 1.0}, ("id", "x"), home)
    # a literal part of another kind than the literal (the text "1" for tier = 1) is kept: an
    # empty snapshot missed every lookup silently, where the cache's type check names it
    tier = PartitionRouting(2, hasher, hasher, literals=((1, 1),))
    assert tier.accepts({"id": 3, "tier": "1"}, ("id", "tier"), home)
    assert tier.accepts({"id": 3, "tier": 1.0}, ("id", "tier"), home)  # a number: equal
    assert not tier.accepts({"id": 3, "tier": 2}, ("id", "tier"), home)
    assert not tier.accepts({"id": 3, "tier": 2.5}, ("id", "tier"), home)


def test_can_filter_needs_a_hash_the_dim_side_can_compute() -> None:
    native = HashPartitioner((0,), ("native",))
    assert not PartitionRouting(2, native, native).can_filter

    class Custom:
        def partition(self, key: Any, num_partitions: int) -> int:
            return 0

    assert PartitionRouting(2, Custom(), native).can_filter
    assert not PartitionRouting(2, Custom(), native, hot={1: 2}).can_filter


def collect(rows: Any) -> list[Row]:
    """A scan's rows, read on a loop of its own (as a FULL cache load reads them)."""

    async def read() -> list[Row]:
        return [row async for row in rows]

    return asyncio.run(read())


def test_filtered_scans_split_the_table_exactly() -> None:
    rows = [{"id": i, "v": i * 2} for i in range(1000)] + [{"id": 7, "v": -1}]
    source = InMemoryConnector(rows, ["id"])
    routing = PartitionRouting(4, HASHER, HASHER, hot={HASHER.hash_of((9,)): 2})
    parts = [collect(PartitionFilteredSource(source, routing, ("id",), p).scan()) for p in range(4)]
    assert sum(len(p) for p in parts) == len(rows) + 1  # key 9 is loaded by two partitions
    for p, part in enumerate(parts):
        assert all(p in routing.partitions((row["id"],)) for row in part)
        assert 180 < len(part) < 320
    assert sorted(r["v"] for part in parts for r in part if r["id"] == 7) == [-1, 14]
    assert sum(1 for part in parts for r in part if r["id"] == 9) == 2


async def test_async_scans_are_filtered_too() -> None:
    class AsyncScan:
        def lookup_function(self) -> None:
            return None

        def async_lookup_function(self) -> None:
            return None

        async def _rows(self) -> AsyncIterator[Row]:
            for i in range(100):
                yield {"id": i}

        def scan(self) -> AsyncIterator[Row]:
            return self._rows()

    routing = PartitionRouting(2, HASHER, HASHER)
    scanned = PartitionFilteredSource(AsyncScan(), routing, ("id",), 1).scan()
    assert scanned is not None and not isinstance(scanned, list)
    ids = [row["id"] async for row in scanned]  # type: ignore[union-attr]
    assert ids == [i for i in range(100) if HASHER.partition((i,), 2) == 1]


def test_a_full_caching_provider_stays_one() -> None:
    rows = [{"id": i} for i in range(10)]
    trigger = PeriodicCacheReloadTrigger(60.0)
    provider = FullCachingLookupProvider.of(lambda: rows, trigger)
    wrapped = partitioned_source(provider, PartitionRouting(2, HASHER, HASHER), ("id",), 0)
    assert isinstance(wrapped, FullCachingLookupProvider)
    assert wrapped.reload_trigger is trigger
    assert [r["id"] for r in collect(wrapped.scan())] == [
        i for i in range(10) if HASHER.partition((i,), 2) == 0
    ]


def test_partitioner_of() -> None:
    assert partitioner_of(InMemoryConnector([], ["id"]), ("id",)) is None

    class Bad:
        def partitioner(self, key_columns: tuple[str, ...]) -> object:
            return object()

    with pytest.raises(ConfigurationError) as error:
        partitioner_of(Bad(), ("id",))
    assert error.value.option == "partitioner"


def test_invalid_partition_count() -> None:
    with pytest.raises(ConfigurationError):
        PartitionRouting(0, HASHER, HASHER)


class _PlainPartitioner:
    def partition(self, key: Any, num_partitions: int) -> int:
        return 0


def test_fingerprint_survives_pickling() -> None:
    import pickle

    for partitioner in (HASHER, _PlainPartitioner()):
        routing = PartitionRouting(3, partitioner, HASHER, hot={5: 2})
        assert pickle.loads(pickle.dumps(routing)).fingerprint() == routing.fingerprint()
