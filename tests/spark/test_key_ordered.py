"""Key-ordered mode (FLIP-519) end to end on local Spark, classic and Connect: async_map keyed by
columns, lookup_join keyed by the lookup key (hint, job default, LookupSQL), and a Structured
Streaming change stream upserted in foreachBatch that ends as a sequential reference does."""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.lookup.functions import AsyncLookupFunction, Key, Row
from asyncio_lookup.lookup.providers import AsyncLookupFunctionProvider
from asyncio_lookup.spark import LookupSQL, LookupTable, async_map, lookup_join

pytestmark = pytest.mark.spark

KEYS = 12
UPDATES = [(seq, (seq * 7) % KEYS) for seq in range(240)]  # (seq, key): 20 updates per key


def updates(spark: SparkSession) -> DataFrame:
    """Each key's rows in one partition, in seq order (the order key order keeps)."""
    return (
        spark.createDataFrame(UPDATES, "seq INT, k INT")
        .repartition(2, "k")
        .sortWithinPartitions("seq")
    )


RUNNING: dict[Any, int] = {}  # per worker process, which runs one task's operator at a time


async def _probe_row(row: dict[str, Any]) -> list[dict[str, Any]]:
    """Random latency, later rows faster; reports how many calls of the row's key ran at once."""
    key = row["k"]
    RUNNING[key] = RUNNING.get(key, 0) + 1
    together = RUNNING[key]
    try:
        await asyncio.sleep(random.random() * 0.004 + (240 - row["seq"]) * 0.00002)
    finally:
        RUNNING[key] -= 1
    return [{"seq": row["seq"], "k": key, "together": together}]


def test_async_map_key_ordered_keeps_each_keys_order(spark: SparkSession) -> None:
    out = async_map(
        updates(spark),
        _probe_row,
        "seq INT, k INT, together INT",
        timeout=30,
        capacity=32,
        output_mode="key_ordered",
        key="k",
    )
    rows = [tuple(r) for r in out.collect()]
    assert sorted((s, k) for s, k, _ in rows) == sorted(UPDATES)
    for key in range(KEYS):
        assert [s for s, k, _ in rows if k == key] == [s for s, k in UPDATES if k == key]
    assert {together for _, _, together in rows} == {1}


def test_async_map_key_ordered_is_checked_on_the_driver(spark: SparkSession, no_job: Any) -> None:
    df = updates(spark)
    with no_job():
        with pytest.raises(ConfigurationError, match=r"'key'.*seq, k"):
            async_map(df, _probe_row, "seq INT", timeout=1, output_mode="key_ordered", key="x")
        with pytest.raises(ConfigurationError, match="keeps order per key"):
            async_map(df, _probe_row, "seq INT", timeout=1, output_mode="key_ordered")
        with pytest.raises(ConfigurationError, match="does not use a key"):
            async_map(df, _probe_row, "seq INT", timeout=1, output_mode="unordered", key="k")
        with pytest.raises(ConfigurationError, match=r"'ordered'.*'unordered'.*'key_ordered'"):
            async_map(df, _probe_row, "seq INT", timeout=1, output_mode="keyed", key="k")
        with pytest.raises(ConfigurationError, match="per record"):
            async_map(
                df, _probe_row, "seq INT", timeout=1, output_mode="key_ordered", key="k",
                batch_size=4,
            )  # fmt: skip
        # a VARIANT reaches Python as a dict, which no key can be: it failed in the task
        variant = df.selectExpr("seq", "parse_json(cast(k AS STRING)) AS v")
        with pytest.raises(ConfigurationError, match=r"'v' is variant.*atomic type"):
            async_map(variant, _probe_row, "seq INT", timeout=1, output_mode="key_ordered", key="v")


class Versions(AsyncLookupFunction):
    """A dim row per key; random latency, later rows of a key answered faster."""

    async def async_lookup(self, key: Key) -> Collection[Row]:
        await asyncio.sleep(random.random() * 0.004)
        return [{"k": key[0], "name": f"name-{key[0]}"}]


def dim() -> LookupTable:
    return LookupTable("Names", "k INT, name STRING", AsyncLookupFunctionProvider.of(Versions()))


