"""The worker's garbage-collector threshold while an async partition runs."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from asyncio_lookup.connectors import InMemoryConnector
from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.lookup.functions import AsyncLookupFunction, Key, Row
from asyncio_lookup.spark import LookupTable, async_map, lookup_join, worker_gc
from asyncio_lookup.spark.worker_gc import (
    CONF_GC_YOUNG_THRESHOLD,
    DEFAULT_GC_YOUNG_THRESHOLD,
    parse_gc_threshold,
    young_generation_threshold,
)
from tests.spark.test_partition import batches, make_task, split


@pytest.fixture(autouse=True)
def _restore_gc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    before, enabled = gc.get_threshold(), gc.isenabled()
    monkeypatch.setattr(worker_gc, "_frozen_in", None)  # this process as a new worker
    yield
    gc.unfreeze()  # the test process's heap back in the collector's reach
    gc.set_threshold(*before)
    if enabled:
        gc.enable()


def test_the_heap_is_frozen_once_per_process() -> None:
    gc.unfreeze()
    with young_generation_threshold(5_000):
        frozen = gc.get_freeze_count()
    assert frozen > 1000, "the worker's heap at its first partition is out of the collector's reach"
    later = [[i] for i in range(1000)]  # the second partition's objects stay collectable
    with young_generation_threshold(5_000):
        assert gc.get_freeze_count() <= frozen  # none added (some freed by refcount)
    assert later


def test_a_forked_worker_freezes_its_own_heap(monkeypatch: pytest.MonkeyPatch) -> None:
    with young_generation_threshold(5_000):
        pass
    gc.unfreeze()
    monkeypatch.setattr(worker_gc, "_frozen_in", os.getpid() + 1)  # frozen in the parent
    with young_generation_threshold(5_000):
        assert gc.get_freeze_count() > 1000


@pytest.mark.parametrize("setup", ["zero", "disabled"])
def test_nothing_is_frozen_when_the_collector_is_left_alone(setup: str) -> None:
    gc.unfreeze()
    if setup == "disabled":
        gc.disable()
    with young_generation_threshold(0 if setup == "zero" else 5_000):
        assert gc.get_freeze_count() == 0


def test_threshold_is_raised_inside_and_restored_after() -> None:
    gc.set_threshold(700, 10, 10)
    with young_generation_threshold(5_000):
        assert gc.get_threshold() == (5_000, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_threshold_is_restored_when_the_body_fails() -> None:
    gc.set_threshold(700, 10, 10)
    with pytest.raises(RuntimeError), young_generation_threshold(5_000):
        raise RuntimeError("partition failed")
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.parametrize("setup", ["zero", "higher", "disabled"])
def test_nothing_changes_when_off_already_higher_or_disabled(setup: str) -> None:
    gc.set_threshold(700, 10, 10)
    threshold = 5_000
    if setup == "zero":
        threshold = 0
    elif setup == "higher":
        gc.set_threshold(50_000, 10, 10)
    else:
        gc.disable()
    before = gc.get_threshold()
    with young_generation_threshold(threshold):
        assert gc.get_threshold() == before
    assert gc.get_threshold() == before


def test_a_change_made_by_someone_else_is_kept() -> None:
    gc.set_threshold(700, 10, 10)
    with young_generation_threshold(5_000):
        gc.set_threshold(1_234, 10, 10)
    assert gc.get_threshold() == (1_234, 10, 10)


def test_conf_values() -> None:
    assert parse_gc_threshold(None) == DEFAULT_GC_YOUNG_THRESHOLD
    assert parse_gc_threshold(" 0 ") == 0
    assert parse_gc_threshold("20000") == 20_000
    assert parse_gc_threshold(str(2**31 - 1)) == 2**31 - 1
    for bad in ("-1", "lots", "1.5", True, "3000000000"):
        with pytest.raises(ConfigurationError) as info:
            parse_gc_threshold(bad)
        assert CONF_GC_YOUNG_THRESHOLD in str(info.value) and "integer from 0" in str(info.value)


async def _worker_threshold(row: dict[str, object]) -> list[dict[str, object]]:
    return [{"n": row["n"], "young": gc.get_threshold()[0]}]


@pytest.mark.parametrize(("conf", "inside"), [(None, DEFAULT_GC_YOUNG_THRESHOLD), ("12345", 12345)])
def test_async_map_runs_with_the_configured_threshold(
    spark: SparkSession, conf: str | None, inside: int
) -> None:
    if conf is not None:
        spark.conf.set(CONF_GC_YOUNG_THRESHOLD, conf)
    try:
        df = spark.range(0, 20, numPartitions=2).selectExpr("CAST(id AS INT) AS n")
        out = async_map(df, _worker_threshold, "n INT, young INT", timeout=10)
        assert {r.young for r in out.collect()} == {inside}
    finally:
        spark.conf.unset(CONF_GC_YOUNG_THRESHOLD)


def test_a_lookup_join_partition_runs_with_the_threshold_and_restores_it() -> None:
    seen: list[int] = []

    class Recording(AsyncLookupFunction):
        async def async_lookup(self, key: Key) -> list[Row]:
            seen.append(gc.get_threshold()[0])
            return [{"id": key[0], "name": "x"}]

    class Source:
        def lookup_function(self) -> None:
            return None

        def async_lookup_function(self) -> AsyncLookupFunction:
            return Recording()

    gc.set_threshold(700, 10, 10)
    task = make_task(Source(), "LOOKUP('table'='T', 'async'='true')")
    assert task.gc_threshold == DEFAULT_GC_YOUNG_THRESHOLD
    out = pa.Table.from_batches(split(task(iter(batches([1, 2, 3]))))[0])
    assert out.num_rows == 3
    assert seen == [DEFAULT_GC_YOUNG_THRESHOLD] * 3
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.parametrize("bad", ["-5", "many"])
def test_a_bad_conf_value_fails_on_the_driver(spark: SparkSession, no_job: Any, bad: str) -> None:
    table = LookupTable("T", "id INT, name STRING", InMemoryConnector([], ["id"]))
    df = spark.range(0, 4).selectExpr("CAST(id AS INT) AS cid")
    spark.conf.set(CONF_GC_YOUNG_THRESHOLD, bad)
    try:
        for build in (
            lambda: lookup_join(df, table, on=[("cid", "id")]),
            lambda: async_map(df, _worker_threshold, "n INT, young INT", timeout=10),
        ):
            with no_job(), pytest.raises(ConfigurationError) as info:
                build()
            assert CONF_GC_YOUNG_THRESHOLD in str(info.value) and repr(bad) in str(info.value)
    finally:
        spark.conf.unset(CONF_GC_YOUNG_THRESHOLD)
