"""Metrics from executors to the driver without accumulators (the same on Spark Connect).

Each task puts *trailer rows* in its output: nulls in every column but the hidden
:data:`METRICS_COLUMN`, which holds metric deltas as JSON (data rows leave it null). A
trailer row goes before the 1st, 2nd, 4th, 8th... output batch (what the task did since its
previous trailer, :func:`reports_before`), and a final one at the task's end, so a task whose
output Spark stops reading early (``limit``, ``show``, ``take``) still reports most of what was
read. The DataFrame a join returns
observes that column (``DataFrame.observe``: ``collect_list`` of the trailers, gathered like
any Spark SQL metric, so a failed or retried task attempt does not count, only the one that
succeeds), then drops the trailer rows and the column. The driver folds the trailers into a
:class:`~asyncio_lookup.spark.job_metrics.JobMetrics` (format and sections:
:mod:`asyncio_lookup.spark.job_metrics`).

A batch DataFrame observes through an :class:`Observation` registered here under the table's
id; a streaming one through a named observation, :func:`observation_name`, that each
micro-batch's progress carries (``observedMetrics``), folded by :func:`progress_metrics`
(one micro-batch) and :func:`query_metrics` (the whole query).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from asyncio_lookup.spark.action_summary import watch
from asyncio_lookup.spark.job_metrics import GAUGES, NUM_MISSING_COLUMNS, Fold, JobMetrics, fold
from asyncio_lookup.spark.observations import (
    LISTENER_GRACE_S,
    OBSERVED_TASKS,
    HeldObservation,
    HeldResult,
    session_stopped,
    stop_scope,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["GAUGES", "NUM_MISSING_COLUMNS", "JobMetrics", "fold"]

logger = logging.getLogger(__name__)

#: The hidden column of the trailer rows (a reserved name: an input may not have it).
METRICS_COLUMN = "__asyncio_lookup_metrics"


def reports_before(number: int) -> bool:
    """Whether a task writes a trailer before its ``number``-th output batch (from 1): the 1st,
    2nd, 4th, 8th... So a reader that stops early has read the trailers of at least half the
    batches it read, and a long task writes about log2(batches) trailers, not one per batch
    (the driver gathers every trailer of a job)."""
    return number & (number - 1) == 0


def with_metrics_column(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A data batch with the (null) metrics column appended."""
    return batch.append_column(METRICS_COLUMN, pa.nulls(batch.num_rows, pa.string()))


def trailer(
    schema: pa.Schema,
    text: str,
    not_null: Iterable[int] = (),
    sample: pa.RecordBatch | None = None,
) -> pa.RecordBatch | None:
    """The one-row batch that carries a trailer, ``text`` (:func:`.job_metrics.encode`;
    ``schema`` has no metrics column).

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
    return pa.RecordBatch.from_arrays([*columns, pa.array([text], pa.string())], names=names)


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


def observation_name(metrics_id: str) -> str:
    """The name of the observation a streaming query's progress reports the metrics under."""
    return f"asyncio_lookup:{metrics_id}"


def observe(df: DataFrame, metrics_id: str, title: str | None = None) -> DataFrame:
    """``df`` (the ``mapInArrow`` output with :data:`METRICS_COLUMN`) observed and without its
    trailer rows and metrics column (``title``: the table's name, for the driver's summary
    after the first action, spark/action_summary.py). The filter stays above the observation:
    Spark does not push predicates below ``CollectMetrics``."""
    from pyspark.sql import functions as F

    tasks = F.collect_list(F.col(METRICS_COLUMN)).alias(OBSERVED_TASKS)
    if df.isStreaming:
        observed = df.observe(_streaming_name(metrics_id), tasks)
    else:
        from pyspark.sql import Observation

        observation = Observation(observation_name(metrics_id) + ":" + _next_suffix())
        observed = df.observe(observation, tasks)
        _settle_finished(metrics_id)
        with _lock:
            _observations.setdefault(metrics_id, []).append(
                (df.sparkSession, HeldObservation(observation))
            )
        watch(title or metrics_id, df.sparkSession, observation)  # the summary after its action
    result = observed.where(F.col(METRICS_COLUMN).isNull()).drop(METRICS_COLUMN)
    if not df.isStreaming:
        result._asyncio_lookup_observed = (  # type: ignore[attr-defined]
            metrics_id,
            observation._name,
        )
    return result


