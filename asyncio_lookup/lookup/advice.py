"""Warnings that say what to do, from one task's counters and causes (docs/reference.md
"Troubleshooting"), and the driver's summary of a job's.

A task ends with :func:`task_advice`: one :class:`Advice` per rule and cause that fired, each
logged once at WARN on the executor (:func:`log_advice`). Its counts go into the task's
``causes`` section (:func:`section`); the driver merges sections (:func:`merge_sections`) and
:func:`driver_summary` renders the job's totals with the same texts.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from asyncio_lookup.lookup.metrics import (
    EVICTION_COUNT,
    HIT_COUNT,
    MISS_COUNT,
    NUM_LOOKUPS,
    NUM_THROTTLED,
    THROTTLED_TIME_MS,
)
from asyncio_lookup.lookup.option_names import (
    MAX_RETRIES,
    MAX_ROWS,
    RATE_LIMIT,
    RATE_LIMIT_ADAPTIVE,
)
from asyncio_lookup.runtime import causes as causes_
from asyncio_lookup.runtime.causes import RETRIED, RETRIES, TIMEOUTS

log = logging.getLogger(__name__)

RETRY_STORM_MIN_RETRIES = 10  # fewer retries are the noise of a healthy service
RETRY_STORM_SHARE = 0.01  # one lookup in 100 retried: its backoff is latency the job feels
THROTTLED_SHARE = 0.2  # a fifth of the task held back by the limit: the limit sets the pace
LOW_HIT_RATIO = 0.5  # under half the lookups answered by the cache...
EVICTION_SHARE = 0.1  # ...while one miss in ten made it evict: the cache churns
EVICTIONS_MIN = 10  # a handful of evictions is a full cache doing its job
NO_ROWS_MIN_LOOKUPS = 100  # a task with fewer lookups may miss on every key by chance

RETRY_STORM = "retry-storm"
TIMEOUT = "timeouts"
THROTTLED = "rate-limited"
CACHE_CHURN = "cache-churn"
MISSING_COLUMNS = "missing-columns"
NO_ROWS = "no-rows"

#: Causes that say the service took fewer connections than were opened (a full listen
#: backlog: refused or reset connects, or connects that hang until the client's timeout).
CONNECTION_CAUSES = frozenset(
    {
        "ConnectionRefusedError",
        "ConnectionResetError",
        "ConnectionAbortedError",
        "BrokenPipeError",
        "ServerDisconnectedError",
        "RemoteProtocolError",
        "IncompleteReadError",
    }
)
THROTTLING_CAUSES = frozenset({"HTTP 429", "HTTP 503"})


@dataclass(frozen=True)
class Facts:
    """What a warning names about its table: where it runs and the options it may change.

    ``lookup`` is False for ``async_map`` (its options are arguments, not LOOKUP options)."""

    table: str
    target: str = ""
    capacity: int | None = None
    timeout: float | None = None
    max_retries: int | None = None
    max_rows: int | None = None
    rate: float | None = None
    adaptive: bool | None = None  # lookup.rate-limit.adaptive is on
    shuffled: bool | None = None  # the join is hash-partitioned by key (SHUFFLE_HASH)
    filtered: bool | None = None  # the join has a dim_filter or a condition on the dim rows
    lookup: bool = True

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Facts:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    @property
    def where(self) -> str:
        noun = "lookup table" if self.lookup else "async_map"
        return f"{noun} {self.table!r}" + (f" ({self.target})" if self.target else "")


@dataclass(frozen=True)
class Advice:
    """One warning: a rule (``code``) about one ``cause`` ('' when none), with the counts its
    text is made of. Counts of several tasks add up; ``tasks`` says how many fired it."""

    code: str
    cause: str
    counts: Mapping[str, float]
    facts: Facts
    message: str = ""  # the cause's first message, or the warning's own text (missing columns)
    tasks: int = 1

    @property
    def key(self) -> str:
        return f"{self.code}:{self.cause}" if self.cause else self.code

    #: the tasks of the job (its tasks ran the table): set by :meth:`of_job`
    job_tasks: int = 0

    def text(self) -> str:
        """The warning: what happened, with this advice's numbers, and what to change."""
        render = _RENDER[self.code]
        text = render(self, self.counts, self.facts)
        if self.tasks < self.job_tasks:
            text += f" [warned in {self.tasks:,} of {self.job_tasks:,} tasks]"
        elif self.tasks > 1:
            text += f" [in {self.tasks:,} tasks]"
        return text

    def of_job(
        self, totals: Mapping[str, float], causes: Mapping[str, Mapping[str, Any]], tasks: int
    ) -> Advice:
        """This warning (merged over the tasks that logged it) with the job's own figures
        where the job has them (``totals``: its merged metrics; ``causes``: its merged
        causes; ``tasks``: how many tasks reported): a rule's denominators are then the
        job's, as the figures beside it. The rate limit's waits stay the warned tasks'."""
        counts = dict(self.counts)
        if "lookups" in counts:
            counts["lookups"] = max(_lookups(totals), int(counts["lookups"]))
        if self.code == RETRY_STORM and self.cause in causes:
            entry = causes[self.cause]
            counts["retried"] = int(entry.get(RETRIED, counts["retried"]))
            counts["retries"] = int(entry.get(RETRIES, counts["retries"]))
        elif self.code == TIMEOUT:
            counts["timeouts"] = max(int(causes_.total(causes, TIMEOUTS)), counts["timeouts"])
        elif self.code == CACHE_CHURN:
            job = {name: int(totals.get(metric, 0)) for name, metric in _CACHE_FIGURES}
            if job["hits"] + job["misses"] >= counts["hits"] + counts["misses"]:
                counts.update(job)  # else figures of tasks the totals lack: the warned ones'
        return replace(self, counts=counts, job_tasks=max(tasks, self.tasks))

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "cause": self.cause,
            "counts": dict(self.counts),
            "facts": self.facts.to_json(),
            "message": self.message,
            "tasks": self.tasks,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Advice:
        return cls(
            code=str(data["code"]),
            cause=str(data.get("cause", "")),
            counts=dict(data.get("counts", {})),
            facts=Facts.from_json(data.get("facts", {})),
            message=str(data.get("message", "")),
            tasks=int(data.get("tasks", 1)),
        )


