"""The shared cache level of one lookup chain: batched reads and writes, the stampede lease,
and failure isolation (docs/semantics.md "The shared cache").

Per lookup that missed L1 (:meth:`SharedTier.lookup`):

1. Read the key from the store. The reads of one event-loop iteration go out together, one
   round trip per batch (like :class:`~asyncio_lookup.lookup.batch.KeyBatcher`'s calls); a key
   asked for twice in a batch is read once.
2. A value: decode it (checking that it is this key's) and return it — an L2 hit.
3. No value: the read also tried to take the key's lease (``SET NX PX``). Taken: load from the
   service, write the value (and drop the lease) in the batch of this iteration's writes, and
   return it. Held by another process: poll the key (5 ms doubling to 50 ms) until its value
   appears, the lease is freed (then take it) or ``lease`` seconds pass (then load anyway).
4. The store failing or slower than ``timeout`` (each batched call is bounded by it): count an
   L2 error and load from the service. After :data:`FAILURES_TO_SKIP` failed calls in a row,
   warn (once per task: :meth:`SharedTier.new_task`) and leave the store alone for
   :data:`RETRY_AFTER` seconds (lookups then skip L2, counted); the first batch after that
   tries it again, so the tier comes back on its own when the store does.

The service call itself goes through ``load`` (the chain's retries, coalescing and batching):
the tier never fails a lookup the service could answer.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import logging
import math
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from asyncio_lookup.lookup.functions import Key, Row
from asyncio_lookup.lookup.l2.codec import (
    EntryMismatch,
    NotEncodable,
    OtherFormat,
    StaleEntry,
    decode_entry,
    encode_entry,
)
from asyncio_lookup.lookup.l2.codec import encode_key as encode_key_bytes
from asyncio_lookup.lookup.l2.deadline import bounded
from asyncio_lookup.lookup.l2.settings import SharedCacheSettings, key_prefix, mask_password
from asyncio_lookup.lookup.l2.store import ReadResult, SharedStore
from asyncio_lookup.lookup.l2.stores import open_store
from asyncio_lookup.lookup.metrics import (
    L2_BYTES_READ,
    L2_BYTES_WRITTEN,
    L2_ERROR_COUNT,
    L2_HIT_COUNT,
    L2_LEASE_WAITS,
    L2_MISS_COUNT,
    L2_SKIPPED,
    CacheMetricGroup,
)

log = logging.getLogger("asyncio_lookup.shared_cache")

#: Seconds the tier leaves a failed store alone before trying it again.
RETRY_AFTER = 1.0
#: Failed calls in a row after which lookups skip the store for RETRY_AFTER (a lone timeout
#: on a loaded host sends only its own batch to the service).
FAILURES_TO_SKIP = 3
#: Seconds a first connection may take (the store's own connect timeout is as long).
CONNECT_TIMEOUT = 1.0
#: Seconds a write may take in the background after its lookups stopped waiting for it.
WRITE_BOUND = 2.0
#: Keys per batched read (one script call); larger batches are split.
MAX_READ_BATCH = 512
#: An encoded key longer than this is stored under its SHA-256 (the entry keeps it whole).
MAX_DIRECT_KEY = 256
_POLL_FIRST = 0.005
_POLL_MAX = 0.05

_Failed = None  # a read's answer when the store failed
#: What a key holds, for the lease time, when its loader had nothing to share.
NOT_SHARED = b"alk-not-shared"


class _Gave(enum.Enum):
    """A lease wait's end without a value or a lease of our own (the lease time passed)."""

    UP = "up"


