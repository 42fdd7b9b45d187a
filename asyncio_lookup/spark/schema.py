"""Dim schemas on the driver: DDL parsing, Arrow types, join-key type compatibility."""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Iterable
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    CharType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
    VarcharType,
    VariantType,
)

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.spark.convert import below_microseconds

SCHEMA_ALLOWED = "a StructType or a DDL string such as 'id INT, name STRING'"

_FAMILIES: tuple[tuple[str, tuple[type[DataType], ...]], ...] = (
    ("integral", (ByteType, ShortType, IntegerType, LongType)),
    # FLOAT and DOUBLE keys never mix: a FLOAT 0.1 is 0.10000000149... as a Python float and
    # would silently miss the DOUBLE key 0.1 (and the other way round).
    ("float", (FloatType,)),
    ("double", (DoubleType,)),
    ("decimal", (DecimalType,)),
    ("string", (StringType, VarcharType, CharType)),
    ("binary", (BinaryType,)),
)


def parse_schema(schema: Any, option: str = "schema") -> StructType:
    """A :class:`StructType` from a StructType or a DDL string (DDL needs an active session,
    classic or Connect)."""
    if isinstance(schema, StructType):
        parsed = schema
    elif isinstance(schema, str) and schema.strip():
        try:
            parsed_type = DataType.fromDDL(schema)
        except Exception as error:
            reason = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
            raise ConfigurationError(option, schema, SCHEMA_ALLOWED, reason=reason) from None
        if not isinstance(parsed_type, StructType):
            raise ConfigurationError(option, schema, SCHEMA_ALLOWED, reason="not a list of columns")
        parsed = parsed_type
    else:
        raise ConfigurationError(option, schema, SCHEMA_ALLOWED)
    if not parsed.fields:
        raise ConfigurationError(option, schema, SCHEMA_ALLOWED, reason="no columns")
    parsed = cast(StructType, _without_char_types(parsed))
    seen: set[str] = set()
    for name in parsed.names:
        if name.lower() in seen:
            raise ConfigurationError(
                option, schema, SCHEMA_ALLOWED, reason=f"column {name!r} appears twice"
            )
        seen.add(name.lower())
    return parsed


def _without_char_types(data_type: Any) -> Any:
    """``CHAR(n)`` and ``VARCHAR(n)`` (Flink DDL) as STRING, as Spark reads them into a
    DataFrame; Arrow has no form of them (the length is not checked)."""
    if isinstance(data_type, (CharType, VarcharType)):
        return StringType()
    if isinstance(data_type, StructType):
        return StructType(
            [
                StructField(f.name, _without_char_types(f.dataType), f.nullable, f.metadata)
                for f in data_type.fields
            ]
        )
    if isinstance(data_type, ArrayType):
        return ArrayType(_without_char_types(data_type.elementType), data_type.containsNull)
    if isinstance(data_type, MapType):
        return MapType(
            _without_char_types(data_type.keyType),
            _without_char_types(data_type.valueType),
            data_type.valueContainsNull,
        )
    return data_type


def arrow_type(data_type: DataType, option: str, large: bool = False) -> pa.DataType:
    """The Arrow type Spark uses for ``data_type`` in Arrow batches."""
    try:
        return to_arrow_type(data_type, timezone="UTC", prefers_large_types=large)
    except Exception as error:
        raise ConfigurationError(
            option,
            data_type.simpleString(),
            "a type Spark can exchange as Arrow",
            reason=str(error).splitlines()[0],
        ) from None


def _children(data_type: DataType) -> list[DataType]:
    if isinstance(data_type, ArrayType):
        return [data_type.elementType]
    if isinstance(data_type, MapType):
        return [data_type.keyType, data_type.valueType]
    if isinstance(data_type, StructType):
        return [field.dataType for field in data_type.fields]
    return []


def _contains(data_type: DataType, kind: type[DataType]) -> bool:
    return isinstance(data_type, kind) or any(_contains(c, kind) for c in _children(data_type))