def observed_by(df: Any) -> tuple[str, str] | None:
    """(metrics id, observation name) of a DataFrame :func:`observe` returned (None for a
    streaming one: a Connect DataFrame answers any unknown attribute with a column)."""
    found = getattr(df, "__dict__", {}).get("_asyncio_lookup_observed")
    return found if isinstance(found, tuple) else None


def register_result(df: Any, observed: Iterable[tuple[str, str]]) -> None:
    """``df`` reads, through temporary views, DataFrames :func:`observe` returned (the SQL
    front end). An :class:`Observation` does not see through a view, but the actions of ``df``
    itself report the observations of its whole plan by name: count those."""
    observed = list(observed)
    for metrics_id in {metrics_id for metrics_id, _ in observed}:
        _settle_finished(metrics_id)
    with _lock:
        for metrics_id, name in observed:
            _results.setdefault(metrics_id, []).append((df.sparkSession, HeldResult(df, name)))
            # the join's own observation never reports behind a view (or, on Connect, as an
            # argument of spark.sql): the actions of df do, so it is not held
            held = _observations.get(metrics_id)
            if held:
                held[:] = [(s, o) for s, o in held if o.name != name]


class _Settled:
    """The final trailers of a session's observations (:meth:`HeldObservation.read`), folded,
    and how many observations reported them."""

    def __init__(self) -> None:
        self.fold = Fold()
        self.reported = 0


_lock = threading.Lock()
# by metrics id: (the session, what it observed); entries of a stopped session are dropped
_observations: dict[str, list[tuple[Any, HeldObservation]]] = {}
_results: dict[str, list[tuple[Any, HeldResult]]] = {}
# by metrics id: (a session, the settled observations of its stop_scope)
_settled: dict[str, list[tuple[Any, _Settled]]] = {}


def _live(entries: dict[str, list[tuple[Any, Any]]], metrics_id: str) -> list[tuple[Any, Any]]:
    """(session, item) of ``metrics_id`` whose session is still running (call under ``_lock``),
    a copy: settling removes from what is held while a caller goes through these."""
    kept = [(s, item) for s, item in entries.get(metrics_id, ()) if not session_stopped(s)]
    if kept:
        entries[metrics_id] = kept
    else:
        entries.pop(metrics_id, None)
    return list(kept)


def _settle(
    store: dict[str, list[tuple[Any, Any]]],
    metrics_id: str,
    session: Any,
    observation: HeldObservation | HeldResult,
    trailers: list[str] | None,
) -> None:
    """Fold the final trailers (None: it never reported) of an observation or a SQL result
    held in ``store`` into the :class:`_Settled` of its session's :func:`stop_scope` and let
    it go, so a session that joins again and again (``foreachBatch``, a loop) keeps one fold
    per table, not every observation it made."""
    with _lock:
        entries = store.get(metrics_id, [])
        for position, (_, held) in enumerate(entries):
            if held is observation:
                del entries[position]
                break
        else:
            return  # another call settled it
        if not entries:
            store.pop(metrics_id, None)
        sessions = _settled.setdefault(metrics_id, [])
        scope = stop_scope(session)
        settled = next((held for s, held in sessions if stop_scope(s) is scope), None)
        if settled is None:
            settled = _Settled()
            sessions.append((session, settled))
        if trailers:
            for text in trailers:
                settled.fold.add(text)
            settled.fold.seal()
            settled.reported += 1


#: Held observations (and SQL results) :func:`observe` and :func:`register_result` look at
#: per call, the oldest first; those not final yet go to the back, so DataFrames never acted
#: on (or a thousand joins unioned before one action) cost a few py4j calls per join, not one
#: per DataFrame built so far.
SETTLE_CHECKS = 4


def _settle_finished(metrics_id: str) -> None:
    """Settle the oldest observations and SQL results of ``metrics_id`` whose trailers are
    final (no wait; at most :data:`SETTLE_CHECKS` of each looked at)."""
    with _lock:
        checks = _tagged(
            _oldest_to_back(_observations, metrics_id), _oldest_to_back(_results, metrics_id)
        )
    for store, session, held in checks:
        try:
            trailers, final = held.poll()
        except Exception:  # its session stopped meanwhile...: never fail the join being built
            logger.debug("%r of %s not settled", held, metrics_id, exc_info=True)
            continue
        if final:
            _settle(store, metrics_id, session, held, trailers)


def _tagged(
    observations: list[tuple[Any, HeldObservation]], results: list[tuple[Any, HeldResult]]
) -> list[tuple[dict[str, list[tuple[Any, Any]]], Any, HeldObservation | HeldResult]]:
    """(the store it is held in, session, item) of each entry, observations first."""
    return [
        *((_observations, s, o) for s, o in observations),
        *((_results, s, r) for s, r in results),
    ]


