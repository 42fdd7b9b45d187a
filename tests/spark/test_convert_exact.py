"""Exact conversion (spark/convert.py, docs/semantics.md §2.9): dates among datetimes, naive
datetimes in the session time zone, FLOAT's range, floats into DECIMAL, NOT NULL children,
nested maps, ints beyond 64 bits; and the driver's checks of declared types (spark/schema.py)."""

from __future__ import annotations

import datetime as dt
from decimal import Context, Decimal
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.types import (
    ArrayType,
    DateType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
    VariantType,
)

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.spark.convert import LossyValueError, rows_to_arrays, with_time_zone
from asyncio_lookup.spark.schema import (
    check_key_type,
    check_literal,
    check_value_type,
    session_time_zone,
)

UTC = dt.UTC
TS = pa.timestamp("us", tz="UTC")
NTZ = pa.timestamp("us")
NEW_YORK = "America/New_York"


def convert(values: list[Any], target: pa.DataType, zone: str | None = None) -> list[Any]:
    field = pa.field("v", target)
    if zone is not None:
        field = with_time_zone(field, zone)
    return rows_to_arrays([{"v": v} for v in values], [field])[0].to_pylist()


def refused(values: list[Any], target: pa.DataType, zone: str | None = None) -> LossyValueError:
    with pytest.raises(LossyValueError) as error:
        convert(values, target, zone)
    assert error.value.column == "v"
    return error.value


# -- a date among datetimes: the same value whatever its neighbours -------------------------

DAY = dt.date(2024, 1, 2)
AFTERNOON = dt.datetime(2024, 1, 3, 13, 0)


@pytest.mark.parametrize(
    "values",
    [[DAY, AFTERNOON], [AFTERNOON, DAY], [None, DAY, AFTERNOON], [DAY, None, AFTERNOON, DAY]],
)
def test_dates_and_datetimes_into_timestamp_convert_as_each_alone(values: list[Any]) -> None:
    alone = [None if v is None else convert([v], TS)[0] for v in values]
    assert convert(values, TS) == alone
    assert dt.datetime(2024, 1, 3, 13, 0, tzinfo=UTC) in alone  # not truncated to midnight
    assert convert([values], pa.list_(TS)) == [alone]
    assert convert([{"s": v} for v in values], pa.struct([("s", TS)])) == [{"s": v} for v in alone]


@pytest.mark.parametrize("values", [[DAY, AFTERNOON], [AFTERNOON, DAY]])
def test_a_datetime_with_a_time_of_day_into_date_is_refused_among_dates(
    values: list[Any],
) -> None:
    error = refused(values, pa.date32())
    assert error.value == AFTERNOON
    assert "time of day" in error.reason
    assert "time of day" in refused([values], pa.list_(pa.date32())).reason


@pytest.mark.parametrize(
    ("values", "target", "odd"),
    [
        # Arrow inferred the first value's type and read the odd one as a count of days or
        # microseconds, a boolean as 1.0, text as its bytes: refused alone, accepted beside it
        ([DAY, 19000], pa.date32(), 19000),
        ([DAY, 2.5], pa.date32(), 2.5),
        ([AFTERNOON, Decimal(3)], TS, Decimal(3)),
        ([AFTERNOON, 7], NTZ, 7),
        ([dt.timedelta(seconds=1), 2.5], pa.duration("us"), 2.5),
        ([1.0, True], pa.int32(), True),
        ([0.1, True], pa.decimal128(10, 2), True),
        ([1.5, np.bool_(True)], pa.float64(), np.bool_(True)),
        ([7, np.bool_(True)], pa.int64(), np.bool_(True)),  # Arrow refuses Python's bool only
        ([b"x", "y"], pa.binary(), "y"),
        ([dt.time(1), 5], pa.time64("ns"), 5),  # 5 µs past midnight
    ],
)
def test_a_value_of_another_kind_is_refused_whatever_its_neighbours(
    values: list[Any], target: pa.DataType, odd: Any
) -> None:
    assert refused([odd], target).value == odd
    assert refused(values, target).value == odd
    refused([values], pa.list_(target))  # the list, or the struct, is the value named
    refused([{"s": v} for v in values], pa.struct([("s", target)]))


def test_a_midnight_datetime_among_dates_is_its_date() -> None:
    midnight = dt.datetime(2024, 1, 3)
    assert convert([DAY, midnight], pa.date32()) == [DAY, dt.date(2024, 1, 3)]
    assert convert([[DAY, midnight]], pa.list_(pa.date32())) == [[DAY, dt.date(2024, 1, 3)]]


# -- naive datetimes and dates into TIMESTAMP: wall clock times in the session time zone ------