def check_value_type(data_type: DataType, option: str, column: str) -> None:
    """ConfigurationError for a declared column whose values cannot be filled: a VARIANT (at
    any depth), whose Arrow form is Spark's binary encoding, not a Python value."""
    if _contains(data_type, VariantType):
        raise ConfigurationError(
            option,
            column,
            "a column of a type other than VARIANT (declare the value as STRING holding JSON "
            "and use parse_json() in Spark)",
            reason=f"{column!r} is {data_type.simpleString()}",
        )


CONF_SESSION_TIME_ZONE = "spark.sql.session.timeZone"

# Spark's offset forms ('+08:00', 'GMT+8', 'UTC-05:30'), which Arrow knows only as '+08:00'.
_OFFSET = re.compile(r"(?:UTC|GMT|UT)?([+-])(\d{1,2})(?::?(\d{2}))?(?::?00)?")


# Java's ZoneId.SHORT_IDS, which Spark resolves the session time zone with ('PST'): the IANA
# names Arrow knows them by.
_JAVA_SHORT_IDS = {
    "ACT": "Australia/Darwin",
    "AET": "Australia/Sydney",
    "AGT": "America/Argentina/Buenos_Aires",
    "ART": "Africa/Cairo",
    "AST": "America/Anchorage",
    "BET": "America/Sao_Paulo",
    "BST": "Asia/Dhaka",
    "CAT": "Africa/Harare",
    "CNT": "America/St_Johns",
    "CST": "America/Chicago",
    "CTT": "Asia/Shanghai",
    "EAT": "Africa/Addis_Ababa",
    "ECT": "Europe/Paris",
    "IET": "America/Indiana/Indianapolis",
    "IST": "Asia/Kolkata",
    "JST": "Asia/Tokyo",
    "MIT": "Pacific/Apia",
    "NET": "Asia/Yerevan",
    "NST": "Pacific/Auckland",
    "PLT": "Asia/Karachi",
    "PNT": "America/Phoenix",
    "PRT": "America/Puerto_Rico",
    "PST": "America/Los_Angeles",
    "SST": "Pacific/Guadalcanal",
    "VST": "Asia/Ho_Chi_Minh",
    "EST": "-05:00",
    "MST": "-07:00",
    "HST": "-10:00",
}


def session_time_zone(df: Any, data_types: Iterable[DataType]) -> str:
    """The session time zone (``spark.sql.session.timeZone``, read on the driver, classic or
    Connect) in which naive datetimes and dates into TIMESTAMP columns among ``data_types``
    are wall clock times, as Spark reads them; ``'UTC'`` when there is no such column."""
    if not any(_contains(t, TimestampType) for t in data_types):
        return "UTC"
    zone = str(df.sparkSession.conf.get(CONF_SESSION_TIME_ZONE)).strip()
    zone = _JAVA_SHORT_IDS.get(zone, zone)
    if zone in ("Z", "UTC", "GMT", "UT"):
        return "UTC"
    offset = _OFFSET.fullmatch(zone)
    if offset is not None:
        sign, hours, minutes = offset.groups()
        return f"{sign}{int(hours):02d}:{minutes or '00'}"
    try:
        pc.assume_timezone(pa.array([0], pa.timestamp("us")), zone)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
        raise ConfigurationError(
            CONF_SESSION_TIME_ZONE,
            zone,
            "a region ID Arrow knows (America/New_York) or an offset (+05:00)",
            reason="naive datetimes into TIMESTAMP columns are read in it",
        ) from None
    return zone


def large_var_types(df: Any) -> bool:
    """Whether the session exchanges strings and binaries as Arrow large types."""
    conf = df.sparkSession.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")
    return str(conf).strip().lower() == "true"


def _family(data_type: DataType) -> str:
    for name, types in _FAMILIES:
        if isinstance(data_type, types):
            return name
    return data_type.simpleString()


def key_family(data_type: DataType) -> str:
    """The family key values of this type compare within (``'integral'``, ``'string'``...)."""
    return _family(data_type)


