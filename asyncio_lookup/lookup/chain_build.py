"""How a lookup chain is built (docs/semantics.md §2.2-2.4): the source's capabilities checked
against the options, the mode chosen, the caches and the shared tier made. Nothing is opened,
so the driver runs it too (:meth:`~asyncio_lookup.lookup.chain.LookupChain.validate`)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.lookup.cache import LookupCache
from asyncio_lookup.lookup.clock import MONOTONIC, WALL, Clock
from asyncio_lookup.lookup.full_cache import FullCache
from asyncio_lookup.lookup.functions import AsyncLookupFunction, LookupFunction, LookupTableSource
from asyncio_lookup.lookup.l2.settings import default_namespace, mask_password
from asyncio_lookup.lookup.l2.tier import SharedTier
from asyncio_lookup.lookup.metrics import (
    NUM_EXTERNAL_CALLS,
    NUM_EXTERNAL_KEYS,
    NUM_THROTTLED,
    THROTTLED_TIME_MS,
    CacheMetricGroup,
)
from asyncio_lookup.lookup.option_names import CACHE, RATE_LIMIT, SHARED_URL
from asyncio_lookup.lookup.options import CacheType, LookupOptions
from asyncio_lookup.lookup.providers import (
    FullCachingLookupProvider,
    PartialCachingAsyncLookupProvider,
    PartialCachingLookupProvider,
)
from asyncio_lookup.lookup.rate import TaskRate
from asyncio_lookup.lookup.rate_limit import RateLimitedLookup, RateLimitedSyncLookup
from asyncio_lookup.lookup.reload import CacheReloadTrigger
from asyncio_lookup.lookup.retry import FailureRetry


def target_of(source: object) -> str:
    """What errors call a source: its ``target`` (the built-in connectors: service and
    table or key pattern, secrets masked), else its type's name (a ``repr`` could hold one)."""
    target = getattr(source, "target", None)
    return target if isinstance(target, str) else type(source).__name__


def shared_namespace_of(name: str, source: object, schema: str = "") -> str:
    """The shared cache's default namespace of a table: a digest of its name, its source's
    ``cache_identity`` (what its answers depend on: service, query or template, headers...)
    and its declared schema. A source without one needs ``lookup.shared-cache.namespace``."""
    identity = getattr(source, "cache_identity", None)
    if not isinstance(identity, str):
        raise ConfigurationError(
            "lookup.shared-cache.namespace",
            None,
            "a namespace naming this table's data (e.g. 'customers.v1'), unique per source",
            f"lookup table {name!r}: {type(source).__name__} has no cache_identity, so two "
            "tables of this name over different sources could read each other's entries",
        )
    return default_namespace(name, identity, schema)


@dataclass(frozen=True)
class SourcePlan:
    """What :meth:`LookupChain.create` builds: a FULL cache over ``scan``, or the function of
    the chosen mode (the other one None) with the provider's cache, if any."""

    is_async: bool
    sync_function: LookupFunction | None = None
    async_function: AsyncLookupFunction | None = None
    provider_cache: LookupCache | None = None
    scan: Callable[[], Any] | None = None
    trigger: CacheReloadTrigger | None = None
    #: A FULL cache's index of key values, when the source has its own (``full_cache_key``).
    index_key: Callable[[Any], Any] | None = None


def plan_source(
    source: LookupTableSource,
    options: LookupOptions,
    *,
    prefer_async: bool,
    key_columns: Sequence[str],
) -> SourcePlan:
    """Check the source's capabilities against the options and pick the mode."""
    provider_cache: LookupCache | None = None
    provider_trigger: CacheReloadTrigger | None = None
    full = False
    if isinstance(source, (PartialCachingLookupProvider, PartialCachingAsyncLookupProvider)):
        provider_cache = source.cache
    elif isinstance(source, FullCachingLookupProvider):
        provider_trigger = source.reload_trigger
        full = True
    if (provider_cache is not None or full) and options.cache is not CacheType.NONE:
        raise ConfigurationError(
            CACHE,
            options.cache.value,
            "NONE (or unset) when the source is a caching provider",
            reason=f"{type(source).__name__} brings its own cache",
        )
    if full and options.shared_url is not None:
        raise ConfigurationError(
            SHARED_URL,
            mask_password(options.shared_url),
            "no shared cache for a FullCachingLookupProvider",
            reason="a FULL cache answers every lookup from its snapshot: nothing would ever "
            "reach the shared cache",
        )
    if full and options.rate_limit is not None:
        raise ConfigurationError(
            RATE_LIMIT,
            options.rate_limit,
            "no rate limit for a FullCachingLookupProvider",
            reason="a FULL cache answers every lookup from its snapshot: there are no per-key "
            "calls to limit",
        )
    if full or options.cache is CacheType.FULL:
        if not key_columns:
            raise ConfigurationError(
                "key_columns", tuple(key_columns), "the dim key columns (FULL cache needs them)"
            )
        trigger = provider_trigger
        if trigger is None and not isinstance(source, FullCachingLookupProvider):
            trigger = options.build_reload_trigger()
        scan = getattr(source, "scan", None)
        # A connector's scan() is lazy (it connects when iterated): asking it here tells the
        # driver whether the source can be fully cached at all.
        if not callable(scan) or (
            not isinstance(source, FullCachingLookupProvider) and scan() is None
        ):
            raise ConfigurationError(
                CACHE,
                "FULL",
                "a source whose scan() returns the table's rows",
                reason=f"{source!r} cannot scan",
            )
        index_key = getattr(source, "full_cache_key", None)
        return SourcePlan(
            is_async=prefer_async,
            scan=scan,
            trigger=trigger,
            index_key=index_key if callable(index_key) else None,
        )
    make_sync = getattr(source, "lookup_function", None)
    make_async = getattr(source, "async_lookup_function", None)
    if not callable(make_sync) and not callable(make_async):
        raise ConfigurationError(
            "connector",
            source,
            "a connector or provider with lookup_function(), async_lookup_function() or scan()",
            reason="it has none of them",
        )
    sync_function = make_sync() if callable(make_sync) else None
    async_function = make_async() if callable(make_async) else None
    if sync_function is None and async_function is None:
        raise ConfigurationError(
            "connector",
            source,
            "a source whose lookup_function() or async_lookup_function() returns a function",
            reason="it offers neither a sync nor an async lookup",
        )
    if async_function is not None and (prefer_async or sync_function is None):
        return SourcePlan(True, async_function=async_function, provider_cache=provider_cache)
    if options.shared_url is not None:
        raise ConfigurationError(
            SHARED_URL,
            "(set)",
            "a shared cache on an async lookup (the LOOKUP hint's 'async'='true', the default, "
            "and a connector with an async lookup)",
            reason="the shared cache batches its reads on the event loop of async lookups",
        )
    return SourcePlan(False, sync_function=sync_function, provider_cache=provider_cache)


