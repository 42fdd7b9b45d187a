"""What runs on an executor for one partition of a lookup join (shipped pickled, no live state)."""

from __future__ import annotations

import functools
import hashlib
import itertools
import time
import uuid
from collections.abc import Collection, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from asyncio_lookup.errors import AsyncLookupError, ResultTypeError, lookup_context
from asyncio_lookup.lookup.advice import SECTION, Advice, section
from asyncio_lookup.lookup.chain import LookupChain
from asyncio_lookup.lookup.chain_build import target_of
from asyncio_lookup.lookup.failed_rows import RowFailure
from asyncio_lookup.lookup.functions import same_nan
from asyncio_lookup.lookup.hint_resolve import ResolvedLookup
from asyncio_lookup.lookup.join import JoinedBatch, JoinSpec, LookupJoinRunner, ProbeBatch
from asyncio_lookup.lookup.metrics import merge_metrics
from asyncio_lookup.lookup.options import CacheType, LookupOptions
from asyncio_lookup.lookup.partitioning import PartitionRouting, partitioned_source
from asyncio_lookup.lookup.providers import FullCachingLookupProvider
from asyncio_lookup.lookup.rate import TaskRate
from asyncio_lookup.lookup.registry import acquire_chain, release_chain
from asyncio_lookup.runtime import causes as causes_
from asyncio_lookup.runtime.causes import FAILURES, Causes
from asyncio_lookup.runtime.sketch import LatencySketch
from asyncio_lookup.spark import bridge
from asyncio_lookup.spark.advice import join_advice
from asyncio_lookup.spark.convert import (
    LossyValueError,
    batch_rows,
    cast_exactly,
    rows_to_arrays,
    with_time_zone,
)
from asyncio_lookup.spark.failed_rows import convert_keeping_failures, error_array
from asyncio_lookup.spark.failures import is_readable, readable
from asyncio_lookup.spark.job_metrics import GAUGES, NUM_MISSING_COLUMNS, encode
from asyncio_lookup.spark.metrics import reports_before, trailer, with_metrics_column
from asyncio_lookup.spark.missing import MissingColumns, struct_fields
from asyncio_lookup.spark.otel_switch import export_otel
from asyncio_lookup.spark.worker_gc import DEFAULT_GC_YOUNG_THRESHOLD, young_generation_threshold
from asyncio_lookup.spark.worker_log import configure_from_env


