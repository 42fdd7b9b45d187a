"""``async_map``'s task driven without Spark: its mapInArrow function over Arrow batches."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from asyncio_lookup.errors import ResultTypeError
from asyncio_lookup.runtime import RetryStrategies
from asyncio_lookup.spark.async_map_task import AsyncMapTask

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("price", pa.float64())])


def task(fn: Any, schema: pa.Schema = SCHEMA, **settings: Any) -> AsyncMapTask:
    """``async_map``'s task of ``fn`` (ordered, capacity 10, 10 s, no retry, no metrics)."""
    defaults: dict[str, Any] = {
        "timeout": 10.0,
        "capacity": 10,
        "output_mode": "ordered",
        "retry_strategy": RetryStrategies.NO_RETRY,
        "metrics_id": None,
    }
    if schema is SCHEMA:
        defaults["not_null"] = (1,)  # price DOUBLE NOT NULL
    return AsyncMapTask(fn=fn, schema=schema, **{**defaults, **settings})


@pytest.mark.parametrize(
    ("output", "said"), [({"price": None}, "has None there"), ({}, "has no value there")]
)
def test_a_null_in_a_not_null_column_names_the_column_and_the_row(
    output: dict[str, Any], said: str
) -> None:
    """Spark failed the task with 'Value at index is null' (or a NullPointerException),
    naming nothing."""

    async def fn(row: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"id": row["id"], **({"price": 1.5} if row["id"] != 2 else output)}]

    batch = pa.RecordBatch.from_pylist([{"id": i} for i in range(4)])
    with pytest.raises(ResultTypeError, match=rf"'price' is NOT NULL.*{said}.*'id': 2"):
        list(task(fn)(iter([batch])))

    async def fine(row: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"id": row["id"], "price": 1.5}]

    out = pa.Table.from_batches(list(task(fine)(iter([batch]))))
    assert out.column("price").to_pylist() == [1.5] * 4


def test_a_map_column_reaches_the_function_as_a_dict_and_passes_through() -> None:
    """Arrow gave a MAP value as a list of (key, value) pairs: ``row['m']['a']`` failed, and a
    MAP passed through unchanged failed the task ('list value ... does not fit')."""
    kinds = pa.map_(pa.string(), pa.int32())
    schema = pa.schema(
        [pa.field("id", pa.int64()), pa.field("m", kinds), pa.field("a", pa.int32())]
    )
    maps = [[("a", 1), ("b", 2)], [], None]
    batch = pa.RecordBatch.from_arrays(
        [pa.array([0, 1, 2], pa.int64()), pa.array(maps, kinds)], names=["id", "m"]
    )

    async def fn(row: dict[str, Any]) -> list[dict[str, Any]]:
        m = row["m"]
        return [{"id": row["id"], "m": m, "a": None if m is None else m.get("a")}]

    mapped = task(fn, schema)
    out = pa.Table.from_batches(list(mapped(iter([batch]))))
    assert out.column("m").to_pylist() == maps
    assert out.column("a").to_pylist() == [1, None, None]


def test_a_map_keyed_by_arrays_stays_pairs() -> None:
    """No dict can hold a list key: the task failed (unhashable type: 'list')."""
    kinds = pa.map_(pa.list_(pa.int32()), pa.int32())
    plain = pa.map_(pa.string(), pa.int32())
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([1], pa.int64()),
            pa.array([[([1, 2], 3)]], kinds),
            pa.array([[("a", 5)]], plain),
        ],
        names=["id", "m", "p"],
    )

    async def fn(row: dict[str, Any]) -> list[dict[str, Any]]:
        assert row["m"] == [([1, 2], 3)] and row["p"] == {"a": 5}  # the other map a dict still
        return [{"id": row["id"] + 1}]

    mapped = task(fn, pa.schema([pa.field("id", pa.int64())]))
    out = pa.Table.from_batches(list(mapped(iter([batch]))))
    assert out.column("id").to_pylist() == [2]


def test_an_output_dict_with_a_key_that_is_no_text_is_named() -> None:
    """difflib failed the task with 'object of type int has no len()'."""

    async def fn(row: dict[str, Any]) -> list[dict[str, Any]]:
        return [{0: row["id"]}]

    batch = pa.RecordBatch.from_pylist([{"id": i} for i in range(2)])
    mapped = task(fn, pa.schema([pa.field("id", pa.int64())]))
    out = pa.Table.from_batches(list(mapped(iter([batch]))))
    assert out.column("id").to_pylist() == [None, None]


def test_a_timeout_that_fails_the_task_names_the_function_and_the_limit() -> None:
    """Spark showed Flink's "Async function call has timed out." alone."""
    import asyncio

    async def slow(row: dict[str, Any]) -> list[dict[str, Any]]:
        await asyncio.sleep(5)
        return [row]

    mapped = task(slow, pa.schema([pa.field("id", pa.int64())]), timeout=0.05, name="scoring")
    batch = pa.RecordBatch.from_pylist([{"id": 1}])
    with pytest.raises(
        TimeoutError,
        match=r"async_map 'scoring': a row did not finish within "
        r"0.05 s \(retries included\): Async function call has timed out",
    ):
        list(mapped(iter([batch])))

    async def slow_batch(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
        await asyncio.sleep(5)
        return [[row] for row in rows]

    # batched, the limits are a batch's: the message spoke of a row and AsyncFunction.timeout()
    batched = task(
        slow_batch, pa.schema([pa.field("id", pa.int64())]), timeout=0.05, name="scoring",
        batch_size=4,
    )  # fmt: skip
    with pytest.raises(TimeoutError) as raised:
        list(batched(iter([batch])))
    said = str(raised.value)
    assert "a batch of rows did not finish" in said and "'capacity' (10 batches)" in said
    assert "AsyncBatchFunction.timeout(rows)" in said


def test_a_batch_function_without_batch_size_is_named_as_such() -> None:
    """A function over a list of rows, given no batch_size, is called per row: its outputs are
    lists, and the error said only 'each output must be a dict'."""

    async def per_batch(rows: Any) -> list[list[Any]]:
        return [[row] for row in rows]

    mapped = task(per_batch, pa.schema([pa.field("id", pa.int64())]))
    batch = pa.RecordBatch.from_pylist([{"id": 1}])
    with pytest.raises(ResultTypeError, match=r"batch_size=N"):
        list(mapped(iter([batch])))
