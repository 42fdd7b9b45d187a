"""One opened lookup chain per lookup table per Python worker process (SEMANTICS §2.3 Scope).

Spark reuses Python workers across tasks; every task of this process that joins through the same
``LookupTable`` gets the same chain, so its cache (or full-cache snapshot) and its connection
pools serve the next task too. A released chain stays open while idle; it is closed after
``idle_timeout`` seconds unused (checked when a chain is next acquired) or at process exit.
A chain whose FULL load failed, or that was opened on another event loop, is replaced.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from asyncio_lookup.lookup.chain import LookupChain

DEFAULT_IDLE_TIMEOUT = 600.0


@dataclass
class _Slot:
    loop: asyncio.AbstractEventLoop
    opening: asyncio.Future[LookupChain]
    chain: LookupChain | None = None
    users: int = 0
    idle_since: float | None = field(default=None)


_slots: dict[str, _Slot] = {}
# acquire runs on the loop's thread; release may come from the task's thread
_users_lock = threading.Lock()
_settings = {"idle_timeout": DEFAULT_IDLE_TIMEOUT}


def set_idle_timeout(seconds: float) -> None:
    """How long an unused chain stays open (default 600 s)."""
    _settings["idle_timeout"] = float(seconds)


def _usable(slot: _Slot, loop: asyncio.AbstractEventLoop) -> bool:
    return slot.loop is loop and not (slot.chain is not None and slot.chain.failed)


async def _discard(slot: _Slot, loop: asyncio.AbstractEventLoop) -> None:
    chain = slot.chain
    if chain is None:
        return
    if slot.loop is loop:
        with contextlib.suppress(Exception):
            await chain.close()
    else:  # its loop is gone or elsewhere: close what needs no loop, leave the rest to GC
        with contextlib.suppress(Exception):
            chain.abandon()


async def _sweep(loop: asyncio.AbstractEventLoop) -> None:
    now = time.monotonic()
    timeout = _settings["idle_timeout"]
    doomed: list[_Slot] = []
    with _users_lock:
        for table_id, slot in list(_slots.items()):
            unused = slot.users == 0 and slot.chain is not None
            idle = slot.idle_since is not None and now - slot.idle_since >= timeout
            if unused and (idle or slot.loop is not loop):
                del _slots[table_id]
                doomed.append(slot)
    for slot in doomed:
        await _discard(slot, loop)


async def acquire_chain(table_id: str, factory: Callable[[], LookupChain]) -> LookupChain:
    """The opened chain for ``table_id`` in this process, created by ``factory`` and opened once.

    Concurrent acquirers wait for the one open. If the open fails, nobody keeps the chain and
    every waiter gets the error; the next acquire starts afresh. Pair with :func:`release_chain`.
    """
    loop = asyncio.get_running_loop()
    await _sweep(loop)
    slot = _slots.get(table_id)
    if slot is not None and not _usable(slot, loop) and slot.chain is not None:
        del _slots[table_id]
        await _discard(slot, loop)
        slot = None
    if slot is not None:
        with _users_lock:
            slot.users += 1
            slot.idle_since = None
        if slot.chain is not None:
            return slot.chain
        try:
            return await asyncio.shield(slot.opening)
        except BaseException:
            with _users_lock:
                slot.users -= 1
            raise
    slot = _Slot(loop=loop, opening=loop.create_future(), users=1)
    slot.opening.add_done_callback(lambda f: f.cancelled() or f.exception())
    _slots[table_id] = slot
    chain: LookupChain | None = None
    try:
        chain = factory()
        await chain.open()
    except BaseException as error:
        if _slots.get(table_id) is slot:
            del _slots[table_id]
        if chain is not None:
            with contextlib.suppress(Exception):
                await chain.close()
        if isinstance(error, Exception):
            slot.opening.set_exception(error)
        else:
            slot.opening.cancel()
        raise
    slot.chain = chain
    slot.opening.set_result(chain)
    return chain


def release_chain(table_id: str, chain: LookupChain | None = None) -> None:
    """A task is done with the chain of ``table_id``; it stays open for the next task.

    Pass the ``chain`` the task acquired: if it has been replaced meanwhile (its FULL reload
    failed), the release is then not counted against its successor, which other tasks use.
    """
    slot = _slots.get(table_id)
    if slot is None or (chain is not None and slot.chain is not chain):
        return
    with _users_lock:
        slot.users = max(0, slot.users - 1)
        if slot.users == 0:
            slot.idle_since = time.monotonic()


def chain_ids() -> list[str]:
    """The table ids with a chain in this process (for inspection and tests)."""
    return list(_slots)


async def close_all_chains() -> None:
    """Close every chain of this process (those of other loops as far as possible)."""
    loop = asyncio.get_running_loop()
    slots = list(_slots.values())
    _slots.clear()
    for slot in slots:
        await _discard(slot, loop)


@atexit.register
def _close_at_exit() -> None:
    slots = list(_slots.values())
    _slots.clear()
    for slot in slots:
        chain = slot.chain
        if chain is None:
            continue
        try:
            if not slot.loop.is_closed() and not slot.loop.is_running():
                slot.loop.run_until_complete(chain.close())
            else:
                chain.abandon()
        except Exception:  # best effort at interpreter exit
            with contextlib.suppress(Exception):
                chain.abandon()
