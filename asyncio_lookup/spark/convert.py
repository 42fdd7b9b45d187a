"""Exact conversion of Python values to declared Arrow types: a value that does not fit is an
error naming it, never a truncated value (docs/semantics.md §2.9).

``pa.array(values, type=int32)`` truncates ``999.75`` to ``999`` and a ``Decimal('0.75')`` to
``0``. So values are first converted with the types Arrow infers from them, then cast to the
declared type with Arrow's checked (``safe``) cast, column by column, in C. Which source types
may reach which declared type is the table below; everything else (a string into a number, a
number into a string, a bool into an int, a DECIMAL into a DOUBLE) is refused. Only when a
column fails (or Arrow cannot infer one type for it, or would infer it from its first value
only: dates among datetimes) is it converted value by value, containers element by element,
which names the first offending value.
"""

from __future__ import annotations

import datetime
import functools
import itertools
import operator
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

import numpy as np
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


#: Field metadata: the time zone in which the field's naive datetimes and dates (at any depth)
#: are wall clock times when declared TIMESTAMP (Spark's session time zone); UTC without it.
TIME_ZONE = b"asyncio_lookup.time_zone"

#: A double is the decimal text it was parsed from when that had at most this many
#: significant digits (DBL_DIG).
_DOUBLE_DIGITS = 15
_WIDE_DIGITS = 76  # decimal256's precision

_INT64 = range(-(2**63), 2**63)

_Converter = Callable[[pa.Array, pa.DataType, str], pa.Array]


def _holds_a_map(t: pa.DataType) -> bool:
    if pt.is_map(t):
        return True
    if pt.is_struct(t):
        return any(_holds_a_map(field.type) for field in t)
    if pt.is_list(t) or pt.is_large_list(t) or pt.is_fixed_size_list(t):
        return _holds_a_map(t.value_type)
    return False


def batch_rows(batch: pa.RecordBatch) -> list[dict[str, Any]]:
    """A batch's rows as dicts, a MAP value as a dict (Arrow's default gives a list of
    ``(key, value)`` pairs, which no MAP output column takes back), but for a column holding a
    MAP keyed by arrays or structs (unhashable: its pairs stay); only a batch holding a map
    pays for it (Arrow's map-as-dict path is several times slower)."""
    rows: list[dict[str, Any]]
    if not any(_holds_a_map(field.type) for field in batch.schema):
        rows = batch.to_pylist()
        return rows
    try:
        rows = batch.to_pylist(maps_as_pydicts="strict")
        return rows
    except TypeError:  # a MAP keyed by arrays or structs: that column's pairs stay
        columns = [_column_values(column) for column in batch.columns]
    names = batch.schema.names
    return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]


def _column_values(column: pa.Array) -> list[Any]:
    """A column's values, a MAP as a dict unless its keys are unhashable (then pairs)."""
    values: list[Any]
    try:
        values = column.to_pylist(maps_as_pydicts="strict")
    except TypeError:
        values = column.to_pylist()
    return values


def with_time_zone(field: pa.Field, time_zone: str) -> pa.Field:
    """``field``, its naive datetimes and dates read in ``time_zone`` (:data:`TIME_ZONE`)."""
    return field.with_metadata({TIME_ZONE: time_zone.encode()})


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


def _to_integer(array: pa.Array, target: pa.DataType, zone: str) -> pa.Array:
    # Arrow's safe cast refuses a fraction, NaN and out-of-range values.
    if _is_integer(array.type) or pt.is_floating(array.type) or pt.is_decimal(array.type):
        return pc.cast(array, target, safe=True)
    raise _Refused


def _to_floating(array: pa.Array, target: pa.DataType, zone: str) -> pa.Array:
    # An integer must be exactly representable; a double narrows to FLOAT as declared.
    if _is_integer(array.type):
        try:
            return pc.cast(array, target, safe=True)
        except pa.ArrowInvalid:
            # Arrow checks a range (|v| <= 2**53 into DOUBLE), not exactness: 2**60 is exact.
            floats = pc.cast(array, target, safe=False)
            try:
                exact = pc.all(pc.equal(pc.cast(floats, array.type, safe=True), array)).as_py()
            except pa.ArrowInvalid:
                exact = False
            if exact is False:
                raise pa.ArrowInvalid(f"an integer not exactly representable as {target}") from None
            return floats
    if pt.is_floating(array.type):
        floats = pc.cast(array, target, safe=True)
        if (
            target.bit_width < array.type.bit_width
            and pc.any(pc.and_(pc.is_inf(floats), pc.invert(pc.is_inf(array)))).as_py()
        ):
            raise pa.ArrowInvalid(f"a value out of the range of {target}")
        return floats
    raise _Refused