def test_naive_datetimes_and_dates_into_timestamp_are_read_in_the_session_time_zone() -> None:
    noon = dt.datetime(2024, 1, 1, 12, 0)
    aware = dt.datetime(2024, 1, 1, 12, 0, tzinfo=UTC)
    expected = [
        dt.datetime(2024, 1, 1, 17, 0, tzinfo=UTC),  # 12:00 EST
        dt.datetime(2024, 1, 2, 5, 0, tzinfo=UTC),  # midnight EST
        aware,  # an instant already
    ]
    values = [noon, dt.date(2024, 1, 2), aware]
    assert convert(values, TS, NEW_YORK) == expected
    assert convert(values[::-1], TS, NEW_YORK) == expected[::-1]
    assert convert([noon, aware], TS, NEW_YORK) == [expected[0], aware]
    assert convert([[noon, aware]], pa.list_(TS), NEW_YORK) == [[expected[0], aware]]
    assert convert([noon], TS) == [dt.datetime(2024, 1, 1, 12, 0, tzinfo=UTC)]  # no zone: UTC
    assert convert([noon], TS, "+05:30") == [dt.datetime(2024, 1, 1, 6, 30, tzinfo=UTC)]


def test_a_date_whose_midnight_a_dst_change_skips_is_the_days_first_instant() -> None:
    # Spark: CAST(DATE '2018-11-04' AS TIMESTAMP) in America/Sao_Paulo is 01:00 local, 03:00Z
    day = dt.date(2018, 11, 4)
    assert convert([day], TS, "America/Sao_Paulo") == [dt.datetime(2018, 11, 4, 3, tzinfo=UTC)]
    assert "gap" in refused([dt.datetime(2018, 11, 4, 0, 30)], TS, "America/Sao_Paulo").reason


def test_timestamp_ntz_holds_wall_clock_times_only() -> None:
    noon = dt.datetime(2024, 1, 1, 12, 0)
    assert convert([noon, dt.date(2024, 1, 2)], NTZ, NEW_YORK) == [noon, dt.datetime(2024, 1, 2)]
    aware = dt.datetime(2024, 1, 1, 12, 0, tzinfo=ZoneInfo(NEW_YORK))
    assert "TIMESTAMP_NTZ" in refused([noon, aware], NTZ, NEW_YORK).reason


def test_a_wall_clock_time_a_dst_change_skips_is_refused() -> None:
    skipped = dt.datetime(2024, 3, 10, 2, 30)  # 02:00 -> 03:00 in New York
    assert refused([skipped], TS, NEW_YORK).value == skipped
    repeated = dt.datetime(2024, 11, 3, 1, 30)  # 01:00-02:00 twice: the earlier one (EDT)
    assert convert([repeated], TS, NEW_YORK) == [dt.datetime(2024, 11, 3, 5, 30, tzinfo=UTC)]


# -- FLOAT's range, floats into DECIMAL, ints beyond 64 bits ---------------------------------


def test_a_double_beyond_float_s_range_is_refused() -> None:
    error = refused([1.0, 1e300], pa.float32())
    assert (error.index, error.value) == (1, 1e300)
    assert "range" in error.reason
    assert refused([-1e39], pa.float32()).value == -1e39
    converted = convert([float("inf"), float("-inf"), float("nan"), 0.5], pa.float32())
    assert converted[:2] == [float("inf"), float("-inf")]
    assert converted[2] != converted[2]
    assert converted[3] == 0.5


@pytest.mark.parametrize(
    ("value", "target", "expected"),
    [
        (1234567890123.45, pa.decimal128(38, 2), Decimal("1234567890123.45")),  # 15 digits
        (0.123456789012345, pa.decimal128(38, 20), Decimal("0.12345678901234500000")),
        (999999999999999.0, pa.decimal128(38, 0), Decimal("999999999999999")),
        (1e22, pa.decimal128(38, 0), Decimal("10000000000000000000000")),
        (-0.5, pa.decimal128(10, 2), Decimal("-0.50")),
    ],
)
def test_a_float_of_at_most_15_significant_digits_is_the_decimal_it_was_parsed_from(
    value: float, target: pa.DataType, expected: Decimal
) -> None:
    assert convert([value], target) == [expected]


@pytest.mark.parametrize(
    "value",
    [
        12345678901234567.89,  # parses to 12345678901234568: digits lost
        0.1234567890123456789,  # 0.12345678901234568
        1234567890123456.0,  # 16 digits: "...456.1" parses to it too
        0.1 + 0.2,  # 0.30000000000000004
    ],
)
def test_a_float_of_16_or_17_significant_digits_into_decimal_is_refused(value: float) -> None:
    error = refused([1.5, value], pa.decimal128(38, 20))
    assert (error.index, error.value) == (1, value)
    assert "significant digits" in error.reason
    assert "significant digits" in refused([[value]], pa.list_(pa.decimal128(38, 20))).reason


