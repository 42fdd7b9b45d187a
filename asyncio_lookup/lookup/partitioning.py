"""Routing keys to partitions for a hash lookup join (FLIP-204, docs/semantics.md §2.7).

One partition function serves both sides of a shuffled lookup join: the engine computes it
over the probe side's key columns (Spark: ``pmod(xxhash64(...), P)``, see :func:`key_hash`), and
a task's FULL cache uses it on the dim side to keep only the rows whose keys can be routed to
that task (:class:`PartitionFilteredSource`). Both sides must agree exactly, so the dim side
re-implements Spark's ``xxhash64`` for the types it supports (:data:`HASH_KINDS`).

A connector may bring its own routing (FLIP-462's idea) by offering ``partitioner(key_columns)``
returning a :class:`KeyPartitioner`; it then replaces the plain hash. Hot keys (skew) are spread
over several consecutive partitions (salting); :class:`PartitionRouting` knows every partition a
key may reach, so the dim-side filter loads a salted key's rows wherever it can be looked up.
"""

from __future__ import annotations

import datetime
import math
import struct
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal, Protocol, TypeAlias, get_args, runtime_checkable

import xxhash

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.lookup.full_cache import comparable_kind
from asyncio_lookup.lookup.functions import (
    AsyncLookupFunction,
    Key,
    LookupFunction,
    Row,
    scan_rows,
)
from asyncio_lookup.lookup.providers import FullCachingLookupProvider, ScanRows
from asyncio_lookup.validation import parse_int

HashKind: TypeAlias = Literal[
    "long",
    "double",
    "string",
    "binary",
    "boolean",
    "date",
    "timestamp",
    "timestamp_ntz",
    "decimal",
    "native",
]
#: The kinds the dim side can hash exactly as Spark does ("native": Spark only, no dim filter).
HASH_KINDS: tuple[str, ...] = tuple(k for k in get_args(HashKind) if k != "native")
SPARK_SEED = 42  # the seed of Spark's xxhash64()

_EPOCH_DAY = datetime.date(1970, 1, 1).toordinal()
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_EPOCH_NAIVE = datetime.datetime(1970, 1, 1)
_MICROSECOND = datetime.timedelta(microseconds=1)

_MASK = (1 << 64) - 1
_SIGN = 1 << 63


def _signed(value: int) -> int:
    return value - (1 << 64) if value & _SIGN else value


def decimal_text(value: Decimal) -> str:
    """A DECIMAL's digits without trailing fraction zeros, whatever its scale (``1.50`` and
    ``1.5`` are one key); the probe side strips Spark's ``CAST(d AS STRING)`` alike."""
    text = format(value, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def _value_bytes(value: Any, kind: str) -> bytes:
    if kind == "long":
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"a long key part must be an int, got {type(value).__name__}")
        return struct.pack("<q", value)
    if kind == "boolean":  # the probe side hashes CAST(b AS BIGINT)
        if not isinstance(value, bool):
            raise TypeError(f"a boolean key part must be a bool, got {type(value).__name__}")
        return struct.pack("<q", int(value))
    if kind == "date":  # unix_date(d)
        if isinstance(value, datetime.datetime) or not isinstance(value, datetime.date):
            raise TypeError(f"a date key part must be a date, got {type(value).__name__}")
        return struct.pack("<q", value.toordinal() - _EPOCH_DAY)
    if kind in ("timestamp", "timestamp_ntz"):  # microseconds since the epoch
        aware = kind == "timestamp"
        if not isinstance(value, datetime.datetime) or (value.tzinfo is not None) != aware:
            raise TypeError(
                f"a {kind} key part must be an {'aware' if aware else 'naive'} datetime, "
                f"got {value!r}"
            )
        micros = (value - (_EPOCH if aware else _EPOCH_NAIVE)) // _MICROSECOND
        return struct.pack("<q", micros)
    if kind == "decimal":
        if not isinstance(value, Decimal):
            raise TypeError(f"a decimal key part must be a Decimal, got {type(value).__name__}")
        return decimal_text(value).encode("ascii")
    if kind == "double":
        number = float(value)
        if number == 0.0:
            number = 0.0  # -0.0 == 0.0 as a key; the probe side normalises it too
        elif number != number:
            number = math.nan  # one NaN, as Java's doubleToLongBits (inf - inf has other bits)
        return struct.pack("<d", number)
    if kind == "string":
        if not isinstance(value, str):
            raise TypeError(f"a string key part must be a str, got {type(value).__name__}")
        return value.encode("utf-8")
    if kind == "binary":
        return bytes(value)
    raise TypeError(f"key parts of kind {kind!r} cannot be hashed outside Spark")