def check_key_type(data_type: DataType, option: str, column: str) -> None:
    """ConfigurationError for a key column whose values Python cannot compare as Spark does:
    a string with a non-binary collation (``UTF8_LCASE`` joins 'ABC' and 'abc'), and nested
    types (struct, array, map: not hashable as they arrive)."""
    if getattr(data_type, "collation", "UTF8_BINARY") != "UTF8_BINARY":  # a StringType's
        raise ConfigurationError(
            option,
            column,
            "a key column of binary collation (plain STRING, UTF8_BINARY)",
            reason=f"{column!r} is {data_type.simpleString()}: its equality is not Python's; "
            f"use collate({column!r}, 'UTF8_BINARY') or lower() on both sides",
        )
    if isinstance(data_type, (StructType, ArrayType, MapType)) or _contains(data_type, VariantType):
        raise ConfigurationError(
            option,
            column,
            "a key column of an atomic type (numbers, strings, binary, dates, timestamps)",
            reason=f"{column!r} is {data_type.simpleString()}",
        )


def key_types_compatible(left: DataType, dim: DataType) -> bool:
    """Whether equal values of the two types compare equal as Python key values."""
    return _family(left) == _family(dim)


def check_literal(value: Any, data_type: DataType, option: str) -> Any:
    """``value`` as the dim key column's values arrive (``1.0`` for a BIGINT column is ``1``);
    ConfigurationError unless it converts to ``data_type`` exactly (``1.5`` for a BIGINT, text
    for a BINARY column, bytes for a STRING one)."""
    allowed = f"a {data_type.simpleString()} value"
    if value is None:
        raise ConfigurationError(
            option, value, f"a non-NULL {allowed[2:]}", "a NULL key never matches"
        )
    if isinstance(value, bool) and _family(data_type) != "boolean":
        raise ConfigurationError(option, value, allowed)
    if isinstance(value, datetime.datetime):
        value = _datetime_literal(value, data_type, option, allowed)
    try:
        (converted,) = pa.array([value], type=arrow_type(data_type, option)).to_pylist()
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        converted = _INEXACT
    # Arrow truncates 1.5 to 1 for an integer type and reads bytes as text: exact only if equal
    # (a datetime is the same instant in the column's time zone; NaN is NaN, as Spark joins it)
    same = converted == value or (
        isinstance(value, float)
        and isinstance(converted, float)
        and math.isnan(value)
        and math.isnan(converted)
    )
    if converted is _INEXACT or (not isinstance(value, datetime.datetime) and not same):
        raise ConfigurationError(
            option, value, allowed, reason="does not convert exactly to the dim key column's type"
        )
    return converted


_INEXACT = object()


def _datetime_literal(
    value: datetime.datetime, data_type: DataType, option: str, allowed: str
) -> datetime.date:
    """A datetime literal for a DATE key (a naive midnight only: its date), a TIMESTAMP key
    (aware only: a naive one names no instant) or a TIMESTAMP_NTZ key (naive only); Arrow
    truncated the first, read the second as UTC and converted the third to UTC wall time."""
    aware = value.tzinfo is not None and value.utcoffset() is not None
    if below_microseconds(value):  # a pandas Timestamp: Arrow would drop them
        raise ConfigurationError(
            option, value, allowed + " (whole microseconds)", reason="it has nanoseconds"
        )
    if isinstance(data_type, DateType):
        if aware or value.time() != datetime.time(0):
            raise ConfigurationError(
                option,
                value,
                "a date (or a datetime at midnight, without a zone) for a DATE key",
                reason="it has a time of day or a zone",
            )
        return value.date()
    if isinstance(data_type, TimestampType) and not aware:
        raise ConfigurationError(
            option,
            value,
            "a datetime with a time zone (tzinfo) for a TIMESTAMP key",
            reason="a naive datetime names no instant",
        )
    if isinstance(data_type, TimestampNTZType) and aware:
        raise ConfigurationError(
            option,
            value,
            "a naive datetime (no tzinfo) for a TIMESTAMP_NTZ key",
            reason="a wall clock time has no zone",
        )
    return value