def test_ints_beyond_64_bits_convert_when_exact() -> None:
    assert convert([2**63, -(2**63) - 1, 1], pa.decimal128(38, 0)) == [
        Decimal(2**63),
        Decimal(-(2**63) - 1),
        Decimal(1),
    ]
    assert convert([[2**64]], pa.list_(pa.decimal128(38, 0))) == [[Decimal(2**64)]]
    assert convert([2**60, 2**64, 3], pa.float64()) == [2.0**60, 2.0**64, 3.0]
    assert convert([2**60], pa.float32()) == [2.0**60]
    assert refused([2**63], pa.int64()).value == 2**63
    assert refused([2**64 + 1], pa.float64()).value == 2**64 + 1
    assert refused([2**53 + 1], pa.float64()).value == 2**53 + 1
    assert refused([2**24 + 1], pa.float32()).value == 2**24 + 1
    assert refused([10**40], pa.decimal128(38, 0)).value == 10**40
    assert refused([2**63], pa.string()).value == 2**63


# -- NOT NULL children and nested maps --------------------------------------------------------

NOT_NULL_A = pa.struct([pa.field("a", pa.int32(), nullable=False), pa.field("b", pa.string())])


@pytest.mark.parametrize("bad", [{"b": "no a"}, {"a": None, "b": "a is null"}])
def test_a_null_in_a_not_null_struct_field_is_refused(bad: dict[str, Any]) -> None:
    error = refused([{"a": 7, "b": "x"}, None, bad], NOT_NULL_A)
    assert (error.index, error.value) == (2, bad)
    assert "NOT NULL" in error.reason
    assert "NOT NULL" in refused([[bad]], pa.list_(NOT_NULL_A)).reason
    assert convert([{"a": 7}, None], NOT_NULL_A) == [{"a": 7, "b": None}, None]


def test_a_null_element_of_a_not_null_list_or_map_is_refused() -> None:
    elements = pa.list_(pa.field("element", pa.int32(), nullable=False))
    assert convert([[1, 2], None], elements) == [[1, 2], None]
    assert "NOT NULL" in refused([[1, None]], elements).reason
    items = pa.map_(pa.string(), pa.field("value", pa.int32(), nullable=False))
    assert "NOT NULL" in refused([{"k": None}], items).reason
    assert refused([{None: 1}], pa.map_(pa.string(), pa.int32())).value == {None: 1}


def test_maps_inside_lists_structs_and_maps_convert_element_by_element() -> None:
    ints = pa.map_(pa.string(), pa.int32())
    assert convert([[{"a": 1}, {"b": 2.0}], None], pa.list_(ints)) == [
        [[("a", 1)], [("b", 2)]],
        None,
    ]
    assert convert([{"x": {"k": 1}}], pa.struct([("x", ints)])) == [{"x": [("k", 1)]}]
    assert convert([{"a": {"x": 1}}], pa.map_(pa.string(), ints)) == [[("a", [("x", 1)])]]
    assert "truncated" in refused([[{"a": 1.5}]], pa.list_(ints)).reason


# -- the driver's checks (spark/schema.py) ---------------------------------------------------


def test_variant_columns_are_refused_naming_the_column() -> None:
    for declared in (
        VariantType(),
        ArrayType(VariantType()),
        StructType([StructField("v", VariantType())]),
        MapType(StringType(), VariantType()),
    ):
        with pytest.raises(ConfigurationError, match=r"'payload'.*VARIANT"):
            check_value_type(declared, "schema", "payload")
    check_value_type(ArrayType(MapType(StringType(), IntegerType())), "schema", "tags")


class _Conf:
    def __init__(self, zone: str) -> None:
        self.zone = zone

    def get(self, key: str, default: Any = None) -> str:
        assert key == "spark.sql.session.timeZone"
        return self.zone


class _Session:
    def __init__(self, zone: str) -> None:
        self.conf = _Conf(zone)


class _Frame:
    def __init__(self, zone: str) -> None:
        self.sparkSession = _Session(zone)


@pytest.mark.parametrize(
    ("zone", "expected"),
    [
        ("America/New_York", "America/New_York"),
        ("UTC", "UTC"),
        ("Z", "UTC"),
        ("+08:00", "+08:00"),
        ("-05", "-05:00"),
        ("GMT+8", "+08:00"),
        ("UTC-05:30", "-05:30"),
        ("PST", "America/Los_Angeles"),  # Java's short ids, which Spark accepts
        ("CTT", "Asia/Shanghai"),
        ("EST", "-05:00"),
    ],
)
def test_the_session_time_zone_as_arrow_names_it(zone: str, expected: str) -> None:
    assert session_time_zone(_Frame(zone), [ArrayType(TimestampType())]) == expected