def _oldest_to_back(store: dict[str, list[tuple[Any, Any]]], metrics_id: str) -> list[Any]:
    """The :data:`SETTLE_CHECKS` oldest entries of ``metrics_id``, moved to the back (call
    under ``_lock``; the order of what is held does not matter: the fold sums)."""
    oldest = _live(store, metrics_id)[:SETTLE_CHECKS]
    entries = store.get(metrics_id, [])
    del entries[: len(oldest)]
    entries.extend(oldest)
    return oldest


_counter = iter(range(1 << 62))


def _streaming_name(metrics_id: str) -> str:
    """The first streaming join of ``metrics_id`` in this process observes under
    :func:`observation_name`, later ones under ``<name>#<n>``: one query may join a table twice,
    and Spark refuses two observations of one name in a plan."""
    with _lock:
        seen = _streaming_seen.get(metrics_id, 0)
        _streaming_seen[metrics_id] = seen + 1
    name = observation_name(metrics_id)
    return name if seen == 0 else f"{name}#{seen}"


_streaming_seen: dict[str, int] = {}


def _next_suffix() -> str:
    with _lock:
        return str(next(_counter))


def table_metrics(metrics_id: str) -> JobMetrics:
    """Metrics of every finished action on a DataFrame that ``metrics_id`` joined or mapped;
    ``partial`` says so when no action has reported yet, or tasks stopped early."""
    folded = Fold()
    reported = 0
    with _lock:  # one snapshot: an observation is either settled or still held
        for _, settled in _live(_settled, metrics_id):
            folded.merge(settled.fold)
            reported += settled.reported
        held = _tagged(_live(_observations, metrics_id), _live(_results, metrics_id))
    deadline = time.monotonic() + LISTENER_GRACE_S
    for store, session, item in held:
        got, final = item.read(deadline)
        if got:  # every task reports; no trailer at all: the observed plan did not run
            reported += 1
            for text in got:
                folded.add(text)
        if final:
            _settle(store, metrics_id, session, item, got)
    partial = None
    if not reported:
        partial = (
            "no action on a DataFrame this table was joined into (or mapped by) has been "
            "observed yet, or those observed ran no task (an input without partitions: "
            "limit(0), an empty foreachBatch). Not observed: an action that runs a query of its "
            "own (count, show or take on a LookupSQL result, or on a classic session its "
            "write), on a classic session toLocalIterator, foreach, foreachPartition and .rdd "
            "jobs, on Spark Connect checkpoint and localCheckpoint"
        )
    metrics = folded.result(partial)
    if metrics.partial is not None and reported:
        logger.info("metrics of %s cover part of the job: %s", metrics_id, metrics.partial)
    return metrics


def _progress_trailers(progress: Any, metrics_id: str) -> list[str] | None:
    """The trailers a micro-batch's progress observed for ``metrics_id``, None without any."""
    if isinstance(progress, Mapping):
        observed = progress.get("observedMetrics") or {}
    else:
        observed = getattr(progress, "observedMetrics", None) or {}
    name = observation_name(metrics_id)
    rows = [  # name#n: a streaming join's; name:n: a batch join's (a stream-static join's
        # static side, run again in each micro-batch)
        row
        for key, row in observed.items()
        if key == name
        or (key[: len(name) + 1] in (name + "#", name + ":") and key[len(name) + 1 :].isdigit())
    ]
    if not rows:
        return None
    trailers: list[str] = []
    for row in rows:  # every join of the table in the query (_streaming_name)
        values = row if isinstance(row, Mapping) else row.asDict()
        if OBSERVED_TASKS not in values and "values" in values:  # Connect: {"values": [...]}
            trailers.extend((values["values"] or [[]])[0] or [])
        else:
            trailers.extend(values.get(OBSERVED_TASKS) or [])
    return trailers


def progress_metrics(progress: Any, metrics_id: str) -> JobMetrics:
    """The metrics of one micro-batch: ``progress`` is ``query.lastProgress`` (a dict) or a
    listener event's ``progress`` (``StreamingQueryProgress``); empty, with ``partial`` saying
    why, when it has none."""
    trailers = _progress_trailers(progress, metrics_id)
    if trailers is None:
        return JobMetrics(partial="this progress report has no metrics of this table")
    return fold(trailers)


#: Spark's default of ``spark.sql.streaming.numRecentProgressUpdates``.
RECENT_PROGRESS_DEFAULT = 100


