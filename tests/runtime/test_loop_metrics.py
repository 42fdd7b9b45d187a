"""Event loops (uvloop selection, the per-process loop) and operator metrics."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Callable

import pytest

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.runtime import OperatorMetrics, new_event_loop, process_loop
from asyncio_lookup.runtime import loop as loop_module
from asyncio_lookup.runtime.loop import uvloop_available
from asyncio_lookup.runtime.sketch import LatencySketch

needs_uvloop = pytest.mark.skipif(not uvloop_available(), reason="uvloop not installed")


@needs_uvloop
def test_new_event_loop_uses_uvloop_unless_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    import uvloop

    for use, env, expect_uvloop in [
        (None, None, True),
        (True, "0", True),
        (False, None, False),
        (None, "0", False),
        (None, "false", False),
    ]:
        if env is None:
            monkeypatch.delenv("ASYNCIO_LOOKUP_UVLOOP", raising=False)
        else:
            monkeypatch.setenv("ASYNCIO_LOOKUP_UVLOOP", env)
        loop = new_event_loop(use)
        try:
            assert isinstance(loop, uvloop.Loop) is expect_uvloop, (use, env)
        finally:
            loop.close()


def test_explicit_uvloop_without_uvloop_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "uvloop", None)  # makes `import uvloop` fail
    with pytest.raises(ConfigurationError) as error:
        new_event_loop(True)
    assert error.value.option == "use_uvloop"
    loop = new_event_loop(None)  # falls back to asyncio
    assert isinstance(loop, asyncio.AbstractEventLoop)
    loop.close()


def test_process_loop_is_persistent_and_recreated_when_closed() -> None:
    first = process_loop()
    assert process_loop() is first
    assert first.run_until_complete(asyncio.sleep(0, "ok")) == "ok"
    first.close()
    second = process_loop()
    assert second is not first and not second.is_closed()


def _true_in_a_forked_child(check: Callable[[], bool]) -> bool:
    """``check()`` run in a forked child (one that hangs dies after 10 s: False)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            signal.alarm(10)
            os.write(write, b"1" if check() else b"0")
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.waitpid(pid, 0)
    os.close(read)
    return answer == b"1"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_process_loop_is_recreated_after_fork() -> None:
    parent = process_loop()

    def check() -> bool:
        child = process_loop()
        ok = child is not parent and child.run_until_complete(asyncio.sleep(0, 1)) == 1
        return ok and loop_module._process_pid == os.getpid()

    assert _true_in_a_forked_child(check)
    assert process_loop() is parent


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_the_read_ahead_thread_is_recreated_after_fork() -> None:
    from asyncio_lookup.spark import bridge

    async def items(source: AsyncIterator[int]) -> list[int]:
        return [item async for item in source]

    def read() -> list[int]:
        return bridge.run(items(bridge.read_ahead(iter([1, 2, 3]), lambda x: x * 10)))

    assert read() == [10, 20, 30]  # the parent's reader thread exists now
    # the child inherits the executor, not its thread
    assert _true_in_a_forked_child(lambda: read() == [10, 20, 30])


def test_metrics_snapshot_names_and_latency_summary() -> None:
    m = OperatorMetrics()
    for ms in [1.0, 2.0, 3.0, 10.0]:
        m.record_latency(ms)
    m.completed, m.retries, m.timeouts, m.errors, m.in_flight = 4, 2, 1, 1, 3
    m.failed = 1
    snap = m.snapshot()
    assert snap == {
        "numInFlight": 3,
        "numCompleted": 4,
        "numRetries": 2,
        "numTimeouts": 1,
        "numErrors": 1,
        "numFailedRows": 1,
        "latencyCount": 4,
        "latencySumMs": 16.0,
        "latencyMaxMs": 10.0,
        # quantiles of the sketch: within 1 % of the true ones (rank q * (n - 1), rounded down)
        "latencyP50Ms": pytest.approx(2.0, rel=0.01),
        "latencyP90Ms": pytest.approx(3.0, rel=0.01),
        "latencyP99Ms": pytest.approx(3.0, rel=0.01),
        "latencyP999Ms": pytest.approx(3.0, rel=0.01),
    }
    assert all(type(snap[name]) is int for name in ("numCompleted", "latencyCount"))
    assert "numInFlight" in OperatorMetrics.GAUGES and "numCompleted" not in OperatorMetrics.GAUGES
    assert "callLatencyCount" not in snap  # calls are timed only when asked (m.calls)


def test_percentiles_cover_every_sample_not_the_most_recent_ones() -> None:
    m = OperatorMetrics()
    for _ in range(5000):
        m.record_latency(100.0)
    for _ in range(1024):
        m.record_latency(1.0)
    snap = m.snapshot()
    assert snap["latencyP99Ms"] == pytest.approx(100.0, rel=0.01)
    assert snap["latencyP50Ms"] == pytest.approx(100.0, rel=0.01)
    assert snap["latencyCount"] == 6024 and snap["latencyMaxMs"] == 100.0


def test_take_delta_reports_each_count_and_latency_once() -> None:
    m = OperatorMetrics()
    m.calls = LatencySketch()
    m.completed, m.in_flight = 3, 2
    m.record_latency(5.0)
    m.calls.add(4.0)
    counters, record, calls = m.take_delta()
    assert counters["numCompleted"] == 3 and counters["numInFlight"] == 2
    assert record.count == 1 and calls is not None and calls.count == 1
    m.completed = 5
    m.record_latency(7.0)
    counters, record, calls = m.take_delta()
    assert counters["numCompleted"] == 2 and counters["numInFlight"] == 2  # a gauge: current
    assert (record.count, record.max_ms) == (1, 7.0) and calls is not None and calls.count == 0