def test_the_session_time_zone_matters_only_with_a_timestamp_column() -> None:
    assert session_time_zone(_Frame("Mars/Olympus"), [TimestampNTZType(), StringType()]) == "UTC"
    with pytest.raises(ConfigurationError, match=r"spark\.sql\.session\.timeZone"):
        session_time_zone(_Frame("Mars/Olympus"), [StringType(), TimestampType()])


def test_times_of_day_convert_to_spark_s_nanosecond_time() -> None:
    # Python's times arrive as microseconds: every value of a TIME column failed its task
    assert convert([dt.time(12, 30, 1, 5), None], pa.time64("ns")) == [dt.time(12, 30, 1, 5), None]


@pytest.mark.parametrize(
    ("value", "spark_type", "reason"),
    [
        (dt.datetime(2024, 1, 1, 15, 30), DateType(), "time of day"),  # was truncated
        (dt.datetime(2024, 1, 1, tzinfo=UTC), DateType(), "zone"),
        (dt.datetime(2024, 1, 1, 15, 30), TimestampType(), "names no instant"),  # was UTC
        (dt.datetime(2024, 1, 1, 15, 30, tzinfo=UTC), TimestampNTZType(), "no zone"),  # was 15:30
        (pd.Timestamp("2024-01-01 00:00:00.000001999", tz="UTC"), TimestampType(), "nanoseconds"),
    ],
)
def test_a_datetime_key_literal_must_say_what_its_key_column_means(
    value: dt.datetime, spark_type: Any, reason: str
) -> None:
    with pytest.raises(ConfigurationError, match=reason) as info:
        check_literal(value, spark_type, "literals['at']")
    assert info.value.option == "literals['at']"


def test_datetime_key_literals_that_say_it_convert() -> None:
    assert check_literal(dt.datetime(2024, 1, 1), DateType(), "x") == dt.date(2024, 1, 1)
    aware = dt.datetime(2024, 1, 1, 15, 30, tzinfo=ZoneInfo(NEW_YORK))
    assert check_literal(aware, TimestampType(), "x") == aware
    naive = dt.datetime(2024, 1, 1, 15, 30)
    assert check_literal(naive, TimestampNTZType(), "x") == naive


def test_a_variant_key_column_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="atomic type"):
        check_key_type(VariantType(), "on", "v")


def test_a_pandas_timestamp_with_nanoseconds_is_refused() -> None:
    import pandas as pd

    exact = pd.Timestamp("2024-01-01 12:00:00.000001", tz="UTC")
    assert convert([exact], TS) == [dt.datetime(2024, 1, 1, 12, 0, 0, 1, tzinfo=UTC)]
    finer = pd.Timestamp("2024-01-01 12:00:00.000000001", tz="UTC")
    assert "nanoseconds" in refused([finer], TS).reason  # was silently 12:00:00
    assert "nanoseconds" in refused([exact, finer], TS).reason
    fine = pd.Timedelta("1us") + pd.Timedelta("1ns")
    assert "nanoseconds" in refused([fine], pa.duration("us")).reason
    assert "nanoseconds" not in refused([pd.NaT], TS).reason  # NaT's nanosecond is NaN


def _fits(value: Decimal, precision: int, scale: int) -> bool:
    quantized = value.quantize(Decimal(1).scaleb(-scale), context=Context(prec=200))
    return quantized == value and len(quantized.as_tuple().digits) <= precision


@settings(max_examples=300, deadline=None)
@given(
    mantissa=st.integers(-(10**45), 10**45),
    value_scale=st.integers(-3, 25),
    precision=st.integers(1, 38),
    data=st.data(),
)
def test_a_decimal_is_its_exact_value_or_refused(
    mantissa: int, value_scale: int, precision: int, data: Any
) -> None:
    """Arrow's decimal128 rescale overflowed silently: 12345678901234567890123 (a PostgreSQL
    numeric, a JSON integer) declared DECIMAL(38, 18) came out as 95513692080783205441.51..."""
    scale = data.draw(st.integers(0, precision))
    value: Any = Decimal(mantissa).scaleb(-value_scale) if value_scale else mantissa
    target = pa.decimal128(precision, scale)
    if _fits(Decimal(value), precision, scale):
        assert convert([value], target) == [Decimal(value)]
    else:
        refused([value], target)


def test_a_numeric_beyond_a_decimal_s_precision_is_refused_not_wrapped() -> None:
    for value in (Decimal("12345678901234567890123"), 12345678901234567890123, 10**18 + 7):
        refused([value], pa.decimal128(38, 18) if value != 10**18 + 7 else pa.decimal128(38, 30))
