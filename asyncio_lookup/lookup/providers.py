"""FLIP-221 providers: wrap a lookup function (and a cache, or a scan and a reload trigger) into
a ``LookupTableSource`` that ``LookupTable(connector=...)`` and ``LookupChain.create`` accept."""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable, Iterable
from typing import ClassVar, Generic, Protocol, TypeAlias, TypeVar, runtime_checkable

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.lookup.cache import LookupCache
from asyncio_lookup.lookup.functions import AsyncLookupFunction, LookupFunction, Row
from asyncio_lookup.lookup.reload import CacheReloadTrigger

ScanRows: TypeAlias = "Iterable[Row] | AsyncIterable[Row]"


@runtime_checkable
class Scannable(Protocol):
    """Anything with a ``scan()`` returning all rows (a connector, for instance)."""

    def scan(self) -> ScanRows | None: ...


ScanProvider: TypeAlias = "Scannable | Callable[[], ScanRows]"
F = TypeVar("F", LookupFunction, AsyncLookupFunction)


class _FunctionProvider(Generic[F]):
    """What both function providers share: one function of the right kind, and no scan."""

    _kind: ClassVar[type]
    _allowed: ClassVar[str]

    def __init__(self, function: F) -> None:
        if not isinstance(function, self._kind):
            raise ConfigurationError("function", function, self._allowed)
        self.function: F = function

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.function!r})"

    def scan(self) -> ScanRows | None:
        return None


class LookupFunctionProvider(_FunctionProvider[LookupFunction]):
    """A source with a sync lookup only: ``LookupFunctionProvider.of(fn)``."""

    _kind = LookupFunction
    _allowed = "a LookupFunction instance"

    @classmethod
    def of(cls, function: LookupFunction) -> LookupFunctionProvider:
        return cls(function)

    def create_lookup_function(self) -> LookupFunction:
        return self.function

    def lookup_function(self) -> LookupFunction | None:
        return self.function

    def async_lookup_function(self) -> AsyncLookupFunction | None:
        return None


class AsyncLookupFunctionProvider(_FunctionProvider[AsyncLookupFunction]):
    """A source with an async lookup only: ``AsyncLookupFunctionProvider.of(fn)``."""

    _kind = AsyncLookupFunction
    _allowed = "an AsyncLookupFunction instance"

    @classmethod
    def of(cls, function: AsyncLookupFunction) -> AsyncLookupFunctionProvider:
        return cls(function)

    def create_async_lookup_function(self) -> AsyncLookupFunction:
        return self.function

    def lookup_function(self) -> LookupFunction | None:
        return None

    def async_lookup_function(self) -> AsyncLookupFunction | None:
        return self.function


def _check_cache(cache: LookupCache) -> LookupCache:
    if not isinstance(cache, LookupCache):
        raise ConfigurationError("cache", cache, "a LookupCache (e.g. DefaultLookupCache)")
    return cache


# The two partial-caching providers differ only in the kind of function, as in Flink's API
# (PartialCachingLookupProvider / PartialCachingAsyncLookupProvider), which they mirror.
class PartialCachingLookupProvider(LookupFunctionProvider):
    """A sync lookup with its own partial cache: ``PartialCachingLookupProvider.of(fn, cache)``."""

    def __init__(self, function: LookupFunction, cache: LookupCache) -> None:
        super().__init__(function)
        self.cache = _check_cache(cache)

    @classmethod
    def of(  # type: ignore[override]
        cls, function: LookupFunction, cache: LookupCache
    ) -> PartialCachingLookupProvider:
        return cls(function, cache)

    def get_cache(self) -> LookupCache:
        return self.cache


class PartialCachingAsyncLookupProvider(AsyncLookupFunctionProvider):
    """An async lookup with its own partial cache: ``...AsyncLookupProvider.of(fn, cache)``."""

    def __init__(self, function: AsyncLookupFunction, cache: LookupCache) -> None:
        super().__init__(function)
        self.cache = _check_cache(cache)

    @classmethod
    def of(  # type: ignore[override]
        cls, function: AsyncLookupFunction, cache: LookupCache
    ) -> PartialCachingAsyncLookupProvider:
        return cls(function, cache)

    def get_cache(self) -> LookupCache:
        return self.cache


class FullCachingLookupProvider:
    """A fully cached table: ``FullCachingLookupProvider.of(scan_provider, reload_trigger)``.

    ``scan_provider`` is an object with ``scan()`` (a connector) or a zero-argument callable;
    either returns all rows, sync or async. ``reload_trigger`` None loads once. Lookups are
    answered from the snapshot only; there is no point lookup.
    """

    def __init__(
        self, scan_provider: ScanProvider, reload_trigger: CacheReloadTrigger | None
    ) -> None:
        if not isinstance(scan_provider, Scannable) and not callable(scan_provider):
            raise ConfigurationError(
                "scan_provider", scan_provider, "an object with scan() or a callable returning rows"
            )
        if reload_trigger is not None and not isinstance(reload_trigger, CacheReloadTrigger):
            raise ConfigurationError(
                "reload_trigger", reload_trigger, "a CacheReloadTrigger or None"
            )
        self.scan_provider = scan_provider
        self.reload_trigger = reload_trigger

    @classmethod
    def of(
        cls, scan_provider: ScanProvider, reload_trigger: CacheReloadTrigger | None
    ) -> FullCachingLookupProvider:
        return cls(scan_provider, reload_trigger)

    def __repr__(self) -> str:
        return f"FullCachingLookupProvider({self.scan_provider!r}, {self.reload_trigger!r})"

    def get_cache_reload_trigger(self) -> CacheReloadTrigger | None:
        return self.reload_trigger

    def lookup_function(self) -> LookupFunction | None:
        return None

    def async_lookup_function(self) -> AsyncLookupFunction | None:
        return None

    def scan(self) -> ScanRows | None:
        if isinstance(self.scan_provider, Scannable):
            return self.scan_provider.scan()
        return self.scan_provider()
