"""Cache scopes: one cache per lookup table per Python worker process (SEMANTICS §2.3 Scope).

Joins through one ``LookupTable`` may need chains of their own (sync and async, different
lookup-miss retries), yet they must share that table's cache. Chains created with the same
``cache_scope`` (and key columns) share, from :meth:`LookupChain.open` on, one partial cache or
one FULL cache (one snapshot, one reload thread) and the metric group its counts go to. The
first chain to open a scope opens its cache; the others adopt it. The scope is reference
counted: the cache is closed when the last chain using it closes (the chain registry closes idle
chains, so a scope lives as long as a chain of its table stays open in the process).

A FULL cache whose latest load failed is not handed to a chain opened later: that chain starts a
fresh load (SEMANTICS §2.4), while the chains still holding the failed one keep it until closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from asyncio_lookup.lookup.cache import LookupCache
from asyncio_lookup.lookup.full_cache import FullCache
from asyncio_lookup.lookup.metrics import CacheMetricGroup

ScopeKey = tuple[str, tuple[str, ...]]


@dataclass(eq=False)
class SharedCache:
    """The cache of one scope: exactly one of ``cache`` / ``full_cache`` is set."""

    key: ScopeKey
    cache: LookupCache | None
    full_cache: FullCache | None
    metrics: CacheMetricGroup
    loop: asyncio.AbstractEventLoop
    opening: asyncio.Future[None]
    users: int = 1

    @property
    def failed(self) -> bool:
        return self.full_cache is not None and self.full_cache.failed


_scopes: dict[ScopeKey, SharedCache] = {}
_lock = threading.Lock()  # release may come from a thread other than the loop's


def scope_key(cache_scope: str, key_columns: Sequence[str]) -> ScopeKey:
    """Key columns are part of the identity: a key tuple means nothing without them."""
    return (cache_scope, tuple(key_columns))


async def acquire_cache(
    key: ScopeKey,
    cache: LookupCache | None,
    full_cache: FullCache | None,
    metrics: CacheMetricGroup,
) -> SharedCache | None:
    """The opened cache of scope ``key``; the caller's (unopened) ``cache`` or ``full_cache``
    and ``metrics`` become it when the scope has none yet (they are opened here).

    Returns None when the scope is being opened on another event loop (the caller then opens
    and keeps its own cache). Raises the open's error (nobody keeps a cache that failed to
    open). Pair with :func:`release_cache`.
    """
    loop = asyncio.get_running_loop()
    opener = False
    with _lock:
        shared = _scopes.get(key)
        if shared is not None and shared.opening.done() and shared.failed:
            del _scopes[key]  # its users keep it; a newcomer loads afresh
            shared = None
        if shared is None:
            shared = SharedCache(key, cache, full_cache, metrics, loop, loop.create_future())
            shared.opening.add_done_callback(lambda f: f.cancelled() or f.exception())
            _scopes[key] = shared
            opener = True
        elif not shared.opening.done() and shared.loop is not loop:
            return None
        else:
            shared.users += 1
    if not opener:
        if not shared.opening.done():
            try:
                await asyncio.shield(shared.opening)
            except BaseException:
                release_cache(shared)
                raise
        return shared
    try:
        if full_cache is not None:
            await full_cache.open()
        elif cache is not None:
            cache.open(metrics)
    except BaseException as error:
        with _lock:
            if _scopes.get(key) is shared:
                del _scopes[key]
            shared.users = 0
        if isinstance(error, Exception):
            shared.opening.set_exception(error)
        else:
            shared.opening.cancel()
        raise
    shared.opening.set_result(None)
    return shared


def release_cache(shared: SharedCache) -> None:
    """A chain is done with ``shared``; the last user closes the cache (no loop needed)."""
    with _lock:
        if shared.users <= 0:
            return
        shared.users -= 1
        if shared.users > 0:
            return
        if _scopes.get(shared.key) is shared:
            del _scopes[shared.key]
    with contextlib.suppress(Exception):
        if shared.full_cache is not None:
            shared.full_cache.close(timeout=0)
        if shared.cache is not None:
            shared.cache.close()


def scope_keys() -> list[ScopeKey]:
    """The scopes with a cache in this process (for inspection and tests)."""
    with _lock:
        return list(_scopes)
