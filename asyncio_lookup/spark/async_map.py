"""``async_map``: any async function over the rows of a DataFrame (FLIP-232 on Spark)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.types import ArrayType, MapType, StringType, StructField, StructType, VariantType

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.lookup.failed_rows import OnError
from asyncio_lookup.lookup.rate import RateLimit, TaskRate
from asyncio_lookup.runtime import AsyncRetryStrategy, OutputMode, RetryStrategies
from asyncio_lookup.runtime.elements import OUTPUT_MODES_ALLOWED
from asyncio_lookup.spark.async_map_task import AsyncMapTask
from asyncio_lookup.spark.failed_rows import (
    DEFAULT_ERROR_COLUMN,
    ERROR_TYPE,
    check_error_column,
    check_on_error,
    error_column_free,
    refuse_unused_error_column,
)
from asyncio_lookup.spark.job_metrics import JobMetrics
from asyncio_lookup.spark.map_in_arrow import map_in_arrow
from asyncio_lookup.spark.metrics import METRICS_COLUMN, observe, table_metrics
from asyncio_lookup.spark.otel_switch import otel_from_conf
from asyncio_lookup.spark.rate_share import task_rate
from asyncio_lookup.spark.schema import (
    arrow_type,
    check_value_type,
    large_var_types,
    parse_schema,
    session_time_zone,
)
from asyncio_lookup.spark.worker_gc import gc_threshold_from_conf

_KEY_ALLOWED = "a column name of the DataFrame or a list of them, with output_mode='key_ordered'"


def _check_key(key: Any, output_mode: Any, df: DataFrame) -> tuple[str, ...] | None:
    """The key columns for key-ordered mode, checked against ``df`` on the driver."""
    try:
        mode = OutputMode(output_mode)
    except ValueError:
        raise ConfigurationError("output_mode", output_mode, OUTPUT_MODES_ALLOWED) from None
    if mode is not OutputMode.KEY_ORDERED:
        if key is not None:
            raise ConfigurationError(
                "key", key, "None", reason=f"output_mode {mode.value!r} does not use a key"
            )
        return None
    if key is None:
        raise ConfigurationError(
            "key", None, _KEY_ALLOWED, reason="output_mode 'key_ordered' keeps order per key"
        )
    columns = (key,) if isinstance(key, str) else key
    if (
        not isinstance(columns, (list, tuple))
        or not columns
        or not all(isinstance(c, str) for c in columns)
    ):
        raise ConfigurationError("key", key, _KEY_ALLOWED)
    fields = {field.name: field for field in df.schema.fields}
    for column in columns:
        if column not in fields:
            raise ConfigurationError(
                "key", column, "one of the DataFrame's columns: " + ", ".join(fields)
            )
        if isinstance(fields[column].dataType, (ArrayType, MapType, StructType, VariantType)):
            raise ConfigurationError(
                "key",
                column,
                "a column of an atomic type (a key must be hashable)",
                reason=f"{column!r} is {fields[column].dataType.simpleString()}",
            )
    return tuple(columns)


def _function_name(fn: Any) -> str:
    named = fn if callable(fn) and hasattr(fn, "__qualname__") else type(fn)
    return str(getattr(named, "__qualname__", type(fn).__name__))


def async_map(
    df: DataFrame,
    fn: Any,
    schema: str | StructType,
    timeout: float | timedelta | None,
    capacity: int = 100,
    output_mode: OutputMode | str = OutputMode.ORDERED,
    retry_strategy: AsyncRetryStrategy = RetryStrategies.NO_RETRY,
    *,
    metrics_id: str | None = None,
    on_error: str = "fail",
    error_column: str = DEFAULT_ERROR_COLUMN,
    batch_size: int | None = None,
    batch_timeout: float | timedelta | None = None,
    rate_limit: float | str | RateLimit | None = None,
    key: str | list[str] | tuple[str, ...] | None = None,
) -> DataFrame:
    """Apply an async function to every row of ``df`` with bounded concurrency.

    ``fn`` is an :class:`AsyncFunction` or ``async def fn(row: dict) -> Collection[dict]``;
    each returned dict is an output row of ``schema`` (flat-map: zero, one or many per input).
    ``timeout`` (seconds per row, across retries), ``capacity``, ``output_mode`` and
    ``retry_strategy`` are the async wait operator's (FLIP-232; ``output_mode`` also as text,
    e.g. ``'allow_unordered'``). With ``metrics_id`` the
    operator metrics are summed on the driver: :func:`async_map_metrics(metrics_id)`.
    ``on_error='keep'`` keeps a row whose call failed for good (or whose output does not fit
    ``schema``) as one row with NULL output columns and a struct column ``error_column``
    (``key`` is the input row as JSON); see :func:`split_failed`.
    With ``batch_size`` the function is batched (Flink's ``AsyncBatchFunction``): ``fn`` is an
    :class:`AsyncBatchFunction` or ``async def fn(rows: list[dict]) -> Sequence[Collection[dict]]``
    returning one collection of output rows per input row; a batch is flushed when it has
    ``batch_size`` rows, ``batch_timeout`` seconds after its first row was read, or at the end of
    the partition. ``timeout``, ``capacity`` and ``retry_strategy`` then apply per batch.
    ``rate_limit`` (requests/s for the whole job, ``'N/min'``..., or a :class:`RateLimit` with
    ``adaptive`` / ``parallelism``) bounds the calls of ``fn``, retries included, shared by the
    tasks as a lookup table's ``lookup.rate-limit`` is (docs/semantics.md §2.12); with
    ``batch_size`` each call of a batch takes one token.
    ``output_mode='key_ordered'`` (FLIP-519) needs ``key``, a column or a list of columns of
    ``df``: rows with equal keys are emitted in the order they reach their task, at most one call
    per key in flight; other keys run concurrently (docs/semantics.md §1.2).
    The function and its arguments are validated here, before any Spark job runs.
    """
    if not isinstance(df, DataFrame):
        raise ConfigurationError("df", type(df).__name__, "a pyspark.sql.DataFrame")
    parsed = parse_schema(schema)
    for field in parsed.fields:
        check_value_type(field.dataType, "schema", field.name)
    large = large_var_types(df)
    arrow_schema = pa.schema(
        [pa.field(f.name, arrow_type(f.dataType, "schema", large), True) for f in parsed.fields]
    )
    keep = check_on_error(on_error) is OnError.KEEP
    not_null = tuple(i for i, f in enumerate(parsed.fields) if not f.nullable)
    if keep and not_null:
        raise ConfigurationError(
            "schema",
            [parsed.fields[i].name for i in not_null],
            "nullable columns with on_error='keep'",
            reason="they are NOT NULL, and a failed row is output with NULL in every column of "
            "the schema",
        )
    error_field = None
    if keep:
        error_column_free(check_error_column(error_column), parsed.names, "the schema")
        error_field = pa.field(error_column, arrow_type(ERROR_TYPE, "schema", large), True)
        parsed = StructType([*parsed.fields, StructField(error_column, ERROR_TYPE, True)])
    else:
        refuse_unused_error_column(error_column, "on_error")
    task = AsyncMapTask(
        fn=fn,
        schema=arrow_schema,
        timeout=timeout,
        capacity=capacity,
        output_mode=output_mode,
        retry_strategy=retry_strategy,
        metrics_id=metrics_id,
        gc_threshold=gc_threshold_from_conf(df.sparkSession.conf),
        error_field=error_field,
        name=metrics_id if isinstance(metrics_id, str) and metrics_id else _function_name(fn),
        batch_size=batch_size,
        batch_timeout=batch_timeout,
        rate=_task_rate(rate_limit, df),
        key=_check_key(key, output_mode, df),
        otel=otel_from_conf(df.sparkSession.conf),
        time_zone=session_time_zone(df, (f.dataType for f in parsed.fields)),
        not_null=not_null,
    )
    task.operator()  # validates fn, timeout, capacity, output mode, retry and batching
    if metrics_id is None:
        return map_in_arrow(df, task, parsed)
    if not isinstance(metrics_id, str) or not metrics_id or set(metrics_id) & {":", "#"}:
        raise ConfigurationError(  # ':' and '#' end the id in observation names ('m:2')
            "metrics_id", metrics_id, "a non-empty string without ':' or '#', or None"
        )
    if METRICS_COLUMN in parsed.names:
        raise ConfigurationError(
            "schema", METRICS_COLUMN, "output columns without this reserved column name"
        )
    with_metrics = StructType([*parsed.fields, StructField(METRICS_COLUMN, StringType(), True)])
    return observe(map_in_arrow(df, task, with_metrics), metrics_id)


def _task_rate(rate_limit: Any, df: DataFrame) -> TaskRate | None:
    limit = RateLimit.of(rate_limit)
    if limit is None:
        return None
    return task_rate(
        limit.requests_per_second,
        limit.adaptive,
        limit.parallelism,
        df.sparkSession.conf,
        what="async_map",
        parallelism_option="rate_limit.parallelism",
    )


def async_map_metrics(metrics_id: str) -> JobMetrics:
    """Operator metrics summed over the tasks of the finished actions on DataFrames returned
    by ``async_map(..., metrics_id=...)`` (see :meth:`LookupTable.metrics`)."""
    return table_metrics(metrics_id).titled(metrics_id)
