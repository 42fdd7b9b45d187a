"""LOOKUP / SHUFFLE_HASH hints: every option, default and validation rule of docs/semantics.md
§2.2."""

from __future__ import annotations

import re
import warnings

import pytest

from asyncio_lookup.errors import ConfigurationError, HintError
from asyncio_lookup.lookup.hint_resolve import (
    AsyncDefaults,
    ResolvedLookup,
    check_retry_timeout,
    resolve_lookup,
)
from asyncio_lookup.lookup.hints import LOOKUP_OPTIONS, LookupHint, ShuffleHashHint, parse_hints
from asyncio_lookup.lookup.retry import MissRetry

RETRY = (
    "'retry-predicate'='lookup_miss', 'retry-strategy'='fixed_delay', "
    "'fixed-delay'='10s', 'max-attempts'='3'"
)


def test_parse_every_option() -> None:
    hint = LookupHint.parse(
        "LOOKUP('table'='Customers', 'async'='true', 'output-mode'='allow_unordered', "
        f"'capacity'='7', 'timeout'='180s', {RETRY}, 'shuffle'='true')"
    )
    assert hint == LookupHint(
        table="Customers",
        async_=True,
        output_mode="allow_unordered",
        capacity=7,
        timeout=180.0,
        retry_predicate="lookup_miss",
        retry_strategy="fixed_delay",
        fixed_delay=10.0,
        max_attempts=3,
        shuffle=True,
    )
    assert hint.has_retry


def test_only_table_is_required_and_the_rest_is_unset() -> None:
    hint = LookupHint.parse("LOOKUP('table'='dim1')")
    assert hint == LookupHint(table="dim1")
    assert not hint.has_retry


def test_hint_name_and_enum_values_are_case_insensitive() -> None:
    hint = LookupHint.parse(
        "lookup('table'='T', 'async'='FALSE', 'output-mode'='ALLOW_UNORDERED', "
        "'retry-predicate'='LOOKUP_MISS', 'retry-strategy'='Fixed_Delay', "
        "'fixed-delay'='1 s', 'max-attempts'='1', 'shuffle'='True')"
    )
    assert hint.async_ is False
    assert hint.output_mode == "allow_unordered"
    assert (hint.retry_predicate, hint.retry_strategy) == ("lookup_miss", "fixed_delay")
    assert hint.shuffle is True


def test_comment_with_several_hints_and_both_quote_styles() -> None:
    hints = parse_hints(
        """/*+ LOOKUP("table"="Cust''s", 'timeout'='100 ms'), SHUFFLE_HASH('A', B) */"""
    )
    assert hints == [
        LookupHint(table="Cust''s", timeout=0.1),
        ShuffleHashHint(("A", "B")),
    ]
    assert parse_hints("LOOKUP('table'='it''s')") == [LookupHint(table="it's")]


def test_hints_as_dict_object_and_list() -> None:
    as_dict = {"table": "T", "async": False, "capacity": 5, "timeout": "2s"}
    expected = LookupHint(table="T", async_=False, capacity=5, timeout=2.0)
    assert parse_hints(as_dict) == [expected]
    assert parse_hints(expected) == [expected]
    assert parse_hints([as_dict, "SHUFFLE_HASH('T')", ShuffleHashHint(("T",))]) == [
        expected,
        ShuffleHashHint(("T",)),
        ShuffleHashHint(("T",)),
    ]
    assert parse_hints(None) == []
    assert parse_hints("  ") == []


def test_to_text_round_trips() -> None:
    hint = LookupHint.parse(
        f"LOOKUP('table'='T', 'async'='false', 'capacity'='3', 'timeout'='1500ms', {RETRY})"
    )
    assert LookupHint.parse(hint.to_text()) == hint