def _as_key_type(column: pa.Array, target: pa.DataType) -> pa.Array:
    try:
        return cast_exactly(column, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # some value does not fit: per value
        out = []
        for i in range(len(column)):
            try:
                out.append(cast_exactly(column.slice(i, 1), target))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                out.append(pa.nulls(1, target))
        return pa.concat_arrays(out) if out else pa.array([], type=target)


#: The partition of a partitioned FULL cache's task that received no rows.
NO_ROWS = -1


def _key_values(column: pa.Array, target: pa.DataType | None = None) -> list[Any]:
    """A key column's values (converted to ``target``, the dim key's type, when given: a
    value it cannot hold is ``None``, which no key equals); NaNs as the one :data:`NAN`
    (looked for in Arrow, in C)."""
    if target is not None and column.type != target:
        column = _as_key_type(column, target)
    values: list[Any] = column.to_pylist()
    if pa.types.is_floating(column.type) and pc.any(pc.is_nan(column)).as_py():
        same_nan(values)
    return values


@dataclass(frozen=True)
class DimColumn:
    """A dim column of the output: its name in the dim rows, its output name, its Arrow type
    and the Spark type it was declared with (for errors)."""

    name: str
    output: str
    type: pa.DataType
    declared: str = ""


def _matched(rows: Sequence[Any], failures: Collection[int] = ()) -> pa.Array:
    """The ``matched_column``: true where a dim row was joined (a failed row is none)."""
    return pa.array(
        [row is not None and position not in failures for position, row in enumerate(rows)],
        pa.bool_(),
    )


@dataclass(frozen=True)
class LookupJoinTask:
    """The ``mapInArrow`` function of a lookup join (see docs/design.md "How a lookup join
    runs")."""

    table_id: str
    table_name: str
    connector: Any
    options: LookupOptions
    hint: ResolvedLookup
    spec: JoinSpec
    dim_columns: tuple[DimColumn, ...]
    #: The output's Arrow schema as the driver sees it: the metrics trailer of a task that
    #: output no batch (None if a type has no Arrow form here; that task then reports none).
    output_schema: pa.Schema | None = None
    #: Positions of the output's NOT NULL columns (the trailer puts values there).
    not_null: tuple[int, ...] = ()
    routing: PartitionRouting | None = None
    partition_column: str | None = None
    gc_threshold: int = DEFAULT_GC_YOUNG_THRESHOLD
    #: With on_error='keep': the error column's name and Arrow type (docs/semantics.md §2.10).
    error_column: str | None = None
    error_type: pa.DataType | None = None
    #: This task's share of the table's ``lookup.rate-limit`` (spark/rate_share.py).
    rate: TaskRate | None = None
    #: The shared cache's default namespace (LookupTable.shared_namespace), with one.
    shared_namespace: str | None = None
    #: Export to OpenTelemetry at task end (Spark conf asyncio_lookup.otel.enabled).
    otel: bool = False
    #: The session time zone, in which naive datetimes into TIMESTAMP columns are read.
    time_zone: str = "UTC"
    #: Left key columns converted before lookup (spark/join_columns.py key_arrow_types).
    key_types: tuple[tuple[str, pa.DataType], ...] = ()
    #: The BOOLEAN column telling joined rows from NULL-padded ones, if asked for.
    matched_column: str | None = None

    @property
    def partitioned_full_cache(self) -> bool:
        """A shuffled join with a FULL cache whose rows the dim side can route: each task
        loads only the rows its partition can be asked for (docs/semantics.md §2.7)."""
        full = self.options.cache is CacheType.FULL or isinstance(
            self.connector, FullCachingLookupProvider
        )
        return full and self.routing is not None and self.routing.can_filter

    def new_chain(self, partition: int | None = None) -> LookupChain:
        source = self.connector
        if partition is not None and self.routing is not None:
            source = partitioned_source(source, self.routing, self.spec.key_columns, partition)
        return LookupChain.create(
            source,
            self.options,
            prefer_async=self.hint.prefer_async,
            miss_retry=self.hint.miss_retry(),
            name=self.table_name,
            key_columns=self.spec.key_columns,
            cache_scope=self.cache_scope(partition),
            target=target_of(self.connector),
            rate=self.rate,
            shared_namespace=self.shared_namespace,
        )

    def cache_scope(self, partition: int | None = None) -> str:
        """Chains of one table share one cache in a process whatever their mode or retry
        (docs/semantics.md §2.3 Scope), unless their shared-cache settings differ; a
        partitioned FULL cache is shared per partition."""
        scope = self.table_id + self._shared_cache_digest()
        if partition is None or self.routing is None:
            return scope
        return f"{scope}:partition={partition}/{self.routing.fingerprint()}"

    def _shared_cache_digest(self) -> str:
        """``:l2=<digest>`` of the join's shared-cache settings, or ``''`` without one. A LOOKUP
        hint may give a join another TTL, namespace or miss policy: its chain and its L1 cache
        are its own, or it would be served rows another join's settings put there."""
        settings = self.options.shared_cache()
        if settings is None:
            return ""
        digest = hashlib.sha256(f"{settings.url}\x00{settings!r}".encode()).hexdigest()
        return f":l2={digest[:16]}"

    def chain_id(self, partition: int | None = None) -> str:
        """Registry key: one chain (and cache) per table in a process. Joins of one table that
        differ in key columns, mode or lookup-miss retry need chains of their own, and so does
        each partition of a partitioned FULL cache (its snapshot holds that partition's rows)."""
        hint = self.hint
        base = (
            f"{self.table_id}:{','.join(self.spec.key_columns)}:"
            f"{'async' if hint.prefer_async else 'sync'}:"
            f"{hint.retry_delay}:{hint.retry_max_attempts}"
        )
        if self.rate is not None:  # a different share is a different limiter
            base += f":rate={self.rate.rate!r}:{self.rate.adaptive}"
        base += self._shared_cache_digest()
        if partition is None or self.routing is None:
            return base
        return f"{base}:partition={partition}/{self.routing.fingerprint()}"

    def _partition_of(
        self, batches: Iterator[pa.RecordBatch]
    ) -> tuple[Iterator[pa.RecordBatch], int | None]:
        """The partition this task's rows were routed to (read from the first batch), and
        the batches, checked to stay in it (a partitioned snapshot holds only its rows)."""
        column = self.partition_column
        if column is None or not self.partitioned_full_cache:
            return batches, None
        first = next(batches, None)
        if first is None:
            return iter(()), NO_ROWS
        values = first.column(column)
        partition = values[0].as_py() if len(values) else None
        if partition is None:
            return itertools.chain([first], batches), None

        def checked() -> Iterator[pa.RecordBatch]:
            for batch in itertools.chain([first], batches):
                bounds = pc.min_max(batch.column(column))
                if batch.num_rows and not (
                    bounds["min"].as_py() == partition == bounds["max"].as_py()
                ):
                    raise AsyncLookupError(
                        f"lookup join {self.table_name!r}: a task of partition {partition} "
                        f"received rows routed to partitions {bounds['min']}..{bounds['max']}; "
                        "were shuffle partitions coalesced?"
                    )
                yield batch

        return checked(), int(partition)

    def probe(self, batch: pa.RecordBatch) -> ProbeBatch[pa.RecordBatch]:
        """Keys of one input batch, read column-wise (only the key columns become Python)."""
        spec = self.spec
        cast = self._key_casts
        columns = {
            name: _key_values(batch.column(name), cast.get(name)) for name in spec.left_key_columns
        }
        left_rows = batch_rows(batch) if spec.needs_left_rows else None
        return ProbeBatch(batch, spec.build_keys(columns, batch.num_rows, left_rows), left_rows)

    def output(self, joined: JoinedBatch[pa.RecordBatch]) -> pa.RecordBatch:
        """Left columns gathered with ``take``, dim columns converted exactly to their types."""
        batch = joined.payload
        if self.partition_column is not None:
            batch = batch.drop_columns([self.partition_column])
        gathered = batch.take(pa.array(joined.indices, type=pa.int64()))
        names = [*batch.schema.names, *(c.output for c in self.dim_columns)]
        arrays = [*gathered.columns, *self.dim_arrays(joined)]
        if self.matched_column is not None:
            names.append(self.matched_column)
            arrays.append(_matched(joined.dim_rows))
        return pa.RecordBatch.from_arrays(arrays, names=names)

    def dim_arrays(self, joined: JoinedBatch[pa.RecordBatch]) -> list[pa.Array]:
        """The dim columns of the joined rows; a value that does not convert exactly to its
        declared type fails the task naming the table, the key, the column and the value."""
        try:
            return rows_to_arrays(joined.dim_rows, self._fields)  # type: ignore[arg-type]
        except LossyValueError as error:
            raise self._lossy(error, joined.payload, joined.indices[error.index]) from None

    @functools.cached_property
    def _key_casts(self) -> dict[str, pa.DataType]:
        return dict(self.key_types)

    @functools.cached_property
    def _fields(self) -> list[pa.Field]:
        return [with_time_zone(pa.field(c.name, c.type), self.time_zone) for c in self.dim_columns]

    def _lossy(self, error: LossyValueError, batch: pa.RecordBatch, index: int) -> ResultTypeError:
        column = next(c for c in self.dim_columns if c.name == error.column)
        key = self._key_of(batch, index)
        return ResultTypeError(
            f"{lookup_context(self.table_name, key, target_of(self.connector))}: "
            f"column {column.name!r} returned {type(error.value).__name__} value "
            f"{error.value!r}, which does not fit the declared type "
            f"{column.declared or column.type} ({error.reason}); "
            "declare the column with a type that holds it"
        )

    def output_keeping_failures(
        self, joined: JoinedBatch[pa.RecordBatch], causes: Causes | None = None
    ) -> tuple[pa.RecordBatch, int]:
        """:meth:`output` with the error column (on_error='keep'): failed rows get NULL dim
        columns and their failure; a value that does not fit its declared type makes its row
        a failed row (counted in ``causes``). Returns the batch and its number of failed rows."""
        assert self.error_column is not None and self.error_type is not None
        batch = joined.payload
        if self.partition_column is not None:
            batch = batch.drop_columns([self.partition_column])
        rows: list[Any] = joined.dim_rows
        failures = {position: rows[position] for position in joined.failures}
        if failures:
            rows = [None if position in failures else row for position, row in enumerate(rows)]

        def failure_of(error: LossyValueError, index: int) -> RowFailure:
            key = self._key_of(batch, index)
            lossy = self._lossy(error, batch, index)
            if causes is not None:
                causes.record(FAILURES, lossy)
            return RowFailure.of(self.table_name, key, lossy)

        indices, dims, failures, rows = convert_keeping_failures(
            rows, joined.indices, failures, self._fields, failure_of
        )
        gathered = batch.take(pa.array(indices, type=pa.int64()))
        names = [*batch.schema.names, *(c.output for c in self.dim_columns), self.error_column]
        errors = error_array(len(indices), failures, self.error_type)
        arrays = [*gathered.columns, *dims, errors]
        if self.matched_column is not None:
            names.append(self.matched_column)
            arrays.append(_matched(rows, failures))
        out = pa.RecordBatch.from_arrays(arrays, names=names)
        return out, len(failures)

    def _key_of(self, batch: pa.RecordBatch, index: int) -> tuple[Any, ...]:
        return tuple(
            binding.literal_key
            if binding.left_column is None
            else batch.column(binding.left_column)[index].as_py()
            for binding in self.spec.keys
        )

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The joined batches (with the null metrics column), some after a trailer row of the
        metrics since the previous one, then the task's final trailer (spark/metrics.py).
        The library's errors reach Spark without its frames (:mod:`.failures`)."""
        configure_from_env()
        try:
            yield from self._stream(batches)
        except Exception as error:
            if is_readable(error):
                raise readable(error)  # noqa: B904 (the same error, its cause kept)
            raise

    def _stream(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        schema = self.output_schema
        sample: pa.RecordBatch | None = None
        pending: list[str] = []  # trailers no row could carry yet (see trailer())

        def trailers() -> Iterator[pa.RecordBatch]:
            while pending and schema is not None:
                row = trailer(schema, pending[0], self.not_null, sample)
                if row is None:
                    return
                pending.pop(0)
                yield row

        joined = self._join(batches)
        with young_generation_threshold(self.gc_threshold):
            try:
                for item in joined:
                    if isinstance(item, str):  # the final trailer
                        pending.append(item)
                        yield from trailers()
                        continue
                    batch, text = item
                    schema = batch.schema
                    if batch.num_rows:
                        sample = batch
                    if text is not None:
                        pending.append(text)
                    yield from trailers()  # before the batch: a reader that stops counts it
                    yield with_metrics_column(batch)
            finally:
                joined.close()  # a consumer that stops early (limit) releases the chain now

    def _join(
        self, batches: Iterator[pa.RecordBatch]
    ) -> Generator[tuple[pa.RecordBatch, str | None] | str, None, None]:
        """Output batches, some with the trailer of the work done since the previous one
        (:func:`reports_before`), then the final trailer."""
        batches, partition = self._partition_of(batches)
        if partition == NO_ROWS:  # no key to look up: no snapshot (it would be the whole table)
            yield encode(uuid.uuid4().hex[:16], {"numFailedRows": 0}, {}, final=True)
            return
        chain_id = self.chain_id(partition)
        chain = bridge.run(acquire_chain(chain_id, lambda: self.new_chain(partition)))
        if chain.shared is not None:
            chain.shared.new_task()  # a failing shared store warns once per task
        keys = self.spec.key_columns
        checked = [c for c in self.dim_columns if c.name not in keys]
        columns = MissingColumns(
            (c.name for c in checked), struct_fields((c.name, c.type) for c in checked)
        )
        task = uuid.uuid4().hex[:16]
        runner: LookupJoinRunner[pa.RecordBatch] = LookupJoinRunner(chain, self.spec, self.hint)
        started = time.monotonic()
        first_key: list[Any] = []  # the task's first key looked up, for the no-rows warning

        def probe(batch: pa.RecordBatch) -> ProbeBatch[pa.RecordBatch]:
            probed = self.probe(batch)
            if not first_key:
                key = next((key for key in probed.keys if key is not None), None)
                if key is not None:
                    first_key.append(key)
            return probed

        totals: dict[str, int | float] = {}  # the task's counters and causes, for its warnings
        total_causes: dict[str, Any] = {}
        total_latency = {"record": LatencySketch(), "call": LatencySketch()}  # for OTel

        def report(failed_rows: int, final: bool, **gauges: int) -> str:
            # Counters since the previous report (of this task, or of the previous task of
            # this process: work between tasks, the FULL load at open, reloads). The process
            # loop is paused while this runs (bridge.drive), so nothing counts meanwhile.
            nonlocal totals, total_causes
            values = chain.metrics.take_delta()
            found = chain.metrics.causes.take().to_json()
            record = None
            if runner.operator is not None:
                counters, record, _ = runner.operator.metrics.take_delta()
                values = merge_metrics(values, counters, GAUGES)
                found = causes_.merge(found, runner.operator.metrics.causes.take().to_json())
            values["numFailedRows"] = failed_rows  # lookup and conversion failures
            values.update(gauges)
            totals = merge_metrics(totals, values, GAUGES)
            total_causes = causes_.merge(total_causes, found)
            advice: list[Advice] = []
            if final:  # the task's warnings, logged once each (spark/advice.py)
                seconds = time.monotonic() - started
                advice = join_advice(
                    chain,
                    runner,
                    self.rate,
                    totals,
                    total_causes,
                    columns,
                    seconds,
                    shuffled=self.routing is not None,
                    first_key=first_key[0] if first_key else None,
                )
            latency = {"record": record, "call": chain.metrics.drain_calls()}
            if self.otel:
                for kind, sketch in latency.items():
                    if sketch is not None:
                        total_latency[kind].merge(sketch)
            return encode(
                task, values, latency, final=final, sections={SECTION: section(found, advice)}
            )

        try:
            if runner.is_async:
                joined = bridge.drive(runner.run_async(bridge.read_ahead(batches, probe)))
            else:
                joined = runner.run_sync(map(probe, batches))
            number = failed_rows = 0
            try:
                for item in joined:
                    number += 1
                    if self.error_column is None:
                        columns.observe(item.dim_rows)
                        out = self.output(item)
                    else:
                        columns.observe(item.dim_rows, item.failures)
                        out, failed = self.output_keeping_failures(item, chain.metrics.causes)
                        failed_rows += failed
                    if reports_before(number):
                        yield out, report(failed_rows, final=False)
                        failed_rows = 0
                    else:
                        yield out, None
            finally:
                joined.close()
                if runner.is_async:  # calls no record of this task waits for: not the next's
                    bridge.run(chain.end_task())
            if chain.shared is not None:
                bridge.run(chain.flush())  # the loop may not run again in this process
            fail = self.options.fail_on_missing_column
            missing = columns.report(self.table_name, chain.target, fail=fail)
            final = report(failed_rows, final=True, **{NUM_MISSING_COLUMNS: missing})
        except GeneratorExit:
            # The reader stopped (limit): what ran since the last trailer stays in the chain's
            # counters for the next task of this process to report.
            if self.otel:
                export_otel(self.table_name, "lookup_join", totals, total_latency)
            raise
        except BaseException:
            # A failed attempt's trailers are dropped with it; so is its unreported share.
            chain.metrics.take_delta()
            chain.metrics.drain_calls()
            chain.metrics.causes.take()
            raise
        finally:
            release_chain(chain_id, chain)
        if self.otel:
            export_otel(self.table_name, "lookup_join", totals, total_latency)
        yield final
