"""When a full cache reloads (FLIP-221): ``CacheReloadTrigger`` and its periodic and timed forms.

A trigger is a schedule: given the times of the previous load it says when the next one starts.
The full cache runs the schedule on its own thread, so loads never overlap and a late load simply
starts as soon as the previous one ends.
"""

from __future__ import annotations

import enum
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.lookup.option_names import (
    INTERVAL_IN_DAYS,
    ISO_TIME,
    PERIODIC_INTERVAL,
    SCHEDULE_MODE,
)
from asyncio_lookup.validation import NEVER, parse_choice, parse_duration, parse_int

#: Java's DateTimeFormatter.ISO_TIME, which Flink's TimedCacheReloadTrigger parses with
_ISO_TIME = re.compile(r"\d\d:\d\d(?::\d\d(?:\.\d{1,9})?)?(?:[Zz]|[+-]\d\d:\d\d(?::\d\d)?)?")
ISO_TIME_ALLOWED = "an ISO-8601 time such as '10:15', '10:15:30', '10:15Z' or '10:15+07:00'"


class ScheduleMode(enum.Enum):
    """FIXED_DELAY: next load starts ``interval`` after the previous ended.
    FIXED_RATE: loads start every ``interval`` from the first; a late one starts when the previous
    ends (like ``ScheduledExecutorService.scheduleAtFixedRate``)."""

    FIXED_DELAY = "FIXED_DELAY"
    FIXED_RATE = "FIXED_RATE"


@dataclass(frozen=True)
class LoadTimes:
    """Clock times (seconds) of one load: when it was due, started and ended; ``initial`` for
    the load at open."""

    scheduled: float
    started: float
    ended: float
    initial: bool


class CacheReloadTrigger(ABC):
    """Decides when the full cache reloads. Subclass it for a custom schedule."""

    @abstractmethod
    def next_reload(self, previous: LoadTimes) -> float | None:
        """Clock time at which the next load is due (a past time: at once), or None for never."""


class PeriodicCacheReloadTrigger(CacheReloadTrigger):
    """Reload every ``interval`` (seconds, ``timedelta`` or a duration string like ``'1h'``)."""

    def __init__(
        self,
        interval: float | timedelta | str,
        schedule_mode: ScheduleMode | str = ScheduleMode.FIXED_DELAY,
    ) -> None:
        # 100 years or more (Flink's tests use Long.MAX_VALUE ms) means: load once, never reload
        self.interval = parse_duration(PERIODIC_INTERVAL, interval, positive=True, never=True)
        self.schedule_mode = parse_schedule_mode(SCHEDULE_MODE, schedule_mode)

    def __repr__(self) -> str:
        return f"PeriodicCacheReloadTrigger({self.interval}s, {self.schedule_mode.name})"

    def next_reload(self, previous: LoadTimes) -> float | None:
        if self.interval >= NEVER:
            return None
        if self.schedule_mode is ScheduleMode.FIXED_DELAY:
            return previous.ended + self.interval
        return previous.scheduled + self.interval


class TimedCacheReloadTrigger(CacheReloadTrigger):
    """Reload at ``reload_time`` every ``interval_in_days`` days, the first time today if that
    time is still ahead when the cache opens, else tomorrow.

    ``reload_time`` is a ``datetime.time`` or an ISO string (``'10:15'`` local time of this
    process, ``'10:15Z'``, ``'10:15+07:00'``). Clock times are epoch seconds.
    """

    def __init__(self, reload_time: time | str, interval_in_days: int = 1) -> None:
        self.reload_time = parse_iso_time(ISO_TIME, reload_time)
        self.interval_in_days = parse_int(INTERVAL_IN_DAYS, interval_in_days, minimum=1, text=False)

    def __repr__(self) -> str:
        return f"TimedCacheReloadTrigger({self.reload_time.isoformat()}, {self.interval_in_days})"

    def first_reload_after(self, now: float) -> float:
        """Today at ``reload_time`` if still ahead of ``now``, else tomorrow."""
        tz = self.reload_time.tzinfo
        today = datetime.fromtimestamp(now, tz).date()
        candidate = self._at(today)
        return candidate if candidate > now else self._at(today + timedelta(days=1))

    def next_reload(self, previous: LoadTimes) -> float:
        if previous.initial:
            return self.first_reload_after(previous.started)
        # Calendar days, not 86400 s: a local reload time stays put across DST changes.
        tz = self.reload_time.tzinfo
        day = datetime.fromtimestamp(previous.scheduled, tz).date()
        return self._at(day + timedelta(days=self.interval_in_days))

    def _at(self, day: date) -> float:
        return datetime.combine(day, self.reload_time).timestamp()


def parse_iso_time(option: str, value: time | str) -> time:
    """``'10:15'``, ``'10:15:30'``, ``'10:15Z'``, ``'10:15+07:00'`` -> ``datetime.time``."""
    if isinstance(value, time):
        return value
    if not isinstance(value, str):
        raise ConfigurationError(option, value, ISO_TIME_ALLOWED)
    text = value.strip()
    if not _ISO_TIME.fullmatch(text):  # Python also reads '10', '1015' and 'T10:15'; Java not
        raise ConfigurationError(option, value, ISO_TIME_ALLOWED)
    zulu = text[-1:] in ("Z", "z")
    try:
        parsed = time.fromisoformat(text[:-1] if zulu else text)
    except ValueError:
        raise ConfigurationError(option, value, ISO_TIME_ALLOWED) from None
    if zulu:
        if parsed.tzinfo is not None:
            raise ConfigurationError(option, value, ISO_TIME_ALLOWED)
        parsed = parsed.replace(tzinfo=UTC)
    return parsed


def parse_schedule_mode(option: str, value: ScheduleMode | str) -> ScheduleMode:
    """A :class:`ScheduleMode` or its name (any case)."""
    if isinstance(value, ScheduleMode):
        return value
    return ScheduleMode[parse_choice(option, value, [m.value for m in ScheduleMode])]