# -- the rules -----------------------------------------------------------------------------


def task_advice(
    metrics: Mapping[str, float],
    causes: Mapping[str, Mapping[str, Any]],
    facts: Facts,
    task_seconds: float,
) -> list[Advice]:
    """The warnings one task's ``metrics`` (flat, :mod:`asyncio_lookup.lookup.metrics` and
    operator names) and ``causes`` (:meth:`Causes.to_json`) call for; ``task_seconds`` is the
    task's wall time."""
    lookups = _lookups(metrics)
    found: list[Advice] = []
    for cause, entry in sorted(causes.items()):
        retries, retried = int(entry.get(RETRIES, 0)), int(entry.get(RETRIED, 0))
        if retries >= RETRY_STORM_MIN_RETRIES and retried >= RETRY_STORM_SHARE * max(lookups, 1):
            counts = {"retried": retried, "retries": retries, "lookups": lookups}
            found.append(Advice(RETRY_STORM, cause, counts, facts, str(entry.get("message", ""))))
    timeouts = int(causes_.total(causes, TIMEOUTS))
    if timeouts:
        found.append(Advice(TIMEOUT, "", {"timeouts": timeouts, "lookups": lookups}, facts))
    waited_ms = float(metrics.get(THROTTLED_TIME_MS, 0))
    if task_seconds > 0 and waited_ms >= THROTTLED_SHARE * task_seconds * 1000.0:
        waited = {
            "waitedMs": waited_ms,
            "taskMs": task_seconds * 1000.0,
            "throttledCalls": float(metrics.get(NUM_THROTTLED, 0)),
        }
        found.append(Advice(THROTTLED, "", waited, facts))
    hits, misses = int(metrics.get(HIT_COUNT, 0)), int(metrics.get(MISS_COUNT, 0))
    evictions = int(metrics.get(EVICTION_COUNT, 0))
    if (
        hits + misses
        and hits < LOW_HIT_RATIO * (hits + misses)
        and evictions >= max(EVICTIONS_MIN, EVICTION_SHARE * misses)
    ):
        counts = {"hits": hits, "misses": misses, "evictions": evictions}
        found.append(Advice(CACHE_CHURN, "", counts, facts))
    return found