@pytest.mark.parametrize(
    ("text", "option", "value", "allowed"),
    [
        ("LOOKUP('table'='T', 'async'='yes')", "async", "yes", "'true' or 'false'"),
        (
            "LOOKUP('table'='T', 'output-mode'='allow-unordered')",
            "output-mode",
            "allow-unordered",
            "'allow_unordered'",
        ),
        ("LOOKUP('table'='T', 'capacity'='0')", "capacity", "0", "> 0"),
        ("LOOKUP('table'='T', 'capacity'='-3')", "capacity", "-3", "> 0"),
        ("LOOKUP('table'='T', 'capacity'='ten')", "capacity", "ten", "whole number"),
        ("LOOKUP('table'='T', 'timeout'='-1s')", "timeout", "-1s", "a duration > 0"),
        ("LOOKUP('table'='T', 'timeout'='0')", "timeout", "'0'", "a duration > 0"),
        ("LOOKUP('table'='T', 'capacity'='1000000000000')", "capacity", "1000000000000", "at most"),
        ("LOOKUP('table'='T', 'timeout'='3 parsecs')", "timeout", "3 parsecs", "duration"),
        ("LOOKUP('table'='T', 'shuffle'='1')", "shuffle", "1", "'true' or 'false'"),
        (
            "LOOKUP('table'='T', 'retry-predicate'='lookup_error', 'retry-strategy'='fixed_delay',"
            " 'fixed-delay'='1s', 'max-attempts'='1')",
            "retry-predicate",
            "lookup_error",
            "'lookup_miss'",
        ),
        (
            "LOOKUP('table'='T', 'retry-predicate'='lookup_miss', 'retry-strategy'='exponential',"
            " 'fixed-delay'='1s', 'max-attempts'='1')",
            "retry-strategy",
            "exponential",
            "'fixed_delay'",
        ),
        (
            "LOOKUP('table'='T', 'retry-predicate'='lookup_miss', 'retry-strategy'='fixed_delay',"
            " 'fixed-delay'='1s', 'max-attempts'='1.5')",
            "max-attempts",
            "1.5",
            "whole number",
        ),
        (
            "LOOKUP('table'='T', 'retry-predicate'='lookup_miss', 'retry-strategy'='fixed_delay',"
            " 'fixed-delay'='1s', 'max-attempts'='0')",
            "max-attempts",
            "0",
            "> 0",
        ),
        (
            "LOOKUP('table'='T', 'retry-predicate'='lookup_miss', 'retry-strategy'='fixed_delay',"
            " 'fixed-delay'='0s', 'max-attempts'='2')",
            "fixed-delay",
            "'0s'",
            "> 0",
        ),
        (
            "LOOKUP('table'='T', 'retry-predicate'='lookup_miss', 'retry-strategy'='fixed_delay',"
            " 'fixed-delay'='-5s', 'max-attempts'='2')",
            "fixed-delay",
            "-5s",
            "must not be negative",
        ),
        ("LOOKUP('table'='')", "table", "''", "non-empty"),
    ],
)
def test_bad_values_name_option_value_and_allowed(
    text: str, option: str, value: str, allowed: str
) -> None:
    with pytest.raises(HintError) as error:
        parse_hints(text)
    assert error.value.option == option
    message = str(error.value)
    assert repr(option) in message
    assert value in message
    assert allowed in message


def test_unknown_option_lists_the_valid_ones() -> None:
    with pytest.raises(HintError, match="unknown LOOKUP hint option") as error:
        parse_hints("LOOKUP('table'='T', 'time-out'='10s')")
    assert error.value.option == "time-out"
    for name in LOOKUP_OPTIONS:
        assert repr(name) in str(error.value)


def test_table_is_required() -> None:
    with pytest.raises(HintError, match="needs 'table'"):
        parse_hints("LOOKUP('async'='true')")


