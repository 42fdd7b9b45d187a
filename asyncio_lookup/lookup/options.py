"""The ``lookup.*`` table options (FLIP-221 plus batching), parsed and validated up front."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import time
from typing import Any, TypeVar

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.lookup.cache import DefaultLookupCache
from asyncio_lookup.lookup.clock import MONOTONIC, Clock
from asyncio_lookup.lookup.durations import DURATION_ALLOWED, parse_duration
from asyncio_lookup.lookup.reload import (
    CacheReloadTrigger,
    PeriodicCacheReloadTrigger,
    ScheduleMode,
    TimedCacheReloadTrigger,
    parse_iso_time,
)

CACHE = "lookup.cache"
MAX_RETRIES = "lookup.max-retries"
EXPIRE_AFTER_ACCESS = "lookup.partial-cache.expire-after-access"
EXPIRE_AFTER_WRITE = "lookup.partial-cache.expire-after-write"
CACHE_MISSING_KEY = "lookup.partial-cache.cache-missing-key"
MAX_ROWS = "lookup.partial-cache.max-rows"
RELOAD_STRATEGY = "lookup.full-cache.reload-strategy"
PERIODIC_INTERVAL = "lookup.full-cache.periodic-reload.interval"
SCHEDULE_MODE = "lookup.full-cache.periodic-reload.schedule-mode"
ISO_TIME = "lookup.full-cache.timed-reload.iso-time"
INTERVAL_IN_DAYS = "lookup.full-cache.timed-reload.interval-in-days"
BATCH_MAX_SIZE = "lookup.batch.max-size"
BATCH_MAX_WAIT = "lookup.batch.max-wait"

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

# name -> (allowed, default shown in docs)
OPTIONS: dict[str, tuple[str, str]] = {
    CACHE: ("NONE, PARTIAL or FULL", "NONE"),
    MAX_RETRIES: ("an integer >= 0 (connector retries on a transient failure)", "3"),
    EXPIRE_AFTER_ACCESS: (DURATION_ALLOWED, "(none)"),
    EXPIRE_AFTER_WRITE: (DURATION_ALLOWED, "(none)"),
    CACHE_MISSING_KEY: ("true or false", "true"),
    MAX_ROWS: ("an integer >= 0 (number of keys)", "(none)"),
    RELOAD_STRATEGY: ("PERIODIC or TIMED", "PERIODIC"),
    PERIODIC_INTERVAL: ("a duration > 0 such as '1h'", "(none)"),
    SCHEDULE_MODE: ("FIXED_DELAY or FIXED_RATE", "FIXED_DELAY"),
    ISO_TIME: ("an ISO-8601 time such as '10:15', '10:15Z' or '10:15+07:00'", "(none)"),
    INTERVAL_IN_DAYS: ("an integer >= 1", "1"),
    BATCH_MAX_SIZE: (
        "an integer >= 1 (keys per batched call; 1 turns batching off)",
        str(DEFAULT_BATCH_MAX_SIZE),
    ),
    BATCH_MAX_WAIT: (DURATION_ALLOWED, "0 ms (the keys of one event-loop iteration)"),
}


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).strip()


def _enum(option: str, value: Any, kind: type[E]) -> E:
    try:
        return kind[_text(value).upper()]
    except KeyError:
        raise ConfigurationError(option, value, OPTIONS[option][0]) from None


def _int(option: str, value: Any, minimum: int) -> int:
    try:
        number = int(_text(value))
    except ValueError:
        raise ConfigurationError(option, value, OPTIONS[option][0]) from None
    if number < minimum:
        raise ConfigurationError(option, value, OPTIONS[option][0])
    return number


def _bool(option: str, value: Any) -> bool:
    text = _text(value).lower()
    if text not in ("true", "false"):
        raise ConfigurationError(option, value, OPTIONS[option][0])
    return text == "true"


def _duration(option: str, value: Any) -> float:
    return parse_duration(option, value if not isinstance(value, str) else value.strip())


def _positive_duration(option: str, value: Any) -> float:
    seconds = _duration(option, value)
    if seconds <= 0:
        raise ConfigurationError(option, value, OPTIONS[option][0])
    return seconds


def _format_seconds(seconds: float) -> str:
    if seconds == int(seconds):
        return f"{int(seconds)} s"
    return f"{seconds * 1000:g} ms"


@dataclass(frozen=True)
class LookupOptions:
    """The ``lookup.*`` options of one lookup table, with Flink's defaults. Times in seconds."""

    cache: CacheType = CacheType.NONE
    max_retries: int = 3
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

    @classmethod
    def from_dict(cls, options: Mapping[str, Any]) -> LookupOptions:
        """Parse the ``lookup.*`` entries of ``options`` (other keys are ignored).

        Raises :class:`ConfigurationError` naming the option for unknown ``lookup.*`` names,
        unparsable values and Flink's invalid combinations.
        """
        parsers: dict[str, tuple[str, Callable[[str, Any], Any]]] = {
            CACHE: ("cache", lambda o, v: _enum(o, v, CacheType)),
            MAX_RETRIES: ("max_retries", lambda o, v: _int(o, v, 0)),
            EXPIRE_AFTER_ACCESS: ("partial_expire_after_access", _duration),
            EXPIRE_AFTER_WRITE: ("partial_expire_after_write", _duration),
            CACHE_MISSING_KEY: ("partial_cache_missing_key", _bool),
            MAX_ROWS: ("partial_max_rows", lambda o, v: _int(o, v, 0)),
            RELOAD_STRATEGY: ("full_reload_strategy", lambda o, v: _enum(o, v, ReloadStrategy)),
            PERIODIC_INTERVAL: ("full_periodic_interval", _positive_duration),
            SCHEDULE_MODE: ("full_periodic_schedule_mode", lambda o, v: _enum(o, v, ScheduleMode)),
            ISO_TIME: ("full_timed_iso_time", parse_iso_time),
            INTERVAL_IN_DAYS: ("full_timed_interval_in_days", lambda o, v: _int(o, v, 1)),
            BATCH_MAX_SIZE: ("batch_max_size", lambda o, v: _int(o, v, 1)),
            BATCH_MAX_WAIT: ("batch_max_wait", _duration),
        }
        values: dict[str, Any] = {}
        for name, raw in options.items():
            if not str(name).lower().startswith("lookup."):
                continue
            if name not in parsers:
                allowed = "one of " + ", ".join(sorted(OPTIONS))
                raise ConfigurationError(name, raw, allowed, reason="unknown lookup option")
            field, parse = parsers[name]
            values[field] = parse(name, raw)
        parsed = cls(**values)
        parsed.validate()
        return parsed

    def validate(self) -> None:
        """Flink's checks of option combinations (the ones a field alone cannot express)."""
        if self.full_periodic_interval is not None and self.full_periodic_interval <= 0:
            raise ConfigurationError(
                PERIODIC_INTERVAL, self.full_periodic_interval, OPTIONS[PERIODIC_INTERVAL][0]
            )
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
            if self.full_reload_strategy is ReloadStrategy.PERIODIC:
                if self.full_periodic_interval is None:
                    raise ConfigurationError(
                        PERIODIC_INTERVAL,
                        None,
                        OPTIONS[PERIODIC_INTERVAL][0],
                        reason=f"required when {RELOAD_STRATEGY!r} is PERIODIC",
                    )
            elif self.full_timed_iso_time is None:
                raise ConfigurationError(
                    ISO_TIME,
                    None,
                    OPTIONS[ISO_TIME][0],
                    reason=f"required when {RELOAD_STRATEGY!r} is TIMED",
                )
        if self.full_timed_interval_in_days < 1:
            raise ConfigurationError(
                INTERVAL_IN_DAYS, self.full_timed_interval_in_days, OPTIONS[INTERVAL_IN_DAYS][0]
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
        """Every option as ``lookup.*`` strings that :meth:`from_dict` parses back to these."""
        out: dict[str, str] = {
            CACHE: self.cache.value,
            MAX_RETRIES: str(self.max_retries),
            CACHE_MISSING_KEY: "true" if self.partial_cache_missing_key else "false",
            RELOAD_STRATEGY: self.full_reload_strategy.value,
            SCHEDULE_MODE: self.full_periodic_schedule_mode.value,
            INTERVAL_IN_DAYS: str(self.full_timed_interval_in_days),
            BATCH_MAX_SIZE: str(self.batch_max_size),
            BATCH_MAX_WAIT: _format_seconds(self.batch_max_wait),
        }
        optional: dict[str, float | int | None] = {
            EXPIRE_AFTER_ACCESS: self.partial_expire_after_access,
            EXPIRE_AFTER_WRITE: self.partial_expire_after_write,
            PERIODIC_INTERVAL: self.full_periodic_interval,
        }
        for name, seconds in optional.items():
            if seconds is not None:
                out[name] = _format_seconds(float(seconds))
        if self.partial_max_rows is not None:
            out[MAX_ROWS] = str(self.partial_max_rows)
        if self.full_timed_iso_time is not None:
            out[ISO_TIME] = self.full_timed_iso_time.isoformat()
        return dict(sorted(out.items()))