_CACHE_FIGURES = (("hits", HIT_COUNT), ("misses", MISS_COUNT), ("evictions", EVICTION_COUNT))


def missing_columns_advice(facts: Facts, columns: int, text: str) -> Advice:
    """The missing-columns warning (:mod:`asyncio_lookup.spark.missing` logs it) for the
    summary: ``text`` is its message, ``columns`` how many are missing."""
    return Advice(MISSING_COLUMNS, "", {"columns": columns}, facts, text)


def no_rows_advice(facts: Facts, metrics: Mapping[str, float], first_key: Any) -> Advice | None:
    """The no-rows warning for a lookup-join task in which no lookup found a row (the caller
    knows that): when it made at least :data:`NO_ROWS_MIN_LOOKUPS` lookups and no row failed
    (``numFailedRows``). A wrong key column, type or key text misses on every key, silently:
    an inner join outputs nothing, a left join NULLs."""
    lookups = _lookups(metrics)
    if lookups < NO_ROWS_MIN_LOOKUPS or metrics.get("numFailedRows", 0):
        return None
    return Advice(NO_ROWS, "", {"missed": lookups}, facts, f"first key looked up: {first_key!r}")


def _lookups(metrics: Mapping[str, float]) -> int:
    """Lookups asked of the chain, or, for ``async_map``, records that got an outcome."""
    if NUM_LOOKUPS in metrics:
        return int(metrics[NUM_LOOKUPS])
    return int(metrics.get("numCompleted", 0) + metrics.get("numErrors", 0))


# -- the texts -----------------------------------------------------------------------------


def _capacity(facts: Facts) -> str:
    return f"'capacity' {facts.capacity}" if facts.capacity is not None else "'capacity'"


def _connections(facts: Facts) -> str:
    """How many connections a job opens at once: a sync join (no capacity) one per task."""
    if facts.capacity is None:
        return "the tasks running at once (one each: 'async'='false')"
    return f"{_capacity(facts)} per task times the tasks running at once"


def _or_lower_capacity(facts: Facts) -> str:
    """ ", or lower 'capacity'" where a capacity applies (not a sync join: one call at a time)."""
    return ", or lower 'capacity'" if facts.capacity is not None else ""


def _retry_storm(advice: Advice, counts: Mapping[str, float], facts: Facts) -> str:
    cause = advice.cause
    head = (
        f"{facts.where}: {int(counts['retried']):,} of {int(counts['lookups']):,} "
        f"{'lookups' if facts.lookup else 'records'} were retried "
        f"({int(counts['retries']):,} retries) after {cause}"
    )
    lower = "lower 'capacity', " if facts.capacity is not None else ""
    if cause in CONNECTION_CAUSES:
        what = (
            f"the service may accept fewer connections than {_connections(facts)}; "
            + ("lower 'capacity' or " if facts.capacity is not None else "")
            + "raise its accept backlog (listen queue)"
        )
    elif cause == "TimeoutError":
        what = (
            "the service did not answer within the connector's 'timeout': it may accept fewer "
            f"connections than {_connections(facts)} (a full accept backlog holds connects for "
            f"seconds); {lower}raise its accept backlog, or raise the connector's 'timeout'"
        )
    elif cause in THROTTLING_CAUSES:
        limit, adaptive = (
            (RATE_LIMIT, f"{RATE_LIMIT_ADAPTIVE}=true")
            if facts.lookup
            else ("rate_limit", "rate_limit=RateLimit(..., adaptive=True)")
        )
        if facts.rate is not None:
            what = (
                f"the service is throttling at {'this' if advice.tasks == 1 else 'a'} task's "
                f"share of {limit} "
                f"({facts.rate:g}/s); lower {limit}"
                + ("" if facts.adaptive else f" or set {adaptive}")
            )
        else:
            what = (
                f"the service is throttling; set {limit} to the rate it allows "
                f"(and {adaptive} to follow it)" + _or_lower_capacity(facts)
            )
    elif cause.startswith("HTTP 5"):
        what = "the service fails under this load; check the service" + (
            f", or lower {_capacity(facts)}" if facts.capacity is not None else ""
        )
    else:
        limit = (
            f"{MAX_RETRIES}={facts.max_retries}"
            if facts.lookup and facts.max_retries is not None
            else "'retry_strategy'"
        )
        what = f"each retry adds backoff ({limit}); fix the cause or lower the retries"
    first = f" First error: {advice.message}" if advice.message else ""
    return f"{head} — {what}.{first}"