def _per_key_in_order(rows: list[tuple[Any, ...]]) -> None:
    assert sorted((s, k) for s, k, *_ in rows) == sorted(UPDATES)
    for key in range(KEYS):
        assert [s for s, k, *_ in rows if k == key] == [s for s, k in UPDATES if k == key]
    assert all(name == f"name-{k}" for _, k, _, name in rows)


@pytest.mark.parametrize("how", ["hint", "job default", "sql"])
def test_lookup_join_key_ordered(spark: SparkSession, how: str) -> None:
    names = dim()
    if how == "sql":
        updates(spark).selectExpr("*", "current_timestamp() AS proc_time").createOrReplaceTempView(
            "Updates"
        )
        sql = LookupSQL(spark)
        sql.register(names)
        out = sql.sql(
            "SELECT /*+ LOOKUP('table'='Names', 'output-mode'='key_ordered', 'capacity'='32') */ "
            "u.seq, u.k, n.k AS dim_k, n.name FROM Updates AS u "
            "JOIN Names FOR SYSTEM_TIME AS OF u.proc_time AS n ON u.k = n.k"
        )
        _per_key_in_order([tuple(r) for r in out.collect()])
        return
    mode = "key_ordered" if how == "hint" else "allow_unordered"
    hint = f"LOOKUP('table'='Names', 'output-mode'='{mode}', 'capacity'='32')"
    conf = "table.exec.async-lookup.key-ordered-enabled"
    if how == "job default":
        spark.conf.set(conf, "true")
    try:
        out = lookup_join(updates(spark), names, on="k", hints=hint, prefix="dim_")
        rows = [tuple(r) for r in out.collect()]
    finally:
        spark.conf.unset(conf)
    _per_key_in_order(rows)


# ------------------------------------------------------------------ Structured Streaming


def _write_changes(source: Path) -> list[dict[str, Any]]:
    """Three files of changes, many per key; ``v`` is the value the change sets."""
    rng = random.Random(11)
    changes = [{"seq": n, "k": rng.randrange(KEYS), "v": rng.randrange(1000)} for n in range(300)]
    for part in range(3):
        rows = changes[part * 100 : (part + 1) * 100]
        path = source / f"part-{part}.json"
        path.write_text("\n".join(json.dumps(r) for r in rows))
        os.utime(path, (1_700_000_000 + part, 1_700_000_000 + part))  # read in this order
    return changes


class LateEveryThird(AsyncLookupFunction):
    """Every third lookup of a key (per task) misses, as if the dim row arrived late: the
    lookup-miss retry finds it. In UNORDERED mode a later change of the key overtakes the one
    whose lookup is waiting to retry (the later one's lookup finds the row at once); KEY_ORDERED
    makes it wait."""

    def __init__(self) -> None:
        self.calls: dict[Key, int] = {}

    async def async_lookup(self, key: Key) -> Collection[Row]:
        self.calls[key] = self.calls.get(key, 0) + 1
        await asyncio.sleep(random.random() * 0.004)
        if self.calls[key] % 3 == 0:
            return []
        return [{"k": key[0], "name": f"name-{key[0]}"}]


STREAM_HINT = (
    "LOOKUP('table'='Names', 'output-mode'='{mode}', 'capacity'='64', "
    "'retry-predicate'='lookup_miss', 'retry-strategy'='fixed_delay', 'fixed-delay'='20ms', "
    "'max-attempts'='2')"
)


def _upsert_into(state_file: str) -> Callable[[DataFrame, int], None]:
    def upsert(batch: DataFrame, batch_id: int) -> None:
        state = json.loads(Path(state_file).read_text()) if Path(state_file).exists() else {}
        for row in batch.collect():  # in the order the operator emitted them
            state[str(row["k"])] = [row["seq"], row["v"], row["dim_name"]]
        Path(state_file).write_text(json.dumps(state))

    return upsert