@pytest.mark.parametrize(
    "given",
    [
        {"retry-predicate": "lookup_miss"},
        {"retry-predicate": "lookup_miss", "retry-strategy": "fixed_delay", "fixed-delay": "1s"},
        {"fixed-delay": "1s", "max-attempts": "3"},
        {"max-attempts": "3"},
        {"retry-strategy": "fixed_delay"},
    ],
)
def test_retry_options_come_all_together_or_not_at_all(given: dict[str, str]) -> None:
    with pytest.raises(HintError) as error:
        LookupHint.from_options({"table": "T", **given})
    message = str(error.value)
    assert "all four of" in message
    missing = {"retry-predicate", "retry-strategy", "fixed-delay", "max-attempts"} - set(given)
    assert error.value.option in missing
    for name in missing:
        assert repr(name) in message


def test_option_given_twice_is_an_error() -> None:
    with pytest.raises(HintError, match="given twice"):
        parse_hints("LOOKUP('table'='T', 'capacity'='1', 'CAPACITY'='2')")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("LOOKUP('table'='T'", "expected"),
        ("/*+ LOOKUP('table'='T')", "unterminated"),
        ("/* LOOKUP('table'='T') */", "starts with '/*+'"),
        ("LOOKUP('table'='T') LOOKUP('table'='U')", "expected ','"),
        ("LOOKUP('table')", "bare value"),
        ("SHUFFLE_HASH('table'='T')", "unexpected option"),
        ("LOOKUP('table'='T', 'async'=)", "expected a value"),
        ("LOOKUP('table'='T'); DROP", "unexpected text"),
    ],
)
def test_syntax_errors(text: str, reason: str) -> None:
    with pytest.raises(HintError, match=re.escape(reason)) as error:
        parse_hints(text)
    assert "allowed: " in str(error.value)


def test_unknown_hint_names_the_known_ones() -> None:
    with pytest.raises(HintError, match="unknown hint") as error:
        parse_hints("/*+ BROADCAST('T') */")
    assert "LOOKUP or SHUFFLE_HASH" in str(error.value)


def test_empty_shuffle_hash_is_an_error() -> None:
    with pytest.raises(HintError, match="SHUFFLE_HASH"):
        parse_hints("SHUFFLE_HASH()")


def test_other_inputs_are_rejected() -> None:
    with pytest.raises(HintError, match="hint string"):
        parse_hints(42)  # type: ignore[arg-type]
    with pytest.raises(HintError, match="hint string"):
        parse_hints(["LOOKUP('table'='T')", 3])  # type: ignore[list-item]


def test_direct_construction_validates() -> None:
    with pytest.raises(HintError, match="capacity"):
        LookupHint(table="T", capacity=0)
    with pytest.raises(HintError, match="all four"):
        LookupHint(table="T", max_attempts=2)


# ------------------------------------------------------------------------------ resolution


def test_no_hint_uses_job_defaults_and_prefers_async() -> None:
    resolved = resolve_lookup(None, "Customers")
    assert resolved.prefer_async is True
    assert (resolved.output_mode, resolved.capacity, resolved.timeout) == ("ordered", 100, 180.0)
    assert resolved.miss_retry() is None
    assert resolved.shuffle is False


def test_missing_async_options_fall_back_to_job_defaults() -> None:
    defaults = AsyncDefaults.from_conf(
        {
            "table.exec.async-lookup.output-mode": "ALLOW_UNORDERED",
            "table.exec.async-lookup.buffer-capacity": "17",
            "table.exec.async-lookup.timeout": "42s",
            "spark.other": "ignored",
        }
    )
    assert defaults == AsyncDefaults(output_mode="unordered", capacity=17, timeout=42.0)
    resolved = resolve_lookup(
        "LOOKUP('table'='Customers', 'async'='true', 'timeout'='300s')",
        "Customers",
        defaults=defaults,
    )
    assert (resolved.output_mode, resolved.capacity, resolved.timeout) == ("unordered", 17, 300.0)
    ordered = resolve_lookup(
        "LOOKUP('table'='Customers', 'output-mode'='ordered')", "Customers", defaults=defaults
    )
    assert (ordered.output_mode, ordered.capacity, ordered.timeout) == ("ordered", 17, 42.0)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("table.exec.async-lookup.output-mode", "sorted"),
        # the Python API's names: lower case passed unchecked and 'UNORDERED' was refused;
        # Flink's AsyncOutputMode has only ORDERED and ALLOW_UNORDERED
        ("table.exec.async-lookup.output-mode", "unordered"),
        ("table.exec.async-lookup.buffer-capacity", "0"),
        ("table.exec.async-lookup.timeout", "soon"),
    ],
)
def test_bad_job_defaults_name_the_conf_key(key: str, value: str) -> None:
    with pytest.raises(ConfigurationError) as error:
        AsyncDefaults.from_conf({key: value})
    assert error.value.option == key
    assert value in str(error.value)


