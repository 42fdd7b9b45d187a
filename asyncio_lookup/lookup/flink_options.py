"""Flink table options a lookup table takes besides its own: deprecated names and the options of
other operators.

A Flink DDL written for ``'connector' = 'jdbc'`` often carries options this library has other
names for, or no use for:

- the JDBC connector's deprecated cache options (``lookup.cache.max-rows``, ``lookup.cache.ttl``,
  ``lookup.cache.caching-missing-key``), which flink-connector-jdbc still honours without
  ``'lookup.cache'``: with ``max-rows > 0`` and ``ttl > 0`` they make a partial cache of at most
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
    """Rewrite the deprecated JDBC cache options to the current ones, as flink-connector-jdbc
    reads them (``JdbcDynamicTableFactory``).

    - ``lookup.cache.max-rows`` and ``lookup.cache.ttl`` come together or not at all (its
      ``checkAllOrNone``); one without the other is an error naming it.
    - They are read only without ``'lookup.cache'`` or with ``'NONE'`` (the legacy cache is
      built whatever NONE says): ``max-rows > 0`` and ``ttl > 0`` turn the partial cache on with
      ``ttl`` as its expire-after-write; otherwise no cache. ``caching-missing-key`` alone
      changes nothing.
    - With ``'lookup.cache'`` = ``'PARTIAL'`` or ``'FULL'`` the connector reads only the current
      names, so a deprecated option is an error naming the name to write instead.
    - A deprecated option and its current name both given with different values is an error.
    """
    out = {k: v for k, v in options.items() if k.lower() not in DEPRECATED}
    legacy = {k.lower(): (k, v) for k, v in options.items() if k.lower() in DEPRECATED}
    if not legacy:
        return Upgraded(out)
    result = Upgraded(out)
    cache = next((v for k, v in options.items() if k.lower() == CACHE), None)
    kind = None if cache is None else cache.strip().upper()
    if kind not in (None, "NONE"):
        written, value = next(iter(legacy.values()))
        current = DEPRECATED[written.lower()]
        raise ConfigurationError(
            written,
            value,
            f"{current!r} instead, or no {CACHE!r} (the legacy cache)",
            reason=f"with {CACHE!r} = {cache!r} Flink's JDBC connector reads only the current "
            "option names",
        )
    max_rows, ttl = legacy.get(LEGACY_MAX_ROWS), legacy.get(LEGACY_TTL)
    if (max_rows is None) != (ttl is None):
        written, value = max_rows if max_rows is not None else ttl  # type: ignore[misc]
        missing = LEGACY_TTL if max_rows is not None else LEGACY_MAX_ROWS
        raise ConfigurationError(
            written,
            value,
            f"{missing!r} given too, or neither",
            reason=f"Flink's JDBC connector takes both {LEGACY_MAX_ROWS!r} and {LEGACY_TTL!r} "
            "or none of them",
        )
    if max_rows is None or ttl is None:
        result.notes.append(
            f"{', '.join(repr(k) for k, _ in legacy.values())} without {LEGACY_MAX_ROWS!r} and "
            f"{LEGACY_TTL!r} turn no cache on, as in Flink's JDBC connector"
        )
        return result
    rows = parse_int(LEGACY_MAX_ROWS, max_rows[1], minimum=-(2**63))
    if rows <= 0 or parse_duration(LEGACY_TTL, ttl[1]) <= 0:
        result.notes.append(
            f"{LEGACY_MAX_ROWS!r} = {max_rows[1]!r} with {LEGACY_TTL!r} = {ttl[1]!r} turns no "
            "cache on, as in Flink's JDBC connector (both must be positive)"
        )
        return result
    out[CACHE] = "PARTIAL"
    result.notes.append(
        f"{LEGACY_MAX_ROWS!r} and {LEGACY_TTL!r} turn the partial cache on ({CACHE!r} = "
        f"'PARTIAL', entries expiring {ttl[1]} after they are written)"
    )
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