class SharedTier:
    """The L2 of one chain in one process. :meth:`open` on the loop, then :meth:`lookup`."""

    def __init__(
        self,
        settings: SharedCacheSettings,
        namespace: str,
        key_columns: Sequence[str],
        *,
        name: str = "",
        store_factory: Callable[[str, float], SharedStore] = open_store,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.name = name
        self.namespace = namespace.encode("utf-8", "surrogatepass")
        self.prefix = key_prefix(namespace, key_columns)
        self.metrics = CacheMetricGroup()
        self._store_factory = store_factory
        self._store: SharedStore | None = None
        self._clock = clock
        self._token = os.urandom(12).hex().encode()
        self._lease_ms = math.ceil(settings.lease * 1000)  # 0.5 ms is 1 ms, not "no lease"
        self._ttl_ms = max(1, int(settings.ttl * 1000))
        self._reads: dict[bytes, list[asyncio.Future[ReadResult | None]]] = {}
        self._writes: dict[bytes, bytes | None] = {}  # key -> value, or None: lease release only
        self._released: set[bytes] = set()
        self._markers: set[bytes] = set()  # keys whose loads had nothing to share
        self._loading: dict[bytes, int] = {}  # keys this process is loading -> their loaders
        self._written: list[asyncio.Future[None]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._down_until = 0.0
        self._down = False
        self._failures = 0  # in a row
        self._warned = False  # in this task
        self._not_shared: set[str] = set()  # why rows were not shared, warned once each

    def __repr__(self) -> str:
        return f"SharedTier({mask_password(self.settings.url)!r}, prefix={self.prefix!r})"

    async def open(self, metrics: CacheMetricGroup) -> None:
        """Count into ``metrics`` (the chain's group, per level) and connect to the store
        (bounded by :data:`CONNECT_TIMEOUT`; a store that cannot be reached counts as failed,
        and the chain opens anyway)."""
        self.metrics = metrics
        metrics.enable_levels()
        if self._store is None:
            self._store = self._store_factory(self.settings.url, self.settings.timeout)
            await self._call(lambda store: store.connect(), CONNECT_TIMEOUT)

    def new_task(self) -> None:
        """A task starts using the tier: its first skip of a failing store warns again."""
        self._warned = False

    async def flush(self) -> None:
        """Wait for the writes under way (each bounded by ``WRITE_BOUND``): the end of a task
        calls it, since the worker's loop may not run again before the process exits."""
        if self._writes or self._released or self._markers:
            self._flush_writes()
        pending = [task for task in self._tasks if not task.done()]
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    async def aclose(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        store, self._store = self._store, None
        if store is not None:
            try:
                await store.aclose()
            except Exception:
                log.debug("closing the shared store failed", exc_info=True)

    # -- keys ------------------------------------------------------------------------------

    def store_key(self, encoded_key: bytes) -> bytes:
        if len(encoded_key) <= MAX_DIRECT_KEY:
            return self.prefix + encoded_key
        return self.prefix + b"#" + hashlib.sha256(encoded_key).hexdigest().encode()

    # -- the lookup ------------------------------------------------------------------------

    @property
    def available(self) -> bool:
        """False while a failed store is left alone (lookups skip L2)."""
        return not self._down or self._clock() >= self._down_until

    async def lookup(
        self, key: Key, load: Callable[[], Awaitable[list[Row]]]
    ) -> tuple[list[Row], bool]:
        """The rows for ``key`` and whether they came from L2 (else from ``load()``)."""
        if self._store is None or not self.available:
            self.metrics.inc(L2_SKIPPED)
            return await load(), False
        try:
            encoded = encode_key_bytes(key)
        except NotEncodable:
            self.metrics.inc(L2_SKIPPED)
            return await load(), False
        skey = self.store_key(encoded)
        if skey in self._loading:
            # this process is loading the key: share that load (the batcher coalesces it),
            # rather than wait on our own lease
            self.metrics.inc(L2_MISS_COUNT)
            return await load(), False
        answer: ReadResult | _Gave | None = await self._read(skey)
        leased = False
        if isinstance(answer, bytes):
            rows = self._decode(encoded, answer)
            if rows is not None:
                return rows, True
        elif answer is False:
            answer = await self._wait(skey)
            if isinstance(answer, bytes):
                rows = self._decode(encoded, answer)
                if rows is not None:
                    return rows, True
            leased = answer is True
        else:
            leased = answer is True
        # every lookup here is an L2 hit, miss or skip: a failed read went past the store
        self.metrics.inc(L2_SKIPPED if answer is _Failed else L2_MISS_COUNT)
        self._loading[skey] = self._loading.get(skey, 0) + 1
        try:
            rows = await load()
        except BaseException:
            if leased:
                self._queue_write(skey, None)  # free the lease for the next process at once
            raise
        finally:
            left = self._loading.pop(skey) - 1
            if left:
                self._loading[skey] = left
        if answer is _Failed:
            # The read may have run on the store and taken the lease before it failed (a
            # timeout on a loaded host): write the rows as their lease holder would, without
            # waiting, so that the token-checked release frees the lease for the others.
            self._store_rows(skey, encoded, rows, True)
        else:
            written = self._store_rows(skey, encoded, rows, leased)
            if written is not None:
                await written
        return rows, False

    def _decode(self, encoded: bytes, data: bytes) -> list[Row] | None:
        """The rows of an entry read for this key, or None: read it as a miss (another key's,
        older than this join's TTL, or a missing key this join does not cache)."""
        self.metrics.inc(L2_BYTES_READ, len(data))
        if data == NOT_SHARED:
            return None  # its loader had nothing to share: load it at once, no lease
        try:
            rows = decode_entry(self.namespace, encoded, data, self._ttl_ms)
        except (StaleEntry, OtherFormat):
            return None
        except EntryMismatch:
            log.warning("shared cache %s: an entry that is not this key's was ignored", self.name)
            return None
        if not rows and not self.settings.cache_missing_key:
            return None  # another join's cached miss: this one asks the service
        self.metrics.inc(L2_HIT_COUNT)
        return rows

    async def _wait(self, skey: bytes) -> ReadResult | _Gave | None:
        """Poll a key whose lease another process holds (bounded by the lease time)."""
        self.metrics.inc(L2_LEASE_WAITS)
        deadline = self._clock() + self.settings.lease
        pause = _POLL_FIRST
        while True:
            remaining = deadline - self._clock()
            if remaining <= 0:
                return _Gave.UP  # waited long enough: fetch it ourselves (no lease held)
            await asyncio.sleep(min(pause, remaining))
            pause = min(pause * 2, _POLL_MAX)
            if not self.available:
                return _Failed
            answer = await self._read(skey)
            if answer is not False:
                return answer

    def _store_rows(
        self, skey: bytes, encoded: bytes, rows: list[Row], leased: bool
    ) -> asyncio.Future[None] | None:
        """Queue the entry of rows just loaded (with their lease's release); the write's
        future (it waits at most the timeout), or None when there is nothing to write."""
        value: bytes | None = None
        if rows or self.settings.cache_missing_key:
            try:
                value = encode_entry(self.namespace, encoded, rows)
            except NotEncodable as error:
                self._warn_not_shared(str(error))
            if value is not None and len(value) > self.settings.max_value_size:
                value = None
                self._warn_not_shared(
                    "an entry larger than lookup.shared-cache.max-value-size "
                    f"({self.settings.max_value_size:,} bytes)"
                )
        if value is None:
            if not leased:
                return None
            if not self._lease_ms:  # no leases (lease 0): no one waits, nothing to release
                return None
            # Nothing to share (a miss this join does not cache, rows too large): a marker
            # for the lease time sends the processes waiting on the lease to the service at
            # once, rather than each in turn taking the lease and loading alone.
            value = NOT_SHARED
        return self._queue_write(skey, value)

    def _warn_not_shared(self, why: str) -> None:
        if why not in self._not_shared:
            self._not_shared.add(why)
            log.warning(
                "shared cache %s: rows not shared (served, and loaded again by other "
                "processes): %s",
                self.name,
                why,
            )

    # -- batched reads ---------------------------------------------------------------------

    def _read(self, skey: bytes) -> asyncio.Future[ReadResult | None]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ReadResult | None] = loop.create_future()
        waiters = self._reads.get(skey)
        if waiters is not None:
            waiters.append(future)
            return future
        if not self._reads:
            loop.call_soon(self._flush_reads)
        self._reads[skey] = [future]
        return future

    def _flush_reads(self) -> None:
        batch, self._reads = self._reads, {}
        keys = list(batch)
        for start in range(0, len(keys), MAX_READ_BATCH):
            chunk = keys[start : start + MAX_READ_BATCH]
            self._spawn(self._run_read(chunk, [batch[k] for k in chunk]))

    async def _run_read(
        self, keys: list[bytes], waiters: list[list[asyncio.Future[ReadResult | None]]]
    ) -> None:
        ok, got = await self._call(lambda store: store.read(keys, self._lease_ms, self._token))
        answers: Sequence[ReadResult | None] = got if ok else [_Failed] * len(keys)
        for skey, futures, answer in zip(keys, waiters, answers, strict=True):
            taken = False
            for future in futures:
                if not future.done():
                    future.set_result(answer)
                    taken = True
            if answer is True and not taken:
                # the lease was taken for lookups cancelled meanwhile: nobody loads the key,
                # so free it for the next process (or the next lookup here) at once
                self._queue_write(skey, None)

    # -- batched writes --------------------------------------------------------------------

    def _queue_write(self, skey: bytes, value: bytes | None) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        if not self._writes and not self._released and not self._markers:
            loop.call_soon(self._flush_writes)
        if value is None:
            self._released.add(skey)
        elif value is NOT_SHARED:
            self._markers.add(skey)
        else:
            self._writes[skey] = value
        future: asyncio.Future[None] = loop.create_future()
        self._written.append(future)
        return future

    def _flush_writes(self) -> None:
        if not self._writes and not self._released and not self._markers:
            return  # flushed early (flush())
        entries = list(self._writes.items())
        markers = list(self._markers - self._writes.keys())
        release = list(self._released | {k for k, _ in entries} | set(markers))
        waiters = self._written
        self._writes, self._released, self._markers, self._written = {}, set(), set(), []
        self._spawn(self._run_write(entries, release, waiters, markers))

    async def _run_write(
        self,
        entries: list[tuple[bytes, bytes | None]],
        release: list[bytes],
        waiters: list[asyncio.Future[None]],
        markers: Sequence[bytes] = (),
    ) -> None:
        values = [(k, v) for k, v in entries if v is not None]

        def release_waiters() -> None:
            for future in waiters:
                if not future.done():
                    future.set_result(None)

        # The lookups wait for the write at most the timeout; the write itself may take
        # longer (a loaded host), up to WRITE_BOUND, rather than be lost.
        handle = asyncio.get_running_loop().call_later(self.settings.timeout, release_waiters)
        bound = max(WRITE_BOUND, self.settings.timeout)
        try:
            if markers:  # first: the leases they replace are released by the write below
                await self._call(
                    lambda store: store.write(
                        [(key, NOT_SHARED) for key in markers], self._lease_ms, (), self._token
                    ),
                    bound,
                )
            ok, sent = await self._call(
                lambda store: store.write(values, self._ttl_ms, release, self._token), bound
            )
            if ok:
                self.metrics.inc(L2_BYTES_WRITTEN, int(sent))
        finally:
            handle.cancel()
            release_waiters()

    # -- failure isolation -----------------------------------------------------------------

    async def _call(
        self, op: Callable[[SharedStore], Awaitable[Any]], timeout: float | None = None
    ) -> tuple[bool, Any]:
        """``(True, op(store))`` bounded by the timeout; on failure ``(False, None)`` (counted,
        logged once per task) and the store is left alone for :data:`RETRY_AFTER`. Never
        raises but a cancellation."""
        store = self._store
        if store is None or not self.available:
            return False, None
        try:
            result = await bounded(op(store), timeout or self.settings.timeout)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            self._failed(error)
            return False, None
        self._failures = 0
        if self._down:
            self._down = False
            log.warning(
                "shared cache %s: %s answers again", self.name, mask_password(self.settings.url)
            )
        return True, result

    def _failed(self, error: BaseException) -> None:
        self.metrics.inc(L2_ERROR_COUNT)
        self._failures += 1
        if self._failures < FAILURES_TO_SKIP:
            return
        self._down_until = self._clock() + RETRY_AFTER
        self._down = True
        if not self._warned:
            self._warned = True
            log.warning(
                "shared cache %s: %s failed (%s: %s); lookups go to the service and the store "
                "is tried again every %.0f s",
                self.name,
                mask_password(self.settings.url),
                type(error).__name__,
                error,
                RETRY_AFTER,
            )

    def _spawn(self, coroutine: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
