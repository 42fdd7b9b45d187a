"""What runs per partition for :func:`~asyncio_lookup.spark.async_map.async_map`: the
``mapInArrow`` generator over an async function, and key-ordered mode's key selector."""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pyarrow as pa

from asyncio_lookup.errors import ConfigurationError, ResultTypeError
from asyncio_lookup.lookup.advice import SECTION, Advice, section
from asyncio_lookup.lookup.failed_rows import RowFailure
from asyncio_lookup.lookup.functions import one_nan, same_nan
from asyncio_lookup.lookup.metrics import merge_metrics
from asyncio_lookup.lookup.rate import TaskRate
from asyncio_lookup.lookup.rate_limit import Limited, RateLimitedBatchFunction, rate_limited
from asyncio_lookup.runtime import (
    AsyncBatchFunction,
    AsyncBatchWaitOperator,
    AsyncRetryStrategy,
    AsyncWaitOperator,
    OutputMode,
)
from asyncio_lookup.runtime import causes as causes_
from asyncio_lookup.runtime.causes import FAILURES, Causes
from asyncio_lookup.runtime.function import TIMEOUT_MESSAGE
from asyncio_lookup.runtime.rebatch import DEFAULT_FLUSH_ROWS, Rebatched, Rebatcher
from asyncio_lookup.runtime.sketch import LatencySketch
from asyncio_lookup.spark import bridge
from asyncio_lookup.spark.advice import map_advice
from asyncio_lookup.spark.convert import (
    LossyValueError,
    batch_rows,
    rows_to_arrays,
    with_time_zone,
)
from asyncio_lookup.spark.failed_rows import collapse, convert_keeping_failures, error_array
from asyncio_lookup.spark.job_metrics import GAUGES, NUM_MISSING_COLUMNS, encode
from asyncio_lookup.spark.metrics import reports_before, trailer, with_metrics_column
from asyncio_lookup.spark.missing import MissingColumns, struct_fields
from asyncio_lookup.spark.otel_switch import export_otel
from asyncio_lookup.spark.worker_gc import DEFAULT_GC_YOUNG_THRESHOLD, young_generation_threshold
from asyncio_lookup.spark.worker_log import configure_from_env


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
    #: With on_error='keep' (docs/semantics.md §2.10): the error column's Arrow field, and the
    #: name failures give as their table.
    error_field: pa.Field | None = None
    name: str = "async_map"
    batch_size: int | None = None  # None: fn is called per row
    batch_timeout: float | timedelta | None = None
    rate: TaskRate | None = None  # this task's share of ``rate_limit``
    key: tuple[str, ...] | None = None  # output_mode 'key_ordered': the key columns
    otel: bool = False  # export to OpenTelemetry at task end (asyncio_lookup.otel.enabled)
    time_zone: str = "UTC"  # the session's: naive datetimes into TIMESTAMP are read in it
    #: Positions of the schema's NOT NULL columns: a metrics trailer puts zeros there (Spark
    #: reads every column of the row before the trailer filter and fails on a null there).
    not_null: tuple[int, ...] = ()

    def operator(
        self,
    ) -> (
        AsyncWaitOperator[dict[str, Any], Mapping[str, Any]]
        | AsyncBatchWaitOperator[dict[str, Any], Mapping[str, Any]]
    ):
        if self.batch_size is not None:
            return AsyncBatchWaitOperator(
                self.fn if self.rate is None else RateLimitedBatchFunction(self.fn, self.rate),
                batch_size=self.batch_size,
                batch_timeout=self.batch_timeout,
                timeout=self.timeout,
                capacity=self.capacity,
                output_mode=self.output_mode,
                retry_strategy=self.retry_strategy,
                on_error=None if self.error_field is None else self._failed,
            )
        if self.batch_timeout is not None:
            raise ConfigurationError(
                "batch_timeout", self.batch_timeout, "None unless batch_size is set"
            )
        if isinstance(self.fn, AsyncBatchFunction):
            raise ConfigurationError(
                "batch_size",
                None,
                "an int >= 1",
                reason=f"fn ({type(self.fn).__name__}) is an AsyncBatchFunction, which takes a "
                "list of rows",
            )
        return AsyncWaitOperator(
            self.fn if self.rate is None else rate_limited(self.fn, self.rate),
            timeout=self.timeout,
            capacity=self.capacity,
            output_mode=self.output_mode,
            retry_strategy=self.retry_strategy,
            on_error=None if self.error_field is None else self._failed,
            key_selector=None if self.key is None else RowKey(self.key),
        )

    def _failed(self, row: dict[str, Any], error: BaseException, attempts: int) -> list[RowFailure]:
        return [RowFailure.of(self.name, row, error, attempts)]

    def build_keeping_failures(
        self, out: Rebatched[list[dict[str, Any]], Any], causes: Causes | None = None
    ) -> tuple[pa.RecordBatch, int]:
        """:meth:`build` with the error column: failed input rows (the function's final error,
        an output that is no dict, a value that does not fit the schema) become one row each
        with NULL output columns and their failure. Returns the batch and its failed rows."""
        assert self.error_field is not None
        rows: list[Any] = out.outputs
        failures: dict[int, RowFailure] = {}
        bad: dict[int, RowFailure] = {}
        for position, row in enumerate(rows):
            if isinstance(row, Mapping):
                continue
            if type(row) is RowFailure:
                failures[position] = row
                continue
            index = out.indices[position]
            if index not in bad:
                error = _not_a_dict(row)
                if causes is not None:
                    causes.record(FAILURES, error)
                bad[index] = self._failure(out.batch[index], error)
        if failures:
            rows = [None if position in failures else row for position, row in enumerate(rows)]
        indices = out.indices
        if bad:
            rows, indices, failures = collapse(rows, indices, failures, bad)

        def failure_of(error: LossyValueError, index: int) -> RowFailure:
            lossy = self._lossy(error)
            if causes is not None:  # the function's own final errors the operator counted
                causes.record(FAILURES, lossy)
            return self._failure(out.batch[index], lossy)

        indices, columns, failures, _ = convert_keeping_failures(
            rows, indices, failures, self._fields, failure_of
        )
        errors = error_array(len(indices), failures, self.error_field.type)
        schema = self.schema.append(self.error_field)
        return pa.RecordBatch.from_arrays([*columns, errors], schema=schema), len(failures)

    @functools.cached_property
    def _fields(self) -> list[pa.Field]:
        return [with_time_zone(field, self.time_zone) for field in self.schema]

    def _failure(self, row: dict[str, Any], error: BaseException) -> RowFailure:
        return RowFailure.of(self.name, row, error)

    def _lossy(self, e: LossyValueError) -> ResultTypeError:
        declared = self.schema.field(e.column).type
        return ResultTypeError(
            f"async_map: output column {e.column!r} got {type(e.value).__name__} value "
            f"{e.value!r}, which does not fit the schema's type {declared} ({e.reason})"
        )

    def build(self, rows: list[Mapping[str, Any]]) -> pa.RecordBatch:
        for row in rows:
            if not isinstance(row, Mapping):
                raise _not_a_dict(row)
        try:
            columns = rows_to_arrays(rows, self._fields)
        except LossyValueError as e:
            raise self._lossy(e) from None
        for position in self.not_null:  # Spark reads them without looking for NULLs
            column = columns[position]
            if column.null_count:
                name = self.schema.field(position).name
                row = rows[column.is_null().index(True).as_py()]
                raise ResultTypeError(
                    f"async_map: output column {name!r} is NOT NULL in the schema, but an "
                    f"output row has {'None' if name in row else 'no value'} there: {row!r}"
                )
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The output batches; with ``metrics_id`` some after a trailer row of the metrics
        since the previous one (``reports_before``), then a final trailer (spark/metrics.py)."""
        configure_from_env()
        started = time.monotonic()  # for the task's warnings (spark/advice.py)
        operator = self.operator()
        metrics = operator.metrics
        if self.metrics_id is not None or self.otel:
            metrics.calls = LatencySketch()  # every call of the function, timed
            if isinstance(operator.fn, Limited):  # from its token on, by the limiter's wrapper
                operator.fn.calls = metrics.calls
                metrics.calls_timed_by_function = True
        limited = operator.fn if isinstance(operator.fn, Limited) else None
        limiter_reported: dict[str, int] = {}

        def counters() -> dict[str, int]:
            # the operator's, and with rate_limit its limiter's throttled time and calls
            values = metrics.counters()
            if limited is not None:
                values.update(limited.counters())
            return values

        task = uuid.uuid4().hex[:16]
        schema = self.schema if self.error_field is None else self.schema.append(self.error_field)
        total_causes: dict[str, Any] = {}  # the task's, for its warnings
        total_latency = {"record": LatencySketch(), "call": LatencySketch()}  # reported, for OTel
        reported: dict[str, int | float] = {}  # the counters reported so far, for OTel
        reported_failed = 0

        def warnings() -> list[Advice]:
            # the task's warnings, logged once each; its counters are the operator's totals
            seconds = time.monotonic() - started
            found = causes_.merge(total_causes, metrics.causes.to_json())
            capacity, timeout = self.capacity, operator.timeout
            return map_advice(self.name, counters(), found, capacity, timeout, seconds, self.rate)

        def report(failed_rows: int, final: bool, **gauges: int) -> pa.RecordBatch | None:
            # the process loop is paused while this runs (bridge.drive): nothing counts meanwhile
            nonlocal total_causes, reported, reported_failed
            advice = warnings() if final else []
            deltas, record, calls = metrics.take_delta()
            if limited is not None:
                for name, value in limited.counters().items():
                    deltas[name] = value - limiter_reported.get(name, 0)
                    limiter_reported[name] = value
            found = metrics.causes.take().to_json()
            total_causes = causes_.merge(total_causes, found)
            values: dict[str, int | float] = dict(deltas)
            values["numFailedRows"] = failed_rows  # the function's and conversion's
            values.update(gauges)
            latency = {"record": record, "call": calls}
            if self.otel:
                reported = merge_metrics(reported, {**deltas, **gauges}, GAUGES)
                reported_failed += failed_rows
                for kind, sketch in latency.items():
                    if sketch is not None:
                        total_latency[kind].merge(sketch)
            sections = {SECTION: section(found, advice)}
            text = encode(task, values, latency, final=final, sections=sections)
            return trailer(schema, text, self.not_null)

        def export_totals(failed_rows: int) -> None:
            totals: dict[str, int | float]
            if self.metrics_id is None:  # nothing drained: the operator's figures are the task's
                totals = {**counters(), "numFailedRows": failed_rows}
                latency = {"record": metrics.latency, "call": metrics.calls}
                export_otel(self.name, "async_map", totals, latency)
            else:  # what the trailers reported
                totals = {**reported, "numFailedRows": reported_failed}
                export_otel(self.name, "async_map", totals, total_latency)

        rebatcher: Rebatcher[list[dict[str, Any]], dict[str, Any], Mapping[str, Any]] = Rebatcher(
            operator, iter, flush_rows=self.flush_rows
        )
        with young_generation_threshold(self.gc_threshold):
            outputs = bridge.drive(rebatcher.run(bridge.read_ahead(batches, batch_rows)))
            number = failed_rows = 0
            columns = MissingColumns(  # a misspelt key: NULL in every row
                self.schema.names, struct_fields((f.name, f.type) for f in self.schema)
            )
            try:
                try:
                    for out in outputs:
                        if columns.unseen:
                            columns.observe(
                                [row if isinstance(row, Mapping) else None for row in out.outputs]
                            )
                        if self.error_field is None:
                            batch = self.build(out.outputs)
                        else:
                            batch, failed = self.build_keeping_failures(out, metrics.causes)
                            failed_rows += failed
                        if self.metrics_id is None:
                            yield batch
                            continue
                        number += 1
                        if reports_before(number):
                            row = report(failed_rows, final=False)
                            if row is not None:
                                failed_rows = 0
                                yield row  # before the batch: a reader that stops counts it
                        yield with_metrics_column(batch)
                finally:
                    outputs.close()
            except GeneratorExit:
                # The reader stopped (limit, show, take): export what was reported so far,
                # as a lookup join's task does (spark/task.py).
                if self.otel:
                    export_totals(failed_rows)
                raise
            except TimeoutError as error:
                if str(error) != TIMEOUT_MESSAGE:
                    raise
                what, capacity, hook = (  # with batch_size, the limits are a batch's
                    ("a row", f"{self.capacity}", "AsyncFunction.timeout()")
                    if self.batch_size is None
                    else (
                        "a batch of rows",
                        f"{self.capacity} batches",
                        "AsyncBatchFunction.timeout(rows)",
                    )
                )
                raise TimeoutError(  # Flink's words alone name neither the function nor the limit
                    f"async_map {self.name!r}: {what} did not finish within "
                    f"{operator.timeout:g} s (retries included): {error} Raise 'timeout', or "
                    f"lower 'capacity' ({capacity}) if the service is saturated; "
                    f"on_error='keep' or an {hook} hook keeps the job going"
                ) from error
        missing = columns.report_function(f"async_map {self.name!r}")
        if self.metrics_id is None:
            warnings()
            if self.otel:
                export_totals(failed_rows)
            return
        last = report(failed_rows, final=True, **{NUM_MISSING_COLUMNS: missing})
        if self.otel:
            export_totals(0)
        if last is not None:
            yield last


@dataclass(frozen=True)
class RowKey:
    """Key-ordered mode's key selector over input rows (dicts): the key column's value, or the
    tuple of the key columns' values. Every NaN is one key, as Spark groups it (Arrow gives
    each NaN its own float object, which no dict matches to another)."""

    columns: tuple[str, ...]

    def __call__(self, row: Mapping[str, Any]) -> Any:
        columns = self.columns
        if len(columns) == 1:
            return one_nan(row[columns[0]])
        return tuple(same_nan([row[column] for column in columns]))


def _not_a_dict(row: Any) -> ResultTypeError:
    batch = (
        " (a list in it: is it a function over a batch of rows? That needs "
        "async_map(..., batch_size=N))"
        if isinstance(row, (list, tuple))
        else ""
    )
    return ResultTypeError(
        f"async_map: the function returned {type(row).__name__} {row!r:.200} in its "
        f"collection; each output must be a dict of column -> value{batch}"
    )