def test_async_false_and_retry_resolve_to_a_miss_retry() -> None:
    resolved = resolve_lookup(
        "LOOKUP('table'='Customers', 'async'='false', 'retry-predicate'='lookup_miss', "
        "'retry-strategy'='fixed_delay', 'fixed-delay'='250ms', 'max-attempts'='4')",
        "customers",
    )
    assert resolved.prefer_async is False
    assert resolved.miss_retry() == MissRetry(delay=0.25, max_attempts=4)


def test_zero_timeout_is_rejected_in_hint_conf_and_defaults() -> None:
    # '0' used to turn the timeout off silently
    with pytest.raises(HintError, match="must be greater than 0") as error:
        resolve_lookup("LOOKUP('table'='T', 'timeout'='0s')", "T")
    assert error.value.option == "timeout"
    with pytest.raises(ConfigurationError) as conf_error:
        AsyncDefaults.from_conf({"table.exec.async-lookup.timeout": "0"})
    assert conf_error.value.option == "table.exec.async-lookup.timeout"
    with pytest.raises(ConfigurationError):
        AsyncDefaults(timeout=0)


def test_unknown_option_suggests_the_nearest_name() -> None:
    with pytest.raises(HintError, match="did you mean 'timeout'"):
        parse_hints("LOOKUP('table'='T', 'time-out'='10s')")
    with pytest.raises(HintError, match="did you mean 'max-attempts'"):
        LookupHint.from_options({"table": "T", "max_attempts": "3"})


def test_lookup_hints_for_the_table_merge_option_by_option() -> None:
    """Flink's QueryHintsResolver merges the LOOKUP hints of one table key by key; the table's
    name and its alias both name it."""
    resolved = resolve_lookup(
        [
            "LOOKUP('table'='D', 'async'='false', 'on-error'='keep')",
            "LOOKUP('table'='T', 'retry-predicate'='lookup_miss', "
            "'retry-strategy'='fixed_delay', 'fixed-delay'='10s', 'max-attempts'='3')",
        ],
        "T",
        aliases=["D"],
    )
    assert (resolved.prefer_async, resolved.on_error.name) == (False, "KEEP")
    assert (resolved.retry_delay, resolved.retry_max_attempts) == (10.0, 3)


def test_conflicting_lookup_hints_for_the_table_are_an_error_naming_both() -> None:
    # Flink keeps the first value silently; a conflict is a mistake here, as unknown options are
    with pytest.raises(HintError) as error:
        resolve_lookup(
            ["LOOKUP('table'='T', 'capacity'='1')", "LOOKUP('table'='t', 'capacity'='2')"], "T"
        )
    assert error.value.option == "capacity"
    assert "'capacity'='1'" in str(error.value) and "'capacity'='2'" in str(error.value)


