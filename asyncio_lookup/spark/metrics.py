"""Metrics from executors to the driver without accumulators (the same on Spark Connect).

Each task appends one *trailer row* to its output: nulls in every column but the hidden
:data:`METRICS_COLUMN`, which holds the task's metric deltas as JSON (data rows leave it null).
The DataFrame a join returns observes that column (``DataFrame.observe``: ``collect_list`` of
the trailers, gathered like any Spark SQL metric, so a failed or retried task attempt does not
count, only the one that succeeds), then drops the trailer rows and the column. The driver
folds the trailers with :func:`merge_metrics`: counters summed, gauges by max.

A batch DataFrame observes through an :class:`Observation` registered here under the table's
id; a streaming one through a named observation, :func:`observation_name`, that each
micro-batch's progress carries (``observedMetrics``), folded by :func:`progress_metrics`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from asyncio_lookup.lookup.metrics import CacheMetricGroup, merge_metrics
from asyncio_lookup.runtime.metrics import OperatorMetrics

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: Dim columns no row a task looked up contained (spark/missing.py); the maximum over tasks.
NUM_MISSING_COLUMNS = "numMissingColumns"

GAUGES: frozenset[str] = CacheMetricGroup.GAUGES | OperatorMetrics.GAUGES | {NUM_MISSING_COLUMNS}

#: The hidden column of the trailer rows (a reserved name: an input may not have it).
METRICS_COLUMN = "__asyncio_lookup_metrics"
#: The observed metric holding the list of trailers (one JSON object per successful task).
OBSERVED_TASKS = "tasks"


def with_metrics_column(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A data batch with the (null) metrics column appended."""
    return batch.append_column(METRICS_COLUMN, pa.nulls(batch.num_rows, pa.string()))


def trailer(
    schema: pa.Schema,
    metrics: Mapping[str, float],
    not_null: Iterable[int] = (),
    sample: pa.RecordBatch | None = None,
) -> pa.RecordBatch | None:
    """The one-row batch that carries a task's metrics (``schema`` has no metrics column).

    Its columns are null, except those at ``not_null`` positions (NOT NULL in Spark: Spark
    reads every column of the row before the trailer filter and fails on a null there), which
    take ``sample``'s first value or a zero of their type. None if a type has no zero here."""
    columns = [pa.nulls(1, field.type) for field in schema]
    for position in not_null:
        if sample is not None and sample.num_rows:
            columns[position] = sample.column(position).slice(0, 1)
            continue
        try:
            columns[position] = pa.array(
                [_zero(schema.field(position).type)], schema[position].type
            )
        except (pa.ArrowException, TypeError, ValueError):
            return None
    names = [*schema.names, METRICS_COLUMN]
    return pa.RecordBatch.from_arrays([*columns, pa.array([encode(metrics)])], names=names)


def _zero(data_type: pa.DataType) -> Any:
    if pa.types.is_string(data_type) or pa.types.is_large_string(data_type):
        return ""
    if pa.types.is_binary(data_type) or pa.types.is_large_binary(data_type):
        return b""
    if pa.types.is_boolean(data_type):
        return False
    if pa.types.is_struct(data_type):
        return {field.name: _zero(field.type) for field in data_type}
    if (
        pa.types.is_list(data_type)
        or pa.types.is_large_list(data_type)
        or pa.types.is_map(data_type)
    ):
        return []
    return 0


def encode(metrics: Mapping[str, Any]) -> str:
    """One task's metrics as JSON; counters as ints (a section, a JSON object, as it is)."""
    return json.dumps(
        {k: v if k in GAUGES or isinstance(v, Mapping) else int(v) for k, v in metrics.items()}
    )


def fold(trailers: Iterable[str | None]) -> dict[str, float]:
    """Merge tasks' JSON metrics: counters summed (ints), gauges by max (sections skipped:
    :func:`table_trailers` gives them to their readers)."""
    merged: dict[str, float] = {}
    for text in trailers:
        if text:
            values = {k: v for k, v in json.loads(text).items() if not isinstance(v, dict)}
            merged = merge_metrics(merged, values, GAUGES)
    return merged


def observation_name(metrics_id: str) -> str:
    """The name of the observation a streaming query's progress reports the metrics under."""
    return f"asyncio_lookup:{metrics_id}"


def observe(df: DataFrame, metrics_id: str) -> DataFrame:
    """``df`` (the ``mapInArrow`` output with :data:`METRICS_COLUMN`) observed and without its
    trailer rows and metrics column. The filter stays above the observation: Spark does not
    push predicates below ``CollectMetrics``."""
    from pyspark.sql import functions as F

    tasks = F.collect_list(F.col(METRICS_COLUMN)).alias(OBSERVED_TASKS)
    if df.isStreaming:
        observed = df.observe(observation_name(metrics_id), tasks)
    else:
        from pyspark.sql import Observation

        observation = Observation(observation_name(metrics_id) + ":" + _next_suffix())
        observed = df.observe(observation, tasks)
        with _lock:
            _observations.setdefault(metrics_id, []).append((df.sparkSession, observation))
    result = observed.where(F.col(METRICS_COLUMN).isNull()).drop(METRICS_COLUMN)
    if not df.isStreaming:
        result._asyncio_lookup_observed = (  # type: ignore[attr-defined]
            metrics_id,
            observation._name,
        )
    return result


