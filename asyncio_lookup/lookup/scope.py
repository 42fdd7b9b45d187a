"""Cache scopes: one cache per lookup table per Python worker process (docs/semantics.md §2.3
Scope).

Joins through one ``LookupTable`` may need chains of their own (sync and async, different
lookup-miss retries), yet they must share that table's cache. Chains created with the same
``cache_scope`` (and key columns) share, from :meth:`LookupChain.open` on, one partial cache or
one FULL cache (one snapshot, one reload thread) and the metric group its counts go to. The
first chain to open a scope opens its cache; the others adopt it. The scope is reference
counted: the cache is closed when the last chain using it closes (the chain registry closes idle
chains, so a scope lives as long as a chain of its table stays open in the process).

A FULL cache whose latest load failed is not handed to a chain opened later: that chain starts
a fresh load (docs/semantics.md §2.4), while the chains still holding the failed one keep it
until closed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

from asyncio_lookup.lookup.cache import LookupCache
from asyncio_lookup.lookup.full_cache import FullCache
from asyncio_lookup.lookup.metrics import CacheMetricGroup
from asyncio_lookup.lookup.shared import Lease, Reuse, Shared

ScopeKey = tuple[str, tuple[str, ...]]


@dataclass(eq=False)
class SharedCache:
    """The cache of one scope: exactly one of ``cache`` / ``full_cache`` is set."""

    cache: LookupCache | None
    full_cache: FullCache | None
    metrics: CacheMetricGroup

    @property
    def failed(self) -> bool:
        return self.full_cache is not None and self.full_cache.failed


CacheLease = Lease[SharedCache]

_scopes: Shared[ScopeKey, SharedCache] = Shared()


def scope_key(cache_scope: str, key_columns: Sequence[str]) -> ScopeKey:
    """Key columns are part of the identity: a key tuple means nothing without them."""
    return (cache_scope, tuple(key_columns))


async def acquire_cache(
    key: ScopeKey,
    cache: LookupCache | None,
    full_cache: FullCache | None,
    metrics: CacheMetricGroup,
) -> CacheLease | None:
    """The opened cache of scope ``key``; the caller's (unopened) ``cache`` or ``full_cache``
    and ``metrics`` become it when the scope has none yet (they are opened here).

    Returns None when the scope is being opened on another event loop (the caller then opens
    and keeps its own cache). Raises the open's error (nobody keeps a cache that failed to
    open). Pair with :func:`release_cache`.
    """
    loop = asyncio.get_running_loop()

    def reuse(lease: CacheLease) -> Reuse:
        if lease.resource is not None and lease.resource.failed:
            return Reuse.REPLACE  # its users keep it; a newcomer loads afresh
        if lease.resource is None and lease.loop is not loop:
            return Reuse.DECLINE
        return Reuse.JOIN

    async def open_cache() -> SharedCache:
        if full_cache is not None:
            await full_cache.open()
        elif cache is not None:
            cache.open(metrics)
        return SharedCache(cache, full_cache, metrics)

    return await _scopes.acquire(key, open_cache, reuse=reuse)


def release_cache(lease: CacheLease) -> None:
    """A chain is done with the scope's cache; the last user closes it (no loop needed)."""
    if not _scopes.release(lease):
        return
    _scopes.evict(lease)
    shared = lease.resource
    if shared is None:
        return
    with contextlib.suppress(Exception):
        if shared.full_cache is not None:
            shared.full_cache.close(timeout=0)
        if shared.cache is not None:
            shared.cache.close()


def scope_keys() -> list[ScopeKey]:
    """The scopes with a cache in this process (for inspection and tests)."""
    return _scopes.keys()
