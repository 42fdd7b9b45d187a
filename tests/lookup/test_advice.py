"""The warnings' rules and texts, the section's merge and the driver summary
(asyncio_lookup/lookup/advice.py)."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pytest

from asyncio_lookup.lookup import advice
from asyncio_lookup.lookup.advice import Advice, Facts, driver_summary, merge_sections, task_advice
from asyncio_lookup.runtime.causes import Causes

FACTS = Facts(
    table="Customers",
    target="HTTP http://127.0.0.1:8080/c/{id}",
    capacity=100,
    timeout=5.0,
    max_retries=3,
    max_rows=1000,
)


def causes(cause: str, **counts: int) -> dict[str, Any]:
    found = Causes()
    found.add(cause, counts, f"TransientError: first {cause}")
    return found.to_json()


def test_a_retry_storm_after_refused_connections_names_capacity_and_the_backlog() -> None:
    found = task_advice(
        {"numLookups": 1000},
        causes("ConnectionRefusedError", retries=220, retried=203),
        FACTS,
        10.0,
    )
    assert [a.key for a in found] == ["retry-storm:ConnectionRefusedError"]
    assert found[0].text() == (
        "lookup table 'Customers' (HTTP http://127.0.0.1:8080/c/{id}): 203 of 1,000 lookups "
        "were retried (220 retries) after ConnectionRefusedError — the service may accept fewer "
        "connections than 'capacity' 100 per task times the tasks running at once; lower "
        "'capacity' or raise its accept backlog (listen queue). "
        "First error: TransientError: first ConnectionRefusedError"
    )


@pytest.mark.parametrize(
    ("cause", "names"),
    [
        ("TimeoutError", ["lower 'capacity'", "raise the connector's 'timeout'"]),
        ("HTTP 429", ["set lookup.rate-limit", "lookup.rate-limit.adaptive=true"]),
        ("HTTP 500", ["lower 'capacity' 100"]),
        ("KeyError", ["lookup.max-retries=3"]),
    ],
)
def test_each_cause_of_a_retry_storm_names_what_to_change(cause: str, names: list[str]) -> None:
    (found,) = task_advice({"numLookups": 100}, causes(cause, retries=10, retried=10), FACTS, 1)
    for name in names:
        assert name in found.text()


def test_a_few_retries_are_no_storm() -> None:
    assert not task_advice(
        {"numLookups": 10_000}, causes("ConnectionResetError", retries=9, retried=9), FACTS, 1
    )
    assert not task_advice(  # more than 10 retries, but in fewer than 1 % of the lookups
        {"numLookups": 10_000}, causes("ConnectionResetError", retries=50, retried=50), FACTS, 1
    )


def test_timeouts_name_the_timeout() -> None:
    (found,) = task_advice({"numLookups": 500}, causes("TimeoutError", timeouts=7), FACTS, 1)
    assert found.text() == (
        "lookup table 'Customers' (HTTP http://127.0.0.1:8080/c/{id}): 7 of 500 lookups timed "
        "out ('timeout' = 5 s, retries included) — raise 'timeout', or lower 'capacity' 100 if "
        "the service is saturated."
    )


def test_time_held_back_by_the_rate_limit() -> None:
    facts = Facts(table="T", rate=50.0)
    (found,) = task_advice({"throttledTimeMs": 3000}, {}, facts, 10.0)
    assert found.text() == (
        "lookup table 'T': calls waited for lookup.rate-limit tokens during 3.0 s of the task's "
        "10.0 s (30%) (this task's share: 50/s) — the limit, not the service, sets the pace; "
        "raise lookup.rate-limit if the service allows more."
    )
    assert not task_advice({"throttledTimeMs": 1999}, {}, facts, 10.0)


def test_an_adaptive_limit_slowed_by_the_service_does_not_ask_for_a_higher_limit() -> None:
    """The adaptive limit, slowed by the service's 429s, waited for tokens: the warning said
    'the limit, not the service, sets the pace; raise lookup.rate-limit'."""
    facts = Facts(table="T", rate=20.0, adaptive=True)
    (found,) = task_advice({"throttledTimeMs": 3000, "numThrottledCalls": 10}, {}, facts, 10.0)
    assert found.text() == (
        "lookup table 'T': calls waited for lookup.rate-limit tokens during 3.0 s of the task's "
        "10.0 s (30%) — the service answered 10 calls 429 / 503, and the adaptive limit slowed "
        "below this task's share (20/s) to the rate the service allows: the service, not the "
        "limit, sets the pace; raising lookup.rate-limit changes nothing."
    )
    (ramp,) = task_advice({"throttledTimeMs": 3000}, {}, facts, 10.0)  # no 429: the limit's
    assert "raise lookup.rate-limit if the service allows more" in ramp.text()


def test_a_churning_cache() -> None:
    metrics = {"hitCount": 100, "missCount": 900, "evictionCount": 800}
    (found,) = task_advice(metrics, {}, FACTS, 1)
    assert found.text() == (
        "lookup table 'Customers' (HTTP http://127.0.0.1:8080/c/{id}): cache hit ratio 10% "
        "(100 hits, 900 misses) while it evicted 800 entries to stay within "
        "lookup.partial-cache.max-rows = 1,000 — if keys repeat, they are evicted before they "
        "come back; raise lookup.partial-cache.max-rows, or hash-partition the rows by key "
        "(SHUFFLE_HASH hint) so each task sees fewer keys."
    )
    assert not task_advice({**metrics, "evictionCount": 0}, {}, FACTS, 1)
    assert not task_advice({**metrics, "hitCount": 1000}, {}, FACTS, 1)
    # a join already hash-partitioned by key is not told to be
    (shuffled,) = task_advice(metrics, {}, dataclasses.replace(FACTS, shuffled=True), 1)
    assert shuffled.text().endswith("raise lookup.partial-cache.max-rows.")


def test_advice_to_turn_on_adaptive_rate_limits_only_when_they_are_off() -> None:
    found = causes("HTTP 429", retries=10, retried=10)
    limited = dataclasses.replace(FACTS, rate=5.0)
    (off,) = task_advice({"numLookups": 100}, found, limited, 1)
    assert "lookup.rate-limit.adaptive=true" in off.text()
    adaptive = dataclasses.replace(limited, adaptive=True)
    (on,) = task_advice({"numLookups": 100}, found, adaptive, 1)
    assert "adaptive" not in on.text() and "lower lookup.rate-limit" in on.text()
    assert Facts.from_json(adaptive.to_json()) == adaptive  # through the trailers


def test_async_map_counts_records() -> None:
    facts = Facts(table="enrich", capacity=10, lookup=False)
    metrics = {"numCompleted": 90, "numErrors": 10}
    (found,) = task_advice(metrics, causes("HTTP 503", retries=30, retried=20), facts, 1)
    assert found.text().startswith("async_map 'enrich': 20 of 100 records were retried")


def test_warnings_are_logged_once_each(caplog: pytest.LogCaptureFixture) -> None:
    found = task_advice(
        {"numLookups": 100},
        {
            **causes("ConnectionRefusedError", retries=20, retried=20),
            **causes("HTTP 503", retries=30, retried=30),
        },
        FACTS,
        1,
    )
    with caplog.at_level(logging.WARNING, logger="asyncio_lookup"):
        advice.log_advice(found)
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.WARNING]
    assert "ConnectionRefusedError" in caplog.records[0].getMessage()
    assert "HTTP 503" in caplog.records[1].getMessage()


def _section(retried: int) -> dict[str, Any]:
    found = causes("ConnectionRefusedError", retries=retried, retried=retried)
    return advice.section(found, task_advice({"numLookups": 1000}, found, FACTS, 1))


def test_sections_merge_and_the_summary_has_the_job_totals() -> None:
    a, b, c = _section(203), _section(203), _section(50)
    assert merge_sections(merge_sections(a, b), c) == merge_sections(a, merge_sections(b, c))
    assert merge_sections(a, c) == merge_sections(c, a)
    text = driver_summary({"Customers": merge_sections(a, b)})
    assert "406 of 2,000 lookups were retried (406 retries) after ConnectionRefusedError" in text
    assert "[in 2 tasks]" in text
    assert "cause ConnectionRefusedError: 406 retries, 406 retried" in text
    assert driver_summary({"Customers": {}}) == ""
    assert Advice.from_json(a["warnings"]["retry-storm:ConnectionRefusedError"]).tasks == 1


def test_a_warning_of_some_tasks_shows_the_job_s_figures() -> None:
    """A cache that churned in one task of two: the summary said 0% (that task's hits and
    misses) beside the job's 49.9%, and did not say the other task had not warned."""
    churn = {"numLookups": 500, "hitCount": 0, "missCount": 500, "evictionCount": 490}
    warned = advice.section({}, task_advice(churn, {}, FACTS, 1))
    quiet = advice.section({}, task_advice({"numLookups": 500, "hitCount": 499}, {}, FACTS, 1))
    merged = merge_sections(warned, quiet)
    job = {"numLookups": 1000, "hitCount": 499, "missCount": 501, "evictionCount": 490}
    (found,) = advice.job_warnings(merged, job, 2)
    assert "cache hit ratio 50% (499 hits, 501 misses) while it evicted 490" in found.text()
    assert found.text().endswith("[warned in 1 of 2 tasks]")
    text = driver_summary({"Customers": merged}, {"Customers": job}, {"Customers": 2})
    assert "(499 hits, 501 misses)" in text
    # totals that lack the warned task's figures (its trailer not merged): its own stay
    (found,) = advice.job_warnings(merged, {"numLookups": 10}, 2)
    assert "(0 hits, 500 misses)" in found.text()
    # retries: the cause's job-wide counts, the job's lookups
    storm = causes("HTTP 503", retries=40, retried=30)
    one = advice.section(storm, task_advice({"numLookups": 100}, storm, FACTS, 1))
    both = merge_sections(one, advice.section(causes("HTTP 503", retries=5, retried=5), []))
    (found,) = advice.job_warnings(both, {"numLookups": 300}, 3)
    assert "35 of 300 lookups were retried (45 retries)" in found.text()
    assert found.text().endswith("[warned in 1 of 3 tasks]")