def observed_by(df: Any) -> tuple[str, str] | None:
    """(metrics id, observation name) of a DataFrame :func:`observe` returned."""
    return getattr(df, "_asyncio_lookup_observed", None)


def register_result(df: Any, observed: Iterable[tuple[str, str]]) -> None:
    """``df`` reads, through temporary views, DataFrames :func:`observe` returned (the SQL
    front end). An :class:`Observation` does not see through a view, but the actions of ``df``
    itself report the observations of its whole plan by name: count those."""
    with _lock:
        for metrics_id, name in observed:
            _results.setdefault(metrics_id, []).append((df.sparkSession, (df, name)))


_lock = threading.Lock()
# by metrics id: (the session, what it observed); entries of a stopped session are dropped
_observations: dict[str, list[tuple[Any, Any]]] = {}
_results: dict[str, list[tuple[Any, tuple[Any, str]]]] = {}


def _live(entries: dict[str, list[tuple[Any, Any]]], metrics_id: str) -> list[Any]:
    """The entries of ``metrics_id`` whose session is still running (call under ``_lock``)."""
    kept = [(s, item) for s, item in entries.get(metrics_id, ()) if not _stopped(s)]
    if kept:
        entries[metrics_id] = kept
    else:
        entries.pop(metrics_id, None)
    return [item for _, item in kept]


def _stopped(session: Any) -> bool:
    if type(session).__module__.startswith("pyspark.sql.connect"):
        return bool(getattr(session, "is_stopped", False))
    context = getattr(session, "_sc", None)
    return context is None or getattr(context, "_jsc", None) is None


_counter = iter(range(1 << 62))


def _next_suffix() -> str:
    with _lock:
        return str(next(_counter))


#: How long :func:`table_metrics` waits on a classic session for an observation that has no
#: metrics yet: the session completes it from its listener bus, just after the action returns.
LISTENER_GRACE_S = 0.25


def _observed(observation: Any, deadline: float) -> list[str] | None:
    """The trailers an :class:`Observation` got from a finished action, None before one."""
    jo = getattr(observation, "_jo", None)
    if jo is not None:  # classic: the first action's metrics; get blocks until there is one
        future = jo.future()
        while not future.isCompleted():
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.01)
        return list(observation.get.get(OBSERVED_TASKS) or [])
    result = getattr(observation, "_result", None)  # Connect: the latest action's metrics
    if not result or OBSERVED_TASKS not in result:
        return None
    return list(result[OBSERVED_TASKS] or [])


def _result_observed(df: Any, name: str) -> list[str] | None:
    """The trailers the latest action of ``df`` observed under ``name``, None before one."""
    if type(df).__module__.startswith("pyspark.sql.connect"):
        info = getattr(df, "_execution_info", None)
        for flow, pairs in info.flows if info is not None else ():
            if flow == name:
                return list(pairs.get(OBSERVED_TASKS) or [])
        return None
    found = df._jdf.queryExecution().observedMetrics().get(name)
    if found.isEmpty():
        return None
    return list(json.loads(found.get().json()).get(OBSERVED_TASKS) or [])


def table_metrics(metrics_id: str) -> dict[str, float]:
    """Metrics of every finished action on a DataFrame that ``metrics_id`` joined or mapped."""
    return fold(table_trailers(metrics_id))


def table_trailers(metrics_id: str) -> list[str]:
    """The trailers (one JSON object per task) behind :func:`table_metrics`."""
    with _lock:
        observations = _live(_observations, metrics_id)
    trailers: list[str] = []
    deadline = time.monotonic() + LISTENER_GRACE_S
    for observation in observations:
        trailers.extend(_observed(observation, deadline) or ())
    with _lock:
        results = _live(_results, metrics_id)
    for df, name in results:
        trailers.extend(_result_observed(df, name) or ())
    return trailers


def progress_metrics(progress: Any, metrics_id: str) -> dict[str, float]:
    """The metrics of one micro-batch: ``progress`` is ``query.lastProgress`` (a dict) or a
    listener event's ``progress`` (``StreamingQueryProgress``); {} when it has none."""
    if isinstance(progress, Mapping):
        observed = progress.get("observedMetrics") or {}
    else:
        observed = getattr(progress, "observedMetrics", None) or {}
    row = observed.get(observation_name(metrics_id))
    if row is None:
        return {}
    values = row if isinstance(row, Mapping) else row.asDict()
    if OBSERVED_TASKS not in values and "values" in values:  # Connect: {"values": [...], ...}
        return fold((values["values"] or [[]])[0] or [])
    return fold(values.get(OBSERVED_TASKS) or [])
