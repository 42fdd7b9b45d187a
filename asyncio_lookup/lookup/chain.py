"""The lookup chain of one lookup table in one worker process (docs/semantics.md §2.2-2.4):

    cache -> lookup-miss retry -> failure retry (lookup.max-retries)
          -> batching/coalescing -> rate limit (lookup.rate-limit) -> connector

A FULL cache answers every lookup from its snapshot instead (no point lookup, no retry).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from threading import get_ident
from time import perf_counter

from asyncio_lookup.errors import (
    in_lookup_context,
    lookup_context,
    with_attempts,
)
from asyncio_lookup.lookup.batch import KeyBatcher
from asyncio_lookup.lookup.cache import DefaultLookupCache, LookupCache
from asyncio_lookup.lookup.chain_build import MetricsRef, SourcePlan, build_parts, plan_source
from asyncio_lookup.lookup.clock import MONOTONIC, Clock
from asyncio_lookup.lookup.failed_rows import attempts_of
from asyncio_lookup.lookup.full_cache import FullCache
from asyncio_lookup.lookup.functions import (
    AsyncLookupFunction,
    Key,
    LookupFunction,
    LookupTableSource,
    Row,
)
from asyncio_lookup.lookup.l2.tier import SharedTier
from asyncio_lookup.lookup.metrics import (
    LATEST_LOAD_TIME,
    LOAD_COUNT,
    NUM_EXTERNAL_CALLS,
    NUM_EXTERNAL_KEYS,
    NUM_FAILURE_RETRIES,
    NUM_LOAD_FAILURES,
    NUM_LOOKUPS,
    NUM_MISS_RETRIES,
    CacheMetricGroup,
)
from asyncio_lookup.lookup.options import LookupOptions
from asyncio_lookup.lookup.rate import TaskRate
from asyncio_lookup.lookup.results import as_rows
from asyncio_lookup.lookup.retry import FailureRetry, MissRetry
from asyncio_lookup.lookup.scope import (
    CacheLease,
    ScopeKey,
    acquire_cache,
    release_cache,
    scope_key,
)
from asyncio_lookup.runtime.causes import FAILURES, RETRIED, RETRIES
from asyncio_lookup.validation import parse_int


class LookupChain:
    """Cache, lookup-miss retry, failure retry and batching over one source, for one lookup
    table in one Python worker process. Build with :meth:`create`; :meth:`open` on the loop."""

    def __init__(
        self,
        *,
        name: str,
        options: LookupOptions,
        is_async: bool,
        sync_function: LookupFunction | None,
        async_function: AsyncLookupFunction | None,
        cache: LookupCache | None,
        full_cache: FullCache | None,
        miss_retry: MissRetry | None,
        clock: Clock,
        async_sleep: Callable[[float], Awaitable[None]],
        metrics: CacheMetricGroup,
        cache_scope: ScopeKey | None = None,
        target: str = "",
        rate: TaskRate | None = None,
        shared: SharedTier | None = None,
        rate_metrics: MetricsRef | None = None,
    ) -> None:
        self.name = name
        self._rate_metrics = rate_metrics
        self.shared = shared
        self.target = target
        self.options = options
        self.is_async = is_async
        self.metrics = metrics
        self.miss_retry = miss_retry
        self.cache = cache
        self.full_cache = full_cache
        self.rate = rate  # the functions come rate-limited (build_parts)
        self._sync = sync_function
        self._async = async_function
        self._clock = clock
        self._async_sleep = async_sleep
        self._retry = FailureRetry(
            options.max_retries, options.max_retry_backoff, table=name, target=target
        )
        self._batcher: KeyBatcher | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        # the counters of the thread that last ran async_lookup (metrics.thread_tables)
        self._thread = 0
        self._counters: dict[str, int] = {}
        self._opened = False
        self._scope = cache_scope
        self._shared: CacheLease | None = None  # the scope's cache, while this chain uses it
        self._owns_cache = True  # False once the cache is a scope's (its last user closes it)

    @classmethod
    def create(
        cls,
        source: LookupTableSource,
        options: LookupOptions,
        *,
        prefer_async: bool,
        miss_retry: MissRetry | None = None,
        name: str = "",
        key_columns: Sequence[str] = (),
        clock: Clock | None = None,
        async_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        cache_scope: str | None = None,
        target: str | None = None,
        rate: TaskRate | None = None,
        shared_namespace: str | None = None,
    ) -> LookupChain:
        """Pick the mode and build the cache; opens nothing (safe on the driver).

        ``key_columns`` (dim columns of the lookup key, in dim-schema order) are required for a
        FULL cache, which indexes scanned rows by them. ``clock`` is injectable for tests (it
        drives expiry, sync sleeps, load times and, for FULL, the reload schedule).

        ``cache_scope`` names the cache's owner, the lookup table (and, for a FULL cache loaded
        per partition, the partition): the chains of one process opened with the same scope and
        key columns share one cache, full-cache snapshot and metric group, whatever their mode
        and lookup-miss retry (see :mod:`asyncio_lookup.lookup.scope`). ``None``: a cache of
        its own. Without a cache (``lookup.cache`` NONE) there is nothing to share.

        ``target`` (default :func:`target_of` the source) is what run-time errors name besides
        the table and the key.
        ``rate``: this chain's share of the table's ``lookup.rate-limit`` (the driver divides
        the job's budget, see :mod:`asyncio_lookup.lookup.rate_limit`); None: no limit.
        ``shared_namespace``: the shared cache's namespace when ``lookup.shared-cache.namespace``
        is not set (the Spark join passes a digest of the table's name, target and declared
        schema); default a digest of ``name`` and the target.
        """
        parts = build_parts(
            source,
            options,
            prefer_async=prefer_async,
            name=name,
            key_columns=key_columns,
            clock=clock,
            target=target,
            shared_namespace=shared_namespace,
            rate=rate,
        )
        return cls(
            name=name,
            options=options,
            is_async=parts.is_async,
            sync_function=parts.sync_function,
            async_function=parts.async_function,
            cache=parts.cache,
            full_cache=parts.full_cache,
            miss_retry=miss_retry,
            clock=clock or MONOTONIC,
            async_sleep=async_sleep,
            metrics=parts.metrics,
            cache_scope=None if cache_scope is None else scope_key(cache_scope, key_columns),
            target=parts.target,
            rate=rate,
            shared=parts.shared,
            rate_metrics=parts.rate_metrics,
        )

    @staticmethod
    def validate(
        source: LookupTableSource,
        options: LookupOptions,
        *,
        prefer_async: bool,
        key_columns: Sequence[str] = (),
    ) -> SourcePlan:
        """Raise the :class:`ConfigurationError` :meth:`create` would raise for this source and
        these options, building no cache and opening nothing (the driver's check); the mode
        and caching :meth:`create` would choose."""
        return plan_source(source, options, prefer_async=prefer_async, key_columns=key_columns)

    def __repr__(self) -> str:
        mode = "FULL" if self.full_cache else ("PARTIAL" if self.cache else "NONE")
        return f"LookupChain({self.name!r}, async={self.is_async}, cache={mode})"

    @property
    def failed(self) -> bool:
        """True when a FULL cache's latest load failed: do not hand this chain to a new task."""
        return self.full_cache is not None and self.full_cache.failed

    async def open(self) -> None:
        """Open the function in use (sync inline) or load the FULL cache; on the worker loop.
        An error names the table and its target."""
        try:
            await self._open()
        except Exception as error:
            named = self._named(error)
            raise named from named.__cause__

    async def _open(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._thread = 0  # the metric group may change below (a scope's cache)
        if self._scope is not None and (self.cache is not None or self.full_cache is not None):
            lease = await acquire_cache(self._scope, self.cache, self.full_cache, self.metrics)
            if lease is not None:
                shared = lease.resource
                assert shared is not None
                self._shared = lease
                self._owns_cache = False
                self.cache, self.full_cache, self.metrics = (
                    shared.cache,
                    shared.full_cache,
                    shared.metrics,
                )
                if self._rate_metrics is not None:  # its limiter counts where it reports
                    self._rate_metrics.group = shared.metrics
        try:
            await self._open_rest()
        except BaseException:
            self._release_cache()
            raise
        self._opened = True

    async def _open_rest(self) -> None:
        if self.full_cache is not None:
            if self._owns_cache:
                await self.full_cache.open()
            return
        if self.cache is not None and self._owns_cache:
            self.cache.open(self.metrics)
        if self.shared is not None:
            await self.shared.open(self.metrics)
        if self._async is not None:
            await self._async.open()
            most = self._async.max_batch_size  # one call, one request (rate limits, metrics)
            if most is not None:
                most = parse_int(
                    f"{type(self._async).__name__}.max_batch_size",
                    most,
                    minimum=1,
                    allowed="an int >= 1, or None",
                    text=False,
                )
            self._batcher = KeyBatcher(
                self._async,
                self.metrics,
                max_size=min(self.options.batch_max_size, most or self.options.batch_max_size),
                max_wait=self.options.batch_max_wait,
            )
        elif self._sync is not None:
            self._sync.open()

    async def flush(self) -> None:
        """Finish the shared cache's writes under way (a task's end; bounded)."""
        if self.shared is not None:
            await self.shared.flush()

    async def end_task(self) -> None:
        """A Spark task that used this chain has ended: cancel the calls no caller waits for
        any more (:meth:`KeyBatcher.cancel_calls`); the chain stays open for the next task."""
        if self._batcher is not None:
            await self._batcher.cancel_calls()

    async def close(self) -> None:
        """Stop reloads, cancel in-flight calls, close the function and drop the cache (a
        scope's cache: once no other chain uses it)."""
        self.abandon()
        if self._batcher is not None:
            await self._batcher.aclose()
        if self.shared is not None:
            await self.shared.aclose()
        if self._async is not None and self._opened:
            await self._async.close()
        self._opened = False

    def abandon(self) -> None:
        """Close what can be closed without the event loop (FULL reloads, cache, sync function);
        used when the loop the chain was opened on is gone."""
        self._release_cache()
        if self._owns_cache:
            if self.full_cache is not None:
                self.full_cache.close(timeout=0)
            if self.cache is not None:
                self.cache.close()
        if self._sync is not None and self._opened:
            self._sync.close()
            self._opened = self._async is not None and self._opened

    def _release_cache(self) -> None:
        shared, self._shared = self._shared, None
        if shared is not None:
            release_cache(shared)

    # -- sync mode -------------------------------------------------------------------------

    def lookup(self, key: Key) -> list[Row]:
        """The rows for ``key``; blocks (lookup-miss retry sleeps, as in Flink). An error names
        the table, its target and the key (:func:`~asyncio_lookup.errors.in_lookup_context`)."""
        self.metrics.inc(NUM_LOOKUPS)
        try:
            if self.full_cache is not None:
                return self.full_cache.get(key)
            if self.cache is None:
                return self._load_sync(key)
            cached = self.cache.get_if_present(key)
            if cached is not None:
                return cached
            started = self._clock.now()
            try:
                rows = self._load_sync(key)
            except Exception:
                self.metrics.inc(NUM_LOAD_FAILURES)
                raise
        except Exception as error:
            # the sync join's final errors (the async ones are the operator's, runtime/handler.py)
            self.metrics.causes.record(FAILURES, error)
            named = self._named(error, key)
            raise named from named.__cause__
        self._loaded(key, rows, self._clock.now() - started)
        return rows

    def _load_sync(self, key: Key) -> list[Row]:
        function = self._sync
        if function is None:
            raise RuntimeError(f"{self!r} is not open in sync mode; use async_lookup()")

        counted = _Attempts(self.metrics)

        def load() -> list[Row]:
            return self._retry.call(key, call, sleep=self._clock.sleep, on_retry=counted)

        def call() -> list[Row]:
            return self._call_sync(function, key)

        try:
            rows = load()
            if rows or self.miss_retry is None:
                return rows
            return self.miss_retry.resume(
                key, load, rows, failed=False, sleep=self._clock.sleep, on_retry=counted.missed
            )
        except Exception as error:
            if counted.calls > attempts_of(error):
                raise with_attempts(error, counted.calls)  # noqa: B904 (its cause kept)
            raise

    def _call_sync(self, function: LookupFunction, key: Key) -> list[Row]:
        if getattr(function, "counts_calls", False):  # from its token on, itself
            return as_rows(function.lookup(key), key, function)
        self.metrics.inc2(NUM_EXTERNAL_CALLS, NUM_EXTERNAL_KEYS)
        started = perf_counter()
        try:
            answer = function.lookup(key)
        finally:
            self.metrics.record_call((perf_counter() - started) * 1000.0)
        return as_rows(answer, key, function)

    # -- async mode ------------------------------------------------------------------------

    @property
    def answers_now(self) -> bool:
        """Whether :meth:`lookup_cached` can answer at all (a FULL cache, or the default
        PARTIAL cache); if not, a caller goes straight to :meth:`async_lookup`."""
        return self.full_cache is not None or type(self.cache) is DefaultLookupCache

    def lookup_cached(self, key: Key) -> list[Row] | None:
        """The rows for ``key`` when the cache has them, counted as a lookup and a hit; else
        None, counting nothing (then call :meth:`async_lookup`). The async path's fast path:
        no coroutine, no task. A FULL cache always answers (or raises its load error)."""
        if self.full_cache is not None:
            self.metrics.inc(NUM_LOOKUPS)
            try:
                return self.full_cache.get(key)
            except Exception as error:
                named = self._named(error, key)
                raise named from named.__cause__
        cache = self.cache
        if cache is None or type(cache) is not DefaultLookupCache:
            return None  # a user's LookupCache may not be peeked at without counting a miss
        rows = cache.get_hit(key)
        if rows is not None:
            self.metrics.inc(NUM_LOOKUPS)
        return rows

    async def async_lookup(self, key: Key) -> list[Row]:
        """The rows for ``key``; retries wait on loop timers (cancel it to time it out). An
        error names the table, its target and the key, as :meth:`lookup`'s do."""
        if self._thread != get_ident():  # metrics.inc(NUM_LOOKUPS), its table kept (hot path)
            self._thread = get_ident()
            self._counters = self.metrics.thread_tables()[0]
        self._counters[NUM_LOOKUPS] += 1
        cache = self.cache
        started = 0.0
        took: float | None = None  # a shared tier's load: its own span
        try:
            if self.full_cache is not None:
                return self.full_cache.get(key)
            if cache is not None:
                cached = cache.get_if_present(key)
                if cached is not None:
                    return cached
                started = self._clock.now()
            from_shared = False
            try:
                if self.shared is None:
                    rows = await self._load_async(key)
                else:
                    mark: list[float] = []  # the load's own span: L2 reads, waits, writes aside
                    rows, from_shared = await self.shared.lookup(
                        key, lambda: self._load_timed(key, mark)
                    )
                    if len(mark) == 2:
                        took = mark[1] - mark[0]
            except Exception:
                if cache is not None:
                    self.metrics.inc(NUM_LOAD_FAILURES)
                raise
        except Exception as error:
            named = self._named(error, key)
            raise named from named.__cause__
        if cache is not None:
            if from_shared:
                cache.put(key, rows)  # an L2 hit fills L1; it is no load
            else:
                self._loaded(key, rows, self._clock.now() - started if took is None else took)
        return rows

    async def _load_timed(self, key: Key, mark: list[float]) -> list[Row]:
        mark.append(self._clock.now())
        rows = await self._load_async(key)
        mark.append(self._clock.now())
        return rows

    async def _load_async(self, key: Key) -> list[Row]:
        """The rows from the connector, through the retry policies, batching and coalescing."""
        batcher = self._batcher
        if batcher is None:
            return await self._load_unbatched(key)
        # The first attempt inline, in this coroutine (the hot path); the retry policies take
        # over only after it.
        counted: _Attempts | None = None
        try:
            try:
                rows = await batcher.lookup(key)
            except Exception as error:
                counted = _Attempts(self.metrics)
                rows = await self._retry_failure(key, batcher, error, counted)
            if not rows and self.miss_retry is not None:
                counted = counted or _Attempts(self.metrics)
                rows = await self._retry_miss(key, batcher, rows, counted)
        except Exception as error:
            if counted is not None and counted.calls > attempts_of(error):
                raise with_attempts(error, counted.calls)  # noqa: B904 (its cause kept)
            raise
        return rows

    async def _load_unbatched(self, key: Key) -> list[Row]:
        if self._sync is not None:
            # a sync-mode chain asked asynchronously: run the blocking path in a thread
            return await asyncio.to_thread(self._load_sync, key)
        raise RuntimeError(f"{self!r} is not open; call open() first")

    async def _retry_failure(
        self, key: Key, batcher: KeyBatcher, error: Exception, counted: _Attempts
    ) -> list[Row]:
        """The failure retry after a first attempt that raised ``error``."""
        return await self._retry.resume_async(
            key,
            lambda: batcher.lookup(key),
            error,
            failed=True,
            sleep=self._async_sleep,
            on_retry=counted,
        )

    async def _retry_miss(
        self, key: Key, batcher: KeyBatcher, rows: list[Row], counted: _Attempts
    ) -> list[Row]:
        """The lookup-miss retry after attempts that found no row."""
        assert self.miss_retry is not None

        def load() -> Awaitable[list[Row]]:
            return self._retry.call_async(
                key, lambda: batcher.lookup(key), sleep=self._async_sleep, on_retry=counted
            )

        return await self.miss_retry.resume_async(
            key, load, rows, failed=False, sleep=self._async_sleep, on_retry=counted.missed
        )

    # -- shared ----------------------------------------------------------------------------

    def _named(self, error: Exception, key: Key | None = None) -> Exception:
        """``error`` naming this chain's table, target and ``key`` (the error path only)."""
        return in_lookup_context(error, lookup_context(self.name, key, self.target))

    def _loaded(self, key: Key, rows: list[Row], took: float) -> None:
        """A load's rows (``took`` seconds) into the cache."""
        assert self.cache is not None
        self.metrics.inc(LOAD_COUNT)
        self.metrics.set_gauge(LATEST_LOAD_TIME, took * 1000.0)
        self.cache.put(key, rows)


class _Attempts:
    """One lookup's retries once its first call failed or missed: its calls (for a failed
    row's ``attempts``), each failure retry in ``retries`` and the lookup once in ``retried``
    (each lookup-miss retry starts a failure retry of its own at attempt 1)."""

    __slots__ = ("calls", "counted", "metrics")

    def __init__(self, metrics: CacheMetricGroup) -> None:
        self.metrics = metrics
        self.calls = 1
        self.counted = False

    def __call__(self, error: BaseException | None, attempt: int) -> None:
        """A failure retry."""
        self.calls += 1
        self.metrics.inc(NUM_FAILURE_RETRIES)
        causes = self.metrics.causes
        causes.record(RETRIES, error)
        if not self.counted:
            self.counted = True
            causes.record(RETRIED, error)

    def missed(self, _error: BaseException | None, _attempt: int) -> None:
        """A lookup-miss retry."""
        self.calls += 1
        self.metrics.inc(NUM_MISS_RETRIES)


__all__ = ["LookupChain", "MissRetry"]