def _timeouts(advice: Advice, counts: Mapping[str, float], facts: Facts) -> str:
    limit = f" = {facts.timeout:g} s" if facts.timeout is not None else ""
    noun = "lookups" if facts.lookup else "records"
    return (
        f"{facts.where}: {int(counts['timeouts']):,} of {int(counts['lookups']):,} {noun} timed "
        f"out ('timeout'{limit}, retries included) — raise 'timeout', or lower "
        f"{_capacity(facts)} if the service is saturated."
    )


def _throttled(advice: Advice, counts: Mapping[str, float], facts: Facts) -> str:
    waited, total = counts["waitedMs"] / 1000.0, counts["taskMs"] / 1000.0
    whose = "this task's" if advice.tasks == 1 else "a task's"
    share = f" ({whose} share: {facts.rate:g}/s)" if facts.rate is not None else ""
    tasks = "task's" if advice.tasks == 1 else f"{advice.tasks:,} tasks'"
    limit = RATE_LIMIT if facts.lookup else "rate_limit"
    head = (
        f"{facts.where}: calls waited for {limit} tokens during {waited:,.1f} s of the "
        f"{tasks} {total:,.1f} s ({waited / total:.0%})"
    )
    throttled = int(counts.get("throttledCalls", 0))
    if facts.adaptive and throttled:
        below = f" below {whose} share ({facts.rate:g}/s)" if facts.rate is not None else ""
        return (
            f"{head} — the service answered {throttled:,} calls 429 / 503, and the adaptive "
            f"limit slowed{below} to the rate the service allows: the service, not the limit, "
            f"sets the pace; raising {limit} changes nothing."
        )
    return (
        f"{head}{share} — the limit, not the service, sets the pace; raise {limit} if the "
        "service allows more."
    )


def _cache_churn(advice: Advice, counts: Mapping[str, float], facts: Facts) -> str:
    hits, misses = int(counts["hits"]), int(counts["misses"])
    size = f" = {facts.max_rows:,}" if facts.max_rows is not None else ""
    return (
        f"{facts.where}: cache hit ratio {hits / (hits + misses):.0%} ({hits:,} hits, "
        f"{misses:,} misses) while it evicted {int(counts['evictions']):,} entries to stay "
        f"within {MAX_ROWS}{size} — if keys repeat, they are evicted before they come back; "
        f"raise {MAX_ROWS}"
        + (
            "."
            if facts.shuffled
            else ", or hash-partition the rows by key (SHUFFLE_HASH hint) so each task sees "
            "fewer keys."
        )
    )


def _no_rows(advice: Advice, counts: Mapping[str, float], facts: Facts) -> str:
    whose = "this task's" if advice.tasks == 1 else f"{advice.tasks:,} tasks'"
    passing = " that passed the join's dim_filter / condition" if facts.filtered else ""
    return (
        f"{facts.where}: none of {whose} {int(counts['missed']):,} lookups found a row{passing}, "
        "so an inner join output no row and a left join NULL dim columns on every row — check "
        "that the key columns hold the source's keys: their values, types and the key text "
        f"the connector builds (docs/reference.md, Connectors); {advice.message}."
    )


def _missing(advice: Advice, counts: Mapping[str, float], facts: Facts) -> str:
    return advice.message


_RENDER = {
    RETRY_STORM: _retry_storm,
    TIMEOUT: _timeouts,
    THROTTLED: _throttled,
    CACHE_CHURN: _cache_churn,
    MISSING_COLUMNS: _missing,
    NO_ROWS: _no_rows,
}


