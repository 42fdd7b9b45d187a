"""Flink's deprecated JDBC cache options and other operators' options (lookup/flink_options.py),
and Flink's Long.MAX_VALUE ms durations ("never")."""

from __future__ import annotations

import pytest

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.lookup import LookupOptions
from asyncio_lookup.lookup.flink_options import ignored, upgrade
from asyncio_lookup.lookup.reload import LoadTimes

LONG_MAX = "9223372036854775807"


def test_legacy_max_rows_and_ttl_turn_the_partial_cache_on_as_the_jdbc_connector_does() -> None:
    out = upgrade(
        {
            "lookup.cache.max-rows": "100",
            "lookup.cache.ttl": "10 s",
            "lookup.cache.caching-missing-key": "false",
        }
    )
    assert out.options == {
        "lookup.cache": "PARTIAL",
        "lookup.partial-cache.max-rows": "100",
        "lookup.partial-cache.expire-after-write": "10 s",
        "lookup.partial-cache.cache-missing-key": "false",
    }
    assert ("lookup.cache.max-rows", "lookup.partial-cache.max-rows") in out.renamed
    options = LookupOptions.from_dict(out.options)
    assert (options.partial_max_rows, options.partial_expire_after_write) == (100, 10.0)
    assert options.partial_cache_missing_key is False


@pytest.mark.parametrize(
    ("given", "missing"),
    [
        ({"lookup.cache.max-rows": "10"}, "lookup.cache.ttl"),
        ({"LOOKUP.CACHE.TTL": "1s"}, "lookup.cache.max-rows"),
        ({"lookup.cache": "NONE", "lookup.cache.max-rows": "-1"}, "lookup.cache.ttl"),
    ],
)
def test_legacy_max_rows_and_ttl_come_together_or_not_at_all(
    given: dict[str, str], missing: str
) -> None:
    """flink-connector-jdbc's checkAllOrNone: 'Either all or none of the following options
    should be provided: lookup.cache.max-rows, lookup.cache.ttl'. max-rows alone turned a cache
    on here (ttl 10 s), and ttl alone was accepted, with a warning saying Flink does the same."""
    with pytest.raises(ConfigurationError) as error:
        upgrade(given)
    assert error.value.option == next(iter(given.keys() - {"lookup.cache"}))
    assert missing in str(error.value)


@pytest.mark.parametrize("kind", ["PARTIAL", "partial", "FULL"])
def test_legacy_options_under_a_lookup_cache_kind_are_an_error_naming_the_current_name(
    kind: str,
) -> None:
    """With 'lookup.cache' = 'PARTIAL' the JDBC connector builds its cache from the current
    names alone (DefaultLookupCache.fromConfig): the deprecated ones were aliased here, a cache
    Flink refuses ('Missing lookup.partial-cache.* ...') or builds otherwise."""
    given = {"lookup.cache": kind, "lookup.cache.ttl": "1 min", "lookup.cache.max-rows": "5"}
    with pytest.raises(ConfigurationError, match=r"lookup\.partial-cache\.expire-after-write"):
        upgrade(given)


@pytest.mark.parametrize(
    "given",
    [
        {"lookup.cache.max-rows": "-1", "lookup.cache.ttl": "10s"},
        {"lookup.cache.max-rows": "5", "lookup.cache.ttl": "0"},
        {"lookup.cache.caching-missing-key": "false"},
    ],
)
def test_legacy_options_that_are_not_both_positive_turn_no_cache_on(
    given: dict[str, str],
) -> None:
    out = upgrade(given)
    assert "lookup.cache" not in out.options and out.notes
    assert LookupOptions.from_dict(out.options).cache.name == "NONE"


def test_legacy_and_new_name_with_different_values_is_an_error() -> None:
    with pytest.raises(ConfigurationError) as error:
        upgrade(
            {
                "lookup.cache.max-rows": "5",
                "lookup.cache.ttl": "1s",
                "lookup.partial-cache.max-rows": "6",
            }
        )
    assert error.value.option == "lookup.cache.max-rows"
    assert "lookup.partial-cache.max-rows" in str(error.value)


def test_other_operators_options_are_recognised() -> None:
    others = ("sink.buffer-flush.max-rows", "scan.partition.column", "format", "SINK.parallelism")
    for name in others:
        assert ignored(name)
    for name in ("lookup.cache.max-row", "url", "table-name", "lookup.cash"):
        assert not ignored(name)


def test_long_max_value_reload_interval_means_load_once() -> None:
    options = LookupOptions.from_dict(
        {"lookup.cache": "FULL", "lookup.full-cache.periodic-reload.interval": LONG_MAX}
    )
    trigger = options.build_reload_trigger()
    assert trigger is not None
    assert trigger.next_reload(LoadTimes(0.0, 0.0, 1.0, initial=True)) is None


@pytest.mark.parametrize(
    ("option", "value", "reason"),
    [
        ("lookup.full-cache.periodic-reload.interval", "9300000000000000000", "Long.MAX_VALUE"),
        ("lookup.batch.max-wait", LONG_MAX, "100 years"),
        ("lookup.max-retry-backoff", "1000000 d", "100 years"),
    ],
)
def test_durations_the_runtime_cannot_hold_fail_naming_the_option(
    option: str, value: str, reason: str
) -> None:
    given = {option: value}
    if option.startswith("lookup.full-cache"):
        given["lookup.cache"] = "FULL"
    with pytest.raises(ConfigurationError) as error:
        LookupOptions.from_dict(given)
    assert error.value.option == option and reason in str(error.value)


def test_long_max_value_expiry_means_never() -> None:
    options = LookupOptions.from_dict(
        {"lookup.cache": "PARTIAL", "lookup.partial-cache.expire-after-write": LONG_MAX}
    )
    cache = options.build_cache()
    assert cache is not None
    cache.put(("k",), [{"a": 1}])
    assert cache.get_if_present(("k",)) == [{"a": 1}]


def test_legacy_options_with_lookup_cache_none_build_the_legacy_cache() -> None:
    """flink-connector-jdbc builds its legacy cache from max-rows and ttl whatever
    'lookup.cache' = 'NONE' says; here they were renamed under NONE and then refused, naming
    'lookup.partial-cache.max-rows', which the statement never wrote."""
    given = {"lookup.cache": "NONE", "lookup.cache.max-rows": "100", "lookup.cache.ttl": "5s"}
    options = LookupOptions.from_dict(upgrade(given).options)
    assert (options.partial_max_rows, options.partial_expire_after_write) == (100, 5.0)
