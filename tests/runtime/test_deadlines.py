"""Deadlines: one timer for the timeouts of many concurrent requests."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from asyncio_lookup.runtime.deadlines import Deadlines


async def request(deadlines: Deadlines, done: asyncio.Event) -> str:
    """The pattern the HTTP connector uses around one request."""
    deadline = deadlines.start()
    try:
        await done.wait()
        return "ok"
    except asyncio.CancelledError:
        if deadline.timed_out():
            return "timeout"
        raise
    finally:
        deadline.finish()


async def test_only_requests_past_their_deadline_time_out() -> None:
    deadlines = Deadlines(0.05)
    fast, slow = asyncio.Event(), asyncio.Event()
    first = asyncio.ensure_future(request(deadlines, slow))
    second = asyncio.ensure_future(request(deadlines, fast))
    await asyncio.sleep(0.01)
    fast.set()
    assert await second == "ok"
    assert await first == "timeout"
    assert first.cancelling() == 0  # the deadline's own cancellation was consumed
    deadlines.close()


async def test_the_timer_rearms_for_later_requests() -> None:
    deadlines = Deadlines(0.05)
    never = asyncio.Event()
    early = asyncio.ensure_future(request(deadlines, never))
    await asyncio.sleep(0.03)
    late = asyncio.ensure_future(request(deadlines, never))
    assert await early == "timeout"
    assert not late.done()  # its deadline is 30 ms later
    assert await late == "timeout"
    deadlines.close()


async def test_an_outside_cancellation_with_the_deadline_stays_a_cancellation() -> None:
    deadlines = Deadlines(10.0)
    task = asyncio.ensure_future(request(deadlines, asyncio.Event()))
    await asyncio.sleep(0)  # the request is waiting
    assert deadlines._timer is not None
    deadlines._timer.cancel()
    deadlines._queue[0].at = 0.0  # due now
    deadlines._fire()  # the deadline cancels the task...
    task.cancel()  # ...and so does its owner, before the task runs again
    with pytest.raises(asyncio.CancelledError):
        await task
    deadlines.close()


async def test_finished_requests_leave_the_queue() -> None:
    deadlines = Deadlines(10.0)
    done = asyncio.Event()
    done.set()
    for _ in range(100):
        assert await request(deadlines, done) == "ok"
    assert len(deadlines._queue) <= 1
    deadlines.close()
    assert deadlines._timer is None


def test_a_new_loop_starts_from_an_empty_queue() -> None:
    # e.g. a worker's loop replaced: requests of the old loop are not cancelled from the new one
    deadlines = Deadlines(10.0)
    first = asyncio.new_event_loop()
    stuck = first.create_task(request(deadlines, asyncio.Event()))
    first.run_until_complete(asyncio.sleep(0))
    assert [d.task for d in deadlines._queue] == [stuck]
    second = asyncio.new_event_loop()
    done = asyncio.Event()
    done.set()
    assert second.run_until_complete(request(deadlines, done)) == "ok"
    assert stuck not in [d.task for d in deadlines._queue]
    deadlines.close()
    second.close()
    stuck.cancel()
    first.run_until_complete(asyncio.gather(stuck, return_exceptions=True))
    first.close()


async def test_the_queue_stays_small_behind_one_stuck_request() -> None:
    deadlines = Deadlines(60.0)
    stuck = asyncio.ensure_future(request(deadlines, asyncio.Event()))
    await asyncio.sleep(0)
    done = asyncio.Event()
    done.set()
    for _ in range(20_000):  # finished requests queue up behind the stuck head
        assert await request(deadlines, done) == "ok"
    assert len(deadlines._queue) <= 2 * 1024 + 2
    assert sum(d.task is not None for d in deadlines._queue) == 1
    stuck.cancel()
    await asyncio.gather(stuck, return_exceptions=True)
    deadlines.close()


async def test_a_task_that_absorbed_an_earlier_cancellation_still_times_out() -> None:
    deadlines = Deadlines(0.05)

    async def caller() -> str:
        # a cancellation absorbed earlier: the task's count stays at 1
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(10)
        return await request(deadlines, asyncio.Event())

    task = asyncio.ensure_future(caller())
    await asyncio.sleep(0)
    task.cancel()
    assert await asyncio.gather(task, return_exceptions=True) == ["timeout"]
    deadlines.close()


def test_one_timer_callback_per_timeout_under_uvloop() -> None:
    # uvloop's clock and timers step by 1 ms: a timer may fire a fraction of a ms early, and
    # re-arming at the same deadline would spin until the clock ticks.
    uvloop = pytest.importorskip("uvloop")

    async def main() -> int:
        deadlines = Deadlines(0.0504)
        fires = 0
        fire = deadlines._fire

        def counting() -> None:
            nonlocal fires
            fires += 1
            fire()

        deadlines._fire = counting  # type: ignore[method-assign]
        for _ in range(5):
            assert await request(deadlines, asyncio.Event()) == "timeout"
        deadlines.close()
        return fires

    loop = uvloop.new_event_loop()
    try:
        assert loop.run_until_complete(main()) <= 10
    finally:
        loop.close()
