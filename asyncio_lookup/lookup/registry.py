"""One opened lookup chain per lookup table per Python worker process (docs/semantics.md §2.3
Scope).

Spark reuses Python workers across tasks; every task of this process that joins through the same
``LookupTable`` gets the same chain, so its cache (or full-cache snapshot) and its connection
pools serve the next task too. A released chain stays open while idle; it is closed after
``idle_timeout`` seconds unused, or when more than ``MAX_IDLE_CHAINS`` are idle (the least
recently used first: a job that builds a ``LookupTable`` per micro-batch would otherwise hold
a pool per table), both checked when a chain is next acquired; or at process exit.
A chain whose FULL load failed, or that was opened on another event loop, is replaced; its
successor reports what it counted and no task reported.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import time
from collections.abc import Callable

from asyncio_lookup.lookup.chain import LookupChain
from asyncio_lookup.lookup.shared import Lease, Shared

log = logging.getLogger(__name__)

DEFAULT_IDLE_TIMEOUT = 600.0
#: The most idle (released, unused) chains a process keeps open: more tables than a job joins
#: at once, fewer pools than a database's connection limit.
MAX_IDLE_CHAINS = 32

_chains: Shared[str, LookupChain] = Shared()
_settings = {"idle_timeout": DEFAULT_IDLE_TIMEOUT}


def set_idle_timeout(seconds: float) -> None:
    """How long an unused chain stays open (default 600 s)."""
    _settings["idle_timeout"] = float(seconds)


async def _discard(lease: Lease[LookupChain], loop: asyncio.AbstractEventLoop) -> None:
    chain = lease.resource
    if chain is None:
        return
    if lease.loop is loop:
        with contextlib.suppress(Exception):
            await chain.close()
    else:  # its loop is gone or elsewhere: close what needs no loop, leave the rest to GC
        with contextlib.suppress(Exception):
            chain.abandon()


async def _sweep(loop: asyncio.AbstractEventLoop, acquiring: str) -> None:
    """Close what is idle too long, from another loop, or beyond the cap (never the chain
    ``acquiring`` is about to take: in a cycle it would be the least recently used)."""
    now = time.monotonic()
    timeout = _settings["idle_timeout"]

    def doomed(lease: Lease[LookupChain]) -> bool:
        unused = lease.users == 0 and lease.opened
        idle = lease.idle_since is not None and now - lease.idle_since >= timeout
        return unused and (idle or lease.loop is not loop)

    for lease in _chains.evict_where(doomed):
        await _discard(lease, loop)
    idle = _chains.leases_where(
        lambda lease: lease.users == 0 and lease.opened and lease.key != acquiring
    )
    idle.sort(key=lambda lease: lease.idle_since if lease.idle_since is not None else now)
    for lease in idle[: max(0, len(idle) - MAX_IDLE_CHAINS)]:
        if lease.users == 0 and _chains.evict(lease):
            await _discard(lease, loop)


async def acquire_chain(table_id: str, factory: Callable[[], LookupChain]) -> LookupChain:
    """The opened chain for ``table_id`` in this process, created by ``factory`` and opened once.

    Concurrent acquirers wait for the one open. If the open fails, nobody keeps the chain and
    every waiter gets the error; the next acquire starts afresh. Pair with :func:`release_chain`.
    """
    loop = asyncio.get_running_loop()
    await _sweep(loop, table_id)
    lease = _chains.get(table_id)
    chain = None if lease is None else lease.resource
    replaced = None
    if lease is not None and chain is not None and (lease.loop is not loop or chain.failed):
        _chains.evict(lease)
        await _discard(lease, loop)
        replaced = chain

    async def open_chain() -> LookupChain:
        chain = factory()
        try:
            await chain.open()
        except BaseException:
            with contextlib.suppress(Exception):
                await chain.close()
            raise
        return chain

    acquired = await _chains.acquire(table_id, open_chain)
    assert acquired is not None and acquired.resource is not None  # JOIN never declines
    fresh = acquired.resource
    if replaced is not None and fresh is not replaced:
        # its failed reload (and what else no task reported) reaches the next task's report
        fresh.metrics.inherit(replaced.metrics)
        if replaced.failed and fresh.full_cache is not None:  # as a good reload says it
            log.warning(
                "full cache of %s: loaded again after its failed reload; lookups are served again",
                fresh.full_cache.name or "lookup table",
            )
    return fresh


def release_chain(table_id: str, chain: LookupChain | None = None) -> None:
    """A task is done with the chain of ``table_id``; it stays open for the next task.

    Pass the ``chain`` the task acquired: if it has been replaced meanwhile (its FULL reload
    failed), the release is then not counted against its successor, which other tasks use.
    """
    lease = _chains.get(table_id)
    if lease is None or (chain is not None and lease.resource is not chain):
        return
    _chains.release(lease)


def chain_ids() -> list[str]:
    """The table ids with a chain in this process (for inspection and tests)."""
    return _chains.keys()


async def close_all_chains() -> None:
    """Close every chain of this process (those of other loops as far as possible)."""
    loop = asyncio.get_running_loop()
    for lease in _chains.drain():
        await _discard(lease, loop)


@atexit.register
def _close_at_exit() -> None:
    for lease in _chains.drain():
        chain = lease.resource
        if chain is None:
            continue
        try:
            if not lease.loop.is_closed() and not lease.loop.is_running():
                lease.loop.run_until_complete(chain.close())
            else:
                chain.abandon()
        except Exception:  # best effort at interpreter exit
            with contextlib.suppress(Exception):
                chain.abandon()
