"""What a lookup join binds (docs/semantics.md §2.1): its ``on`` pairs and literals to the dim
table's key columns (types checked), and which dim columns come out under which names
(``columns``, ``rename``, ``prefix``; one ``id`` for ``on='id'``, as ``DataFrame.join``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.types import DecimalType, StructField, StructType, TimestampType

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.lookup.join import KeyBinding
from asyncio_lookup.spark.schema import (
    arrow_type,
    check_key_type,
    check_literal,
    check_value_type,
    key_types_compatible,
)
from asyncio_lookup.spark.table import LookupTable
from asyncio_lookup.spark.task import DimColumn

OnInput = str | tuple[str, str] | Sequence[str | tuple[str, str]] | Mapping[str, str]
_ON_ALLOWED = (
    "a column name present on both sides, a (left column, dim column) pair, a list of these, "
    "or a mapping {left column: dim column}"
)


def _pairs(on: OnInput) -> list[tuple[str, str]]:
    if isinstance(on, str):
        return [(on, on)]
    if isinstance(on, Mapping):
        items: Iterable[Any] = list(on.items())
    elif isinstance(on, tuple) and len(on) == 2 and all(isinstance(x, str) for x in on):
        items = [on]
    elif isinstance(on, Sequence):
        items = on
    else:
        raise ConfigurationError("on", on, _ON_ALLOWED)
    pairs: list[tuple[str, str]] = []
    for item in items:
        if isinstance(item, str):
            pairs.append((item, item))
        elif (
            isinstance(item, (tuple, list))
            and len(item) == 2
            and all(isinstance(x, str) for x in item)
        ):
            pairs.append((item[0], item[1]))
        else:
            raise ConfigurationError("on", item, _ON_ALLOWED)
    return pairs


def _field(schema: StructType, name: str, option: str, side: str) -> StructField:
    for field in schema.fields:
        if field.name == name:
            return field
    close = [f.name for f in schema.fields if f.name.lower() == name.lower()]
    reason = f"no column {name!r} in the {side}"
    if close:
        reason += f" (did you mean {close[0]!r}? names are matched exactly)"
    raise ConfigurationError(option, name, f"one of {schema.names}", reason=reason)


def key_bindings(
    table: LookupTable,
    left: StructType,
    on: OnInput,
    literals: Mapping[str, Any] | None,
) -> tuple[KeyBinding, ...]:
    dim = table.schema
    bound: dict[str, KeyBinding] = {}
    for left_name, dim_name in _pairs(on):
        left_field = _field(left, left_name, "on", "left DataFrame")
        dim_field = _field(dim, dim_name, "on", f"dim table {table.name!r}")
        if dim_name in bound:
            raise ConfigurationError(
                "on", dim_name, "each dim key column bound once", reason="bound twice"
            )
        check_key_type(left_field.dataType, "on", left_name)
        check_key_type(dim_field.dataType, "on", dim_name)
        if not key_types_compatible(left_field.dataType, dim_field.dataType):
            raise ConfigurationError(
                "on",
                (left_name, dim_name),
                "key columns of compatible types (integral, decimal, string or binary; "
                "otherwise the same type, FLOAT and DOUBLE included)",
                reason=f"left column {left_name!r} is {left_field.dataType.simpleString()} but "
                f"dim column {dim_name!r} is {dim_field.dataType.simpleString()}; cast one side",
            )
        bound[dim_name] = KeyBinding(dim_name, left_column=left_name)
    if literals is not None and not isinstance(literals, Mapping):
        raise ConfigurationError("literals", literals, "a mapping {dim column: value}")
    for dim_name, value in (literals or {}).items():
        dim_field = _field(dim, dim_name, "literals", f"dim table {table.name!r}")
        if dim_name in bound:
            raise ConfigurationError(
                "literals", dim_name, "a dim column not already bound by 'on'", reason="bound twice"
            )
        check_key_type(dim_field.dataType, "literals", dim_name)
        value = check_literal(value, dim_field.dataType, f"literals[{dim_name!r}]")
        bound[dim_name] = KeyBinding(dim_name, literal=value)
    if not bound:
        raise ConfigurationError("on", on, _ON_ALLOWED, reason="no key column given")
    # The key is in dim-schema order, whatever order the user listed the columns in.
    keys = tuple(bound[name] for name in dim.names if name in bound)
    declared = getattr(table.connector, "key_columns", None)
    if isinstance(declared, (list, tuple)) and all(isinstance(c, str) for c in declared):
        key_names = tuple(b.dim_column for b in keys)
        if tuple(declared) != key_names:
            raise ConfigurationError(
                "on",
                list(key_names),
                f"the connector's key columns {list(declared)} (in dim-schema order)",
                reason=f"the join's key does not match how {table.name!r} is looked up",
            )
    return keys


def key_arrow_types(
    table: LookupTable, left: StructType, keys: Sequence[KeyBinding]
) -> tuple[tuple[str, pa.DataType], ...]:
    """The left key columns whose values a task converts before looking them up, and to what:
    a DECIMAL to the dim key column's DECIMAL (``1.00`` and ``1`` are one key, as in Spark's
    join, and a connector writes the dim's digits), a TIMESTAMP to UTC (one key text whatever
    the session's time zone). A value the dim type cannot hold equals no dim key: a miss."""
    dim = {f.name: f.dataType for f in table.schema.fields}
    types = {f.name: f.dataType for f in left.fields}
    found = []
    for binding in keys:
        if binding.left_column is None:
            continue
        left_type, dim_type = types[binding.left_column], dim[binding.dim_column]
        if isinstance(left_type, DecimalType) and left_type != dim_type:
            found.append((binding.left_column, arrow_type(dim_type, "on")))
        elif isinstance(left_type, TimestampType):
            found.append((binding.left_column, pa.timestamp("us", tz="UTC")))
    return tuple(found)


