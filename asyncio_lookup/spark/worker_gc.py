"""The Python worker's garbage collector while an async partition runs.

Each in-flight lookup allocates a handful of short-lived containers (a task, futures, a request,
response objects), so CPython's young generation (700 allocations by default) fills every few
rows, and each collection that promotes into the old generations eventually makes the collector
walk the whole heap of a Spark worker (pyspark, pyarrow, aiohttp, caches). Measured with
callgrind on the lookup-join pipeline outside Spark, that costs about 13 % of the instructions
per row. A larger young generation while the partition runs removes nearly all of it; the
interpreter's thresholds are restored when the partition ends.

Once per worker process, at its first partition, the heap it holds then (pyspark, pyarrow,
pandas, this package: modules, classes and functions that live as long as the process) is
frozen out of the collector's reach (``gc.freeze``). PySpark's daemon runs ``gc.collect()``
after every task of a reused worker, and every full collection walks that heap: about 50 ms a
walk here, 5 % of an HTTP lookup join's worker samples (py-spy). Frozen objects are still freed
by reference counting; only a reference cycle among them is never collected.

Set with the Spark conf key ``asyncio_lookup.worker.gc-young-threshold`` (an integer; ``0``
leaves the worker's collector alone).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from asyncio_lookup.spark.conf import library_conf
from asyncio_lookup.validation import parse_int

CONF_GC_YOUNG_THRESHOLD = "asyncio_lookup.worker.gc-young-threshold"
DEFAULT_GC_YOUNG_THRESHOLD = 10_000
_MAX = 2**31 - 1  # what gc.set_threshold accepts
_ALLOWED = f"an integer from 0 to {_MAX} (0 leaves the worker's garbage collector alone)"


def parse_gc_threshold(value: Any, option: str = CONF_GC_YOUNG_THRESHOLD) -> int:
    """The young-generation threshold from a conf value (``None``: the default); ``option``:
    the key it was set under, for the error."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return DEFAULT_GC_YOUNG_THRESHOLD
    return parse_int(option, value, minimum=0, maximum=_MAX, allowed=_ALLOWED)


def gc_threshold_from_conf(conf: Any) -> int:
    """The threshold configured in a Spark session's ``conf`` (``spark.conf``)."""
    option, value = library_conf(conf, CONF_GC_YOUNG_THRESHOLD)
    return parse_gc_threshold(value, option)


_frozen_in: int | None = None  # the process whose heap was frozen


def freeze_process_heap() -> None:
    """``gc.freeze()`` once per process (see the module docstring); a forked child, whose
    heap is its own, freezes again."""
    global _frozen_in
    pid = os.getpid()
    if _frozen_in != pid:
        _frozen_in = pid
        gc.freeze()


@contextmanager
def young_generation_threshold(threshold: int) -> Iterator[None]:
    """Raise the young-generation threshold to ``threshold`` for the ``with`` body, after
    freezing the process's heap once (:func:`freeze_process_heap`).

    Nothing changes when ``threshold`` is 0 or the collector is disabled; the threshold stays
    when it is already as high. The previous thresholds come back afterwards unless someone
    else changed them in between.
    """
    first, second, third = gc.get_threshold()
    if threshold <= 0 or not gc.isenabled() or first == 0:
        yield
        return
    freeze_process_heap()
    if first >= threshold:
        yield
        return
    gc.set_threshold(threshold, second, third)
    try:
        yield
    finally:
        if gc.get_threshold() == (threshold, second, third):
            gc.set_threshold(first, second, third)