def log_advice(advice: Iterable[Advice]) -> None:
    """Log each warning once at WARN (on the executor, at a task's end)."""
    for item in advice:
        log.warning("%s", item.text())


# -- the section -----------------------------------------------------------------------------

SECTION = "causes"
"""The trailer section's name: ``{"causes": {...}, "warnings": {key: Advice JSON}}``."""


def section(causes: Mapping[str, Mapping[str, Any]], advice: Iterable[Advice]) -> dict[str, Any]:
    """One task's ``causes`` section: its causes and the warnings it logged, as JSON."""
    return {"causes": dict(causes), "warnings": {a.key: a.to_json() for a in advice}}


def merge_sections(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Two sections as one: causes merged (:func:`~asyncio_lookup.runtime.causes.merge`);
    a warning's counts and tasks summed, its message and facts the smaller of the two.
    Associative and commutative: the driver's merge function for :data:`SECTION`."""
    warnings: dict[str, dict[str, Any]] = {}
    for data in (a.get("warnings", {}), b.get("warnings", {})):
        for key, item in data.items():
            warnings[key] = _merge_warning(warnings[key], item) if key in warnings else dict(item)
    return {
        "causes": causes_.merge(a.get("causes", {}), b.get("causes", {})),
        "warnings": warnings,
    }


def _merge_warning(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    counts = dict(a.get("counts", {}))
    for name, value in b.get("counts", {}).items():
        counts[name] = counts.get(name, 0) + value
    messages = [m for m in (a.get("message", ""), b.get("message", "")) if m]
    facts = min(
        (a.get("facts", {}), b.get("facts", {})), key=lambda f: json.dumps(f, sort_keys=True)
    )
    return {
        "code": a["code"],
        "cause": a.get("cause", ""),
        "counts": counts,
        "facts": facts,
        "message": min(messages) if messages else "",
        "tasks": int(a.get("tasks", 1)) + int(b.get("tasks", 1)),
    }


def job_warnings(
    section: Mapping[str, Any], totals: Mapping[str, float] | None = None, tasks: int = 0
) -> list[Advice]:
    """A merged section's warnings; with the job's merged metrics ``totals`` and its task
    count, each with the job's figures (:meth:`Advice.of_job`)."""
    warnings = [Advice.from_json(w) for _, w in sorted(section.get("warnings", {}).items())]
    if totals is None:
        return warnings
    causes = section.get("causes", {})
    return [w.of_job(totals, causes, tasks) for w in warnings]


def driver_summary(
    sections: Mapping[str, Mapping[str, Any]],
    totals: Mapping[str, Mapping[str, float]] | None = None,
    tasks: Mapping[str, int] | None = None,
) -> str:
    """The job's warnings and causes, per table (``sections``: table name to its merged
    section; ``totals`` and ``tasks``: its merged metrics and task count, for the job's
    figures), for the driver's log after an action; '' when there is nothing to say."""
    lines: list[str] = []
    for table, data in sorted(sections.items()):
        given = None if totals is None else totals.get(table)
        warnings = job_warnings(data, given, (tasks or {}).get(table, 0))
        causes = data.get("causes", {})
        if not warnings and not causes:
            continue
        lines.append(f"{table!r}: {len(warnings)} warning(s)")
        lines.extend(f"  - {w.text()}" for w in warnings)
        for cause, entry in sorted(causes.items()):
            counts = ", ".join(
                f"{int(entry.get(kind, 0)):,} {kind}"
                for kind in causes_.KINDS
                if int(entry.get(kind, 0))
            )
            message = entry.get("message") or ""
            lines.append(f"  cause {cause}: {counts}" + (f"; first: {message}" if message else ""))
    if not lines:
        return ""
    return "asyncio_lookup: what the job's tasks reported\n" + "\n".join(lines)


__all__ = [
    "CACHE_CHURN",
    "MISSING_COLUMNS",
    "NO_ROWS",
    "RETRY_STORM",
    "SECTION",
    "THROTTLED",
    "TIMEOUT",
    "Advice",
    "Facts",
    "driver_summary",
    "job_warnings",
    "log_advice",
    "merge_sections",
    "missing_columns_advice",
    "no_rows_advice",
    "section",
    "task_advice",
]
