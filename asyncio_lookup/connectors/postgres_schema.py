"""Whether a declared dim schema fits a PostgreSQL relation: names and lossless types.

A declared type fits a PostgreSQL type when every value of the column converts to it without
loss (``integer`` into ``bigint`` yes, ``double precision`` into ``int`` no). Declared types are
Spark SQL type names (``"bigint"``, ``"decimal(12,2)"``), pyspark ``DataType``s or pyarrow types.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from asyncio_lookup.errors import ConfigurationError

_ARROW = {  # pyarrow str(type) -> Spark SQL name
    "bool": "boolean",
    "int8": "tinyint",
    "int16": "smallint",
    "int32": "int",
    "int64": "bigint",
    "float": "float",
    "double": "double",
    "string": "string",
    "large_string": "string",
    "binary": "binary",
    "large_binary": "binary",
    "date32[day]": "date",
}
_ALIASES = {
    "integer": "int",
    "long": "bigint",
    "short": "smallint",
    "byte": "tinyint",
    "bool": "boolean",
    "real": "float",
    "str": "string",
}
_INTEGER_DIGITS = {"tinyint": 3, "smallint": 5, "int": 10, "bigint": 19}
_INTEGERS = ("tinyint", "smallint", "int", "bigint")
# PostgreSQL type (format_type, without modifiers) -> (Spark types that hold every value,
# the one to suggest). Integer and numeric types are handled by _fits.
_PG_TYPES: dict[str, tuple[tuple[str, ...], str]] = {
    "real": (("float", "double"), "float"),
    "double precision": (("double",), "double"),
    "boolean": (("boolean",), "boolean"),
    "text": (("string",), "string"),
    "character varying": (("string",), "string"),
    "character": (("string",), "string"),
    "name": (("string",), "string"),
    "citext": (("string",), "string"),
    "bytea": (("binary",), "binary"),
    "date": (("date",), "date"),
    "timestamp without time zone": (("timestamp_ntz", "timestamp"), "timestamp_ntz"),
    "timestamp with time zone": (("timestamp",), "timestamp"),
}
_PG_INTEGERS = {"smallint": "smallint", "integer": "int", "bigint": "bigint"}
_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")
_NUMERIC = re.compile(r"^numeric\((\d+),(\d+)\)$")
_MODIFIER = re.compile(r"\([^)]*\)")  # "(3)" in "timestamp(3) without time zone"


def spark_type_name(declared: Any) -> str:
    """A declared type as a Spark SQL type name in lower case (``"decimal(12,2)"``)."""
    simple = getattr(declared, "simpleString", None)
    if callable(simple):  # a pyspark DataType
        name = str(simple())
    else:
        name = str(declared)
        if name.startswith("decimal128(") or name.startswith("decimal256("):
            name = "decimal(" + name.split("(", 1)[1]
        elif name.startswith("timestamp["):
            name = "timestamp" if "tz=" in name else "timestamp_ntz"
        name = _ARROW.get(name, name)
    name = name.strip().lower().replace(" ", "")
    if name == "decimal":
        name = "decimal(10,0)"
    return _ALIASES.get(name, name)


def _decimal(name: str) -> tuple[int, int] | None:
    match = _DECIMAL.match(name)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _base(pg_type: str) -> str:
    """A PostgreSQL type name without modifiers: ``timestamp(3) with time zone`` ->
    ``timestamp with time zone``, ``character varying(8)`` -> ``character varying``."""
    return " ".join(_MODIFIER.sub("", pg_type).split("[", 1)[0].split())


def _fits(pg_type: str, declared: str) -> tuple[bool, str]:
    """(whether ``declared`` holds every value of ``pg_type`` losslessly, the type to suggest)."""
    base = _base(pg_type)
    if pg_type.endswith("[]"):
        return declared.startswith("array<"), "array<...> of the element type"
    if base in _PG_INTEGERS:
        own = _PG_INTEGERS[base]
        digits = _INTEGER_DIGITS[own]
        if declared in _INTEGERS:
            return _INTEGERS.index(declared) >= _INTEGERS.index(own), own
        if declared == "double":
            return own != "bigint", own  # 53-bit mantissa: int8 does not fit
        dec = _decimal(declared)
        return dec is not None and dec[0] - dec[1] >= digits, own
    if base == "numeric":
        match = _NUMERIC.match(pg_type.replace(" ", ""))
        dec = _decimal(declared)
        if match is None:  # unconstrained numeric: any scale; only a decimal may hold it
            return dec is not None, "decimal(38,18)"
        precision, scale = int(match.group(1)), int(match.group(2))
        suggestion = f"decimal({precision},{scale})"
        if scale == 0 and declared in _INTEGERS:
            return precision < _INTEGER_DIGITS[declared], suggestion
        return dec is not None and dec[1] >= scale and dec[0] - dec[1] >= precision - scale, (
            suggestion
        )
    allowed, suggestion = _PG_TYPES.get(base, ((), ""))
    if not allowed:
        return True, declared  # a type this check does not know: left to the conversion
    return declared in allowed, suggestion


def _key_fits(pg_type: str, declared: str) -> tuple[bool, str, str]:
    """(whether a key of type ``declared`` matches ``pg_type`` values exactly, what is allowed,
    why not). Stricter than :func:`_fits`: a key value is sent to PostgreSQL, so it must not be
    truncated (1.5 sent to an integer column matches 1) nor shifted by a time zone."""
    if pg_type.endswith("[]"):
        return True, "", ""
    base = _base(pg_type)
    if base in _PG_INTEGERS:
        dec = _decimal(declared)
        if declared in _INTEGERS or (dec is not None and dec[1] == 0):
            return True, "", ""
        own = _PG_INTEGERS[base]
        wider = ", ".join(_INTEGERS[_INTEGERS.index(own) :])
        digits = _INTEGER_DIGITS[own]
        return (
            False,
            f"an integral type: {wider} or decimal(p,0) with p >= {digits}",
            f"a {declared} key with a fraction would be truncated and match the wrong row",
        )
    if base == "real" and declared != "float":
        return (
            False,
            "float",
            f"a {declared} key is rounded to real (float4) before the compare, so many keys "
            "would match one row",
        )
    if base == "timestamp without time zone" and declared != "timestamp_ntz":
        return (
            False,
            "timestamp_ntz",
            f"a Spark {declared} key is a UTC instant, which PostgreSQL does not compare with "
            f"{base} values",
        )
    return True, "", ""


def check_columns(
    relation: str,
    actual: Mapping[str, str] | None,
    declared: Sequence[tuple[str, Any]],
    needed: Sequence[str] = (),
    key_columns: Sequence[str] = (),
) -> None:
    """Raise :class:`ConfigurationError` unless ``relation`` exists (``actual`` is not None),
    has every declared and ``needed`` column, and each declared type fits its column's type
    (a declared ``key_columns`` column: matches its values exactly, see :func:`_key_fits`)."""
    if actual is None:
        raise ConfigurationError(
            "table", relation, "an existing table or view", "PostgreSQL has no such relation"
        )
    names = [name for name, _ in declared] + [n for n in needed if n not in dict(declared)]
    missing = [name for name in names if name not in actual]
    if missing:
        raise ConfigurationError(
            "columns",
            missing,
            f"columns of {relation}: {', '.join(actual)}",
            f"PostgreSQL relation {relation} has no column {', '.join(map(repr, missing))}",
        )
    for name, declared_type in declared:
        spark = spark_type_name(declared_type)
        pg_type = actual[name]
        ok, suggestion = _fits(pg_type, spark)
        if not ok:
            raise ConfigurationError(
                f"schema column {name!r}",
                spark,
                suggestion,
                f"PostgreSQL column {relation}.{name} is {pg_type}, whose values do not convert "
                f"to {spark} without loss; declare {suggestion}",
            )
        if name in key_columns:
            ok, allowed, why = _key_fits(pg_type, spark)
            if not ok:
                raise ConfigurationError(
                    f"schema key column {name!r}",
                    spark,
                    allowed,
                    f"PostgreSQL key column {relation}.{name} is {pg_type}: {why}; declare "
                    f"{allowed}",
                )


__all__ = ["check_columns", "spark_type_name"]