def select_dim_columns(
    table: LookupTable,
    left: StructType,
    columns: Sequence[str] | None,
    rename: Mapping[str, str] | None,
    prefix: str,
    large_types: bool,
    keys: Sequence[KeyBinding] = (),
) -> tuple[DimColumn, ...]:
    dim = table.schema
    if columns is None:
        selected = list(dim.names)
    elif isinstance(columns, str) or not isinstance(columns, Sequence):
        raise ConfigurationError("columns", columns, "a list of dim column names")
    else:
        for name in columns:
            if not isinstance(name, str):
                raise ConfigurationError("columns", name, f"one of {dim.names}")
        selected = [_field(dim, c, "columns", f"dim table {table.name!r}").name for c in columns]
    if rename is not None and not isinstance(rename, Mapping):
        raise ConfigurationError("rename", rename, "a mapping {dim column: output name}")
    rename = dict(rename or {})
    for name, output in rename.items():
        if not isinstance(name, str):
            raise ConfigurationError("rename", name, f"dim column names: one of {dim.names}")
        _field(dim, name, "rename", f"dim table {table.name!r}")
        if not isinstance(output, str) or not output.strip():
            raise ConfigurationError(
                "rename", {name: output}, "a non-empty output name for each dim column"
            )
    unselected = [name for name in rename if name not in selected]
    if unselected:
        raise ConfigurationError(
            "rename",
            unselected,
            f"dim columns the join outputs: {selected}",
            reason="not among columns=[...]: the rename would do nothing",
        )
    provided = getattr(table.connector, "columns", None)
    if isinstance(provided, (list, tuple)) and all(isinstance(c, str) for c in provided):
        absent = [name for name in selected if name not in provided]
        if absent:
            raise ConfigurationError(
                "columns",
                absent,
                f"dim columns the connector returns: {list(provided)}",
                reason=f"{table.name!r} declares them in its schema but its connector does not "
                "select them, so they would always be NULL; add them to the connector's "
                "columns or pass columns=[...] without them",
            )
    taken = {name.lower(): name for name in left.names}
    # As DataFrame.join(other, on='id'): a dim key column bound to the left column of the same
    # name is that column already; it is output once (the left's), unless asked for by name.
    same_name = {k.dim_column for k in keys if k.left_column == k.dim_column}
    out: list[DimColumn] = []
    for name in selected:
        output = rename.get(name, prefix + name)
        if columns is None and name in same_name and name not in rename and output == name:
            continue
        if output.lower() in taken:
            # the argument that named it: rename, else a prefix, else columns (or none given)
            given = "rename" if name in rename else "prefix" if prefix else "columns"
            raise ConfigurationError(
                given,
                output,
                "output names distinct from every left column and each other (names compare "
                "case-insensitively)",
                reason=f"dim column {name!r} of {table.name!r} would be output as {output!r}, "
                f"which collides with column {taken[output.lower()]!r}; pass rename="
                f"{{{name!r}: 'new_name'}}, prefix='...', or columns=[...] without it",
            )
        taken[output.lower()] = output
        field = _field(dim, name, "schema", f"dim table {table.name!r}")
        check_value_type(field.dataType, "schema", name)
        arrow = arrow_type(field.dataType, "schema", large_types)
        out.append(DimColumn(name, output, arrow, field.dataType.simpleString().upper()))
    return tuple(out)
