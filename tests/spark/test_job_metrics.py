"""The fold of trailers into JobMetrics, without Spark: sections, kinds, partial jobs."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncio_lookup.runtime.sketch import LatencySketch
from asyncio_lookup.spark import job_metrics
from asyncio_lookup.spark import metrics as spark_metrics
from asyncio_lookup.spark.job_metrics import JobMetrics, encode, fold, register_section
from asyncio_lookup.spark.metrics import observation_name, query_metrics


def _sketch(*values: float) -> LatencySketch:
    sketch = LatencySketch()
    for value in values:
        sketch.add(value)
    return sketch


@pytest.fixture
def causes_section() -> Iterator[None]:
    """A section registered as another module would (counts by cause, summed)."""

    def merge(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
        for cause, n in b.items():
            a[cause] = a.get(cause, 0) + n
        return a

    register_section("retries_by_cause", merge, dict)
    yield
    job_metrics._sections.pop("retries_by_cause")


def test_counters_sum_as_ints_gauges_take_the_max_and_sketches_merge() -> None:
    a = encode(
        "t1",
        {"numLookups": 3, "numCachedRecords": 5, "latestLoadTime": 1.25},
        {"record": _sketch(1.0, 2.0), "call": _sketch(10.0)},
        final=True,
    )
    b = encode(
        "t2",
        {"numLookups": 4.0, "numCachedRecords": 2, "latestLoadTime": 7.5, "numExternalCalls": 1},
        {"record": _sketch(100.0), "call": None},
        final=True,
    )
    metrics = fold([a, None, b])
    assert metrics["numLookups"] == 7 and type(metrics["numLookups"]) is int
    assert metrics["numCachedRecords"] == 5 and metrics["latestLoadTime"] == 7.5
    assert metrics.latency["record"].count == 3 and metrics.latency["call"].count == 1
    assert metrics["latencyCount"] == 3 and metrics["latencyMaxMs"] == 100.0
    assert metrics["latencyP50Ms"] == pytest.approx(2.0, rel=0.01)
    assert metrics["callLatencyCount"] == 1 and metrics["callLatencyP99Ms"] == 10.0
    assert metrics.tasks == 2 and metrics.partial is None


def test_latencies_are_rounded_to_the_microsecond() -> None:
    text = encode("t", {"numCompleted": 1}, {"record": _sketch(17.000000000280124)}, final=True)
    metrics = fold([text])
    assert metrics["latencyMaxMs"] == 17.0 and metrics["latencySumMs"] == 17.0


def test_a_task_without_its_final_trailer_makes_the_figures_partial() -> None:
    first = encode("t1", {"numLookups": 2}, {}, final=False)
    done = [encode("t2", {"numLookups": 1}, {}, final=False), encode("t2", {}, {}, final=True)]
    metrics = fold([first, *done])
    assert metrics["numLookups"] == 3 and metrics.tasks == 2
    assert metrics.partial is not None and metrics.partial.startswith("1 of 2 tasks stopped")


def test_a_registered_section_is_merged_and_an_unknown_one_left_out(
    causes_section: None, caplog: pytest.LogCaptureFixture
) -> None:
    trailers = [
        encode("t1", {}, {}, final=True, sections={"retries_by_cause": {"TimeoutError": 2}}),
        encode(
            "t2", {}, {}, final=True, sections={"retries_by_cause": {"TimeoutError": 1, "429": 4}}
        ),
        encode("t3", {}, {}, final=True, sections={"future": [1]}),
    ]
    with caplog.at_level(logging.WARNING):
        metrics = fold(trailers)
    assert metrics.sections == {"retries_by_cause": {"TimeoutError": 3, "429": 4}}
    assert "no merger for trailer section 'future'" in caplog.text


def test_a_section_may_not_reuse_the_task_s_own_keys() -> None:
    with pytest.raises(ValueError, match="'final'"):
        register_section("final", lambda a, b: a)
    with pytest.raises(ValueError, match="written by the task itself"):
        encode("t", {}, {}, final=True, sections={"values": {}})


def test_a_trailer_of_another_format_names_both_formats() -> None:
    old: dict[str, Any] = {"numLookups": 3}  # the flat trailer of versions before format 2
    with pytest.raises(ValueError, match="format None; this version reads format 2"):
        fold([json.dumps(old)])


def test_job_metrics_is_a_dict_with_attributes() -> None:
    metrics = JobMetrics({"numLookups": 1}, tasks=1, partial="why")
    assert metrics == {"numLookups": 1} and isinstance(metrics, dict)
    assert set(metrics.latency) == {"record", "call"} and metrics.latency["call"].count == 0
    assert "partial='why'" in repr(metrics)


class _Conf:
    def get(self, name: str, default: Any = None) -> str:
        assert name == "spark.sql.streaming.numRecentProgressUpdates"
        return "4"


class _Session:
    conf = _Conf()


class FakeQuery:
    """What query_metrics reads of a streaming query: ``id``, ``recentProgress`` (with the
    conf's 4, Spark keeps the last 3: it drops the oldest while it holds 4) and the conf."""

    def __init__(self) -> None:
        self.id = uuid.uuid4().hex
        self._session = _Session()
        self.progress: list[dict[str, Any]] = []

    @property
    def recentProgress(self) -> list[dict[str, Any]]:
        return self.progress[-3:]

    def run_batch(self, batch_id: int, lookups: int) -> None:
        trailer = encode(f"task-{batch_id}", {"numLookups": lookups}, {}, final=True)
        observed = {observation_name("T"): {"tasks": [trailer]}}
        self.progress.append({"batchId": batch_id, "observedMetrics": observed})

    def idle(self, times: int) -> None:
        """Reports of triggers that found no data: the next batch's id, no metrics."""
        next_id = self.progress[-1]["batchId"] + 1 if self.progress else 0
        for _ in range(times):
            self.progress.append({"batchId": next_id, "observedMetrics": {}, "numInputRows": 0})


def test_query_metrics_fold_each_micro_batch_once_across_calls() -> None:
    query = FakeQuery()
    query.run_batch(0, 1)
    query.run_batch(1, 2)
    assert query_metrics(query, "T")["numLookups"] == 3
    query.run_batch(2, 4)
    query.run_batch(3, 8)  # batch 0 falls out of recentProgress, but was read before
    metrics = query_metrics(query, "T")
    assert metrics["numLookups"] == 15 and metrics.tasks == 4 and metrics.partial is None
    for batch_id in range(4, 50):  # a long-running query, read after each micro-batch
        query.run_batch(batch_id, 1)
        query_metrics(query, "T")
    metrics = query_metrics(query, "T")
    assert metrics["numLookups"] == 15 + 46 and metrics.tasks == 50 and metrics.partial is None
    state = spark_metrics._queries[(str(query.id), "T")]
    assert state.batches == {47, 48, 49}  # what recentProgress holds, not every batch seen
    assert not state.fold._started  # the tasks counted, their ids not kept


def test_query_metrics_say_when_progress_reports_fell_out_unread() -> None:
    query = FakeQuery()
    for batch_id in range(5):
        query.run_batch(batch_id, 1)
    metrics = query_metrics(query, "T")
    assert metrics["numLookups"] == 3  # batches 2, 3, 4: what recentProgress still holds
    assert metrics.partial is not None and "fell out of recentProgress (it keeps 3)" in (
        metrics.partial
    )


def test_query_metrics_tell_idle_reports_from_missed_ones() -> None:
    query = FakeQuery()
    for batch_id in range(3):
        query.run_batch(batch_id, 1)
        query_metrics(query, "T")
    query.idle(10)  # the query idles: recentProgress fills with reports of no micro-batch
    assert query_metrics(query, "T").partial is None
    query.run_batch(3, 1)
    metrics = query_metrics(query, "T")
    assert metrics["numLookups"] == 4 and metrics.partial is None
    for batch_id in range(4, 9):  # read again only after five micro-batches: two fell out
        query.run_batch(batch_id, 1)
    metrics = query_metrics(query, "T")
    assert metrics["numLookups"] == 7 and metrics.partial is not None


def test_query_metrics_of_a_late_first_call_say_only_what_may_be_missed() -> None:
    query = FakeQuery()
    query.run_batch(0, 1)
    query.run_batch(1, 1)
    query.run_batch(2, 1)  # recentProgress full, but it starts at the query's first batch
    assert query_metrics(query, "T").partial is None


def test_query_metrics_of_a_query_restarted_from_its_checkpoint_say_so() -> None:
    """A restarted query's batch ids go on from its checkpoint, and this run's recentProgress
    starts there: the figures covered this run alone, with partial None."""
    query = FakeQuery()
    query.run_batch(7, 2)  # batches 0-6 ran before the restart
    metrics = query_metrics(query, "T")
    assert metrics["numLookups"] == 2
    assert metrics.partial is not None and "restarted from its checkpoint" in metrics.partial
    assert "micro-batches 7 on" in metrics.partial


def test_causes_warnings_summary_and_views_of_a_job() -> None:
    from asyncio_lookup.lookup.advice import RETRY_STORM, SECTION, Advice, Facts, section

    facts = Facts(table="Customers", target="HTTP http://127.0.0.1:1/c/{id}", capacity=100)
    storm = Advice(RETRY_STORM, "HTTP 503", {"retries": 40, "retried": 40, "lookups": 100}, facts)
    causes = {
        "HTTP 503": {
            "failures": 0,
            "retries": 40,
            "retried": 40,
            "timeouts": 0,
            "message": "HTTP 503 from http://127.0.0.1:1/c/7",
        }
    }
    trailers = [
        encode(
            f"t{i}",
            {"numLookups": 100, "numCompleted": 100},
            {"record": _sketch(5.0, 500.0)},
            final=True,
            sections={SECTION: section(causes, [storm])},
        )
        for i in range(2)
    ]
    metrics = fold(trailers).titled("Customers <b>")
    assert metrics.causes["HTTP 503"]["retries"] == 80
    (warning,) = metrics.warnings
    assert "80 of 200 lookups were retried" in warning and "[in 2 tasks]" in warning
    assert metrics.summary().startswith("asyncio_lookup: what the job's tasks reported")
    assert "'Customers <b>'" in metrics.summary()
    html = metrics._repr_html_()
    assert "Customers &lt;b&gt;" in html and "Customers <b>" not in html
    assert "80 of 200 lookups were retried" in html
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    figure = metrics.plot()
    assert figure.axes and figure.axes[0].patches  # the record latency histogram's bars


_task_trailers = st.lists(
    st.tuples(
        st.integers(0, 50),  # numLookups (a counter)
        st.integers(0, 9),  # numCachedRecords (a gauge)
        st.lists(st.integers(1, 500), max_size=3),  # record latencies, ms
    ),
    min_size=1,
    max_size=3,
)
#: actions, each a list of tasks: (its trailers, whether its final one came)
_actions = st.lists(st.lists(st.tuples(_task_trailers, st.booleans()), max_size=3), max_size=5)


def _encoded(actions: list[list[tuple[list[tuple[int, int, list[int]]], bool]]]) -> list[list[str]]:
    encoded = []
    for action in actions:
        texts = []
        for trailers, finished in action:
            task = uuid.uuid4().hex[:16]
            for number, (lookups, cached, latencies) in enumerate(trailers, start=1):
                values = {"numLookups": lookups, "numCachedRecords": cached}
                final = finished and number == len(trailers)
                texts.append(encode(task, values, {"record": _sketch(*latencies)}, final=final))
        encoded.append(texts)
    return encoded


@settings(max_examples=150, deadline=None)
@given(actions=_actions, split=st.integers(0, 5), sessions=st.integers(1, 3), seal=st.booleans())
def test_settled_folds_give_what_one_fold_of_every_trailer_gives(
    actions: list[list[tuple[list[tuple[int, int, list[int]]], bool]]],
    split: int,
    sessions: int,
    seal: bool,
) -> None:
    """What spark/metrics.py does with final observations: the first ``split`` actions are
    folded (and sealed) one by one into per-session folds, which are merged into the fold the
    rest is added to; the result is that of folding every trailer at once."""
    encoded = _encoded(actions)
    settled = [job_metrics.Fold() for _ in range(sessions)]
    for number, texts in enumerate(encoded[:split]):
        for text in texts:
            settled[number % sessions].add(text)
        if seal:
            settled[number % sessions].seal()
    folded = job_metrics.Fold()
    for fold_ in settled:
        folded.merge(fold_)
    for texts in encoded[split:]:
        for text in texts:
            folded.add(text)
    got = folded.result("p")
    want = fold([text for texts in encoded for text in texts], partial="p")
    assert dict(got) == dict(want)
    assert (got.tasks, got.partial) == (want.tasks, want.partial)
    assert got.latency["record"].to_json() == want.latency["record"].to_json()
    again = job_metrics.Fold()  # merge left the settled folds as they were
    for fold_ in settled:
        again.merge(fold_)
    settled_only = fold([text for texts in encoded[:split] for text in texts])
    assert dict(again.result()) == dict(settled_only)
    assert again.result().latency["record"].to_json() == settled_only.latency["record"].to_json()
