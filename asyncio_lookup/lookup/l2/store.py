"""What a shared store must do; it imports no store (:mod:`.stores` opens them by URL scheme).

The tier speaks to a store only through :class:`SharedStore`: one batched read that also takes
the stampede leases of the keys it misses, one batched write, and a clear of a namespace. A new
store (memcached, a database, a cloud cache) is a class with these methods registered for its
URL schemes in :data:`.stores._FACTORIES`; nothing else changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

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
        self,
        entries: Sequence[tuple[bytes, bytes]],
        ttl_ms: int,
        release: Sequence[bytes],
        token: bytes,
    ) -> int:
        """Store each ``(key, value)`` for ``ttl_ms``, then drop the leases of ``release``
        keys that ``token`` still holds (a lease another process has taken since stays).
        One round trip; returns the bytes sent."""
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
