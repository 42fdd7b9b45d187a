"""Lookup functions, caches, options, metrics, hints and the join runner. Imports no Spark."""

from asyncio_lookup.lookup.cache import DefaultLookupCache, DefaultLookupCacheBuilder, LookupCache
from asyncio_lookup.lookup.chain import LookupChain
from asyncio_lookup.lookup.functions import (
    AsyncLookupFunction,
    Key,
    LookupFunction,
    LookupTableSource,
    Row,
)
from asyncio_lookup.lookup.hints import LookupHint, ShuffleHashHint, parse_hints
from asyncio_lookup.lookup.metrics import CacheMetricGroup, merge_metrics, metrics_delta
from asyncio_lookup.lookup.options import CacheType, LookupOptions, ReloadStrategy
from asyncio_lookup.lookup.partitioning import (
    HashPartitioner,
    KeyPartitioner,
    PartitionFilteredSource,
    PartitionRouting,
)
from asyncio_lookup.lookup.providers import (
    AsyncLookupFunctionProvider,
    FullCachingLookupProvider,
    LookupFunctionProvider,
    PartialCachingAsyncLookupProvider,
    PartialCachingLookupProvider,
)
from asyncio_lookup.lookup.registry import acquire_chain, release_chain
from asyncio_lookup.lookup.reload import (
    CacheReloadTrigger,
    PeriodicCacheReloadTrigger,
    ScheduleMode,
    TimedCacheReloadTrigger,
)
from asyncio_lookup.lookup.retry import MissRetry
from asyncio_lookup.validation import parse_duration

__all__ = [
    "AsyncLookupFunction",
    "AsyncLookupFunctionProvider",
    "CacheMetricGroup",
    "CacheReloadTrigger",
    "CacheType",
    "DefaultLookupCache",
    "DefaultLookupCacheBuilder",
    "FullCachingLookupProvider",
    "HashPartitioner",
    "Key",
    "KeyPartitioner",
    "LookupCache",
    "LookupChain",
    "LookupFunction",
    "LookupFunctionProvider",
    "LookupHint",
    "LookupOptions",
    "LookupTableSource",
    "MissRetry",
    "PartialCachingAsyncLookupProvider",
    "PartialCachingLookupProvider",
    "PartitionFilteredSource",
    "PartitionRouting",
    "PeriodicCacheReloadTrigger",
    "ReloadStrategy",
    "Row",
    "ScheduleMode",
    "ShuffleHashHint",
    "TimedCacheReloadTrigger",
    "acquire_chain",
    "merge_metrics",
    "metrics_delta",
    "parse_duration",
    "parse_hints",
    "release_chain",
]
