"""The error output on Spark (docs/semantics.md §2.10): the error column, failed rows in Arrow,
and :func:`split_failed`.

A join (or ``async_map``) with ``on_error='keep'`` outputs one more column, a struct that is
NULL on good rows and on a failed row says why (``table``, ``key``, ``error_class``,
``message``, ``attempts``); the failed row's dim (output) columns are NULL. The failed rows
are ordinary rows of the DataFrame, so Spark's task retries can neither lose nor duplicate them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.lookup.failed_rows import OnError, RowFailure
from asyncio_lookup.spark.convert import LossyValueError, rows_to_arrays

DEFAULT_ERROR_COLUMN = "lookup_error"

ERROR_TYPE = StructType(
    [
        StructField("table", StringType(), True),
        StructField("key", StringType(), True),
        StructField("error_class", StringType(), True),
        StructField("message", StringType(), True),
        StructField("attempts", IntegerType(), True),
    ]
)
"""The error column's type: NULL on a good row."""


def check_error_column(name: Any) -> str:
    """The error column's name: a non-empty string."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigurationError(
            "error_column", name, "a non-empty column name (used with on_error='keep')"
        )
    return name


def refuse_unused_error_column(name: Any, on_error: str) -> None:
    """Refuse an ``error_column`` other than the default when failed rows are not kept."""
    if name != DEFAULT_ERROR_COLUMN:
        raise ConfigurationError(
            "error_column",
            name,
            f"{DEFAULT_ERROR_COLUMN!r} (the default) unless {on_error} is 'keep'",
            reason="only kept failed rows have an error column, so it would do nothing",
        )


def check_on_error(value: Any) -> OnError | None:
    """``on_error``: None (not given), ``'fail'`` or ``'keep'``."""
    return None if value is None else OnError.of(value)


def error_column_free(name: str, taken: Sequence[str], what: str) -> None:
    """Refuse an error column named like another output column (case-insensitively)."""
    for other in taken:
        if other.lower() == name.lower():
            raise ConfigurationError(
                "error_column",
                name,
                "a name distinct from every output column (compared case-insensitively)",
                reason=f"{what} already has a column {other!r}; pass error_column='...' "
                "(e.g. when chaining two joins that keep failed rows)",
            )


def error_array(
    length: int, failures: Mapping[int, RowFailure], data_type: pa.DataType
) -> pa.Array:
    """The error column of a batch: NULL except at the positions of ``failures``."""
    if not failures:
        return pa.nulls(length, data_type)
    values: list[dict[str, Any] | None] = [None] * length
    for position, failure in failures.items():
        values[position] = failure.as_dict()
    return pa.array(values, type=data_type)


def convert_keeping_failures(
    rows: list[Mapping[str, Any] | None],
    indices: list[int],
    failures: dict[int, RowFailure],
    fields: Sequence[pa.Field],
    failure_of: Callable[[LossyValueError, int], RowFailure],
) -> tuple[list[int], list[pa.Array], dict[int, RowFailure], list[Mapping[str, Any] | None]]:
    """:func:`rows_to_arrays`, where a value that does not fit its declared type turns the input
    row it came from (``indices``: the input row of each output row) into one failed row,
    ``failure_of(error, input_index)``. Returns the indices, the columns, the failures (by
    position) and the rows of the rows that remain. Converts once unless a value does not
    fit."""
    while True:
        try:
            return indices, rows_to_arrays(rows, fields), failures, rows
        except LossyValueError as error:
            bad = indices[error.index]
            rows, indices, failures = collapse(
                rows, indices, failures, {bad: failure_of(error, bad)}
            )


def collapse(
    rows: list[Mapping[str, Any] | None],
    indices: list[int],
    failures: dict[int, RowFailure],
    failed: Mapping[int, RowFailure],
) -> tuple[list[Mapping[str, Any] | None], list[int], dict[int, RowFailure]]:
    """The output rows with every input row of ``failed`` (input index -> its failure) made
    one failed row at the place of its first output, its other outputs dropped."""
    kept_rows: list[Mapping[str, Any] | None] = []
    kept_indices: list[int] = []
    kept_failures: dict[int, RowFailure] = {}
    placed: set[int] = set()
    for position, (index, row) in enumerate(zip(indices, rows, strict=True)):
        if index in failed:
            if index in placed:
                continue
            placed.add(index)
            kept_failures[len(kept_rows)] = failed[index]
            row = None
        elif position in failures:
            kept_failures[len(kept_rows)] = failures[position]
        kept_rows.append(row)
        kept_indices.append(index)
    return kept_rows, kept_indices, kept_failures


def split_failed(
    df: DataFrame, error_column: str = DEFAULT_ERROR_COLUMN
) -> tuple[DataFrame, DataFrame]:
    """``(good, failed)`` rows of a DataFrame that ``lookup_join`` / ``async_map`` returned with
    ``on_error='keep'``: ``good`` without the error column, ``failed`` with it.

    Both are lazy: acting on each runs the lookups again (and a lookup may fail in one run and
    not the other). Write the joined DataFrame once (or ``persist`` / ``checkpoint`` it) before
    acting on both."""
    if not isinstance(df, DataFrame):
        raise ConfigurationError("df", type(df).__name__, "a pyspark.sql.DataFrame")
    check_error_column(error_column)
    field = next((f for f in df.schema.fields if f.name == error_column), None)
    if field is None or not isinstance(field.dataType, StructType):
        raise ConfigurationError(
            "error_column",
            error_column,
            f"the error column of a DataFrame returned with on_error='keep'; columns: {df.columns}",
            reason="no such struct column",
        )
    column = F.col(f"`{error_column}`")
    return df.where(column.isNull()).drop(error_column), df.where(column.isNotNull())
