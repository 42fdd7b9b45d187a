"""asyncio_lookup.validation: the one parser for each kind of setting."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncio_lookup.errors import ConfigurationError, HintError
from asyncio_lookup.validation import (
    did_you_mean,
    format_duration,
    parse_bool,
    parse_choice,
    parse_duration,
    parse_int,
    parse_number,
    to_seconds,
)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("10s", 10.0),
        ("10 s", 10.0),
        ("100ms", 0.1),
        ("3 min", 180.0),
        ("1h", 3600.0),
        ("250", 0.25),  # no unit: milliseconds, as in Flink
        (" 2 SECONDS ", 2.0),
        (1.5, 1.5),
        (timedelta(minutes=1), 60.0),
        # ISO-8601, which Flink 2's TimeUtils.parseDuration reads with Java's Duration.parse
        ("PT10S", 10.0),
        ("pt0.5s", 0.5),
        ("P2DT3H", 2 * 86400 + 3 * 3600.0),
        ("PT1H-30M", 1800.0),
        ("PT1,25S", 1.25),
    ],
)
def test_durations_in_every_form(value: Any, seconds: float) -> None:
    assert parse_duration("d", value) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("value", "kwargs", "reason"),
    [
        ("-1s", {}, "must not be negative"),
        ("0", {"positive": True}, "must be greater than 0"),
        (float("inf"), {}, "must be finite"),
        ("3 parsecs", {}, "unknown time unit 'parsecs'"),
        ("-PT1S", {}, "a negative ISO-8601 duration"),  # refused by Flink too
        ("PT-0.5S", {}, "a negative ISO-8601 duration"),
        ("PT", {}, None),
        ("P", {}, None),
        ("PT1.1234567891S", {}, None),  # Java's nanoseconds: 9 digits at most
        # Long.MAX_VALUE ms + 1: a float comparison read it as Long.MAX_VALUE ("never")
        ("9223372036854775808", {}, "longer than Flink's longest duration"),
        ("PT2562047788015H12M55.808S", {}, "longer than Flink's longest duration"),
        (True, {}, None),
        (float("nan"), {}, None),
        ("10s", {"text": False}, None),
        (None, {}, None),
    ],
)
def test_bad_durations_name_option_value_and_reason(
    value: Any, kwargs: dict[str, Any], reason: str | None
) -> None:
    with pytest.raises(ConfigurationError) as raised:
        parse_duration("lookup.x", value, **kwargs)
    assert raised.value.option == "lookup.x" and raised.value.value is value
    assert raised.value.reason == reason or (reason and reason in str(raised.value.reason))


def test_to_seconds_keeps_the_sign_and_the_error_class() -> None:
    assert to_seconds("t", -2) == -2.0
    with pytest.raises(HintError):
        to_seconds("t", "soon", error=HintError)


@given(st.floats(min_value=0, max_value=10**6, allow_nan=False).map(lambda f: round(f, 3)))
def test_format_duration_parses_back(seconds: float) -> None:
    assert parse_duration("d", format_duration(seconds)) == pytest.approx(seconds, abs=1e-9)


def test_format_duration_forms() -> None:
    assert (format_duration(3), format_duration(1.5), format_duration(0.00025)) == (
        "3 s",
        "1500 ms",
        "0.25 ms",
    )


def test_integers_ranges_and_text() -> None:
    assert parse_int("n", " 7 ", minimum=1) == 7
    assert parse_int("n", 0, minimum=0, maximum=3) == 0
    for bad, kwargs in [
        (True, {}),
        (1.0, {}),
        ("1.5", {}),
        ("7", {"text": False}),
        ("\u0663", {}),  # an Arabic-Indic 3: int() reads it, an option does not
        ("1_000", {}),
        (0, {}),
        (11, {"maximum": 10}),
    ]:
        with pytest.raises(ConfigurationError) as raised:
            parse_int("n", bad, minimum=1, **kwargs)
        assert raised.value.option == "n"
    with pytest.raises(ConfigurationError, match="from 1 to 1_000"):
        parse_int("n", 5000, minimum=1, maximum=1000)


def test_numbers_bools_and_choices() -> None:
    assert parse_number("f", 1, above=0, maximum=1, allowed="(0, 1]") == 1.0
    for bad in (0, 1.01, True, "0.5", float("nan")):
        with pytest.raises(ConfigurationError):
            parse_number("f", bad, above=0, maximum=1, allowed="(0, 1]")
    assert parse_bool("b", " TRUE ") is True and parse_bool("b", False) is False
    with pytest.raises(ConfigurationError, match="'true' or 'false'"):
        parse_bool("b", "yes")
    assert parse_choice("c", "Allow_Unordered", ("ordered", "allow_unordered")) == "allow_unordered"
    with pytest.raises(ConfigurationError, match="'ordered' or 'allow_unordered'"):
        parse_choice("c", "sorted", ("ordered", "allow_unordered"))


def test_did_you_mean() -> None:
    known = ("lookup.cache", "lookup.max-retries", "lookup.partial-cache.max-rows")
    assert did_you_mean(" lookup.cache", known) == "lookup.cache"
    assert did_you_mean("lookup-cache", known) == "lookup.cache"
    assert did_you_mean("cache", known, prefixes=("lookup.",)) == "lookup.cache"
    assert did_you_mean("max-rows", known) == "lookup.partial-cache.max-rows"
    assert did_you_mean("connector", known, prefixes=("lookup.",)) is None