def _to_decimal(array: pa.Array, target: pa.DataType, zone: str) -> pa.Array:
    if pt.is_decimal(array.type):
        return _rescaled(array, target)
    if _is_integer(array.type):
        return _rescaled(pc.cast(array, pa.decimal256(20, 0)), target)  # 64 bits: 20 digits
    if pt.is_floating(array.type):
        # Through the shortest round-trip text (JSON's 12.5 is '12.5'): Arrow's float to
        # decimal cast would round 0.125 to 0.12 silently; parsing the text refuses it. That
        # text is the one the double was parsed from only up to 15 significant digits: a
        # longer one may have lost digits (12345678901234567.89 parses to ...68), so refused.
        text = pc.cast(array, pa.string())
        long = pc.filter(text, pc.greater(pc.binary_length(text), _DOUBLE_DIGITS))
        digits = pc.utf8_trim(pc.replace_substring_regex(long, r"[eE].*|[^0-9]", ""), "0")
        if len(long) and (pc.max(pc.binary_length(digits)).as_py() or 0) > _DOUBLE_DIGITS:
            raise pa.ArrowInvalid(
                f"a float of more than {_DOUBLE_DIGITS} significant digits may have lost "
                "digits of the number the source sent; have the source send it as a string "
                "and declare STRING, or declare DOUBLE"
            )
        return _rescaled(text, target)
    raise _Refused


def cast_exactly(array: pa.Array, target: pa.DataType) -> pa.Array:
    """``pc.cast(array, target, safe=True)``, with decimals rescaled in 256 bits (Arrow's
    decimal128 rescale wraps some values into another number: a key, another key)."""
    if pt.is_decimal(target) and (pt.is_decimal(array.type) or _is_integer(array.type)):
        return _to_decimal(array, target, "")
    return pc.cast(array, target, safe=True)


def _rescaled(array: pa.Array, target: pa.DataType) -> pa.Array:
    """``array`` (decimals or their text) as the decimal ``target``, refusing what does not
    fit. Arrow's decimal128 rescale overflows silently (12345678901234567890123 as
    DECIMAL(38, 18) came out as 95513692080783205441.51...): rescaled in 256 bits, where every
    Spark decimal fits, then narrowed, which checks the precision."""
    digits = _WIDE_DIGITS
    if pt.is_decimal(array.type):
        source = array.type
        if target.scale >= source.scale and (
            target.precision - target.scale >= source.precision - source.scale
        ):
            return pc.cast(array, target, safe=True)  # every value fits: nothing can wrap
        digits = min(digits, source.precision + max(0, target.scale - source.scale))
    wide = pa.decimal256(max(digits, target.scale, 1), target.scale)
    return pc.cast(pc.cast(array, wide, safe=True), target, safe=True)


def _to_date(array: pa.Array, target: pa.DataType, zone: str) -> pa.Array:
    if pt.is_date(array.type):
        return pc.cast(array, target, safe=True)
    if pt.is_timestamp(array.type):
        dates = pc.cast(array, target)
        if pc.all(pc.equal(pc.cast(dates, array.type), array)).as_py() is not False:
            return dates
        raise pa.ArrowInvalid("the time of day would be lost")
    raise _Refused


def _to_timestamp(array: pa.Array, target: pa.DataType, zone: str) -> pa.Array:
    # a date is its day's first instant: midnight, or where a DST change skips midnight the
    # end of that gap (Spark's CAST(DATE AS TIMESTAMP)); a naive datetime a gap skips names no
    # instant and is refused
    skipped = "raise"
    if pt.is_date(array.type):
        array = pc.cast(array, pa.timestamp("us"))
        skipped = "latest"
    if not pt.is_timestamp(array.type):
        raise _Refused
    if target.tz is None:  # TIMESTAMP_NTZ: wall clock times only
        if array.type.tz is not None:
            raise pa.ArrowInvalid("an aware datetime into TIMESTAMP_NTZ; declare TIMESTAMP")
    elif array.type.tz is None and zone != "UTC":
        # A naive datetime is a wall clock time in the session time zone, as Spark reads one.
        array = pc.assume_timezone(array, zone, ambiguous="earliest", nonexistent=skipped)
    return pc.cast(array, target, safe=True)


