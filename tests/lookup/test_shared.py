"""Shared: opened once per key, reference-counted, replaced or declined on the acquirer's word."""

from __future__ import annotations

import asyncio

import pytest

from asyncio_lookup.lookup.shared import Lease, Reuse, Shared


class Opener:
    def __init__(self, fail: bool = False) -> None:
        self.calls = 0
        self.fail = fail
        self.gate = asyncio.Event()

    async def __call__(self) -> str:
        self.calls += 1
        await self.gate.wait()
        if self.fail:
            raise ConnectionRefusedError("refused")
        return f"resource {self.calls}"


async def test_concurrent_acquirers_share_one_open_and_count_as_users() -> None:
    shared: Shared[str, str] = Shared()
    opener = Opener()
    pending = [asyncio.ensure_future(shared.acquire("k", opener)) for _ in range(4)]
    await asyncio.sleep(0)
    opener.gate.set()
    leases = await asyncio.gather(*pending)
    assert opener.calls == 1 and len({id(lease) for lease in leases}) == 1
    lease = leases[0]
    assert lease is not None and lease.resource == "resource 1" and lease.users == 4
    assert [shared.release(lease) for _ in range(4)] == [False, False, False, True]
    assert lease.idle_since is not None and shared.keys() == ["k"]  # idle, not forgotten
    assert not shared.release(lease)  # never below zero


async def test_a_failed_open_is_kept_by_nobody_and_every_waiter_gets_its_error() -> None:
    shared: Shared[str, str] = Shared()
    opener = Opener(fail=True)
    pending = [asyncio.ensure_future(shared.acquire("k", opener)) for _ in range(3)]
    await asyncio.sleep(0)
    opener.gate.set()
    results = await asyncio.gather(*pending, return_exceptions=True)
    assert all(isinstance(r, ConnectionRefusedError) for r in results)
    assert shared.keys() == [] and opener.calls == 1
    good = Opener()
    good.gate.set()
    assert (await shared.acquire("k", good)) is not None  # the next acquire starts afresh


async def test_replace_leaves_the_old_lease_to_its_users_and_decline_returns_none() -> None:
    shared: Shared[str, str] = Shared()
    opener = Opener()
    opener.gate.set()
    first = await shared.acquire("k", opener)
    assert first is not None

    def replace(_lease: Lease[str]) -> Reuse:
        return Reuse.REPLACE

    second = await shared.acquire("k", opener, reuse=replace)
    assert second is not None and second is not first
    assert (first.users, second.users, shared.get("k")) == (1, 1, second)
    assert await shared.acquire("k", opener, reuse=lambda _l: Reuse.DECLINE) is None
    assert second.users == 1
    assert shared.release(first) and shared.get("k") is second
    assert not shared.evict(first) and shared.evict(second) and shared.keys() == []


async def test_a_cancelled_waiter_gives_back_its_use() -> None:
    shared: Shared[str, str] = Shared()
    opener = Opener()
    opening = asyncio.ensure_future(shared.acquire("k", opener))
    await asyncio.sleep(0)
    waiter = asyncio.ensure_future(shared.acquire("k", opener))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    opener.gate.set()
    lease = await opening
    assert lease is not None and lease.users == 1