def test_advice_names_what_the_join_or_map_can_change() -> None:
    throttled = causes("HTTP 429", retries=10, retried=10)
    mapped = Facts(table="enrich", capacity=10, lookup=False)
    (found,) = task_advice({"numCompleted": 100}, throttled, mapped, 1)
    assert "rate_limit" in found.text() and "lookup.rate-limit" not in found.text()
    limited = dataclasses.replace(mapped, rate=5.0, adaptive=False)
    (found,) = task_advice({"numCompleted": 100}, throttled, limited, 1)
    assert "lower rate_limit or set rate_limit=RateLimit(..., adaptive=True)" in found.text()
    # a sync join (no capacity): one call at a time per task, 'capacity' does nothing
    sync = dataclasses.replace(FACTS, capacity=None, timeout=None)
    for cause in ("ConnectionRefusedError", "TimeoutError", "HTTP 429", "HTTP 500"):
        (found,) = task_advice({"numLookups": 100}, causes(cause, retries=10, retried=10), sync, 1)
        assert "capacity" not in found.text(), found.text()


def test_no_rows_found_by_every_lookup_of_a_task() -> None:
    """The no-rows rule: 100+ lookups, no failed row; its count stays the warned tasks' in the
    job's summary (the job's other tasks may have found rows)."""
    assert advice.no_rows_advice(FACTS, {"numLookups": 99}, (1,)) is None
    assert advice.no_rows_advice(FACTS, {"numLookups": 500, "numFailedRows": 1}, (1,)) is None
    found = advice.no_rows_advice(FACTS, {"numLookups": 500}, (7,))
    assert found is not None
    assert found.text().startswith(
        "lookup table 'Customers' (HTTP http://127.0.0.1:8080/c/{id}): none of this task's 500 "
        "lookups found a row, so an inner join output no row"
    )
    assert found.text().endswith("; first key looked up: (7,).")
    filtered = dataclasses.replace(FACTS, filtered=True)
    text = advice.no_rows_advice(filtered, {"numLookups": 100}, ("a",)).text()  # type: ignore[union-attr]
    assert "found a row that passed the join's dim_filter / condition" in text
    two = merge_sections(advice.section({}, [found]), advice.section({}, [found]))
    (merged,) = advice.job_warnings(two, {"numLookups": 3000}, 3)
    assert "none of 2 tasks' 1,000 lookups found a row" in merged.text()
    assert merged.text().endswith("[warned in 2 of 3 tasks]")