def _same_kind(check: Callable[[pa.DataType], bool]) -> _Converter:
    def convert(array: pa.Array, target: pa.DataType, zone: str) -> pa.Array:
        if check(array.type):
            return pc.cast(array, target, safe=True)
        raise _Refused

    return convert


def _to_string(array: pa.Array, target: pa.DataType, zone: str) -> pa.Array:
    """Text as text; a ``uuid.UUID`` (PostgreSQL's ``uuid``) as its canonical text, which is
    PostgreSQL's own."""
    if isinstance(array.type, pa.UuidType):
        return pa.array([None if u is None else str(u) for u in array.to_pylist()], target)
    if _is_string(array.type):
        return pc.cast(array, target, safe=True)
    raise _Refused


def _converter(target: pa.DataType) -> _Converter:
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
        return _to_string
    if _is_binary(target):
        return _same_kind(_is_binary)
    if pt.is_boolean(target):
        return _same_kind(pt.is_boolean)
    if _is_list(target):
        return _to_list
    if pt.is_struct(target):
        return _to_struct
    if pt.is_time(target):  # Python's times are microseconds, Spark's TIME(6) nanoseconds
        return _same_kind(pt.is_time)
    # INTERVAL, a MAP (built value by value)...: only the same type.
    return _same_kind(lambda source: source == target)


def _to_list(array: pa.Array, target: pa.DataType, zone: str) -> pa.Array:
    if not _is_list(array.type):
        raise _Refused
    items = exact_cast(array.values, target.value_type, zone)
    _refuse_nulls(target.value_field, items)
    mask = array.is_null() if array.null_count else None
    return _list_of(array.offsets, items, target, mask)


def _list_of(
    offsets: pa.Array, items: pa.Array, target: pa.DataType, mask: pa.Array | None = None
) -> pa.Array:
    list_class = pa.LargeListArray if pt.is_large_list(target) else pa.ListArray
    offsets = pc.cast(offsets, pa.int64() if pt.is_large_list(target) else pa.int32())
    return list_class.from_arrays(offsets, items, type=target, mask=mask)


def _to_struct(array: pa.Array, target: pa.DataType, zone: str) -> pa.Array:
    if not pt.is_struct(array.type):
        raise _Refused
    names = {array.type.field(i).name: i for i in range(array.type.num_fields)}
    children = []
    for i in range(target.num_fields):
        field = target.field(i)
        child = array.field(names[field.name]) if field.name in names else None
        child = (
            pa.nulls(len(array), field.type)
            if child is None
            else exact_cast(child, field.type, zone)
        )
        _refuse_nulls(field, child, array)
        children.append(child)
    mask = array.is_null() if array.null_count else None
    return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)


def _refuse_nulls(field: pa.Field, child: pa.Array, parent: pa.Array | None = None) -> None:
    """ArrowInvalid if the NOT NULL ``field`` would hold a NULL (where its ``parent`` struct
    is not NULL): Spark reads such a field without looking for NULLs."""
    if field.nullable or not child.null_count:
        return
    if parent is None or not parent.null_count:
        raise pa.ArrowInvalid(f"NULL in the NOT NULL field {field.name!r}")
    if pc.any(pc.and_(child.is_null(), parent.is_valid())).as_py():
        raise pa.ArrowInvalid(f"NULL in the NOT NULL field {field.name!r}")


def exact_cast(array: pa.Array, target: pa.DataType, zone: str = "UTC") -> pa.Array:
    """``array`` as ``target`` (naive datetimes and dates into TIMESTAMP read in ``zone``);
    raises ``pa.ArrowInvalid`` (a value does not fit) or ``TypeError`` (its type never converts
    to ``target``)."""
    if array.type == target:
        return array
    if pt.is_null(array.type):
        return pa.nulls(len(array), target)
    try:
        return _converter(target)(array, target, zone)
    except _Refused:
        raise TypeError(f"{array.type} values never convert to {target}") from None