def key_hash(values: Sequence[Any], kinds: Sequence[str]) -> int:
    """Spark's ``xxhash64(c1, c2, ...)`` (signed) of values cast to ``kinds``.

    ``long`` = BIGINT, ``double`` = DOUBLE (with -0.0 as 0.0), ``string`` = STRING (UTF-8),
    ``binary`` = BINARY; the other kinds as the probe side canonicalises them first
    (``asyncio_lookup.spark.shuffle``): ``boolean`` as BIGINT 0/1, ``date`` as days and
    ``timestamp`` / ``timestamp_ntz`` as microseconds since the epoch (BIGINT), ``decimal`` as
    :func:`decimal_text` (STRING). As in Spark, each value's hash seeds the next and a NULL is
    skipped.
    """
    seed = SPARK_SEED
    for value, kind in zip(values, kinds, strict=True):
        if value is None:
            continue
        seed = xxhash.xxh64_intdigest(_value_bytes(value, kind), seed)
    return _signed(seed & _MASK)


@runtime_checkable
class KeyPartitioner(Protocol):
    """Maps a lookup key (all key columns, dim-schema order) to a partition in ``[0, n)``.

    A connector offers one through an optional ``partitioner(key_columns)`` method. It may also
    define ``spark_column(columns, num_partitions)`` returning a Spark ``Column`` computing the
    same partition from the key's columns (left columns, and ``lit`` for literal-bound ones);
    without it the probe side calls :meth:`partition` per row in a Python UDF.
    """

    def partition(self, key: Key, num_partitions: int) -> int: ...


@dataclass(frozen=True)
class HashPartitioner:
    """The default: ``pmod(xxhash64(left-bound key parts), n)``.

    ``positions`` are the indexes of the key parts bound to left columns (literal-bound parts
    are constant and left out); ``kinds`` their hash kinds (see :func:`key_hash`).
    """

    positions: tuple[int, ...]
    kinds: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.positions or len(self.positions) != len(self.kinds):
            raise ConfigurationError(
                "positions", self.positions, "one hash kind per left-bound key part"
            )

    @property
    def exact(self) -> bool:
        """True when every part's kind can be hashed here (else only Spark can route)."""
        return all(kind in HASH_KINDS for kind in self.kinds)

    def hash_of(self, key: Key) -> int:
        return key_hash([key[p] for p in self.positions], self.kinds)

    def partition(self, key: Key, num_partitions: int) -> int:
        return self.hash_of(key) % num_partitions  # Python's % is Spark's pmod for n > 0


def partitioner_of(source: Any, key_columns: Sequence[str]) -> KeyPartitioner | None:
    """The connector-supplied partitioner of ``source`` for these key columns, if any."""
    factory = getattr(source, "partitioner", None)
    if not callable(factory):
        return None
    partitioner = factory(tuple(key_columns))
    if partitioner is not None and not isinstance(partitioner, KeyPartitioner):
        raise ConfigurationError(
            "partitioner",
            partitioner,
            "an object with partition(key, num_partitions) -> int, or None",
            reason=f"{type(source).__name__}.partitioner() returned something else",
        )
    return partitioner


def salt_count(share: float, num_partitions: int) -> int:
    """How many partitions a hot key with this share of the rows is spread over: enough that
    each piece is at most half a partition's fair share (1 / n), at most ``n``."""
    return max(1, min(num_partitions, math.ceil(share * num_partitions * 2)))


