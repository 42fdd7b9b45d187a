"""Objects opened once per process and shared, reference-counted, by every task that needs them.

Spark reuses a Python worker for many tasks. What is costly to open (a lookup chain with its
connection pools, a cache with its snapshot) is opened by the first task that asks for it and
handed to the next ones: :class:`Shared` is that registry for one kind of object, keyed by
whatever names it. A :class:`Lease` is one entry: the object, the loop it was opened on and its
number of users. The first acquirer opens; concurrent acquirers wait for that open; a failed
open is kept by nobody and every waiter gets its error. What happens when the last user leaves
(close at once, or stay open while idle) is the caller's choice: :meth:`Shared.release` says.
"""

from __future__ import annotations

import asyncio
import enum
import threading
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

K = TypeVar("K", bound=Hashable)
R = TypeVar("R")


class Reuse(enum.Enum):
    """What an acquirer does with the lease it finds: join it, replace it with a fresh one
    (its users keep theirs), or decline it (:meth:`Shared.acquire` then returns None)."""

    JOIN = "join"
    REPLACE = "replace"
    DECLINE = "decline"


@dataclass(eq=False)
class Lease(Generic[R]):
    """One shared object: ``resource`` once opened, ``users`` holding it, ``idle_since``
    (monotonic seconds) since the last one left."""

    key: Hashable
    loop: asyncio.AbstractEventLoop
    opening: asyncio.Future[R]
    resource: R | None = None
    users: int = 1
    idle_since: float | None = None

    @property
    def opened(self) -> bool:
        return self.resource is not None


def _join(_lease: Lease[R]) -> Reuse:
    return Reuse.JOIN


class Shared(Generic[K, R]):
    """The leases of one kind of object in this process. Acquire on an event loop; release
    from any thread."""

    def __init__(self) -> None:
        self._leases: dict[K, Lease[R]] = {}
        self._lock = threading.Lock()

    def get(self, key: K) -> Lease[R] | None:
        return self._leases.get(key)

    def keys(self) -> list[K]:
        with self._lock:
            return list(self._leases)

    def evict(self, lease: Lease[R]) -> bool:
        """Forget ``lease`` (if it is still the one for its key); its users keep it."""
        key = cast(K, lease.key)
        with self._lock:
            if self._leases.get(key) is lease:
                del self._leases[key]
                return True
            return False

    def leases_where(self, wanted: Callable[[Lease[R]], bool]) -> list[Lease[R]]:
        """The leases for which ``wanted`` is true (checked under the lock)."""
        with self._lock:
            return [lease for lease in self._leases.values() if wanted(lease)]

    def evict_where(self, doomed: Callable[[Lease[R]], bool]) -> list[Lease[R]]:
        """Forget and return every lease for which ``doomed`` is true (checked under the lock)."""
        with self._lock:
            gone = [(k, lease) for k, lease in self._leases.items() if doomed(lease)]
            for key, _lease in gone:
                del self._leases[key]
        return [lease for _key, lease in gone]

    async def acquire(
        self,
        key: K,
        open: Callable[[], Awaitable[R]],
        *,
        reuse: Callable[[Lease[R]], Reuse] = _join,
    ) -> Lease[R] | None:
        """The lease of ``key`` with one more user, opened by ``open()`` if there is none (or
        ``reuse`` replaces the one there is). None when ``reuse`` declines. Raises the open's
        error. Pair with :meth:`release`."""
        loop = asyncio.get_running_loop()
        with self._lock:
            lease = self._leases.get(key)
            decision = Reuse.REPLACE if lease is None else reuse(lease)
            if decision is Reuse.DECLINE:
                return None
            if lease is not None and decision is Reuse.JOIN:
                lease.users += 1
                lease.idle_since = None
            else:
                lease = Lease(key, loop, loop.create_future())
                lease.opening.add_done_callback(lambda f: f.cancelled() or f.exception())
                self._leases[key] = lease
                decision = Reuse.REPLACE
        if decision is Reuse.JOIN:
            if not lease.opened:
                try:
                    await asyncio.shield(lease.opening)
                except BaseException:
                    self.release(lease)
                    raise
            return lease
        try:
            resource = await open()
        except BaseException as error:
            self.evict(lease)
            with self._lock:
                lease.users = 0
            if isinstance(error, Exception):
                lease.opening.set_exception(error)
            else:
                lease.opening.cancel()
            raise
        lease.resource = resource
        lease.opening.set_result(resource)
        return lease

    def release(self, lease: Lease[R]) -> bool:
        """One user fewer; True when that was the last (the lease is then idle)."""
        with self._lock:
            if lease.users <= 0:
                return False
            lease.users -= 1
            if lease.users:
                return False
            lease.idle_since = time.monotonic()
            return True

    def drain(self) -> list[Lease[R]]:
        """Forget and return every lease (process shutdown, tests)."""
        with self._lock:
            leases = list(self._leases.values())
            self._leases.clear()
        return leases
