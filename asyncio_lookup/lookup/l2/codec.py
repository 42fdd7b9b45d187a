"""Keys and values of the shared cache as bytes: unambiguous, exact, and checked on read.

A wrong key's value is the worst bug a lookup cache can have, so:

- A key tuple is written as tagged JSON (``encode_key``): every part keeps its type (``1``,
  ``"1"``, ``1.0``, ``true`` and ``Decimal("1")`` are five different keys), strings are JSON
  escaped (separators, quotes, newlines and unicode cannot run into the next part; ASCII only,
  so a lone surrogate encodes too) and ``None`` is ``null``.
- An entry (``encode_entry``) repeats the full encoded key and the namespace; a read whose
  entry names another key or namespace is a miss (:class:`EntryMismatch`), never a value.
- Values are tagged JSON too: JSON's own types stand for themselves (``str``, ``int`` of any
  size, finite ``float`` via ``repr`` (exact), ``bool``, ``None``, ``dict`` with ``str`` keys);
  every JSON array starts with a tag saying what it is: ``["L", ...]`` list, ``["T", ...]``
  tuple, ``["D", "1.20"]`` Decimal, ``["d", iso]`` date, ``["t", iso]`` datetime (its UTC
  offset kept), ``["h", iso]`` time, ``["s", days, seconds, µs]`` timedelta, ``["b", base64]``
  bytes, ``["f", "nan"]`` non-finite float, ``["P", [k, v], ...]`` a dict with other keys,
  ``["u", hex]`` uuid, ``["a" | "I" | "n", text]`` an IP address, interface or network (what
  asyncpg returns for ``uuid``, ``inet`` and ``cidr`` columns). A row is a dict with ``str``
  keys. Anything else (a numpy scalar, a user class, a subclass of a built-in) raises
  :class:`NotEncodable`: such a value is served but never shared, rather than shared inexactly.
- An entry carries the wall-clock time it was written at, so that a reader whose ``.ttl`` is
  shorter than the writer's reads an older entry as a miss (:class:`StaleEntry`).
- No ``pickle``: a shared store is a network service; reading must never run code.

An empty result (a missing key) is the marker ``M``, distinct from an absent entry (a read of
an absent entry is ``None`` at the store).
"""

from __future__ import annotations

import base64
import ipaddress
import json
import math
import time as clock
import uuid
from collections.abc import Sequence
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from asyncio_lookup.lookup.functions import Key, Row

#: The entry format's version: bump it when the encoding changes (old entries then miss).
FORMAT = b"alk2"
_MISSING = b"M"
_SEP = b"\n"  # never inside an encoded key or value: JSON escapes control characters


class NotEncodable(ValueError):
    """A value the codec cannot round-trip exactly; it is not written to the shared cache."""


class EntryMismatch(ValueError):
    """An entry that is not this key's (another key, namespace or format): read as a miss."""


class StaleEntry(ValueError):
    """An entry written longer ago than the reader's TTL: read as a miss."""


class OtherFormat(EntryMismatch):
    """An entry of another format version (a process of another release wrote it): read as a
    miss, quietly: after an upgrade every entry of the old one is such an entry."""


_IP_TAGS: dict[type, str] = {
    ipaddress.IPv4Address: "a",
    ipaddress.IPv6Address: "a",
    ipaddress.IPv4Interface: "I",
    ipaddress.IPv6Interface: "I",
    ipaddress.IPv4Network: "n",
    ipaddress.IPv6Network: "n",
}
_IP_TYPES: dict[str, Any] = {
    "a": ipaddress.ip_address,
    "I": ipaddress.ip_interface,
    "n": ipaddress.ip_network,
}


def _tag(value: Any) -> Any:
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float:
        return value if math.isfinite(value) else ["f", repr(value)]
    if kind is dict:
        if all(type(k) is str for k in value):
            return {k: _tag(v) for k, v in value.items()}
        return ["P", *([_tag(k), _tag(v)] for k, v in value.items())]
    if kind is list:
        return ["L", *map(_tag, value)]
    if kind is tuple:
        return ["T", *map(_tag, value)]
    if kind is Decimal:
        return ["D", str(value)]
    if kind is datetime:  # before date: a datetime is a date
        return ["t", value.isoformat()]
    if kind is date:
        return ["d", value.isoformat()]
    if kind is time:
        return ["h", value.isoformat()]
    if kind is timedelta:
        return ["s", value.days, value.seconds, value.microseconds]
    if kind is bytes:
        return ["b", base64.b64encode(value).decode("ascii")]
    if kind is uuid.UUID:
        return ["u", value.hex]
    ip_tag = _IP_TAGS.get(kind)
    if ip_tag is not None:
        return [ip_tag, str(value)]
    raise NotEncodable(f"a {kind.__module__}.{kind.__qualname__} value cannot be shared exactly")


