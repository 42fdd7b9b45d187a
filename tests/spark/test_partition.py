"""The executor side of a lookup join, run in this process without Spark: one partition's
Arrow batches in, Arrow batches out, on the process loop (docs/design.md "How a lookup join
runs")."""

from __future__ import annotations

import asyncio
import pickle
import threading
import uuid
from collections.abc import Collection, Iterable, Iterator
from types import MappingProxyType
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from asyncio_lookup.connectors import InMemoryConnector
from asyncio_lookup.errors import LookupFailedError, ResultTypeError
from asyncio_lookup.lookup.functions import AsyncLookupFunction, Key, Row
from asyncio_lookup.lookup.hint_resolve import resolve_lookup
from asyncio_lookup.lookup.join import JoinedBatch, JoinSpec, JoinType, KeyBinding
from asyncio_lookup.lookup.options import LookupOptions
from asyncio_lookup.lookup.registry import chain_ids
from asyncio_lookup.runtime.loop import process_loop
from asyncio_lookup.spark.job_metrics import fold
from asyncio_lookup.spark.metrics import METRICS_COLUMN
from asyncio_lookup.spark.table import LookupTable
from asyncio_lookup.spark.task import DimColumn, LookupJoinTask
from tests.spark.helpers import BoomError, FailingConnector, SyncOnly

DIM = [{"id": i, "name": f"n{i}"} for i in range(10)] + [{"id": 4, "name": "n4-b"}]
COLUMNS = (DimColumn("id", "dim_id", pa.int32()), DimColumn("name", "name", pa.string()))


def split(outputs: Iterable[pa.RecordBatch]) -> tuple[list[pa.RecordBatch], list[str]]:
    """A task's output: its data batches (without the metrics column), and its trailers (one
    before its 1st, 2nd, 4th... data batch, a final one at the end of a successful task)."""
    data: list[pa.RecordBatch] = []
    reports: list[str] = []
    for batch in outputs:
        metrics = batch.column(METRICS_COLUMN)
        if metrics.null_count == len(metrics):
            data.append(batch.drop_columns([METRICS_COLUMN]))
        else:
            assert batch.num_rows == 1, "a trailer is one row"
            reports.append(metrics[0].as_py())
    return data, reports


def make_task(
    connector: Any,
    hint: str | None = None,
    how: JoinType = JoinType.LEFT,
    columns: tuple[DimColumn, ...] = COLUMNS,
) -> LookupJoinTask:
    return LookupJoinTask(
        table_id=uuid.uuid4().hex,
        table_name="T",
        connector=connector,
        options=LookupOptions(),
        hint=resolve_lookup(hint, "T"),
        spec=JoinSpec(how, (KeyBinding("id", left_column="cid"),)),
        dim_columns=columns,
    )


def batches(*ids: list[Any]) -> list[pa.RecordBatch]:
    return [
        pa.RecordBatch.from_pydict(
            {"cid": pa.array(chunk, pa.int32()), "tag": [f"t{c}" for c in chunk]}
        )
        for chunk in ids
    ]


def loop_tasks() -> set[asyncio.Task[Any]]:
    return {t for t in asyncio.all_tasks(process_loop()) if not t.done()}


@pytest.mark.parametrize(
    "hint",
    [
        "LOOKUP('table'='T', 'capacity'='2')",
        "LOOKUP('table'='T', 'output-mode'='allow_unordered')",
        "LOOKUP('table'='T', 'async'='false')",
    ],
)
def test_a_partition_gathers_left_columns_and_builds_dim_columns(hint: str) -> None:
    task = make_task(InMemoryConnector(DIM, ["id"], latency=0.001), hint)
    data, reports = split(task(iter(batches([4, None, 11], [], [2]))))
    out = pa.Table.from_batches(data)
    assert out.schema == pa.schema(
        [("cid", pa.int32()), ("tag", pa.string()), ("dim_id", pa.int32()), ("name", pa.string())]
    )
    rows = out.to_pylist()
    expected = [
        {"cid": 4, "tag": "t4", "dim_id": 4, "name": "n4"},
        {"cid": 4, "tag": "t4", "dim_id": 4, "name": "n4-b"},
        {"cid": None, "tag": "tNone", "dim_id": None, "name": None},
        {"cid": 11, "tag": "t11", "dim_id": None, "name": None},
        {"cid": 2, "tag": "t2", "dim_id": 2, "name": "n2"},
    ]
    if "unordered" in hint:
        assert sorted(map(str, rows)) == sorted(map(str, expected))
    else:
        assert rows == expected
    metrics = fold(reports)
    assert metrics.tasks == 1 and metrics.partial is None
    assert len(reports) == len(data) + 1  # before the 1st and 2nd output batch, the final one
    assert metrics["numLookups"] == 3
    assert ("numCompleted" in metrics) == ("async'='false" not in hint)
    assert loop_tasks() == set()


def test_a_source_without_async_runs_sync_whatever_the_hint() -> None:
    task = make_task(
        SyncOnly(InMemoryConnector(DIM, ["id"])), "LOOKUP('table'='T', 'async'='true')"
    )
    data, reports = split(task(iter(batches([1, 2]))))
    rows = [r for b in data for r in b.to_pylist()]
    assert [r["name"] for r in rows] == ["n1", "n2"]
    assert "numCompleted" not in fold(reports)


class CountingOpens(AsyncLookupFunction):
    opens = 0

    async def open(self) -> None:
        type(self).opens += 1

    async def async_lookup(self, key: Key) -> Collection[Row]:
        return [{"id": key[0], "name": "x"}]


class CountingSource:
    def lookup_function(self) -> None:
        return None

    def async_lookup_function(self) -> AsyncLookupFunction:
        return CountingOpens()

    def scan(self) -> None:
        return None