def _is_numeric(data_type: pa.DataType) -> bool:
    return bool(pt.is_integer(data_type) or pt.is_floating(data_type) or pt.is_decimal(data_type))


def _is_temporal(data_type: pa.DataType) -> bool:
    return bool(
        pt.is_date(data_type)
        or pt.is_timestamp(data_type)
        or pt.is_duration(data_type)
        or pt.is_time(data_type)
    )


@functools.cache
def _kinds_checked(inferred: pa.DataType) -> bool:
    """Whether Arrow converts values of another kind silently into ``inferred`` (or a type
    inside it): a number into a date, time, timestamp or duration (as a count of days or
    microseconds), a boolean into a number (Arrow refuses Python's among integers, not
    numpy's), text into binary."""
    if _is_temporal(inferred) or _is_numeric(inferred) or _is_binary(inferred):
        return True
    if _is_list(inferred):
        return _kinds_checked(inferred.value_type)
    return bool(pt.is_struct(inferred)) and any(_kinds_checked(f.type) for f in inferred)


_TZINFO = operator.attrgetter("tzinfo")
_NUMBERS = (int, float, Decimal, np.number, np.bool_)  # bool is an int
_BOOLS = (bool, np.bool_)


def _foreign(kinds: set[type], inferred: pa.DataType) -> bool:
    """Whether values of these Python ``kinds`` include one Arrow converts into ``inferred`` as
    another kind of value (:func:`_kinds_checked`)."""
    if _is_temporal(inferred):
        return any(issubclass(kind, _NUMBERS) for kind in kinds)
    if _is_numeric(inferred):
        return any(issubclass(kind, _BOOLS) for kind in kinds)
    if _is_binary(inferred):
        return any(issubclass(kind, str) for kind in kinds)
    return False


def below_microseconds(value: Any) -> bool:
    """A pandas ``Timestamp`` or ``Timedelta`` with nanoseconds, which Arrow would drop (NaT's
    are NaN: not such a value)."""
    nanoseconds = getattr(value, "nanosecond", None)
    if nanoseconds is None:
        nanoseconds = getattr(value, "nanoseconds", None)
    return type(nanoseconds) is int and nanoseconds != 0


def _pandas_kinds(kinds: set[type]) -> bool:
    return any(hasattr(kind, "nanosecond") or hasattr(kind, "nanoseconds") for kind in kinds)


def _mixes_kinds(values: Sequence[Any], inferred: pa.DataType) -> bool:
    """Whether Arrow, having inferred ``inferred`` from ``values``, converted some of them as
    another kind (each value must convert the same whatever its neighbours, docs/semantics.md
    §2.9): a number among dates or times, a boolean among floats, text among bytes
    (:func:`_foreign`); a pandas value with nanoseconds; a datetime among dates (truncated to
    its day); a naive datetime among aware ones (read as UTC). Then the caller converts value
    by value."""
    try:
        kinds = set(map(type, values))
        kinds.discard(type(None))
        if _foreign(kinds, inferred):
            return True
        if _pandas_kinds(kinds) and any(map(below_microseconds, values)):
            return True  # inferred as microseconds: the nanoseconds dropped
        if pt.is_date(inferred):
            return any(issubclass(kind, datetime.datetime) for kind in kinds)
        if pt.is_timestamp(inferred):
            zones = set(map(_TZINFO, filter(None, values)))
            return None in zones and len(zones) > 1
        if _is_list(inferred):
            items = list(itertools.chain.from_iterable(filter(None, values)))
            return _mixes_kinds(items, inferred.value_type)
        if pt.is_struct(inferred):
            rows = list(filter(None, values))
            return any(
                _mixes_kinds([row.get(f.name) for row in rows], f.type)
                for f in inferred
                if _kinds_checked(f.type)
            )
    except (AttributeError, TypeError, ValueError):  # not datetimes, lists, dicts: value by value
        return True
    return False


def _cast_inferred(values: list[Any], target: pa.DataType, zone: str) -> pa.Array | None:
    """``values`` converted with the type Arrow infers from them, then cast exactly to
    ``target``, in C; ``None`` when that fails (the caller converts value by value)."""
    try:
        inferred = pa.array(values)
    except _ARROW_ERRORS:
        return None
    if _kinds_checked(inferred.type) and _mixes_kinds(values, inferred.type):
        return None
    try:
        return exact_cast(inferred, target, zone)
    except _ARROW_ERRORS:
        return None