class _QueryFold:
    """A streaming query's trailers folded so far, and which of the micro-batches that
    ``recentProgress`` may still hold they came from (its size does not grow with the query's
    age)."""

    def __init__(self) -> None:
        self.fold = Fold()
        self.batches: set[int] = set()
        self.missed = False  # progress reports fell out of recentProgress unread
        # the first micro-batch this process saw of a query restarted from its checkpoint
        self.resumed_at: int | None = None
        self.found = False  # a report had this table's metrics
        # every micro-batch below this id was read: one past the last read that ran, or the id
        # of an idle report (Spark gives it the next batch's id); None before the first call
        self.read_upto: int | None = None


_queries: dict[tuple[str, str], _QueryFold] = {}


def query_metrics(query: Any, metrics_id: str) -> JobMetrics:
    """Metrics of a streaming query from its start: every micro-batch in ``query.recentProgress``
    is folded once and remembered, so successive calls cover the whole query. Spark keeps the
    last ``spark.sql.streaming.numRecentProgressUpdates`` - 1 (99) reports only: when reports
    may have been dropped unread (the first call came late, or calls are further apart than
    that), ``partial`` says so; and so it does for a query restarted from its checkpoint,
    whose earlier runs' reports this process never saw."""
    progresses = list(query.recentProgress)
    key = (str(query.id), metrics_id)
    with _lock:
        state = _queries.setdefault(key, _QueryFold())
        keep = _recent_limit(query)
        ids = [_batch_id(p) for p in progresses]
        if ids:
            if state.read_upto is None:  # a full buffer may have lost the query's first ones
                gap = len(progresses) >= keep - 1 and ids[0] > 0
                if ids[0] > 0 and not gap:  # ran before this run: restarted from a checkpoint
                    state.resumed_at = ids[0]
            else:  # micro-batches ran between the last one read and the oldest kept report
                gap = ids[0] > state.read_upto
            state.missed = state.missed or gap
        for progress, batch_id in zip(progresses, ids, strict=True):
            trailers = _progress_trailers(progress, metrics_id)
            ran = trailers is not None or _progress_ran(progress)
            upto = batch_id + 1 if ran else batch_id
            if state.read_upto is None or upto > state.read_upto:
                state.read_upto = upto
            if batch_id in state.batches or trailers is None:
                continue  # read before; an idle report or not this table's query
            state.found = True
            state.batches.add(batch_id)
            for text in trailers:
                state.fold.add(text)
            state.fold.seal()  # a micro-batch's trailers come in one report
        if ids:  # a report older than those kept now can never be read again
            oldest = min(ids)
            state.batches = {batch_id for batch_id in state.batches if batch_id >= oldest}
        partial = None
        if state.missed:
            partial = (
                f"progress reports of the query fell out of recentProgress (it keeps {keep - 1}) "
                "before they were read: call query_metrics at least that often"
            )
        elif state.resumed_at is not None:
            partial = (
                f"the query was restarted from its checkpoint: micro-batches before "
                f"{state.resumed_at} ran in an earlier run, whose reports this process never "
                f"saw; the figures cover micro-batches {state.resumed_at} on"
            )
        elif not state.found:
            partial = "no progress report of the query has metrics of this table yet"
        return state.fold.result(partial)


def _progress_ran(progress: Any) -> bool:
    """Whether the report is of a micro-batch that ran (an idle one reads no input rows and
    carries the next batch's id)."""
    if isinstance(progress, Mapping):
        durations = progress.get("durationMs") or {}
        rows = progress.get("numInputRows")
    else:
        durations = getattr(progress, "durationMs", None) or {}
        rows = getattr(progress, "numInputRows", None)
    if "addBatch" in durations:
        return True
    return bool(rows)


def _batch_id(progress: Any) -> int:
    if isinstance(progress, Mapping):
        return int(progress["batchId"])
    return int(progress.batchId)


def _recent_limit(query: Any) -> int:
    """``spark.sql.streaming.numRecentProgressUpdates`` of the query's session (Connect:
    ``query._session``; classic: the JVM query's session), else Spark's default."""
    name = "spark.sql.streaming.numRecentProgressUpdates"
    try:
        session = getattr(query, "_session", None)
        if session is not None:
            value = session.conf.get(name, None)
        else:
            value = query._jsq.sparkSession().conf().get(name, str(RECENT_PROGRESS_DEFAULT))
    except Exception:  # a query object of another shape: Spark's default
        return RECENT_PROGRESS_DEFAULT
    return int(value) if value else RECENT_PROGRESS_DEFAULT