def test_long_max_value_timeout_means_no_timeout() -> None:
    hint = "LOOKUP('table'='T', 'timeout'='9223372036854775807 ms')"
    assert resolve_lookup(hint, "T").timeout is None
    with pytest.raises(HintError, match=r"Long\.MAX_VALUE"):
        parse_hints("LOOKUP('table'='T', 'timeout'='9300000000000000000 ms')")
    with pytest.raises(HintError, match=r"'fixed-delay'.*100 years"):
        parse_hints(
            "LOOKUP('table'='T', 'retry-predicate'='lookup_miss', 'retry-strategy'='fixed_delay', "
            "'fixed-delay'='9223372036854775807 ms', 'max-attempts'='1')"
        )


def test_hint_naming_another_table_is_an_error_naming_it() -> None:
    with pytest.raises(HintError) as error:
        resolve_lookup("LOOKUP('table'='Orders')", "Customers")
    assert error.value.option == "table"
    assert "'Orders'" in str(error.value)
    assert "'Customers'" in str(error.value)


def test_alias_is_accepted() -> None:
    assert (
        resolve_lookup("LOOKUP('table'='c', 'capacity'='3')", "Customers", aliases=["C"]).capacity
        == 3
    )


def test_shuffle_hash_and_shuffle_option_set_the_shuffle_flag() -> None:
    assert resolve_lookup("SHUFFLE_HASH('Customers')", "Customers").shuffle is True
    assert resolve_lookup("LOOKUP('table'='Customers', 'shuffle'='true')", "Customers").shuffle
    assert not resolve_lookup("LOOKUP('table'='Customers', 'shuffle'='false')", "Customers").shuffle
    with pytest.raises(HintError) as error:
        resolve_lookup("SHUFFLE_HASH('Orders')", "Customers")
    assert "'Orders'" in str(error.value)
    assert error.value.option == "SHUFFLE_HASH"


@pytest.mark.parametrize(
    ("name", "number"),
    [("timeout", 1500), ("fixed-delay", 2), ("lookup.shared-cache.ttl", 60.0)],
)
def test_a_hint_duration_given_as_a_bare_number_is_refused(name: str, number: float) -> None:
    """'1500' is 1.5 s as text (no unit: ms) but 1500 read as 25 minutes."""
    with pytest.raises(HintError, match="no unit") as info:
        LookupHint.from_options({"table": "T", name: number})
    assert info.value.option == name and f"'{number}ms'" in str(info.value)
    retry = {"retry-predicate": "lookup_miss", "retry-strategy": "fixed_delay", "max-attempts": "1"}
    whole = {"table": "T", name: f"{number}ms", **(retry if name == "fixed-delay" else {})}
    assert LookupHint.from_options(whole) is not None


MISS_RETRY = "'retry-predicate'='lookup_miss', 'retry-strategy'='fixed_delay', 'max-attempts'='3'"


def _checked(hint: str, defaults: AsyncDefaults | None = None, **mode: bool) -> ResolvedLookup:
    resolved = resolve_lookup(hint, "D", defaults=defaults or AsyncDefaults())
    check_retry_timeout(
        resolved, is_async=mode.get("is_async", True), full_cache=mode.get("full_cache", False)
    )
    return resolved


def test_a_retry_delay_the_timeout_cannot_hold_is_an_error() -> None:
    """Every retried row timed out (a miss failed the job instead of being dropped)."""
    with pytest.raises(HintError, match="shorter than the timeout \\(1 s\\)") as info:
        _checked(f"LOOKUP('table'='D', {MISS_RETRY}, 'fixed-delay'='5s', 'timeout'='1s')")
    assert info.value.option == "fixed-delay"
    with pytest.raises(HintError, match="fixed-delay"):  # the job default's timeout too
        _checked(f"LOOKUP('table'='D', {MISS_RETRY}, 'fixed-delay'='5s')", AsyncDefaults(timeout=2))
    assert _checked(f"LOOKUP('table'='D', {MISS_RETRY}, 'fixed-delay'='1s')").has_retry
    # no timeout (100 years or more): any delay
    never = f"LOOKUP('table'='D', {MISS_RETRY}, 'fixed-delay'='5s', 'timeout'='36500d')"
    assert _checked(never).timeout is None


