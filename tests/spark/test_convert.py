"""Exact conversion of looked-up values to declared Arrow types (spark/convert.py)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncio_lookup.spark.convert import LossyValueError, rows_to_arrays


def convert(values: list[Any], target: pa.DataType) -> list[Any]:
    rows = [None if v is ... else {"v": v} for v in values]
    return rows_to_arrays(rows, [pa.field("v", target)])[0].to_pylist()


@pytest.mark.parametrize(
    ("values", "target", "index", "reason"),
    [
        ([1, 999.75], pa.int32(), 1, "truncated"),
        ([0.75], pa.int32(), 0, "truncated"),
        ([float("nan")], pa.int64(), 0, "truncated"),
        ([Decimal("999.75")], pa.int64(), 0, "data loss"),
        ([Decimal("999.75")], pa.int32(), 0, "data loss"),
        ([1, 2, 5_000_000_000, 3], pa.int32(), 2, "not in range"),
        ([2**63], pa.int64(), 0, ""),
        (["12"], pa.int32(), 0, "never convert"),
        ([True], pa.int32(), 0, "never convert"),
        ([12], pa.string(), 0, "never convert"),
        ([Decimal("1.5")], pa.float64(), 0, "never convert"),
        ([2**53 + 1], pa.float64(), 0, "not exactly representable"),
        ([0.125], pa.decimal128(10, 2), 0, "data loss"),
        ([Decimal("1.25")], pa.decimal128(10, 1), 0, "data loss"),
        ([Decimal("123456.5")], pa.decimal128(5, 1), 0, "precision"),
        ([dt.datetime(2024, 1, 1, 3)], pa.date32(), 0, "time of day"),
        ([[1.5]], pa.list_(pa.int32()), 0, "truncated"),
        ([["1"]], pa.list_(pa.int32()), 0, "never convert"),
        ([{"x": 1.5}], pa.struct([("x", pa.int64())]), 0, "truncated"),
        ([{"k": 1.5}], pa.map_(pa.string(), pa.int32()), 0, "truncated"),
    ],
)
def test_a_value_that_does_not_fit_is_named(
    values: list[Any], target: pa.DataType, index: int, reason: str
) -> None:
    with pytest.raises(LossyValueError) as error:
        convert(values, target)
    assert error.value.index == index
    assert error.value.value == values[index] or values[index] != values[index]  # NaN
    assert error.value.column == "v"
    assert reason in error.value.reason


@pytest.mark.parametrize(
    ("values", "target", "expected"),
    [
        ([1, 2**40], pa.int64(), [1, 2**40]),
        ([1.0, 2], pa.int32(), [1, 2]),
        ([Decimal("7.00")], pa.int64(), [7]),
        ([3, 2**53], pa.float64(), [3.0, float(2**53)]),
        ([0.1], pa.float32(), [pytest.approx(0.1)]),
        ([12.5, 3], pa.decimal128(10, 2), [Decimal("12.50"), Decimal("3.00")]),
        ([Decimal("1.2")], pa.decimal128(10, 3), [Decimal("1.200")]),
        ([dt.datetime(2024, 1, 1)], pa.date32(), [dt.date(2024, 1, 1)]),
        ([dt.date(2024, 1, 1)], pa.timestamp("us"), [dt.datetime(2024, 1, 1)]),
        ([[1.0, 2]], pa.list_(pa.int64()), [[1, 2]]),
        ([{"k": 1}], pa.map_(pa.string(), pa.int64()), [[("k", 1)]]),
        (["a", None, ...], pa.string(), ["a", None, None]),
        ([2**60, 2.0], pa.int64(), [2**60, 2]),  # Arrow infers no one type: value by value
    ],
)
def test_lossless_values_convert(values: list[Any], target: pa.DataType, expected: Any) -> None:
    assert convert(values, target) == expected


def test_missing_columns_and_rows_are_null() -> None:
    rows = [{"a": 1}, None, {"b": "x", "extra": [1, "mixed"]}]
    a, b = rows_to_arrays(rows, [pa.field("a", pa.int32()), pa.field("b", pa.string())])
    assert a.to_pylist() == [1, None, None]
    assert b.to_pylist() == [None, None, "x"]
    assert rows_to_arrays([None, None], [pa.field("a", pa.int8())])[0].to_pylist() == [None] * 2
    assert rows_to_arrays([], [pa.field("a", pa.int8())])[0].to_pylist() == []


@given(st.lists(st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)), max_size=30))
def test_integers_in_range_round_trip(values: list[int | None]) -> None:
    assert convert(values, pa.int32()) == values


@given(
    st.lists(st.integers(-(2**31), 2**31 - 1), max_size=10),
    st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not f.is_integer()),
    st.integers(0, 10),
)
def test_any_fraction_fails_at_its_index(ints: list[int], fraction: float, at: int) -> None:
    at = min(at, len(ints))
    values: list[Any] = [*ints[:at], fraction, *ints[at:]]
    with pytest.raises(LossyValueError) as error:
        convert(values, pa.int64())
    assert error.value.index == at
    assert error.value.value == fraction


def test_a_uuid_into_string_is_its_canonical_text() -> None:
    # PostgreSQL's uuid comes from asyncpg as uuid.UUID; Spark has no UUID type
    import uuid

    value = uuid.UUID("A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11")
    assert convert([value, None, "x"], pa.string()) == [
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        None,
        "x",
    ]
    assert convert([value], pa.large_string()) == ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"]
    with pytest.raises(LossyValueError, match="UUID"):
        convert([value], pa.int64())
