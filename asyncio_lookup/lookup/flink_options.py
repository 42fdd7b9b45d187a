"""Flink table options a lookup table takes besides its own: deprecated names and the options of
other operators.

A Flink DDL written for ``'connector' = 'jdbc'`` often carries options this library has other
names for, or no use for:

- the JDBC connector's deprecated cache options (``lookup.cache.max-rows``, ``lookup.cache.ttl``,
  ``lookup.cache.caching-missing-key``), which flink-connector-jdbc still honours: with
  ``max-rows > 0`` and ``ttl > 0`` (``ttl`` defaults to 10 s) they make a partial cache of at most
  ``max-rows`` keys, written entries expiring after ``ttl`` (``JdbcDynamicTableFactory.
  getLookupCache``). :func:`upgrade` rewrites them to the current names;
- options that only a scan, a sink or a format reads (``scan.*``, ``sink.*``, ...), present when
  one table definition serves a job as both source or sink and dim table. They are accepted and
  ignored (:func:`ignored`).

Whatever else is unknown stays an error (a typo of a lookup option must not pass unnoticed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.lookup.option_names import (
    CACHE,
    CACHE_MISSING_KEY,
    EXPIRE_AFTER_WRITE,
    MAX_ROWS,
)
from asyncio_lookup.validation import parse_duration, parse_int

LEGACY_MAX_ROWS = "lookup.cache.max-rows"
LEGACY_TTL = "lookup.cache.ttl"
LEGACY_CACHE_MISSING_KEY = "lookup.cache.caching-missing-key"

#: deprecated name -> current name (flink-connector-jdbc's "Deprecated Options")
DEPRECATED: dict[str, str] = {
    LEGACY_MAX_ROWS: MAX_ROWS,
    LEGACY_TTL: EXPIRE_AFTER_WRITE,
    LEGACY_CACHE_MISSING_KEY: CACHE_MISSING_KEY,
}
LEGACY_TTL_DEFAULT = "10 s"
"""``lookup.cache.ttl``'s default in flink-connector-jdbc."""

#: option-name prefixes that only other Flink operators read (scans, sinks, formats)
OTHER_OPERATOR_PREFIXES = ("scan.", "sink.", "source.", "format.", "key.", "value.")
#: whole option names that only other Flink operators read
OTHER_OPERATOR_NAMES = ("format", "property-version")


@dataclass(frozen=True)
class Upgraded:
    """``options`` with deprecated names rewritten; ``renamed``: (old, new) per rewritten one;
    ``notes``: what else the rewrite did (the partial cache a legacy ``max-rows`` turns on)."""

    options: dict[str, str]
    renamed: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def upgrade(options: Mapping[str, str]) -> Upgraded:
    """Rewrite the deprecated JDBC cache options to the current ones, as the JDBC connector
    reads them.

    - Without ``'lookup.cache'`` (or with ``'NONE'``, which flink-connector-jdbc's legacy cache
      does not read), ``lookup.cache.max-rows > 0`` turns the partial cache on with
      ``expire-after-write`` = ``lookup.cache.ttl`` (10 s when not given), as Flink's legacy
      cache; ``max-rows <= 0`` (the JDBC default ``-1``) means no legacy cache, and ``ttl`` or
      ``caching-missing-key`` without ``max-rows`` change nothing.
    - With ``'lookup.cache' = 'PARTIAL'`` each deprecated option stands for its current name;
      with another cache kind (FULL) a deprecated option is an error naming it.
    - A deprecated option and its current name both given with different values is an error.
    """
    out = {k: v for k, v in options.items() if k.lower() not in DEPRECATED}
    legacy = {k.lower(): (k, v) for k, v in options.items() if k.lower() in DEPRECATED}
    if not legacy:
        return Upgraded(out)
    result = Upgraded(out)
    cache = next((v for k, v in options.items() if k.lower() == CACHE), None)
    kind = None if cache is None else cache.strip().upper()
    if kind == "NONE":  # flink-connector-jdbc builds its legacy cache whatever NONE says
        cache = None
    elif kind not in (None, "PARTIAL"):
        written, value = next(iter(legacy.values()))
        raise ConfigurationError(
            written,
            value,
            f"'lookup.cache' = 'PARTIAL', or no {written!r}",
            reason=f"a partial cache option, with {CACHE!r} = {cache!r}",
        )
    max_rows = legacy.get(LEGACY_MAX_ROWS)
    if cache is None and max_rows is not None:
        rows = parse_int(LEGACY_MAX_ROWS, max_rows[1], minimum=-(2**63))
        ttl = legacy.get(LEGACY_TTL, (LEGACY_TTL, LEGACY_TTL_DEFAULT))[1]
        if rows <= 0 or parse_duration(LEGACY_TTL, ttl) <= 0:
            result.notes.append(
                f"{LEGACY_MAX_ROWS!r} = {max_rows[1]!r} (with {LEGACY_TTL!r} = {ttl!r}) turns no "
                "cache on, as in Flink's JDBC connector"
            )
            return result
        out[CACHE] = "PARTIAL"
        legacy.setdefault(LEGACY_TTL, (LEGACY_TTL, LEGACY_TTL_DEFAULT))
        result.notes.append(
            f"{LEGACY_MAX_ROWS!r} turns the partial cache on ({CACHE!r} = 'PARTIAL', entries "
            f"expiring {legacy[LEGACY_TTL][1]} after they are written)"
        )
    elif cache is None:
        result.notes.append(
            f"{', '.join(repr(k) for k, _ in legacy.values())} without {LEGACY_MAX_ROWS!r} or "
            f"{CACHE!r} turn no cache on, as in Flink's JDBC connector"
        )
        return result
    for name, (given, value) in legacy.items():
        current = DEPRECATED[name]
        other = next((v for k, v in options.items() if k.lower() == current), None)
        if other is not None and other.strip() != value.strip():
            raise ConfigurationError(
                given,
                value,
                f"the same value as {current!r} ({other!r}), or only one of the two",
                reason=f"{given!r} is the deprecated name of {current!r}",
            )
        out[current] = value
        result.renamed.append((given, current))
    return result


def ignored(name: str) -> bool:
    """True for an option only other Flink operators read (a scan, a sink, a format)."""
    lowered = name.lower()
    return lowered in OTHER_OPERATOR_NAMES or lowered.startswith(OTHER_OPERATOR_PREFIXES)