def test_successive_tasks_of_a_process_share_one_opened_chain() -> None:
    task = make_task(CountingSource())
    before = CountingOpens.opens
    reported = 0
    for _ in range(3):
        data, reports = split(task(iter(batches([1, 2, 3]))))
        assert sum(b.num_rows for b in data) == 3
        reported += fold(reports).tasks
    assert CountingOpens.opens == before + 1
    assert sum(1 for c in chain_ids() if c.startswith(task.table_id)) == 1
    assert reported == 3


@pytest.mark.parametrize("hint", ["LOOKUP('table'='T')", "LOOKUP('table'='T', 'async'='false')"])
def test_a_failing_partition_raises_the_named_error_and_leaves_the_loop_clean(
    hint: str,
) -> None:
    task = make_task(FailingConnector({1: [{"id": 1, "name": "a"}]}, bad_key=5), hint)
    outputs: list[pa.RecordBatch] = []
    with pytest.raises(LookupFailedError, match="rejected key 5") as raised:
        outputs.extend(task(iter(batches(list(range(8)), list(range(8, 20))))))
    assert str(raised.value).startswith("lookup table 'T' (FailingConnector), key (5,): BoomError")
    assert isinstance(raised.value.__cause__, BoomError)  # the original, as the cause
    assert loop_tasks() == set()
    assert split(outputs)[1] == []  # a failed task reports nothing
    # the next partition of this process runs normally on the same loop
    ok = make_task(InMemoryConnector(DIM, ["id"]), hint)
    assert sum(b.num_rows for b in split(ok(iter(batches([1, 2]))))[0]) == 2


def test_closing_a_partition_early_cancels_its_lookups() -> None:
    task = make_task(
        InMemoryConnector(DIM, ["id"], latency=0.05), "LOOKUP('table'='T', 'capacity'='50')"
    )
    stream = task(iter(batches([1], list(range(10)) * 5, list(range(10)))))
    first = next(stream)
    assert first.num_rows == 1
    stream.close()
    # What is left belongs to the shared chain, not the partition: a batched connector call
    # that other lookups could still join; it finishes by itself (nothing waits on it).
    left = loop_tasks()
    assert all("KeyBatcher._call" in repr(t) for t in left)
    process_loop().run_until_complete(asyncio.wait(left, timeout=5) if left else asyncio.sleep(0))
    assert loop_tasks() == set()


def test_dim_columns_from_any_mapping_rows_and_missing_fields() -> None:
    # Rows are Mappings (not necessarily dicts); a field a row lacks is NULL, extra ones are
    # ignored; a LEFT miss pads every dim column.
    rows = {1: [MappingProxyType({"id": 1, "name": "a"})], 2: [{"id": 2, "extra": True}]}
    task = make_task(SyncOnly(InMemoryConnector([], ["id"])))
    out = task.output(JoinedBatch(batches([1, 2, 3])[0], [0, 1, 2], [rows[1][0], rows[2][0], None]))
    assert out.to_pylist() == [
        {"cid": 1, "tag": "t1", "dim_id": 1, "name": "a"},
        {"cid": 2, "tag": "t2", "dim_id": 2, "name": None},
        {"cid": 3, "tag": "t3", "dim_id": None, "name": None},
    ]


def test_a_dim_value_of_the_wrong_type_is_a_clear_error() -> None:
    bad = [{"id": 1, "name": "n1", "born": "yesterday"}]
    columns = (*COLUMNS, DimColumn("born", "born", pa.date32()))
    task = make_task(InMemoryConnector(bad, ["id"]), columns=columns)
    with pytest.raises(ResultTypeError) as error:
        list(task(iter(batches([1]))))
    message = str(error.value)
    assert "lookup table 'T'" in message
    assert "column 'born' returned str value 'yesterday'" in message
    assert "date32" in message


class SignalsLookups(AsyncLookupFunction):
    """Sets ``done`` when a lookup has completed (on the loop thread)."""

    def __init__(self, done: threading.Event) -> None:
        self.done = done

    async def async_lookup(self, key: Key) -> Collection[Row]:
        await asyncio.sleep(0.01)
        self.done.set()
        return [{"id": key[0], "name": "x"}]


class SignalsSource:
    def __init__(self, done: threading.Event) -> None:
        self.done = done

    def lookup_function(self) -> None:
        return None

    def async_lookup_function(self) -> AsyncLookupFunction:
        return SignalsLookups(self.done)

    def scan(self) -> None:
        return None


def test_reading_input_does_not_starve_in_flight_lookups() -> None:
    done = threading.Event()
    starved: list[bool] = []

    def input_batches() -> Iterator[pa.RecordBatch]:
        first, second = batches([1, 2, 3], [4])
        yield first
        # Like the JVM being slow to send the next batch: this read only ends once a lookup
        # of the first batch has completed, which needs the loop to keep running meanwhile.
        starved.append(not done.wait(10))
        yield second

    task = make_task(SignalsSource(done))
    out = [r["cid"] for b in split(task(input_batches()))[0] for r in b.to_pylist()]
    assert out == [1, 2, 3, 4]
    assert starved == [False]


def test_lookup_table_id_survives_pickling() -> None:
    table = LookupTable(
        "T",
        StructType([StructField("id", IntegerType()), StructField("name", StringType())]),
        InMemoryConnector(DIM, ["id"]),
    )
    copy = pickle.loads(pickle.dumps(table))
    assert copy.table_id == table.table_id
    assert copy.schema == table.schema
    assert LookupTable("T", table.schema, InMemoryConnector(DIM, ["id"])).table_id != table.table_id