def _column(values: list[Any], target: pa.DataType, zone: str) -> pa.Array:
    """``values`` as ``target``; raises the error of the first value that does not fit."""
    converted = _cast_inferred(values, target, zone)
    if converted is not None:
        return converted
    if not values:
        return pa.array([], type=target)
    return pa.concat_arrays([_value(value, target, zone) for value in values])


def _value(value: Any, target: pa.DataType, zone: str) -> pa.Array:
    """One value as a one-value array of ``target``; a list, a struct or a map element by
    element (a map at any depth, which Arrow infers as a struct, and a list mixing dates and
    datetimes convert only so)."""
    if value is None:
        return pa.nulls(1, target)
    if isinstance(value, Mapping):
        if pt.is_map(target):
            return _map_value(value, target, zone)
        if pt.is_struct(target):
            children = []
            for field in target:
                child = _column([value.get(field.name)], field.type, zone)
                _refuse_nulls(field, child)
                children.append(child)
            return pa.StructArray.from_arrays(children, fields=list(target))
    elif _is_list(target) and isinstance(value, (list, tuple)):
        items = _column(list(value), target.value_type, zone)
        _refuse_nulls(target.value_field, items)
        return _list_of(pa.array([0, len(items)]), items, target)
    if type(value) is int and value not in _INT64:  # Arrow infers no type for it
        return exact_cast(_big_int(value, target), target, zone)
    if below_microseconds(value):  # a pandas Timestamp or Timedelta: Arrow would drop them
        raise pa.ArrowInvalid("its nanoseconds would be lost (Spark keeps microseconds)")
    return exact_cast(pa.array([value]), target, zone)


def _big_int(value: int, target: pa.DataType) -> pa.Array:
    """An int beyond 64 bits as a DECIMAL, or as a float when that is exactly the int."""
    if pt.is_floating(target):
        floats = pa.array([float(value)], type=target)
        if floats[0].as_py() != value:
            raise pa.ArrowInvalid(f"an integer not exactly representable as {target}")
        return floats
    return pa.array([Decimal(value)])


def _map_value(value: Mapping[Any, Any], target: pa.MapType, zone: str) -> pa.Array:
    keys = _column(list(value.keys()), target.key_type, zone)
    items = _column(list(value.values()), target.item_type, zone)
    _refuse_nulls(target.item_field, items)
    return pa.MapArray.from_arrays(pa.array([0, len(keys)], pa.int32()), keys, items, type=target)


def _column_slow(values: list[Any], column: str, target: pa.DataType, zone: str) -> pa.Array:
    """Convert value by value, naming the first that does not fit: the path of a column that
    failed in C, mixes dates and datetimes, or holds maps."""
    converted = []
    for index, value in enumerate(values):
        try:
            converted.append(_value(value, target, zone))
        except _ARROW_ERRORS as error:
            reason = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
            raise LossyValueError(column, index, value, target, reason) from None
    return pa.concat_arrays(converted) if converted else pa.array([], type=target)


def rows_to_arrays(
    rows: Sequence[Mapping[str, Any] | None], fields: Sequence[pa.Field]
) -> list[pa.Array]:
    """The columns ``fields`` of ``rows`` (``None``: a row of NULLs), each exactly of its type.

    A column a row lacks is NULL there. Raises :class:`LossyValueError` for the first value
    that does not convert exactly. Column by column: only the declared columns are read (a
    service's rows often hold many more), each inferred and cast in C. Naive datetimes and
    dates into TIMESTAMP are read in the field's :data:`TIME_ZONE` (UTC without one).
    """
    nulls = None in rows
    out = []
    for field in fields:
        name = field.name
        metadata = field.metadata
        zone = metadata[TIME_ZONE].decode() if metadata and TIME_ZONE in metadata else "UTC"
        if nulls:
            values = [None if row is None else row.get(name) for row in rows]
        else:
            values = [row.get(name) for row in rows]  # type: ignore[union-attr]
        converted = _cast_inferred(values, field.type, zone)
        if converted is None:  # no one inferred type, or a value that does not fit: name it
            converted = _column_slow(values, name, field.type, zone)
        out.append(converted)
    return out
