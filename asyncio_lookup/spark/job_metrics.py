"""What ``metrics()`` returns: the fold of the trailers of a job's tasks into :class:`JobMetrics`.

A trailer is a JSON object (:func:`encode`)::

    {"format": 2, "task": "<id of the task attempt>", "final": true | false,
     "values": {name: int | float, ...},              # counters and gauges
     "latency": {"record": <sketch>, "call": <sketch>},  # LatencySketch.to_json()
     "<section>": <any JSON>, ...}

A task writes a trailer before its 1st, 2nd, 4th... output batch (the deltas since its
previous one) and a ``final`` one at its end. Every other key is a *section*: the driver
merges each section with the functions registered for it (:func:`register_section`), so a
new kind of report adds a section and a merger without touching the fold. ``values`` and
``latency`` are registered here.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from asyncio_lookup.lookup.advice import SECTION as CAUSES
from asyncio_lookup.lookup.advice import Advice, driver_summary, job_warnings, merge_sections
from asyncio_lookup.lookup.metrics import CacheMetricGroup, merge_metrics
from asyncio_lookup.runtime.metrics import OperatorMetrics, latency_names
from asyncio_lookup.runtime.sketch import LatencySketch

logger = logging.getLogger(__name__)

FORMAT = 2
#: Dim columns no row a task looked up contained (spark/missing.py); the maximum over tasks.
NUM_MISSING_COLUMNS = "numMissingColumns"
#: Names merged by max across trailers (every other value is a counter, summed).
GAUGES: frozenset[str] = CacheMetricGroup.GAUGES | OperatorMetrics.GAUGES | {NUM_MISSING_COLUMNS}
#: The latency kinds: every completed record (admission to result) and every external call.
LATENCY_KINDS: dict[str, str] = {"record": "latency", "call": "callLatency"}
_RESERVED = frozenset({"format", "task", "final"})


@dataclass(frozen=True)
class Section:
    """How the driver merges one section of the trailers: ``load`` turns a trailer's JSON
    value into the value ``merge`` combines (``merge(a, b)`` must be associative and
    commutative, may update ``a`` and returns the result)."""

    merge: Callable[[Any, Any], Any]
    load: Callable[[Any], Any]


_sections: dict[str, Section] = {}
_unknown_warned: set[str] = set()


def register_section(
    name: str, merge: Callable[[Any, Any], Any], load: Callable[[Any], Any] | None = None
) -> None:
    """Make the fold merge trailer section ``name`` with ``merge`` (``load`` converts each
    trailer's JSON value first; default: the value itself). The folded value is
    ``JobMetrics.sections[name]``. Registering a name again replaces its functions."""
    if not isinstance(name, str) or not name or name in _RESERVED:
        raise ValueError(
            f"section name {name!r}: a non-empty string other than {sorted(_RESERVED)}"
        )
    _sections[name] = Section(merge, load if load is not None else _identity)


def _identity(value: Any) -> Any:
    return value


def _merge_values(a: dict[str, int | float], b: Mapping[str, int | float]) -> dict[str, Any]:
    return merge_metrics(a, b, GAUGES)


def _load_latency(data: Mapping[str, Any]) -> dict[str, LatencySketch]:
    return {kind: LatencySketch.from_json(sketch) for kind, sketch in data.items()}


def _merge_latency(
    a: dict[str, LatencySketch], b: Mapping[str, LatencySketch]
) -> dict[str, LatencySketch]:
    for kind, sketch in b.items():
        if kind in a:
            a[kind].merge(sketch)
        else:
            a[kind] = sketch
    return a


register_section("values", _merge_values, dict)
register_section("latency", _merge_latency, _load_latency)
register_section(CAUSES, merge_sections)  # failures by cause and warnings (lookup/advice.py)


def encode(
    task: str,
    values: Mapping[str, int | float],
    latency: Mapping[str, LatencySketch | None],
    *,
    final: bool,
    sections: Mapping[str, Any] | None = None,
) -> str:
    """One trailer: ``values`` (counters as ints), the sketches (empty ones left out) and any
    other ``sections`` (JSON-ready values registered on the driver)."""
    data: dict[str, Any] = {
        "format": FORMAT,
        "task": task,
        "final": final,
        "values": {k: v if k in GAUGES else int(v) for k, v in values.items()},
        "latency": {k: s.to_json() for k, s in latency.items() if s is not None and s.count},
    }
    for name, value in (sections or {}).items():
        if name in data:
            raise ValueError(f"trailer section {name!r} is written by the task itself")
        data[name] = value
    return json.dumps(data, separators=(",", ":"))


class JobMetrics(dict[str, int | float]):
    """Metrics of a table (or ``async_map``) over a job: a ``dict`` of name -> int | float
    (counters are ints; see docs/reference.md "Metrics"), plus

    - ``latency``: the merged sketches, ``{"record": ..., "call": ...}``
      (:class:`~asyncio_lookup.runtime.sketch.LatencySketch`; empty when nothing was timed);
    - ``tasks``: how many task attempts reported (each successful attempt once; a task reading
      several partitions of the join, after ``coalesce``, counts each);
    - ``partial``: why the figures cover only part of the job, or None when they cover it all;
    - ``sections``: the other merged trailer sections, by name (:func:`register_section`);
    - ``title``: what it measured (the table's name), for :meth:`_repr_html_` and :meth:`plot`.
    """

    latency: dict[str, LatencySketch]
    tasks: int
    partial: str | None
    sections: dict[str, Any]
    title: str

    def __init__(
        self,
        values: Mapping[str, int | float] | None = None,
        *,
        latency: Mapping[str, LatencySketch] | None = None,
        tasks: int = 0,
        partial: str | None = None,
        sections: Mapping[str, Any] | None = None,
        title: str = "metrics",
    ) -> None:
        super().__init__(values or {})
        self.title = title
        self.latency = {kind: LatencySketch() for kind in LATENCY_KINDS}
        self.latency.update(latency or {})
        self.tasks = tasks
        self.partial = partial
        self.sections = dict(sections or {})

    @property
    def warnings(self) -> list[str]:
        """The job's warnings (each rule and cause once, with the job's figures: its lookups,
        hits, retries of the cause; the tasks that logged it of all), [] when none."""
        return [w.text() for w in self.advice()]

    def advice(self) -> list[Advice]:
        """The job's warnings as :class:`Advice`, with the job's figures."""
        return job_warnings(self.sections.get(CAUSES) or {}, self, self.tasks)

    @property
    def causes(self) -> dict[str, dict[str, Any]]:
        """Failures, retries and timeouts by cause (``HTTP 503``, ``ConnectionRefusedError``...),
        each with its first message (secrets masked); {} when nothing failed."""
        return dict((self.sections.get(CAUSES) or {}).get("causes", {}))

    def summary(self) -> str:
        """The warnings and causes as the driver logs them after an action; '' when none."""
        found = self.sections.get(CAUSES)
        if not found:
            return ""
        return driver_summary({self.title: found}, {self.title: self}, {self.title: self.tasks})

    def titled(self, title: str) -> JobMetrics:
        """These metrics, named ``title`` (the table's name) in summaries and views."""
        self.title = title
        return self

    def notes(self) -> list[str]:
        """What a reader must know before trusting the figures: ``partial``, then the warnings."""
        return ([self.partial] if self.partial else []) + self.warnings

    def _repr_html_(self) -> str:
        """A notebook's view: key figures, latency quantiles and histograms, the notes."""
        from asyncio_lookup.lookup.metrics_view import metrics_html

        return metrics_html(self, self.latency, title=self.title, notes=self.notes())

    def plot(self, ax: Any = None) -> Any:
        """A matplotlib ``Figure`` of the latency histograms with p50/p99 marked and the
        counters (extra ``[plot]``); on ``ax`` when given."""
        from asyncio_lookup.lookup.metrics_plot import plot_metrics

        return plot_metrics(self, self.latency, title=self.title, ax=ax)

    def __repr__(self) -> str:
        note = "" if self.partial is None else f", partial={self.partial!r}"
        return f"JobMetrics({dict.__repr__(self)}, tasks={self.tasks}{note})"


class Fold:
    """Trailers merged so far (:meth:`add`), read as :class:`JobMetrics` (:meth:`result`)."""

    def __init__(self) -> None:
        self._merged: dict[str, Any] = {}
        self._started: set[str] = set()
        self._finished: set[str] = set()
        self._sealed_tasks = 0  # tasks counted by seal(), their ids forgotten
        self._sealed_unfinished = 0  # of those, tasks without their final trailer

    def add(self, text: str | None) -> None:
        """Merge one trailer (a null trailer is no trailer)."""
        if not text:
            return
        data = json.loads(text)
        if data.get("format") != FORMAT:
            raise ValueError(
                f"a metrics trailer of format {data.get('format')!r}; this version reads format "
                f"{FORMAT} (driver and executors run different asyncio-lookup versions?)"
            )
        task = str(data["task"])
        self._started.add(task)
        if data.get("final"):
            self._finished.add(task)
        merged = self._merged
        for name, value in data.items():
            if name in _RESERVED:
                continue
            section = _sections.get(name)
            if section is None:
                if name not in _unknown_warned:
                    _unknown_warned.add(name)
                    logger.warning("metrics: no merger for trailer section %r; left out", name)
                continue
            loaded = section.load(value)
            merged[name] = loaded if name not in merged else section.merge(merged[name], loaded)

    def seal(self) -> None:
        """Keep the number of tasks added so far, forget their ids: for trailers that are all
        in (a finished action's), so a fold that takes in one action after another keeps
        the size of its merged sections, not of its tasks. A trailer of a sealed task added
        later would count its task again."""
        self._sealed_tasks += len(self._started)
        self._sealed_unfinished += len(self._started - self._finished)
        self._started.clear()
        self._finished.clear()

    def merge(self, other: Fold) -> None:
        """Add what ``other`` folded (``other`` is left as it was); its tasks are not this
        fold's."""
        merged = self._merged
        for name, value in other._merged.items():
            value = copy.deepcopy(value)
            merged[name] = (
                value if name not in merged else _sections[name].merge(merged[name], value)
            )
        self._started |= other._started
        self._finished |= other._finished
        self._sealed_tasks += other._sealed_tasks
        self._sealed_unfinished += other._sealed_unfinished

    def result(self, partial: str | None = None) -> JobMetrics:
        """The metrics of the trailers added. ``partial``: what the caller knows is missing;
        tasks that reported batches but no final trailer (their output was not read to its
        end) add to it."""
        sections = {name: copy.deepcopy(value) for name, value in self._merged.items()}
        values: dict[str, int | float] = sections.pop("values", {})
        latency: dict[str, LatencySketch] = sections.pop("latency", {})
        tasks = len(self._started) + self._sealed_tasks
        result = JobMetrics(latency=latency, tasks=tasks, sections=sections)
        result.update({k: round(v, 3) if isinstance(v, float) else v for k, v in values.items()})
        # the latency names of each kind the job had: records when the async operator ran,
        # calls when a call was made (counts 0 and no quantiles when none was timed)
        ran = {"record": "numCompleted" in values, "call": "numExternalCalls" in values}
        for kind, prefix in LATENCY_KINDS.items():
            if ran[kind] or kind in latency:
                result.update(latency_names(prefix, result.latency[kind]))
        notes = [partial] if partial else []
        unfinished = len(self._started - self._finished) + self._sealed_unfinished
        if unfinished:
            notes.append(
                f"{unfinished} of {tasks} tasks stopped before the end of their "
                "partition (limit, show, take...): their figures cover what they had done by "
                "the last trailer Spark read, at least half the batches it read"
            )
        result.partial = "; ".join(notes) or None
        return result


def fold(trailers: Iterable[str | None], *, partial: str | None = None) -> JobMetrics:
    """Merge trailers into one :class:`JobMetrics` (see :meth:`Fold.result` for ``partial``)."""
    folded = Fold()
    for text in trailers:
        folded.add(text)
    return folded.result(partial)
