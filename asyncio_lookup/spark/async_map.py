"""``async_map``: any async function over the rows of a DataFrame (FLIP-232 on Spark)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.types import StringType, StructField, StructType

from asyncio_lookup.errors import ConfigurationError, ResultTypeError
from asyncio_lookup.lookup.rate_limit import RateLimit, TaskRate, rate_limited
from asyncio_lookup.runtime import (
    AsyncRetryStrategy,
    AsyncWaitOperator,
    OutputMode,
    RetryStrategies,
)
from asyncio_lookup.runtime.rebatch import DEFAULT_FLUSH_ROWS, Rebatcher
from asyncio_lookup.spark import bridge
from asyncio_lookup.spark.convert import LossyValueError, rows_to_arrays
from asyncio_lookup.spark.metrics import (
    METRICS_COLUMN,
    observe,
    table_metrics,
    trailer,
    with_metrics_column,
)
from asyncio_lookup.spark.rate_share import task_rate
from asyncio_lookup.spark.schema import arrow_type, large_var_types, parse_schema
from asyncio_lookup.spark.worker_gc import (
    DEFAULT_GC_YOUNG_THRESHOLD,
    gc_threshold_from_conf,
    young_generation_threshold,
)


@dataclass(frozen=True)
class AsyncMapTask:
    """The ``mapInArrow`` function of :func:`async_map`."""

    fn: Any
    schema: pa.Schema
    timeout: float | timedelta | None
    capacity: int
    output_mode: OutputMode | str
    retry_strategy: AsyncRetryStrategy
    metrics_id: str | None
    flush_rows: int = DEFAULT_FLUSH_ROWS
    gc_threshold: int = DEFAULT_GC_YOUNG_THRESHOLD
    rate: TaskRate | None = None  # this task's share of ``rate_limit``

    def operator(self) -> AsyncWaitOperator[dict[str, Any], Mapping[str, Any]]:
        return AsyncWaitOperator(
            self.fn if self.rate is None else rate_limited(self.fn, self.rate),
            timeout=self.timeout,
            capacity=self.capacity,
            output_mode=self.output_mode,
            retry_strategy=self.retry_strategy,
        )

    def build(self, rows: list[Mapping[str, Any]]) -> pa.RecordBatch:
        for row in rows:
            if not isinstance(row, Mapping):
                raise ResultTypeError(
                    f"async_map: the function returned {type(row).__name__} {row!r} in its "
                    "collection; each output must be a dict of column -> value"
                )
        try:
            return pa.RecordBatch.from_arrays(rows_to_arrays(rows, self.schema), schema=self.schema)
        except LossyValueError as e:
            declared = self.schema.field(e.column).type
            raise ResultTypeError(
                f"async_map: output column {e.column!r} got {type(e.value).__name__} value "
                f"{e.value!r}, which does not fit the schema's type {declared} ({e.reason})"
            ) from None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        operator = self.operator()
        rebatcher: Rebatcher[list[dict[str, Any]], dict[str, Any], Mapping[str, Any]] = Rebatcher(
            operator, iter, flush_rows=self.flush_rows
        )
        with young_generation_threshold(self.gc_threshold):
            outputs = bridge.drive(
                rebatcher.run(bridge.read_ahead(batches, pa.RecordBatch.to_pylist))
            )
            try:
                for out in outputs:
                    batch = self.build(out.outputs)
                    yield batch if self.metrics_id is None else with_metrics_column(batch)
            finally:
                outputs.close()
        if self.metrics_id is not None:
            yield trailer(self.schema, operator.metrics.snapshot())


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
    rate_limit: float | str | RateLimit | None = None,
) -> DataFrame:
    """Apply an async function to every row of ``df`` with bounded concurrency.

    ``fn`` is an :class:`AsyncFunction` or ``async def fn(row: dict) -> Collection[dict]``;
    each returned dict is an output row of ``schema`` (flat-map: zero, one or many per input).
    ``timeout`` (seconds per row, across retries), ``capacity``, ``output_mode`` and
    ``retry_strategy`` are the async wait operator's (FLIP-232; ``output_mode`` also as text,
    e.g. ``'allow_unordered'``). With ``metrics_id`` the
    operator metrics are summed on the driver: :func:`async_map_metrics(metrics_id)`.
    ``rate_limit`` (requests/s for the whole job, ``'N/min'``..., or a :class:`RateLimit` with
    ``adaptive`` / ``parallelism``) bounds the calls of ``fn``, retries included, shared by the
    tasks as a lookup table's ``lookup.rate-limit`` is (docs/semantics.md §2.10).
    The function and its arguments are validated here, before any Spark job runs.
    """
    if not isinstance(df, DataFrame):
        raise ConfigurationError("df", type(df).__name__, "a pyspark.sql.DataFrame")
    parsed = parse_schema(schema)
    large = large_var_types(df)
    arrow_schema = pa.schema(
        [pa.field(f.name, arrow_type(f.dataType, "schema", large), True) for f in parsed.fields]
    )
    task = AsyncMapTask(
        fn=fn,
        schema=arrow_schema,
        timeout=timeout,
        capacity=capacity,
        output_mode=output_mode,
        retry_strategy=retry_strategy,
        metrics_id=metrics_id,
        gc_threshold=gc_threshold_from_conf(df.sparkSession.conf),
        rate=_task_rate(rate_limit, df),
    )
    task.operator()  # validates fn, timeout, capacity, output mode and retry strategy
    if metrics_id is None:
        return df.mapInArrow(task, parsed)
    if not isinstance(metrics_id, str) or not metrics_id:
        raise ConfigurationError("metrics_id", metrics_id, "a non-empty string or None")
    if METRICS_COLUMN in parsed.names:
        raise ConfigurationError(
            "schema", METRICS_COLUMN, "output columns without this reserved column name"
        )
    with_metrics = StructType([*parsed.fields, StructField(METRICS_COLUMN, StringType(), True)])
    return observe(df.mapInArrow(task, with_metrics), metrics_id)


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


def async_map_metrics(metrics_id: str) -> dict[str, float]:
    """Operator metrics summed over the tasks of the finished actions on DataFrames returned
    by ``async_map(..., metrics_id=...)`` (see :meth:`LookupTable.metrics`)."""
    return table_metrics(metrics_id)