def test_a_join_that_runs_sync_or_never_retries_takes_any_delay() -> None:
    """The check ran before the source's mode and cache were known: a sync-only source and a
    FULL cache (no retries) were refused with a message false for them."""
    hint = f"LOOKUP('table'='D', {MISS_RETRY}, 'fixed-delay'='5min')"
    assert _checked(hint, is_async=False).has_retry
    assert _checked(hint, full_cache=True).has_retry
    with pytest.raises(HintError, match="fixed-delay"):
        _checked(hint)


def test_retries_that_outlast_the_timeout_are_warned_about() -> None:
    hint = f"LOOKUP('table'='D', {MISS_RETRY}, 'fixed-delay'='1min')"  # 3 x 1 min: 3 min
    with pytest.warns(UserWarning, match="3 retries of 60 s outlast the async timeout") as seen:
        _checked(hint, AsyncDefaults(timeout=180))
    assert seen[0].filename == __file__  # the user's code, not the library's
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _checked(hint, AsyncDefaults(timeout=181))
        _checked(hint, AsyncDefaults(timeout=60), is_async=False)


def test_async_options_of_a_sync_join_are_warned_about() -> None:
    with pytest.warns(UserWarning, match=r"'async'='false'.*\['capacity', 'timeout'\] do nothing"):
        resolve_lookup("LOOKUP('table'='D', 'async'='false', 'capacity'='5', 'timeout'='1s')", "D")
    sync_retry = f"LOOKUP('table'='D', 'async'='false', {MISS_RETRY}, 'fixed-delay'='5s')"
    assert resolve_lookup(sync_retry, "D", defaults=AsyncDefaults(timeout=1)).has_retry


def test_a_hint_may_name_the_table_with_flinks_default_catalog_and_database() -> None:
    """Flink matches 'default_catalog.default_database.D' to the temporary table D."""
    for name in ("default_catalog.default_database.D", "DEFAULT_DATABASE.D"):
        assert resolve_lookup(f"LOOKUP('table'='{name}', 'capacity'='7')", "D").capacity == 7
    with pytest.raises(HintError, match="not the dim table"):
        resolve_lookup("LOOKUP('table'='other_db.D', 'capacity'='7')", "D")


def test_shared_cache_options_of_several_hints_merge_one_by_one() -> None:
    """A hint with shared-cache options and one without were refused as disagreeing (on an
    option 'shared-cache' that does not exist), the password in the message."""
    from asyncio_lookup.lookup.hint_merge import merge_lookup_hints

    url = "redis://:s3cret@127.0.0.1:6379/0"
    merged = merge_lookup_hints(
        parse_hints(
            f"LOOKUP('table'='c', 'lookup.shared-cache.url'='{url}'), "
            "LOOKUP('table'='c', 'output-mode'='allow_unordered'), "
            "LOOKUP('table'='c', 'lookup.shared-cache.ttl'='1 min')"
        )
    )
    assert merged is not None
    assert dict(merged.shared_cache) == {
        "lookup.shared-cache.url": url,
        "lookup.shared-cache.ttl": "60 s",  # as parsed
    }
    assert merged.output_mode is not None
    other = url.replace("s3cret", "0ther")
    with pytest.raises(HintError, match=r"disagree \(in their secrets\)") as info:
        merge_lookup_hints(
            parse_hints(
                f"LOOKUP('table'='c', 'lookup.shared-cache.url'='{url}'), "
                f"LOOKUP('table'='c', 'lookup.shared-cache.url'='{other}')"
            )
        )
    assert "s3cret" not in str(info.value)


def test_a_hint_syntax_error_masks_a_urls_password() -> None:
    with pytest.raises(HintError) as info:
        parse_hints("LOOKUP('table'='c', 'lookup.shared-cache.url'='redis://:s3cret@h:6379/0' 'x')")
    assert "s3cret" not in str(info.value)
