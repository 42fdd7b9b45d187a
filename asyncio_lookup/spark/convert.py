"""Exact conversion of Python values to declared Arrow types: a value that does not fit is an
error naming it, never a truncated value (docs/semantics.md §2.9).

``pa.array(values, type=int32)`` truncates ``999.75`` to ``999`` and a ``Decimal('0.75')`` to
``0``. So values are first converted with the types Arrow infers from them, then cast to the
declared type with Arrow's checked (``safe``) cast, column by column, in C. Which source types
may reach which declared type is the table below; everything else (a string into a number, a
number into a string, a bool into an int, a DECIMAL into a DOUBLE) is refused. Only when a
column fails (or Arrow cannot infer one type for it) does a Python loop look for the first
offending value, to name it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pt

_ARROW_ERRORS = (
    pa.ArrowInvalid,
    pa.ArrowTypeError,
    pa.ArrowNotImplementedError,
    TypeError,
    ValueError,
    OverflowError,
)


class LossyValueError(ValueError):
    """``value`` (row ``index`` of ``column``) does not convert exactly to ``target``."""

    def __init__(self, column: str, index: int, value: Any, target: pa.DataType, reason: str):
        super().__init__(
            f"column {column!r}: {type(value).__name__} value {value!r} does not convert "
            f"exactly to {target} ({reason})"
        )
        self.column = column
        self.index = index
        self.value = value
        self.target = target
        self.reason = reason


class _Refused(Exception):
    """A source type that never converts to the target type."""


def _is_integer(t: pa.DataType) -> bool:
    return bool(pt.is_integer(t))


def _is_string(t: pa.DataType) -> bool:
    return bool(pt.is_string(t) or pt.is_large_string(t))


def _is_binary(t: pa.DataType) -> bool:
    return bool(pt.is_binary(t) or pt.is_large_binary(t) or pt.is_fixed_size_binary(t))


def _is_list(t: pa.DataType) -> bool:
    return bool(pt.is_list(t) or pt.is_large_list(t))


def _to_integer(array: pa.Array, target: pa.DataType) -> pa.Array:
    # Arrow's safe cast refuses a fraction, NaN and out-of-range values.
    if _is_integer(array.type) or pt.is_floating(array.type) or pt.is_decimal(array.type):
        return pc.cast(array, target, safe=True)
    raise _Refused


def _to_floating(array: pa.Array, target: pa.DataType) -> pa.Array:
    # An integer must be exactly representable; a double narrows to FLOAT as declared.
    if _is_integer(array.type) or pt.is_floating(array.type):
        return pc.cast(array, target, safe=True)
    raise _Refused


def _to_decimal(array: pa.Array, target: pa.DataType) -> pa.Array:
    if pt.is_decimal(array.type):
        return pc.cast(array, target, safe=True)
    if _is_integer(array.type):
        return pc.cast(pc.cast(array, pa.decimal128(38, 0)), target, safe=True)
    if pt.is_floating(array.type):
        # Through the shortest round-trip text (JSON's 12.5 is '12.5'): Arrow's float to
        # decimal cast would round 0.125 to 0.12 silently; parsing the text refuses it.
        return pc.cast(pc.cast(array, pa.string()), target, safe=True)
    raise _Refused


def _to_date(array: pa.Array, target: pa.DataType) -> pa.Array:
    if pt.is_date(array.type):
        return pc.cast(array, target, safe=True)
    if pt.is_timestamp(array.type):
        dates = pc.cast(array, target)
        if pc.all(pc.equal(pc.cast(dates, array.type), array)).as_py() is not False:
            return dates
        raise pa.ArrowInvalid("the time of day would be lost")
    raise _Refused


def _to_timestamp(array: pa.Array, target: pa.DataType) -> pa.Array:
    if pt.is_timestamp(array.type) or pt.is_date(array.type):
        return pc.cast(array, target, safe=True)
    raise _Refused


def _same_kind(check: Callable[[pa.DataType], bool]) -> Callable[[pa.Array, pa.DataType], pa.Array]:
    def convert(array: pa.Array, target: pa.DataType) -> pa.Array:
        if check(array.type):
            return pc.cast(array, target, safe=True)
        raise _Refused

    return convert


def _converter(target: pa.DataType) -> Callable[[pa.Array, pa.DataType], pa.Array]:
    if _is_integer(target):
        return _to_integer
    if pt.is_floating(target):
        return _to_floating
    if pt.is_decimal(target):
        return _to_decimal
    if pt.is_date(target):
        return _to_date
    if pt.is_timestamp(target):
        return _to_timestamp
    if _is_string(target):
        return _same_kind(_is_string)
    if _is_binary(target):
        return _same_kind(_is_binary)
    if pt.is_boolean(target):
        return _same_kind(pt.is_boolean)
    if _is_list(target):
        return _to_list
    if pt.is_struct(target):
        return _to_struct
    # TIME, INTERVAL, a MAP (built value by value)...: only the same type.
    return _same_kind(lambda source: source == target)


def _to_list(array: pa.Array, target: pa.DataType) -> pa.Array:
    if not _is_list(array.type):
        raise _Refused
    items = exact_cast(array.values, target.value_type)
    list_class = pa.LargeListArray if pt.is_large_list(target) else pa.ListArray
    offsets = pc.cast(array.offsets, pa.int64() if pt.is_large_list(target) else pa.int32())
    mask = array.is_null() if array.null_count else None
    return list_class.from_arrays(offsets, items, type=target, mask=mask)


def _to_struct(array: pa.Array, target: pa.DataType) -> pa.Array:
    if not pt.is_struct(array.type):
        raise _Refused
    names = {array.type.field(i).name: i for i in range(array.type.num_fields)}
    children = []
    for i in range(target.num_fields):
        field = target.field(i)
        child = array.field(names[field.name]) if field.name in names else None
        children.append(
            pa.nulls(len(array), field.type) if child is None else exact_cast(child, field.type)
        )
    mask = array.is_null() if array.null_count else None
    return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)


def exact_cast(array: pa.Array, target: pa.DataType) -> pa.Array:
    """``array`` as ``target``; raises ``pa.ArrowInvalid`` (a value does not fit) or
    ``TypeError`` (its type never converts to ``target``)."""
    if array.type == target:
        return array
    if pt.is_null(array.type):
        return pa.nulls(len(array), target)
    try:
        return _converter(target)(array, target)
    except _Refused:
        raise TypeError(f"{array.type} values never convert to {target}") from None


def _column_slow(values: list[Any], column: str, target: pa.DataType) -> pa.Array:
    """Convert value by value to name the first that does not fit (the error path)."""
    converted = []
    for index, value in enumerate(values):
        if value is None:
            converted.append(pa.nulls(1, target))
            continue
        try:
            if pt.is_map(target) and isinstance(value, Mapping):
                converted.append(_map_value(value, target))
            else:
                converted.append(exact_cast(pa.array([value]), target))
        except _ARROW_ERRORS as error:
            reason = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
            raise LossyValueError(column, index, value, target, reason) from None
    return pa.concat_arrays(converted) if converted else pa.array([], type=target)


def _map_value(value: Mapping[Any, Any], target: pa.MapType) -> pa.Array:
    keys = exact_cast(pa.array(list(value.keys())), target.key_type)
    items = exact_cast(pa.array(list(value.values())), target.item_type)
    return pa.MapArray.from_arrays(pa.array([0, len(keys)], pa.int32()), keys, items, type=target)


def rows_to_arrays(
    rows: Sequence[Mapping[str, Any] | None], fields: Sequence[pa.Field]
) -> list[pa.Array]:
    """The columns ``fields`` of ``rows`` (``None``: a row of NULLs), each exactly of its type.

    A column a row lacks is NULL there. Raises :class:`LossyValueError` for the first value
    that does not convert exactly. Column by column: only the declared columns are read (a
    service's rows often hold many more), each inferred and cast in C.
    """
    nulls = None in rows
    out = []
    for field in fields:
        name = field.name
        if nulls:
            values = [None if row is None else row.get(name) for row in rows]
        else:
            values = [row.get(name) for row in rows]  # type: ignore[union-attr]
        try:
            inferred = pa.array(values)
        except _ARROW_ERRORS:
            inferred = None
        converted = None if inferred is None else _cast_or_none(inferred, field.type)
        if converted is None:  # no one inferred type, or a value that does not fit: name it
            converted = _column_slow(values, name, field.type)
        out.append(converted)
    return out


def _cast_or_none(array: pa.Array, target: pa.DataType) -> pa.Array | None:
    """:func:`exact_cast`, or ``None`` when some value does not fit (the caller finds which)."""
    try:
        return exact_cast(array, target)
    except _ARROW_ERRORS:
        return None
