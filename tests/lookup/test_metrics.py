"""CacheMetricGroup snapshots, per-task deltas and driver-side sums."""

from __future__ import annotations

import threading

from asyncio_lookup.lookup.metrics import CacheMetricGroup, merge_metrics, metrics_delta

GAUGES = CacheMetricGroup.GAUGES


def test_flink_names_and_extra_counts_present() -> None:
    snap = CacheMetricGroup().snapshot()
    for name in (
        "hitCount",
        "missCount",
        "loadCount",
        "numLoadFailures",
        "latestLoadTime",
        "numCachedRecords",
        "numCachedBytes",
        "numLookups",
        "numExternalCalls",
    ):
        assert snap[name] == 0
    assert {"latestLoadTime", "numCachedRecords", "numCachedBytes"} == GAUGES


def test_delta_takes_counters_difference_and_gauges_current() -> None:
    metrics = CacheMetricGroup()
    metrics.inc("hitCount", 5)
    metrics.set_gauge("latestLoadTime", 40)
    before = metrics.snapshot()
    metrics.inc("hitCount", 2)
    metrics.inc("missCount")
    metrics.set_gauge("latestLoadTime", 12)
    delta = metrics_delta(before, metrics.snapshot(), GAUGES)
    assert (delta["hitCount"], delta["missCount"], delta["latestLoadTime"]) == (2, 1, 12)


def test_merge_sums_counters_and_maxes_gauges() -> None:
    a = {"hitCount": 3.0, "numCachedRecords": 10.0, "onlyA": 1.0}
    b = {"hitCount": 4.0, "numCachedRecords": 7.0, "onlyB": 2.0}
    assert merge_metrics(a, b, GAUGES) == {
        "hitCount": 7.0,
        "numCachedRecords": 10.0,
        "onlyA": 1.0,
        "onlyB": 2.0,
    }


def test_registered_gauge_is_read_at_snapshot() -> None:
    metrics = CacheMetricGroup()
    size = [3]
    metrics.register_gauge("numCachedRecords", lambda: size[0])
    size[0] = 9
    assert metrics["numCachedRecords"] == 9


def test_counters_are_thread_safe() -> None:
    metrics = CacheMetricGroup()

    def work() -> None:
        for _ in range(20000):
            metrics.inc("numLookups")

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert metrics["numLookups"] == 80000


def test_take_delta_reports_each_count_once() -> None:
    metrics = CacheMetricGroup()
    metrics.inc("loadCount")  # e.g. a FULL load at open, before any task window
    metrics.set_gauge("numCachedRecords", 5)
    first = metrics.take_delta()
    assert (first["loadCount"], first["numCachedRecords"]) == (1, 5)
    metrics.inc("hitCount", 3)
    second = metrics.take_delta()
    assert (second["loadCount"], second["hitCount"], second["numCachedRecords"]) == (0, 3, 5)
    assert metrics.take_delta()["hitCount"] == 0


def test_concurrent_take_delta_never_reports_a_negative_count() -> None:
    # Two tasks of one process ending at once: each count must land in exactly one delta,
    # never as a negative correction in a later one.
    metrics = CacheMetricGroup()
    reading, go = threading.Event(), threading.Event()

    def cached_records() -> float:
        if threading.current_thread().name == "slow":
            reading.set()
            go.wait(0.5)
        return 0.0

    metrics.register_gauge("numCachedRecords", cached_records)
    metrics.inc("hitCount", 5)
    deltas: list[dict[str, float]] = []
    slow = threading.Thread(target=lambda: deltas.append(metrics.take_delta()), name="slow")
    slow.start()
    assert reading.wait(10)
    metrics.inc("hitCount", 2)
    fast = threading.Thread(target=lambda: deltas.append(metrics.take_delta()))
    fast.start()
    fast.join(0.2)
    go.set()
    slow.join(10)
    fast.join(10)
    deltas.append(metrics.take_delta())
    assert all(d["hitCount"] >= 0 for d in deltas)
    assert sum(d["hitCount"] for d in deltas) == 7


def test_deltas_taken_while_threads_count_sum_to_the_total() -> None:
    # Counters take no lock: each thread counts in its own table and take_delta sums them.
    metrics = CacheMetricGroup()
    done = threading.Event()

    def work() -> None:
        for _ in range(20000):
            metrics.inc("hitCount")
            metrics.inc2("numExternalCalls", "numExternalKeys")

    threads = [threading.Thread(target=work) for _ in range(3)]
    deltas: list[dict[str, float]] = []

    def report() -> None:
        while not done.is_set():
            deltas.append(metrics.take_delta())

    reporter = threading.Thread(target=report)
    reporter.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    reporter.join()
    deltas.append(metrics.take_delta())
    for name in ("hitCount", "numExternalCalls", "numExternalKeys"):
        assert all(d[name] >= 0 for d in deltas)
        assert sum(d[name] for d in deltas) == 60000


def test_call_latencies_drain_once_and_match_the_sketch() -> None:
    from asyncio_lookup.runtime.sketch import LatencySketch

    group, expected = CacheMetricGroup(), LatencySketch()
    for ms in (0.0001, 1.0, 12.5, 250.0, 1e9):  # the zero bucket, in range, past the last
        group.record_call(ms)  # LatencySketch.add inlined
        expected.add(ms)
    drained = group.drain_calls()
    assert drained.to_json() == expected.to_json()
    assert group.drain_calls().count == 0  # each call is reported once


def test_counters_are_ints_and_durations_rounded_to_the_microsecond() -> None:
    group = CacheMetricGroup()
    group.inc("numLookups")
    group.set_gauge("latestLoadTime", 17.000000000280124)
    group.set_gauge("numCachedRecords", 54.0)
    snap = group.snapshot()
    assert type(snap["numLookups"]) is int and type(snap["numCachedRecords"]) is int
    assert snap["latestLoadTime"] == 17.0
