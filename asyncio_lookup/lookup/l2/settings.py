"""The shared cache's settings (the ``lookup.shared-cache.*`` options) and its namespace.

Every entry of a table lives under one key prefix, ``alk:{<namespace>}:<key columns>:``. The
namespace defaults to a digest of what gives a key its meaning and a value its shape — the
table's name, the connector's target and the declared schema — so a changed schema (or
another service) never reads the entries written under the old one. The braces are a Redis
Cluster hash tag: a table's entries and leases share one slot, which the batched read script
needs. The key columns are part of the prefix whatever the namespace: a key tuple means
nothing without them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from asyncio_lookup.masking import mask_url

DEFAULT_TTL = 3600.0
DEFAULT_TIMEOUT = 0.1
DEFAULT_LEASE = 2.0
DEFAULT_MAX_VALUE_SIZE = 64 * 1024


def default_namespace(table: str, target: str, schema: str) -> str:
    """A digest of the table's name, its connector's target and its declared schema."""
    text = "\x00".join((table, target, schema))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def key_prefix(namespace: str, key_columns: Sequence[str]) -> bytes:
    """The prefix of every entry of ``namespace`` looked up by ``key_columns``."""
    columns = hashlib.sha256("\x00".join(key_columns).encode("utf-8", "surrogatepass"))
    return f"alk:{{{namespace}}}:{columns.hexdigest()[:12]}:".encode("utf-8", "surrogatepass")


def namespace_pattern(namespace: str) -> bytes:
    """A SCAN pattern for every entry and lease of ``namespace`` (glob characters escaped)."""
    escaped = "".join("\\" + c if c in "*?[]\\" else c for c in namespace)
    return f"alk:{{{escaped}}}:*".encode("utf-8", "surrogatepass")


def mask_password(url: str) -> str:
    """``url`` with its password (in the user part or a ``?password=`` parameter) replaced by
    ``***`` (every message and repr shows this)."""
    return mask_url(url)


@dataclass(frozen=True)
class SharedCacheSettings:
    """What the shared cache of one table does; times in seconds.

    ``namespace`` None: :func:`default_namespace` of the table (filled in by the join).
    ``lease`` 0: no stampede control (every process that misses a key fetches it).
    """

    url: str
    ttl: float = DEFAULT_TTL
    cache_missing_key: bool = True
    namespace: str | None = None
    max_value_size: int = DEFAULT_MAX_VALUE_SIZE
    timeout: float = DEFAULT_TIMEOUT
    lease: float = DEFAULT_LEASE

    def __repr__(self) -> str:
        return (
            f"SharedCacheSettings(url={mask_password(self.url)!r}, ttl={self.ttl}, "
            f"cache_missing_key={self.cache_missing_key}, namespace={self.namespace!r}, "
            f"max_value_size={self.max_value_size}, timeout={self.timeout}, lease={self.lease})"
        )
