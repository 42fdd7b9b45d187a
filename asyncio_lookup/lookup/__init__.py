"""The lookup layer's public API: lookup functions and providers, caches and their reload
triggers, ``lookup.*`` options, hints, key partitioners. Imports no Spark.

What a connector or cache author needs is exported here; the machinery that runs a lookup join
(the chain, its per-process registry, metric deltas, partition routing) stays in its modules.
"""

from asyncio_lookup.lookup.cache import DefaultLookupCache, LookupCache
from asyncio_lookup.lookup.functions import (
    AsyncLookupFunction,
    Key,
    LookupFunction,
    LookupTableSource,
    Row,
)
from asyncio_lookup.lookup.hints import LookupHint, ShuffleHashHint, parse_hints
from asyncio_lookup.lookup.metrics import CacheMetricGroup
from asyncio_lookup.lookup.options import CacheType, LookupOptions, ReloadStrategy
from asyncio_lookup.lookup.partitioning import HashPartitioner, KeyPartitioner
from asyncio_lookup.lookup.providers import (
    AsyncLookupFunctionProvider,
    FullCachingLookupProvider,
    LookupFunctionProvider,
    PartialCachingAsyncLookupProvider,
    PartialCachingLookupProvider,
)
from asyncio_lookup.lookup.rate import RateLimit
from asyncio_lookup.lookup.reload import (
    CacheReloadTrigger,
    PeriodicCacheReloadTrigger,
    ScheduleMode,
    TimedCacheReloadTrigger,
)

__all__ = [
    "AsyncLookupFunction",
    "AsyncLookupFunctionProvider",
    "CacheMetricGroup",
    "CacheReloadTrigger",
    "CacheType",
    "DefaultLookupCache",
    "FullCachingLookupProvider",
    "HashPartitioner",
    "Key",
    "KeyPartitioner",
    "LookupCache",
    "LookupFunction",
    "LookupFunctionProvider",
    "LookupHint",
    "LookupOptions",
    "LookupTableSource",
    "PartialCachingAsyncLookupProvider",
    "PartialCachingLookupProvider",
    "PeriodicCacheReloadTrigger",
    "RateLimit",
    "ReloadStrategy",
    "Row",
    "ScheduleMode",
    "ShuffleHashHint",
    "TimedCacheReloadTrigger",
    "parse_hints",
]
