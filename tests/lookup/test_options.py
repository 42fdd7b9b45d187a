"""LookupOptions: docs/semantics.md §2.5 parsing, Flink defaults and every configuration error."""

from __future__ import annotations

from datetime import UTC, time, timedelta, timezone

import pytest

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.lookup.cache import DefaultLookupCache
from asyncio_lookup.lookup.option_names import SHARED_CACHE_MISSING_KEY as SHARED_MISSING
from asyncio_lookup.lookup.options import CacheType, LookupOptions, ReloadStrategy
from asyncio_lookup.lookup.reload import (
    PeriodicCacheReloadTrigger,
    ScheduleMode,
    TimedCacheReloadTrigger,
)


def test_defaults_are_flinks() -> None:
    options = LookupOptions.from_dict({})
    assert options.cache is CacheType.NONE
    assert options.max_retries == 3
    assert options.partial_cache_missing_key is True
    assert options.full_reload_strategy is ReloadStrategy.PERIODIC
    assert options.full_periodic_schedule_mode is ScheduleMode.FIXED_DELAY
    assert options.full_timed_interval_in_days == 1
    assert options.build_cache() is None
    assert options.build_reload_trigger() is None


def test_every_option_parses() -> None:
    options = LookupOptions.from_dict(
        {
            "lookup.cache": "partial",
            "lookup.max-retries": "5",
            "lookup.partial-cache.expire-after-access": "10 s",
            "lookup.partial-cache.expire-after-write": "3 min",
            "lookup.partial-cache.cache-missing-key": "FALSE",
            "lookup.partial-cache.max-rows": "1000",
            "lookup.batch.max-size": "16",
            "lookup.batch.max-wait": "100ms",
            "lookup.max-retry-backoff": "30 s",
        }
    )
    assert options.cache is CacheType.PARTIAL
    assert options.max_retries == 5
    assert options.max_retry_backoff == 30
    assert options.partial_expire_after_access == 10
    assert options.partial_expire_after_write == 180
    assert options.partial_cache_missing_key is False
    assert options.partial_max_rows == 1000
    timed = LookupOptions.from_dict(
        {
            "lookup.cache": "full",
            "lookup.full-cache.reload-strategy": "timed",
            "lookup.full-cache.timed-reload.iso-time": "10:15+07:00",
            "lookup.full-cache.timed-reload.interval-in-days": "2",
        }
    )
    assert timed.full_reload_strategy is ReloadStrategy.TIMED
    assert timed.full_timed_iso_time == time(10, 15, tzinfo=timezone(timedelta(hours=7)))
    assert timed.full_timed_interval_in_days == 2
    periodic = LookupOptions.from_dict(
        {
            "lookup.cache": "full",
            "lookup.full-cache.periodic-reload.interval": "1h",
            "lookup.full-cache.periodic-reload.schedule-mode": "fixed_rate",
        }
    )
    assert periodic.full_periodic_interval == 3600
    assert periodic.full_periodic_schedule_mode is ScheduleMode.FIXED_RATE
    assert options.batch_max_size == 16
    assert options.batch_max_wait == pytest.approx(0.1)
    cache = options.build_cache()
    assert isinstance(cache, DefaultLookupCache)
    assert (cache.maximum_size, cache.expire_after_access, cache.cache_missing_key) == (
        1000,
        10,
        False,
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10:15", time(10, 15)),
        ("10:15:30", time(10, 15, 30)),
        ("10:15Z", time(10, 15, tzinfo=UTC)),
        ("10:15+07:00", time(10, 15, tzinfo=timezone(timedelta(hours=7)))),
    ],
)
def test_iso_time_forms(text: str, expected: time) -> None:
    options = LookupOptions.from_dict(
        {
            "lookup.cache": "FULL",
            "lookup.full-cache.reload-strategy": "TIMED",
            "lookup.full-cache.timed-reload.iso-time": text,
        }
    )
    trigger = options.build_reload_trigger()
    assert isinstance(trigger, TimedCacheReloadTrigger)
    assert trigger.reload_time == expected


def test_full_periodic_builds_trigger() -> None:
    trigger = LookupOptions.from_dict(
        {
            "lookup.cache": "FULL",
            "lookup.full-cache.periodic-reload.interval": "30 s",
            "lookup.full-cache.periodic-reload.schedule-mode": "FIXED_RATE",
        }
    ).build_reload_trigger()
    assert isinstance(trigger, PeriodicCacheReloadTrigger)
    assert (trigger.interval, trigger.schedule_mode) == (30, ScheduleMode.FIXED_RATE)


