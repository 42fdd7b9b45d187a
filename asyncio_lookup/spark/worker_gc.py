"""The Python worker's garbage collector while an async partition runs.

Each in-flight lookup allocates a handful of short-lived containers (a task, futures, a request,
response objects), so CPython's young generation (700 allocations by default) fills every few
rows, and each collection that promotes into the old generations eventually makes the collector
walk the whole heap of a Spark worker (pyspark, pyarrow, aiohttp, caches). Measured with
callgrind on the lookup-join pipeline outside Spark, that costs about 13 % of the instructions
per row. A larger young generation while the partition runs removes nearly all of it; the
interpreter's thresholds are restored when the partition ends.

Set with the Spark conf key ``asyncio_lookup.worker.gc-young-threshold`` (an integer; ``0``
leaves the worker's collector alone).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from asyncio_lookup.validation import parse_int

CONF_GC_YOUNG_THRESHOLD = "asyncio_lookup.worker.gc-young-threshold"
DEFAULT_GC_YOUNG_THRESHOLD = 10_000
_MAX = 2**31 - 1  # what gc.set_threshold accepts
_ALLOWED = f"an integer from 0 to {_MAX} (0 leaves the worker's garbage collector alone)"


def parse_gc_threshold(value: Any) -> int:
    """The young-generation threshold from a conf value (``None``: the default)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return DEFAULT_GC_YOUNG_THRESHOLD
    return parse_int(CONF_GC_YOUNG_THRESHOLD, value, minimum=0, maximum=_MAX, allowed=_ALLOWED)


def gc_threshold_from_conf(conf: Any) -> int:
    """The threshold configured in a Spark session's ``conf`` (``spark.conf``)."""
    return parse_gc_threshold(conf.get(CONF_GC_YOUNG_THRESHOLD, None))


@contextmanager
def young_generation_threshold(threshold: int) -> Iterator[None]:
    """Raise the young-generation threshold to ``threshold`` for the ``with`` body.

    Nothing changes when ``threshold`` is 0, the collector is disabled, or its threshold is
    already as high. The previous thresholds come back afterwards unless someone else changed
    them in between.
    """
    first, second, third = gc.get_threshold()
    if threshold <= 0 or not gc.isenabled() or first == 0 or first >= threshold:
        yield
        return
    gc.set_threshold(threshold, second, third)
    try:
        yield
    finally:
        if gc.get_threshold() == (threshold, second, third):
            gc.set_threshold(first, second, third)