@dataclass(frozen=True)
class PartitionRouting:
    """Where each key goes: ``partitioner`` picks a base partition; a hot key (identified by
    its :meth:`HashPartitioner.hash_of`) with salt count ``s`` may land on any of the ``s``
    partitions ``base, base + 1, ... (mod n)``.

    ``literals`` are the (key position, value) pairs bound to constants: a dim row with another
    value there is never looked up. ``hot`` maps hot keys' hashes to their salt counts.
    """

    num_partitions: int
    partitioner: KeyPartitioner
    hasher: HashPartitioner
    literals: tuple[tuple[int, Any], ...] = ()
    hot: Mapping[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        parse_int("shuffle_partitions", self.num_partitions, minimum=1, text=False)

    @property
    def can_filter(self) -> bool:
        """True when the dim side can compute every key's partitions (partitioned FULL cache)."""
        return self.hasher.exact or (not self.hot and self.partitioner is not self.hasher)

    def fingerprint(self) -> str:
        """Identifies the routing (for cache registry keys): equal routings, equal text."""
        hot = ",".join(f"{h}x{s}" for h, s in sorted(self.hot.items()))
        kind = type(self.partitioner)
        # object's repr holds an address, which differs in every unpickled copy
        name = repr(self.partitioner) if kind.__repr__ is not object.__repr__ else kind.__qualname__
        # a partition's FULL cache holds only the rows of the literals' values (accepts)
        literals = ",".join(f"{p}={type(v).__qualname__}:{v!r}" for p, v in self.literals)
        return f"{self.num_partitions}:{name}:{hot}:{literals}"

    def partitions(self, key: Key) -> frozenset[int]:
        """Every partition ``key`` may be looked up in."""
        n = self.num_partitions
        base = self.partitioner.partition(key, n) % n
        salt = self.hot.get(self.hasher.hash_of(key), 1) if self.hot else 1
        return frozenset((base + i) % n for i in range(salt))

    def accepts(self, row: Row, key_columns: Sequence[str], partition: int) -> bool:
        """Whether a task of ``partition`` must hold ``row`` in its FULL cache.

        Errs on keeping: a row whose partitions cannot be computed is kept.
        """
        try:
            key = tuple(row[c] for c in key_columns)
        except KeyError:
            return True  # the cache reports the missing column
        if any(v is None for v in key):
            return False  # a NULL key is never looked up
        for position, value in self.literals:
            found = key[position]
            # Values of kinds that never compare equal (the text "1" against the literal 1)
            # are kept: the FULL cache's type check then names the mismatch, where an empty
            # snapshot would make every lookup miss silently.
            if (
                found != value
                and not (found != found and value != value)  # NaN is NaN
                and comparable_kind(found) == comparable_kind(value)
            ):
                return False
        try:
            return partition in self.partitions(key)
        except Exception:
            return True


class PartitionFilteredSource:
    """``source`` whose ``scan()`` yields only the rows one partition can look up.

    Point lookups pass through; the FULL cache built over it holds about 1/n of the table.
    """

    def __init__(
        self,
        source: Any,
        routing: PartitionRouting,
        key_columns: Sequence[str],
        partition: int,
    ) -> None:
        self.source = source
        self.routing = routing
        self.key_columns = tuple(key_columns)
        self.partition = partition

    def __repr__(self) -> str:
        return (
            f"PartitionFilteredSource({self.source!r}, partition={self.partition}/"
            f"{self.routing.num_partitions})"
        )

    def lookup_function(self) -> LookupFunction | None:
        result: LookupFunction | None = self.source.lookup_function()
        return result

    def async_lookup_function(self) -> AsyncLookupFunction | None:
        result: AsyncLookupFunction | None = self.source.async_lookup_function()
        return result

    def keep(self, row: Row) -> bool:
        return self.routing.accepts(row, self.key_columns, self.partition)

    def scan(self) -> ScanRows | None:
        rows: ScanRows | None = self.source.scan()
        if rows is None:
            return None
        return _filter(rows, self.keep)


async def _filter(rows: ScanRows, keep: Callable[[Row], bool]) -> AsyncIterator[Row]:
    async for row in scan_rows(rows):
        if keep(row):
            yield row


def partitioned_source(
    source: Any, routing: PartitionRouting, key_columns: Sequence[str], partition: int
) -> Any:
    """``source`` restricted to the rows of ``partition`` for a FULL cache; a
    :class:`FullCachingLookupProvider` stays one (its reload trigger kept)."""
    filtered = PartitionFilteredSource(source, routing, key_columns, partition)
    if isinstance(source, FullCachingLookupProvider):
        return FullCachingLookupProvider.of(filtered, source.reload_trigger)
    return filtered


__all__ = [
    "HASH_KINDS",
    "HashPartitioner",
    "KeyPartitioner",
    "PartitionFilteredSource",
    "PartitionRouting",
    "key_hash",
    "partitioned_source",
    "partitioner_of",
    "salt_count",
]