def test_round_trip_through_to_dict() -> None:
    original = LookupOptions.from_dict(
        {
            "lookup.cache": "PARTIAL",
            "lookup.partial-cache.max-rows": "7",
            "lookup.partial-cache.expire-after-write": "1500ms",
            "lookup.batch.max-wait": "2ms",
        }
    )
    assert LookupOptions.from_dict(original.to_dict()) == original
    timed = LookupOptions.from_dict(
        {
            "lookup.cache": "FULL",
            "lookup.full-cache.reload-strategy": "TIMED",
            "lookup.full-cache.timed-reload.iso-time": "23:05Z",
        }
    )
    assert LookupOptions.from_dict(timed.to_dict()) == timed


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"lookup.cache": "PARTLY"}, "lookup.cache"),
        ({"lookup.max-retries": "three"}, "lookup.max-retries"),
        ({"lookup.max-retries": "-1"}, "lookup.max-retries"),
        ({"lookup.partial-cache.expire-after-access": "ten"}, "expire-after-access"),
        ({"lookup.partial-cache.expire-after-write": "-1s"}, "expire-after-write"),
        ({"lookup.partial-cache.cache-missing-key": "yes"}, "cache-missing-key"),
        ({"lookup.partial-cache.max-rows": "1.5"}, "lookup.partial-cache.max-rows"),
        ({"lookup.partial-cache.max-rows": "-3"}, "lookup.partial-cache.max-rows"),
        ({"lookup.partial-cache.max-rows": "0"}, "lookup.partial-cache.max-rows"),
        ({"lookup.partial-cache.expire-after-write": "0"}, "expire-after-write"),
        ({"lookup.partial-cache.expire-after-access": "0 s"}, "expire-after-access"),
        ({"lookup.max-retry-backoff": "0"}, "lookup.max-retry-backoff"),
        ({"lookup.max-retry-backoff": "-1s"}, "lookup.max-retry-backoff"),
        ({"lookup.full-cache.reload-strategy": "HOURLY"}, "reload-strategy"),
        ({"lookup.full-cache.periodic-reload.interval": "0s"}, "periodic-reload.interval"),
        ({"lookup.full-cache.periodic-reload.interval": "soon"}, "periodic-reload.interval"),
        ({"lookup.full-cache.periodic-reload.schedule-mode": "FIXED"}, "schedule-mode"),
        ({"lookup.full-cache.timed-reload.iso-time": "25:00"}, "timed-reload.iso-time"),
        ({"lookup.full-cache.timed-reload.iso-time": "10:15ZZ"}, "timed-reload.iso-time"),
        # not Java's ISO_TIME (Flink's TimedCacheReloadTriggerTest refuses '10'); Python's
        # time.fromisoformat reads them as 10:00, 10:15, 10:15
        ({"lookup.full-cache.timed-reload.iso-time": "10"}, "timed-reload.iso-time"),
        ({"lookup.full-cache.timed-reload.iso-time": "1015"}, "timed-reload.iso-time"),
        ({"lookup.full-cache.timed-reload.iso-time": "T10:15"}, "timed-reload.iso-time"),
        ({"lookup.full-cache.timed-reload.interval-in-days": "0"}, "interval-in-days"),
        ({"lookup.batch.max-size": "0"}, "lookup.batch.max-size"),
        ({"lookup.batch.max-wait": "later"}, "lookup.batch.max-wait"),
        ({"lookup.time-out": "1s"}, "lookup.time-out"),
        ({"LOOKUP.CACHE": "FULL"}, "LOOKUP.CACHE"),
        # Flink's combination errors (docs/semantics.md §2.3-2.4)
        ({"lookup.cache": "PARTIAL"}, "lookup.partial-cache.max-rows"),
        ({"lookup.cache": "FULL"}, "lookup.full-cache.periodic-reload.interval"),
        (
            {"lookup.cache": "FULL", "lookup.full-cache.reload-strategy": "TIMED"},
            "lookup.full-cache.timed-reload.iso-time",
        ),
    ],
)
def test_configuration_errors_name_the_option(options: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        LookupOptions.from_dict(options)
    message = str(raised.value)
    assert named in message
    assert "allowed" in message
    name, value = next(iter(options.items()))
    if raised.value.option == name:
        assert repr(value) in message  # the bad value is shown


def test_unknown_option_lists_valid_names() -> None:
    with pytest.raises(ConfigurationError) as raised:
        LookupOptions.from_dict({"lookup.partial-cache.max-row": "10"})
    assert "lookup.partial-cache.max-rows" in raised.value.allowed


def test_partial_error_names_every_bound_and_reason() -> None:
    with pytest.raises(ConfigurationError) as raised:
        LookupOptions.from_dict({"lookup.cache": "PARTIAL"})
    assert raised.value.option == "lookup.cache"
    for name in ("max-rows", "expire-after-write", "expire-after-access", "unbounded"):
        assert name in str(raised.value)


def test_triggers_validate_like_options() -> None:
    with pytest.raises(ConfigurationError, match=r"periodic-reload.interval"):
        PeriodicCacheReloadTrigger(0)
    with pytest.raises(ConfigurationError, match="schedule-mode"):
        PeriodicCacheReloadTrigger(1, "SOMETIMES")
    with pytest.raises(ConfigurationError, match="interval-in-days"):
        TimedCacheReloadTrigger("10:15", 0)
    with pytest.raises(ConfigurationError, match="iso-time"):
        TimedCacheReloadTrigger("quarter past ten")


@pytest.mark.parametrize(
    ("name", "suggested"),
    [
        ("lookup-cache", "lookup.cache"),
        ("cache", "lookup.cache"),
        (" lookup.cache", "lookup.cache"),
        ("LOOKUP.CACHE", "lookup.cache"),
        ("lookup.max-retry", "lookup.max-retries"),
        ("max-rows", "lookup.partial-cache.max-rows"),
        ("lookup.partial-cache.expire-after-writes", "lookup.partial-cache.expire-after-write"),
    ],
)
def test_every_key_must_be_known_and_a_near_miss_names_the_right_one(
    name: str, suggested: str
) -> None:
    # these used to be ignored silently (the cache was then off)
    with pytest.raises(ConfigurationError) as raised:
        LookupOptions.from_dict({name: "PARTIAL"})
    assert raised.value.option == name
    assert f"did you mean {suggested!r}?" in str(raised.value)


def test_a_key_far_from_every_option_lists_them_without_a_guess() -> None:
    with pytest.raises(ConfigurationError) as raised:
        LookupOptions.from_dict({"connector": "redis"})
    assert "did you mean" not in str(raised.value)
    assert "'lookup.cache'" in raised.value.allowed


@pytest.mark.parametrize(
    ("field", "value", "option"),
    [
        ("partial_max_rows", 0, "lookup.partial-cache.max-rows"),
        ("partial_expire_after_write", 0.0, "lookup.partial-cache.expire-after-write"),
        ("max_retries", -1, "lookup.max-retries"),
        ("batch_max_size", True, "lookup.batch.max-size"),
    ],
)
def test_direct_construction_validates_each_field_once_by_option_name(
    field: str, value: object, option: str
) -> None:
    with pytest.raises(ConfigurationError) as raised:
        LookupOptions(cache=CacheType.NONE, **{field: value})  # type: ignore[arg-type]
    assert raised.value.option == option


def test_options_given_as_python_values_parse_like_text() -> None:
    options = LookupOptions.from_dict(
        {
            "lookup.cache": CacheType.PARTIAL,
            "lookup.partial-cache.max-rows": 10,
            "lookup.partial-cache.expire-after-write": timedelta(minutes=2),
            "lookup.partial-cache.cache-missing-key": False,
        }
    )
    assert options == LookupOptions.from_dict(
        {
            "lookup.cache": "PARTIAL",
            "lookup.partial-cache.max-rows": "10",
            "lookup.partial-cache.expire-after-write": "2 min",
            "lookup.partial-cache.cache-missing-key": "false",
        }
    )


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({}, True),
        ({"lookup.partial-cache.cache-missing-key": "false"}, False),
        ({"lookup.partial-cache.cache-missing-key": "false", SHARED_MISSING: "true"}, True),
        ({SHARED_MISSING: "false"}, False),
    ],
)
def test_the_shared_cache_keeps_misses_as_the_partial_cache_does_unless_told(
    given: dict[str, str], expected: bool
) -> None:
    options = LookupOptions.from_dict(
        {
            "lookup.cache": "PARTIAL",
            "lookup.partial-cache.max-rows": "10",
            "lookup.shared-cache.url": "redis://127.0.0.1:6379",
            **given,
        }
    )
    settings = options.shared_cache()
    assert settings is not None and settings.cache_missing_key is expected


