"""What a shared store must do, and which stores there are (by URL scheme).

The tier speaks to a store only through :class:`SharedStore`: one batched read that also takes
the stampede leases of the keys it misses, one batched write, and a clear of a namespace. A new
store (memcached, a database, a cloud cache) is a class with these methods registered for its
URL schemes in :data:`_FACTORIES`; nothing else changes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol
from urllib.parse import urlsplit

#: A read's answer for one key: the stored bytes, or whether the caller now holds the key's
#: lease (True: fetch it and write it; False: another process holds it, wait for its value).
ReadResult = bytes | bool


class SharedStore(Protocol):
    """A key-value store shared by processes; every method may raise any exception (the tier
    counts it and goes to the service). Async methods run on one event loop."""

    async def connect(self) -> None:
        """Connect (and prepare what reads need) ahead of the first read."""
        ...

    async def read(self, keys: Sequence[bytes], lease_ms: int, token: bytes) -> list[ReadResult]:
        """For each key its value; for a key without one, try to take its lease for
        ``lease_ms`` (0: no leases, every absent key answers True). One round trip."""
        ...

    async def write(
        self, entries: Sequence[tuple[bytes, bytes]], ttl_ms: int, release: Sequence[bytes]
    ) -> int:
        """Store each ``(key, value)`` for ``ttl_ms``, then drop the leases of ``release``
        keys (with or without a value). One round trip; returns the bytes sent."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


class SharedStoreAdmin(Protocol):
    """The driver's side of a store (no event loop): invalidation."""

    def clear(self, pattern: bytes) -> int:
        """Delete every entry and lease matching ``pattern`` (a glob); the number deleted."""
        ...

    def close(self) -> None: ...


def _redis(url: str, timeout: float) -> SharedStore:
    from asyncio_lookup.lookup.l2.redis_store import RedisStore

    return RedisStore(url, timeout)


def _redis_admin(url: str, timeout: float) -> SharedStoreAdmin:
    from asyncio_lookup.lookup.l2.redis_store import RedisAdmin

    return RedisAdmin(url, timeout)


_FACTORIES: dict[str, tuple[Callable[[str, float], SharedStore], Callable[..., SharedStoreAdmin]]]
_FACTORIES = {scheme: (_redis, _redis_admin) for scheme in ("redis", "rediss", "unix")}


def store_schemes() -> tuple[str, ...]:
    """The URL schemes a shared store exists for."""
    return tuple(_FACTORIES)


def scheme_of(url: str) -> str:
    try:
        return urlsplit(url).scheme.lower()
    except ValueError:
        return ""


def open_store(url: str, timeout: float) -> SharedStore:
    """The store ``url`` names (connecting lazily, on first use); ``timeout`` bounds a
    connect and each command."""
    return _FACTORIES[scheme_of(url)][0](url, timeout)


def open_admin(url: str, timeout: float) -> SharedStoreAdmin:
    """The driver's handle on the store ``url`` names."""
    return _FACTORIES[scheme_of(url)][1](url, timeout)
