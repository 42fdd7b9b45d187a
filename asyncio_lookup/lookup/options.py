"""The ``lookup.*`` table options (FLIP-221 plus batching), parsed and validated up front.

Each option is one row of :data:`OPTIONS`: its field, what is allowed, its default as shown to
users, its parser (text or Python values to the field's value) and its text form.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from datetime import time
from typing import Any, TypeVar

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.lookup.cache import DefaultLookupCache
from asyncio_lookup.lookup.clock import MONOTONIC, Clock
from asyncio_lookup.lookup.flink_options import DEPRECATED
from asyncio_lookup.lookup.l2.options import (
    SHARED_URL_ALLOWED,
    SharedCacheSettings,
    shared_options,
)
from asyncio_lookup.lookup.option_names import (
    BATCH_MAX_SIZE,
    BATCH_MAX_WAIT,
    CACHE,
    CACHE_MISSING_KEY,
    EXPIRE_AFTER_ACCESS,
    EXPIRE_AFTER_WRITE,
    FAIL_ON_MISSING_COLUMN,
    INTERVAL_IN_DAYS,
    ISO_TIME,
    MAX_RETRIES,
    MAX_RETRY_BACKOFF,
    MAX_ROWS,
    PERIODIC_INTERVAL,
    RATE_LIMIT,
    RATE_LIMIT_ADAPTIVE,
    RATE_LIMIT_PARALLELISM,
    RELOAD_STRATEGY,
    SCHEDULE_MODE,
    SHARED_CACHE_MISSING_KEY,
    SHARED_LEASE,
    SHARED_MAX_VALUE_SIZE,
    SHARED_NAMESPACE,
    SHARED_TIMEOUT,
    SHARED_TTL,
    SHARED_URL,
)
from asyncio_lookup.lookup.rate import RATE_ALLOWED, format_rate, parse_rate
from asyncio_lookup.lookup.reload import (
    ISO_TIME_ALLOWED,
    CacheReloadTrigger,
    PeriodicCacheReloadTrigger,
    ScheduleMode,
    TimedCacheReloadTrigger,
    parse_iso_time,
)
from asyncio_lookup.lookup.retry import DEFAULT_MAX_BACKOFF, DEFAULT_MAX_RETRIES
from asyncio_lookup.validation import (
    BOOL_ALLOWED,
    DURATION_ALLOWED,
    POSITIVE_DURATION_ALLOWED,
    format_duration,
    parse_bool,
    parse_choice,
    parse_duration,
    parse_int,
    refuse_unitless,
    unknown_option,
)

E = TypeVar("E", bound=enum.Enum)


class CacheType(enum.Enum):
    """``lookup.cache``: no cache, a partial (LRU + expiry) cache, or the whole table."""

    NONE = "NONE"
    PARTIAL = "PARTIAL"
    FULL = "FULL"


class ReloadStrategy(enum.Enum):
    """``lookup.full-cache.reload-strategy``."""

    PERIODIC = "PERIODIC"
    TIMED = "TIMED"


DEFAULT_BATCH_MAX_SIZE = 64
DEFAULT_BATCH_MAX_WAIT = 0.0


@dataclass(frozen=True)
class Option:
    """One ``lookup.*`` option: the :class:`LookupOptions` field it sets and how."""

    field: str
    allowed: str
    default: str
    parse: Callable[[str, Any], Any]
    text: Callable[[Any], str] = str

    @property
    def is_duration(self) -> bool:
        return self.text is format_duration  # every duration option is shown as one


def _enum(kind: type[E]) -> Callable[[str, Any], E]:
    def parse(option: str, value: Any) -> E:
        if isinstance(value, kind):
            return value
        return kind[parse_choice(option, value, [member.value for member in kind])]

    return parse


def _int(minimum: int) -> Callable[[str, Any], int]:
    return lambda option, value: parse_int(option, value, minimum=minimum)


def _duration(positive: bool, never: bool = False) -> Callable[[str, Any], float]:
    def parse(option: str, value: Any) -> float:
        return parse_duration(option, value, positive=positive, never=never)

    return parse


def _enum_text(value: enum.Enum) -> str:
    return str(value.value)


def _bool_text(value: bool) -> str:
    return "true" if value else "false"


_POSITIVE = _duration(positive=True)
_POSITIVE_OR_NEVER = _duration(positive=True, never=True)  # 100 years or more: never

OPTIONS: dict[str, Option] = {
    CACHE: Option("cache", "NONE, PARTIAL or FULL", "NONE", _enum(CacheType), _enum_text),
    MAX_RETRIES: Option(
        "max_retries",
        "an integer >= 0 (connector retries on a transient failure)",
        str(DEFAULT_MAX_RETRIES),
        _int(0),
    ),
    MAX_RETRY_BACKOFF: Option(
        "max_retry_backoff",
        POSITIVE_DURATION_ALLOWED,
        format_duration(DEFAULT_MAX_BACKOFF),
        _POSITIVE,
        format_duration,
    ),
    FAIL_ON_MISSING_COLUMN: Option(
        "fail_on_missing_column",
        BOOL_ALLOWED + " (true: a dim column no row of a task contained fails the task)",
        "false",
        parse_bool,
        _bool_text,
    ),
    EXPIRE_AFTER_ACCESS: Option(
        "partial_expire_after_access",
        POSITIVE_DURATION_ALLOWED,
        "(none)",
        _POSITIVE_OR_NEVER,
        format_duration,
    ),
    EXPIRE_AFTER_WRITE: Option(
        "partial_expire_after_write",
        POSITIVE_DURATION_ALLOWED,
        "(none)",
        _POSITIVE_OR_NEVER,
        format_duration,
    ),
    CACHE_MISSING_KEY: Option(
        "partial_cache_missing_key", BOOL_ALLOWED, "true", parse_bool, _bool_text
    ),
    MAX_ROWS: Option("partial_max_rows", "an integer >= 1 (number of keys)", "(none)", _int(1)),
    RELOAD_STRATEGY: Option(
        "full_reload_strategy", "PERIODIC or TIMED", "PERIODIC", _enum(ReloadStrategy), _enum_text
    ),
    PERIODIC_INTERVAL: Option(
        "full_periodic_interval",
        POSITIVE_DURATION_ALLOWED,
        "(none)",
        _POSITIVE_OR_NEVER,
        format_duration,
    ),
    SCHEDULE_MODE: Option(
        "full_periodic_schedule_mode",
        "FIXED_DELAY or FIXED_RATE",
        "FIXED_DELAY",
        _enum(ScheduleMode),
        _enum_text,
    ),
    ISO_TIME: Option(
        "full_timed_iso_time", ISO_TIME_ALLOWED, "(none)", parse_iso_time, time.isoformat
    ),
    INTERVAL_IN_DAYS: Option("full_timed_interval_in_days", "an integer >= 1", "1", _int(1)),
    BATCH_MAX_SIZE: Option(
        "batch_max_size",
        "an integer >= 1 (keys per batched call; 1 turns batching off)",
        str(DEFAULT_BATCH_MAX_SIZE),
        _int(1),
    ),
    BATCH_MAX_WAIT: Option(
        "batch_max_wait",
        DURATION_ALLOWED,
        "0 ms (the keys of one event-loop iteration)",
        _duration(positive=False),
        format_duration,
    ),
    RATE_LIMIT: Option(
        "rate_limit",
        RATE_ALLOWED + " (for the whole job, shared by its tasks)",
        "(none: no limit)",
        parse_rate,
        format_rate,
    ),
    RATE_LIMIT_ADAPTIVE: Option(
        "rate_limit_adaptive",
        BOOL_ALLOWED + " (back off on 429/503 answers, recover when they stop)",
        "false",
        parse_bool,
        _bool_text,
    ),
    RATE_LIMIT_PARALLELISM: Option(
        "rate_limit_parallelism",
        "an integer >= 1 (the number of tasks that run the join at once)",
        "(the task slots the Spark conf describes)",
        _int(1),
    ),
    **shared_options(Option),
}


@dataclass(frozen=True)
class LookupOptions:
    """The ``lookup.*`` options of one lookup table, with Flink's defaults. Times in seconds."""

    cache: CacheType = CacheType.NONE
    max_retries: int = DEFAULT_MAX_RETRIES
    max_retry_backoff: float = DEFAULT_MAX_BACKOFF
    fail_on_missing_column: bool = False
    partial_expire_after_access: float | None = None
    partial_expire_after_write: float | None = None
    partial_cache_missing_key: bool = True
    partial_max_rows: int | None = None
    full_reload_strategy: ReloadStrategy = ReloadStrategy.PERIODIC
    full_periodic_interval: float | None = None
    full_periodic_schedule_mode: ScheduleMode = ScheduleMode.FIXED_DELAY
    full_timed_iso_time: time | None = None
    full_timed_interval_in_days: int = 1
    batch_max_size: int = DEFAULT_BATCH_MAX_SIZE
    batch_max_wait: float = DEFAULT_BATCH_MAX_WAIT
    rate_limit: float | None = None
    rate_limit_adaptive: bool | None = None
    rate_limit_parallelism: int | None = None
    shared_url: str | None = field(default=None, repr=False)  # may hold a password
    shared_ttl: float | None = None
    shared_cache_missing_key: bool | None = None
    shared_namespace: str | None = None
    shared_max_value_size: int | None = None
    shared_timeout: float | None = None
    shared_lease: float | None = None

    def __post_init__(self) -> None:
        # Every field is parsed here, once, whichever way the options were given.
        for name, option in OPTIONS.items():
            value = getattr(self, option.field)
            if value is not None:
                object.__setattr__(self, option.field, option.parse(name, value))
        self.validate()

    @classmethod
    def from_dict(cls, options: Mapping[str, Any]) -> LookupOptions:
        """Parse ``lookup.*`` options given as text (or Python values).

        Raises :class:`ConfigurationError` naming the option for an unknown name (suggesting
        the nearest known one), an unparsable or senseless value, and Flink's invalid
        combinations.
        """
        values: dict[str, Any] = {}
        for name, raw in options.items():
            option = OPTIONS.get(name) if isinstance(name, str) else None
            if option is None and isinstance(name, str) and name.lower() in DEPRECATED:
                current = DEPRECATED[name.lower()]
                raise ConfigurationError(
                    name,
                    raw,
                    f"{current!r} (with 'lookup.cache' = 'PARTIAL')",
                    reason="a deprecated name of Flink's JDBC connector, read in SQL DDL only",
                )
            if option is None:
                raise unknown_option(
                    name, raw, OPTIONS, kind="lookup table option", prefixes=("lookup.",)
                )
            if option.is_duration:
                refuse_unitless(name, raw, option.allowed)
            values[option.field] = raw
        parsed = cls(**values)
        parsed._validate_given({name for name in options if name in OPTIONS})
        return parsed

    def _validate_given(self, given: set[str]) -> None:
        """:meth:`_validate_cache_kind` for the options that have a default (so a field
        alone cannot tell whether they were given): given for another cache kind or reload
        strategy, they would do nothing."""
        needs = {
            RELOAD_STRATEGY: (CacheType.FULL, None),
            SCHEDULE_MODE: (CacheType.FULL, ReloadStrategy.PERIODIC),
            INTERVAL_IN_DAYS: (CacheType.FULL, ReloadStrategy.TIMED),
            CACHE_MISSING_KEY: (CacheType.PARTIAL, None),
        }
        for name, (cache, strategy) in needs.items():
            if name not in given:
                continue
            if name == CACHE_MISSING_KEY and self.shared_url is not None:
                continue  # the shared cache's default too
            self._refuse_unless(name, cache, strategy)

    def validate(self) -> None:
        """Flink's checks of option combinations (the ones a field alone cannot express)."""
        if self.cache is CacheType.PARTIAL and (
            self.partial_max_rows is None
            and self.partial_expire_after_write is None
            and self.partial_expire_after_access is None
        ):
            raise ConfigurationError(
                CACHE,
                "PARTIAL",
                f"PARTIAL with at least one of {MAX_ROWS!r}, {EXPIRE_AFTER_WRITE!r}, "
                f"{EXPIRE_AFTER_ACCESS!r}",
                reason="the partial cache would be unbounded",
            )
        if self.cache is CacheType.FULL:
            strategy = self.full_reload_strategy
            required, value = (
                (PERIODIC_INTERVAL, self.full_periodic_interval)
                if strategy is ReloadStrategy.PERIODIC
                else (ISO_TIME, self.full_timed_iso_time)
            )
            if value is None:
                raise ConfigurationError(
                    required,
                    None,
                    OPTIONS[required].allowed,
                    reason=f"required when {RELOAD_STRATEGY!r} is {strategy.name}",
                )

        self._validate_cache_kind()
        self._validate_rate_limit()
        self._validate_shared_cache()

    def _refuse_unless(self, name: str, cache: CacheType, strategy: ReloadStrategy | None) -> None:
        """Refuse the set option ``name`` unless the cache is ``cache`` (and the reload strategy
        ``strategy``): otherwise it would do nothing."""
        if self.cache is not cache:
            raise ConfigurationError(
                CACHE,
                self.cache.name,
                f"{cache.name!r} for {name!r}",
                reason=f"{name!r} is set but the cache is {self.cache.name}: it would do nothing",
            )
        if strategy is not None and self.full_reload_strategy is not strategy:
            raise ConfigurationError(
                RELOAD_STRATEGY,
                self.full_reload_strategy.name,
                f"{strategy.name!r} for {name!r}",
                reason=f"{name!r} is set but the reload strategy is "
                f"{self.full_reload_strategy.name}: it would do nothing",
            )

    def _validate_cache_kind(self) -> None:
        """An option of another cache kind than ``lookup.cache``'s would do nothing (Flink
        ignores it silently: a cache the user believes is on)."""
        needs = {
            MAX_ROWS: (self.partial_max_rows, CacheType.PARTIAL, None),
            EXPIRE_AFTER_WRITE: (self.partial_expire_after_write, CacheType.PARTIAL, None),
            EXPIRE_AFTER_ACCESS: (self.partial_expire_after_access, CacheType.PARTIAL, None),
            PERIODIC_INTERVAL: (
                self.full_periodic_interval,
                CacheType.FULL,
                ReloadStrategy.PERIODIC,
            ),
            ISO_TIME: (self.full_timed_iso_time, CacheType.FULL, ReloadStrategy.TIMED),
        }
        for name, (value, cache, strategy) in needs.items():
            if value is None:
                continue
            self._refuse_unless(name, cache, strategy)

    def _validate_shared_cache(self) -> None:
        if self.shared_url is None:
            for name in (
                SHARED_TTL,
                SHARED_CACHE_MISSING_KEY,
                SHARED_NAMESPACE,
                SHARED_MAX_VALUE_SIZE,
                SHARED_TIMEOUT,
                SHARED_LEASE,
            ):
                if getattr(self, OPTIONS[name].field) is not None:
                    raise ConfigurationError(
                        SHARED_URL,
                        None,
                        SHARED_URL_ALLOWED,
                        reason=f"required when {name!r} is set (the store it configures)",
                    )
        elif self.cache is CacheType.FULL:
            raise ConfigurationError(
                CACHE,
                "FULL",
                "PARTIAL or NONE with a shared cache ('lookup.shared-cache.url')",
                reason="a FULL cache answers every lookup from its snapshot: nothing would "
                "ever reach the shared cache",
            )

    def shared_cache(self) -> SharedCacheSettings | None:
        """The shared cache's settings (None without ``lookup.shared-cache.url``)."""
        if self.shared_url is None:
            return None
        given = {
            option.field.removeprefix("shared_"): getattr(self, option.field)
            for option in OPTIONS.values()
            if option.field.startswith("shared_")
        }
        if given["cache_missing_key"] is None:  # unset: as the partial cache (L1) does
            given["cache_missing_key"] = self.partial_cache_missing_key
        return SharedCacheSettings(**{k: v for k, v in given.items() if v is not None})

    def _validate_rate_limit(self) -> None:
        if self.rate_limit is None:
            for name, field in (
                (RATE_LIMIT_ADAPTIVE, self.rate_limit_adaptive),
                (RATE_LIMIT_PARALLELISM, self.rate_limit_parallelism),
            ):
                if field is not None:
                    raise ConfigurationError(
                        RATE_LIMIT,
                        None,
                        RATE_ALLOWED,
                        reason=f"required when {name!r} is set (the job's budget it applies to)",
                    )
        elif self.cache is CacheType.FULL:
            raise ConfigurationError(
                RATE_LIMIT,
                format_rate(self.rate_limit),
                "no rate limit with 'lookup.cache' = FULL (or a PARTIAL / NONE cache)",
                reason="a FULL cache answers every lookup from its snapshot: there are no "
                "per-key calls to limit",
            )

    def build_cache(self, clock: Clock = MONOTONIC) -> DefaultLookupCache | None:
        """The partial cache these options describe (None unless ``lookup.cache`` is PARTIAL)."""
        if self.cache is not CacheType.PARTIAL:
            return None
        builder = DefaultLookupCache.new_builder().clock(clock)
        builder.cache_missing_key(self.partial_cache_missing_key)
        if self.partial_expire_after_access is not None:
            builder.expire_after_access(self.partial_expire_after_access)
        if self.partial_expire_after_write is not None:
            builder.expire_after_write(self.partial_expire_after_write)
        if self.partial_max_rows is not None:
            builder.maximum_size(self.partial_max_rows)
        return builder.build()

    def build_reload_trigger(self) -> CacheReloadTrigger | None:
        """The full cache's reload trigger (None unless ``lookup.cache`` is FULL)."""
        if self.cache is not CacheType.FULL:
            return None
        if self.full_reload_strategy is ReloadStrategy.PERIODIC:
            assert self.full_periodic_interval is not None
            return PeriodicCacheReloadTrigger(
                self.full_periodic_interval, self.full_periodic_schedule_mode
            )
        assert self.full_timed_iso_time is not None
        return TimedCacheReloadTrigger(self.full_timed_iso_time, self.full_timed_interval_in_days)

    def to_dict(self) -> dict[str, str]:
        """Every option that is set to other than its default, as text that
        :meth:`from_dict` parses back to these."""
        defaults = {f.name: f.default for f in fields(self)}
        out: dict[str, str] = {}
        for name, option in OPTIONS.items():
            value = getattr(self, option.field)
            if value is not None and value != defaults.get(option.field):
                out[name] = option.text(value)
        return dict(sorted(out.items()))