def _untag(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return {k: _untag(v) for k, v in value.items()}
    if kind is not list:
        return value
    tag = value[0]
    if tag == "L":
        return [_untag(v) for v in value[1:]]
    if tag == "T":
        return tuple(_untag(v) for v in value[1:])
    if tag == "D":
        return Decimal(value[1])
    if tag == "t":
        return datetime.fromisoformat(value[1])
    if tag == "d":
        return date.fromisoformat(value[1])
    if tag == "h":
        return time.fromisoformat(value[1])
    if tag == "s":
        return timedelta(days=value[1], seconds=value[2], microseconds=value[3])
    if tag == "b":
        return base64.b64decode(value[1])
    if tag == "f":
        return float(value[1])
    if tag == "P":
        return {_untag(k): _untag(v) for k, v in value[1:]}
    if tag == "u":
        return uuid.UUID(hex=value[1])
    if tag in _IP_TYPES:
        return _IP_TYPES[tag](value[1])
    raise EntryMismatch(f"unknown tag {tag!r}")


# ensure_ascii: lone surrogates survive; allow_nan=False: non-finite floats are tagged. One
# encoder for every call (json.dumps with options builds one per call).
_ENCODE = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode


def _dumps(value: Any) -> bytes:
    try:
        return _ENCODE(value).encode()
    except (ValueError, RecursionError) as error:  # an int over 4,300 digits, deep nesting
        raise NotEncodable(f"{type(error).__name__}: {error}") from None


def encode_key(key: Key) -> bytes:
    """The key tuple's unambiguous bytes (raises :class:`NotEncodable`)."""
    if type(key) is not tuple:
        raise NotEncodable(f"a lookup key is a tuple, not {type(key).__name__}")
    return _dumps([_tag(part) for part in key])


def _row(row: Row) -> Any:
    if type(row) is not dict or not all(type(k) is str for k in row):
        raise NotEncodable("a row is shared only as a dict with text column names")
    return _tag(row)


def now_ms() -> int:
    """The wall clock in milliseconds, as entries are stamped."""
    return int(clock.time() * 1000)


def encode_entry(
    namespace: bytes, encoded_key: bytes, rows: Sequence[Row], written_ms: int | None = None
) -> bytes:
    """The stored bytes of ``rows`` (an empty sequence: the missing-key marker), stamped with
    ``written_ms`` (default: now)."""
    body = _dumps([_row(row) for row in rows]) if rows else _MISSING
    stamp = str(now_ms() if written_ms is None else written_ms).encode()
    return _SEP.join((FORMAT, namespace, encoded_key, stamp, body))


def decode_entry(
    namespace: bytes, encoded_key: bytes, data: bytes, max_age_ms: int | None = None
) -> list[Row]:
    """The rows of an entry read for ``encoded_key`` in ``namespace``; raises
    :class:`EntryMismatch` when the entry is another key's, another namespace's or another
    format's (or damaged), :class:`StaleEntry` when it was written more than ``max_age_ms``
    ago."""
    parts = data.split(_SEP, 4)
    if parts[0] != FORMAT and parts[0].startswith(b"alk"):
        raise OtherFormat(f"an entry of format {parts[0][:8]!r}, not {FORMAT!r}")
    if len(parts) != 5 or parts[0] != FORMAT:
        raise EntryMismatch("not an entry of this format")
    if parts[1] != namespace or parts[2] != encoded_key:
        raise EntryMismatch("an entry of another key or namespace")
    if not parts[3].isdigit():
        raise EntryMismatch("damaged entry: no time stamp")
    if max_age_ms is not None and now_ms() - int(parts[3]) > max_age_ms:
        raise StaleEntry("written longer ago than this reader's TTL")
    body = parts[4]
    if body == _MISSING:
        return []
    try:
        rows = json.loads(body)
        if type(rows) is not list or not all(type(r) is dict for r in rows):
            raise EntryMismatch("rows are not a list of objects")
        return [_untag(row) for row in rows]
    except EntryMismatch:
        raise
    except Exception as error:  # whatever a damaged body makes json or a tag raise
        raise EntryMismatch(f"damaged entry: {type(error).__name__}: {error}") from None