@pytest.mark.parametrize(
    "option",
    [
        "lookup.partial-cache.expire-after-write",
        "lookup.max-retry-backoff",
        "lookup.batch.max-wait",
        "lookup.shared-cache.ttl",
    ],
)
def test_a_duration_given_as_a_bare_number_is_refused(option: str) -> None:
    """'10' is 10 ms (Flink's rule for text) but 10 read as 10 s: a 1000x silent difference."""
    base = {
        "lookup.cache": "PARTIAL",
        "lookup.partial-cache.max-rows": "10",
        "lookup.shared-cache.url": "redis://127.0.0.1:6379",
    }
    for number in (10, 1.5):
        with pytest.raises(ConfigurationError, match="no unit") as info:
            LookupOptions.from_dict({**base, option: number})
        assert info.value.option == option and f"'{number}s'" in str(info.value)
    assert LookupOptions.from_dict({**base, option: "10"}) is not None  # text: ms
    assert LookupOptions.from_dict({**base, option: timedelta(seconds=10)}) is not None


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis://:pw@127.0.0.1:6379/1x", "database '1x'"),  # redis-py would use database 0
        ("redis://127.0.0.1:6379/-1", "database '-1'"),
        ("redis://127.0.0.1:6379/0?db=two", "database 'two'"),
        ("redis://127.0.0.1:99999/0", "Port out of range"),
        # query options redis-py refuses when a task connects (every task then ran without
        # the shared cache, with one warning each)
        ("redis://:pw@127.0.0.1:6379/0?socket_timeout=fast", "socket_timeout"),
        ("redis://:pw@127.0.0.1:6379/0?ssl_cert_reqs=none", "ssl_cert_reqs"),
        ("redis://:pw@127.0.0.1:6379/0?protocol=9", "protocol"),
        # would win over the store's own pool size: 18 of 20 concurrent reads failed
        ("redis://:pw@127.0.0.1:6379/0?max_connections=2", "max_connections"),
    ],
)
def test_a_shared_cache_url_redis_would_misread_is_refused(url: str, problem: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        LookupOptions.from_dict({"lookup.shared-cache.url": url})
    assert info.value.option == "lookup.shared-cache.url"
    assert info.value.reason is not None and problem in info.value.reason
    assert "pw" not in str(info.value)


@pytest.mark.parametrize(
    ("given", "option", "named"),
    [
        ({"lookup.partial-cache.max-rows": "100"}, "lookup.cache", "the cache is NONE"),
        (
            {
                "lookup.cache": "FULL",
                "lookup.full-cache.periodic-reload.interval": "1h",
                "lookup.partial-cache.expire-after-write": "1 min",
            },
            "lookup.cache",
            "'lookup.partial-cache.expire-after-write' is set but the cache is FULL",
        ),
        (
            {
                "lookup.cache": "PARTIAL",
                "lookup.partial-cache.max-rows": "100",
                "lookup.full-cache.periodic-reload.interval": "1h",
            },
            "lookup.cache",
            "the cache is PARTIAL",
        ),
        (
            {
                "lookup.cache": "FULL",
                "lookup.full-cache.reload-strategy": "TIMED",
                "lookup.full-cache.timed-reload.iso-time": "10:15",
                "lookup.full-cache.periodic-reload.interval": "1h",
            },
            "lookup.full-cache.reload-strategy",
            "the reload strategy is TIMED",
        ),
        (
            {
                "lookup.cache": "FULL",
                "lookup.full-cache.periodic-reload.interval": "1h",
                "lookup.full-cache.timed-reload.iso-time": "10:15",
            },
            "lookup.full-cache.reload-strategy",
            "the reload strategy is PERIODIC",
        ),
        # options with a default: only a given one can be told apart
        ({"lookup.full-cache.reload-strategy": "TIMED"}, "lookup.cache", "the cache is NONE"),
        (
            {
                "lookup.cache": "PARTIAL",
                "lookup.partial-cache.max-rows": "10",
                "lookup.full-cache.periodic-reload.schedule-mode": "FIXED_RATE",
            },
            "lookup.cache",
            "the cache is PARTIAL",
        ),
        (
            {
                "lookup.cache": "FULL",
                "lookup.full-cache.periodic-reload.interval": "1h",
                "lookup.full-cache.timed-reload.interval-in-days": "2",
            },
            "lookup.full-cache.reload-strategy",
            "the reload strategy is PERIODIC",
        ),
        (
            {"lookup.partial-cache.cache-missing-key": "false"},
            "lookup.cache",
            "'lookup.partial-cache.cache-missing-key' is set but the cache is NONE",
        ),
    ],
)
def test_an_option_of_another_cache_kind_is_refused(
    given: dict[str, str], option: str, named: str
) -> None:
    """Flink ignores them: a cache the user believes is on, or a reload that never happens."""
    with pytest.raises(ConfigurationError, match="it would do nothing") as info:
        LookupOptions.from_dict(given)
    assert info.value.option == option and named in str(info.value)


def test_given_defaults_of_the_right_kind_and_a_shared_caches_miss_setting_are_taken() -> None:
    full = {"lookup.cache": "FULL", "lookup.full-cache.reload-strategy": "TIMED"}
    full |= {"lookup.full-cache.timed-reload.iso-time": "10:15"}
    full |= {"lookup.full-cache.timed-reload.interval-in-days": "2"}
    assert LookupOptions.from_dict(full).full_timed_interval_in_days == 2
    shared = {"lookup.shared-cache.url": "redis://127.0.0.1:6379/0"}
    shared |= {"lookup.partial-cache.cache-missing-key": "false"}  # the shared cache's default
    assert LookupOptions.from_dict(shared).shared_cache().cache_missing_key is False
    options = LookupOptions.from_dict(full)
    assert LookupOptions.from_dict(options.to_dict()) == options


@pytest.mark.parametrize(
    ("given", "expected"),
    [({}, False), ({"lookup.shared-cache.cache-missing-key": "true"}, True)],
)
def test_the_shared_cache_keeps_misses_as_a_providers_own_cache_does_unless_told(
    given: dict[str, str], expected: bool
) -> None:
    """A source with its own partial cache keeping misses out got them shared in L2."""
    from asyncio_lookup.lookup import DefaultLookupCache, PartialCachingAsyncLookupProvider
    from asyncio_lookup.lookup.chain_build import build_parts
    from asyncio_lookup.lookup.functions import AsyncLookupFunction

    class Empty(AsyncLookupFunction):
        async def async_lookup(self, key: tuple[object, ...]) -> list[dict[str, object]]:
            return []

    own = DefaultLookupCache.new_builder().maximum_size(100).cache_missing_key(False).build()
    options = LookupOptions.from_dict(
        {"lookup.shared-cache.url": "redis://127.0.0.1:6379/0", **given}
    )
    parts = build_parts(
        PartialCachingAsyncLookupProvider.of(Empty(), own),
        options,
        prefer_async=True,
        name="T",
        key_columns=["id"],
        clock=None,
        target="t",
        shared_namespace="test-options",
    )
    assert parts.cache is own and parts.shared is not None
    assert parts.shared.settings.cache_missing_key is expected


def test_a_full_caching_provider_refuses_a_shared_cache() -> None:
    """The options passed the driver and the tier was never opened: no sharing, no warning."""
    from asyncio_lookup.lookup import FullCachingLookupProvider
    from asyncio_lookup.lookup.chain_build import plan_source

    options = LookupOptions.from_dict(
        {"lookup.shared-cache.url": "redis://:pw@127.0.0.1:6379/0?password=pw2"}
    )
    provider = FullCachingLookupProvider.of(lambda: iter([{"id": 1}]), None)
    with pytest.raises(ConfigurationError, match="FullCachingLookupProvider") as info:
        plan_source(provider, options, prefer_async=True, key_columns=["id"])
    assert info.value.option == "lookup.shared-cache.url"
    assert "pw" not in str(info.value)


def test_a_shared_cache_password_never_shows() -> None:
    from asyncio_lookup.errors import HintError
    from asyncio_lookup.lookup.l2.hint_options import parse_hint_options

    url = "redis://127.0.0.1:6379/0?password=s3cret"
    settings = LookupOptions.from_dict({"lookup.shared-cache.url": url}).shared_cache()
    assert settings is not None and "s3cret" not in repr(settings)
    twice = "redis://:s3cret@h:6379/0"
    for pairs in (
        [("lookup.shared-cache.url", twice), ("lookup.shared-cache.url", twice)],
        [("lookup.shared-cache.urll", twice)],
    ):
        with pytest.raises(HintError) as info:
            parse_hint_options(pairs)
        assert "s3cret" not in str(info.value)


def test_a_deprecated_jdbc_name_in_python_options_names_the_current_one() -> None:
    """'lookup.cache.ttl' suggested 'lookup.cache' (the nearest name), not what it stands for."""
    with pytest.raises(ConfigurationError, match=r"partial-cache\.expire-after-write") as info:
        LookupOptions.from_dict({"lookup.cache.ttl": "10s"})
    assert info.value.option == "lookup.cache.ttl" and "SQL DDL only" in str(info.value)