def test_a_change_stream_upserted_in_key_order_ends_as_the_sequential_reference(
    spark: SparkSession, tmp_path: Path
) -> None:
    source = tmp_path / "changes"
    source.mkdir()
    changes = _write_changes(source)
    reference: dict[str, list[Any]] = {}
    for change in changes:  # one change after another
        reference[str(change["k"])] = [change["seq"], change["v"], f"name-{change['k']}"]
    stream = (
        spark.readStream.schema("seq INT, k INT, v INT")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
    )
    names = LookupTable(
        "Names", "k INT, name STRING", AsyncLookupFunctionProvider.of(LateEveryThird())
    )
    enriched = lookup_join(
        stream, names, on="k", hints=STREAM_HINT.format(mode="key_ordered"), prefix="dim_"
    )
    assert _upserted(enriched, tmp_path) == reference


# Spark waits a fixed 10 s (PythonWorkerFactory.createSimpleWorker) for a streaming query's
# foreachBatch Python worker to connect back. That worker imports PySpark from pyspark.zip (no
# bytecode cache: 1.3 s on an idle machine), and on a loaded 2-core machine the Connect server's
# worker has missed it twice in a row (CI, stop 47) before running anything. Such a start is
# retried, after a pause and on a fresh checkpoint, up to _STARTS times.
_WORKER_NOT_STARTED = "Python worker failed to connect back"
_STARTS = 4


def _upserted(stream: Any, tmp_path: Path) -> Any:
    """Run ``stream`` to its end, upserting each micro-batch; the final state."""
    state_file = tmp_path / "state.json"
    for attempt in range(_STARTS):
        try:
            query = (
                stream.writeStream.foreachBatch(_upsert_into(str(state_file)))
                .option("checkpointLocation", str(tmp_path / f"checkpoint-{attempt}"))
                .trigger(availableNow=True)
                .start()
            )
            break
        except Exception as error:
            last = attempt == _STARTS - 1
            if last or _WORKER_NOT_STARTED not in str(error) or state_file.exists():
                raise
            time.sleep(5)
    try:
        query.awaitTermination(180)
        assert query.exception() is None
    finally:
        query.stop()
    return json.loads(state_file.read_text())


async def _change_row(row: dict[str, Any]) -> list[dict[str, Any]]:
    await asyncio.sleep(random.random() * 0.005)  # later changes of a key may finish first
    return [{"seq": row["seq"], "k": row["k"], "v": row["v"], "dim_name": f"name-{row['k']}"}]


def test_async_map_key_ordered_on_a_stream_ends_as_the_sequential_reference(
    spark: SparkSession, tmp_path: Path
) -> None:
    source = tmp_path / "changes"
    source.mkdir()
    changes = _write_changes(source)
    reference = {str(c["k"]): [c["seq"], c["v"], f"name-{c['k']}"] for c in changes}
    stream = (
        spark.readStream.schema("seq INT, k INT, v INT")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .repartition(2, "k")  # a file is one partition: each key's changes in one, in file order
    )
    mapped = async_map(
        stream,
        _change_row,
        "seq INT, k INT, v INT, dim_name STRING",
        timeout=30,
        capacity=64,
        output_mode="key_ordered",
        key=["k"],
    )
    assert _upserted(mapped, tmp_path) == reference


def test_async_map_key_orders_every_nan_as_one_key() -> None:
    # Arrow gives each NaN its own float object; Spark groups them all under one key
    import pyarrow as pa

    from asyncio_lookup.runtime.datastream import AsyncDataStream
    from asyncio_lookup.spark.async_map_task import RowKey

    batch = pa.RecordBatch.from_pydict(
        {"k": [float("nan"), float("nan"), 1.0], "j": [float("nan")] * 3, "i": [0, 1, 2]}
    )
    rows = batch.to_pylist()
    assert rows[0]["k"] is not rows[1]["k"]
    running: list[int] = []
    for key in (RowKey(("k",)), RowKey(("k", "j"))):

        async def call(row: dict[str, Any]) -> list[int]:
            running.append(row["i"])
            await asyncio.sleep(0.05 if row["i"] == 0 else 0.001)  # the first NaN row slower
            together = len(running)
            running.remove(row["i"])
            return [(row["i"], together)]  # type: ignore[list-item]

        out = list(AsyncDataStream.key_ordered_wait(rows, call, key, 5))
        nan_rows = [(i, together) for i, together in out if i in (0, 1)]
        assert nan_rows == [(0, 1), (1, 1)]  # in order, never both in flight
        assert [key(rows[0])] == [key(rows[1])]  # one object: list equality tries `is` first