@dataclass(frozen=True)
class ChainParts:
    """What :meth:`~asyncio_lookup.lookup.chain.LookupChain.create` assembles a chain from."""

    is_async: bool
    sync_function: LookupFunction | None
    async_function: AsyncLookupFunction | None
    cache: LookupCache | None
    full_cache: FullCache | None
    metrics: CacheMetricGroup
    target: str
    shared: SharedTier | None
    #: Where the rate limiter counts: set to the cache scope's group when the chain joins one.
    rate_metrics: MetricsRef


class MetricsRef:
    """The metric group a chain's rate limiter counts into: the chain's own, until the chain
    shares its cache scope's group (:meth:`LookupChain._open`)."""

    __slots__ = ("group",)

    def __init__(self, group: CacheMetricGroup) -> None:
        self.group = group


class _WholeMilliseconds:
    """Adds waits in seconds to a counter of whole milliseconds, carrying the fractions: a
    fast rate limit's waits are each under half a millisecond and would round to nothing."""

    def __init__(self, add: Callable[[int], None]) -> None:
        self._add = add
        self._carried = 0.0
        self._lock = threading.Lock()  # blocking lookups wait on several threads

    def __call__(self, seconds: float) -> None:
        with self._lock:
            total = self._carried + seconds * 1000.0
            whole = int(total)
            self._carried = total - whole
        if whole:
            self._add(whole)


def build_parts(
    source: LookupTableSource,
    options: LookupOptions,
    *,
    prefer_async: bool,
    name: str,
    key_columns: Sequence[str],
    clock: Clock | None,
    target: str | None,
    shared_namespace: str | None,
    rate: TaskRate | None = None,
) -> ChainParts:
    """The mode, functions (behind ``rate``, when given, below batching and retries: every
    connector call takes a token), caches and shared tier of a chain; opens nothing."""
    plan = plan_source(source, options, prefer_async=prefer_async, key_columns=key_columns)
    metrics = CacheMetricGroup()
    full_cache: FullCache | None = None
    cache: LookupCache | None = None
    target = target_of(source) if target is None else target
    if plan.scan is not None:
        full_cache = FullCache(
            plan.scan,
            key_columns,
            plan.trigger,
            metrics,
            clock=clock or WALL,
            name=name,
            retry=FailureRetry(
                options.max_retries, options.max_retry_backoff, table=name, target=target
            ),
            index_key=plan.index_key,
        )
    else:
        cache = plan.provider_cache
        if cache is None:
            cache = options.build_cache(clock or MONOTONIC)
    shared: SharedTier | None = None
    settings = options.shared_cache()
    own = getattr(plan.provider_cache, "cache_missing_key", None)
    if settings is not None and options.shared_cache_missing_key is None and own is not None:
        # unset: as the partial cache (L1) does, the provider's own one too
        settings = dataclasses.replace(settings, cache_missing_key=bool(own))
    if settings is not None:
        namespace = settings.namespace or shared_namespace or shared_namespace_of(name, source)
        shared = SharedTier(settings, namespace, key_columns, name=name)
    sync_function, async_function = plan.sync_function, plan.async_function
    rate_metrics = MetricsRef(metrics)
    if rate is not None:

        def throttled() -> None:
            rate_metrics.group.inc(NUM_THROTTLED)

        waited = _WholeMilliseconds(lambda ms: rate_metrics.group.inc(THROTTLED_TIME_MS, ms))

        def called(keys: int, ms: float | None) -> None:  # from the token on (CallCounter)
            group = rate_metrics.group
            if ms is None:
                group.inc(NUM_EXTERNAL_CALLS)
                group.inc(NUM_EXTERNAL_KEYS, keys)
            else:
                group.record_call(ms)

        if sync_function is not None:
            chosen = clock or MONOTONIC
            sync_function = RateLimitedSyncLookup(
                sync_function,
                rate,
                sleep=chosen.sleep,
                clock=chosen.now,
                on_throttle=throttled,
                on_wait=waited,
                on_call=called,
            )
        if async_function is not None:
            async_function = RateLimitedLookup(
                async_function, rate, on_throttle=throttled, on_wait=waited, on_call=called
            )
    return ChainParts(
        is_async=plan.is_async,
        sync_function=sync_function,
        async_function=async_function,
        cache=cache,
        full_cache=full_cache,
        metrics=metrics,
        target=target,
        shared=shared,
        rate_metrics=rate_metrics,
    )


__all__ = ["ChainParts", "MetricsRef", "SourcePlan", "build_parts", "plan_source", "target_of"]
