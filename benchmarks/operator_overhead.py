"""Overhead of the async wait operator vs a minimal hand-rolled asyncio pipeline.

A no-op async function goes through ``AsyncDataStream.ordered_wait`` and ``unordered_wait``
(capacity 100, a timeout set) and through a hand-rolled pipeline (one Task per element, a deque
of pending tasks, the same capacity), in the same process, on asyncio and on uvloop. Prints the
median µs/element of 5 runs for each and the ratio operator / hand-rolled.

The hand-rolled pipeline starts its tasks the way the operator starts its attempts (and the way a
careful user would): on Python 3.11 without a task factory, ``asyncio.Task(coro, loop=loop,
name=...)`` with a fixed name, which skips ``ensure_future``'s checks and 3.11's formatting of a
``Task-<n>`` name for every unnamed task; on 3.12+ (or with a task factory) ``loop.create_task``.
Before 2026-11-27 it used ``asyncio.ensure_future(coro)``, which paid both, so its ratios were
flattering to the operator.

    .venv/bin/python -m benchmarks.operator_overhead [--elements N] [--runs R]

Targets: ratio <= 1.5, and <= 6 µs/element with uvloop. Both CPU time of this process and
wall time are printed; on a shared machine CPU time is the stable figure.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any

from asyncio_lookup.runtime import AsyncDataStream, new_event_loop
from asyncio_lookup.runtime.loop import uvloop_available

CAPACITY = 100
TIMEOUT = 60.0


async def noop(element: int) -> list[int]:
    return [element]


BASELINE_TASK_NAME = "hand-rolled"


def baseline_task_factory(
    loop: asyncio.AbstractEventLoop,
) -> Callable[[Coroutine[Any, Any, list[int]]], asyncio.Task[list[int]]]:
    """How the hand-rolled pipeline starts a task: as the operator starts its attempts
    (``asyncio_lookup.runtime.run.attempt_task_factory``), written out here so that the baseline
    does not depend on the library's internals."""
    if sys.version_info >= (3, 12) or loop.get_task_factory() is not None:
        return loop.create_task
    return partial(asyncio.Task, loop=loop, name=BASELINE_TASK_NAME)


async def hand_rolled(n: int) -> int:
    """One Task per element, a deque of pending tasks, at most CAPACITY pending, in order."""
    new_task = baseline_task_factory(asyncio.get_running_loop())
    pending: deque[asyncio.Task[list[int]]] = deque()
    count = 0
    for element in range(n):
        if len(pending) >= CAPACITY:
            for _ in pending.popleft().result() if pending[0].done() else await pending.popleft():
                count += 1
        pending.append(new_task(noop(element)))
    while pending:
        for _ in await pending.popleft():
            count += 1
    return count


async def operator_ordered(n: int) -> int:
    count = 0
    async for _ in AsyncDataStream.ordered_wait(range(n), noop, TIMEOUT, CAPACITY):
        count += 1
    return count


async def operator_unordered(n: int) -> int:
    count = 0
    async for _ in AsyncDataStream.unordered_wait(range(n), noop, TIMEOUT, CAPACITY):
        count += 1
    return count


PIPELINES: dict[str, Callable[[int], Coroutine[Any, Any, int]]] = {
    "hand-rolled": hand_rolled,
    "ordered_wait": operator_ordered,
    "unordered_wait": operator_unordered,
}


def measure(use_uvloop: bool, n: int, runs: int) -> dict[str, tuple[float, float]]:
    """Median (CPU µs/element, wall µs/element) per pipeline over ``runs`` interleaved rounds.

    CPU time of this process is the primary figure: the machine is shared, and other
    processes' load inflates wall time without changing what the pipeline costs.
    """
    cpu: dict[str, list[float]] = {name: [] for name in PIPELINES}
    wall: dict[str, list[float]] = {name: [] for name in PIPELINES}
    loop = new_event_loop(use_uvloop)
    try:
        for pipeline in PIPELINES.values():  # warm-up
            loop.run_until_complete(pipeline(min(n, 10_000)))
        for _ in range(runs):
            for name, pipeline in PIPELINES.items():
                gc.collect()
                start_cpu, start_wall = time.process_time(), time.perf_counter()
                count = loop.run_until_complete(pipeline(n))
                cpu[name].append((time.process_time() - start_cpu) / n * 1e6)
                wall[name].append((time.perf_counter() - start_wall) / n * 1e6)
                assert count == n, (name, count)
    finally:
        loop.close()
    return {name: (statistics.median(cpu[name]), statistics.median(wall[name])) for name in cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    loops = [("asyncio", False)] + ([("uvloop", True)] if uvloop_available() else [])
    print(
        f"no-op async function, {args.elements} elements, capacity {CAPACITY}, "
        f"timeout {TIMEOUT:g}s, median of {args.runs} runs"
    )
    print(
        f"{'loop':8} {'pipeline':15} {'CPU µs/el':>10} {'ratio':>7} {'wall µs/el':>11} {'ratio':>7}"
    )
    for loop_name, use_uvloop in loops:
        medians = measure(use_uvloop, args.elements, args.runs)
        base_cpu, base_wall = medians["hand-rolled"]
        for name, (cpu, wall) in medians.items():
            print(
                f"{loop_name:8} {name:15} {cpu:10.2f} {cpu / base_cpu:6.2f}x "
                f"{wall:11.2f} {wall / base_wall:6.2f}x"
            )


if __name__ == "__main__":
    main()
