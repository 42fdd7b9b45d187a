"""Batched ``async_map`` end to end (docs/semantics.md §1.8) against a local aiohttp service
that takes lists of ids: results, order, batch sizes seen by the service, per-batch timeout,
retry and errors, driver-side validation; classic and Spark Connect."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from pyspark.sql import DataFrame, SparkSession

from asyncio_lookup import (
    AsyncBatchFunction,
    AsyncFunction,
    ConfigurationError,
    OutputMode,
    RetryPredicates,
    RetryStrategies,
)
from asyncio_lookup.spark import async_map, async_map_metrics, split_failed
from tests.services import BackgroundService
from tests.spark.conftest import no_spark_job

SCHEMA = "n INT, score INT"


class ScoreService(BackgroundService):
    """``POST /scores`` with ``{"ids": [...]}`` answers ``{"scores": [n * 10 ...]}``.

    ``?fail=k`` answers 500 for a list holding ``k`` (``?fail_once=k``: only its first time);
    ``?slow=k`` never answers in time for a list holding ``k``. Records every list's size.
    """

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []
        self.seen: Counter[int] = Counter()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/scores"

    def reset(self) -> None:
        with self.lock:
            self.sizes = []
            self.seen = Counter()

    async def _scores(self, request: web.Request) -> web.Response:
        ids = (await request.json())["ids"]
        with self.lock:
            self.sizes.append(len(ids))
            first_time = all(self.seen[i] == 0 for i in ids)
            self.seen.update(ids)
        query = request.query
        if "fail" in query and int(query["fail"]) in ids:
            return web.json_response({"error": "boom"}, status=500)
        if "fail_once" in query and int(query["fail_once"]) in ids and first_time:
            return web.json_response({"error": "once"}, status=503)
        if "slow" in query and int(query["slow"]) in ids:
            await asyncio.sleep(30)
        return web.json_response({"scores": [i * 10 for i in ids]})

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/scores", self._scores)


@pytest.fixture(scope="module")
def service() -> Iterator[ScoreService]:
    running = ScoreService()
    running.start()
    yield running
    running.stop()


class Scores(AsyncBatchFunction[dict[str, Any], dict[str, Any]]):
    """One POST per batch; ``fallback`` answers a timed-out batch's rows with a NULL score."""

    def __init__(self, url: str, *, short_by: int = 0, fallback: bool = False) -> None:
        self.url = url
        self.short_by = short_by
        self.fallback = fallback
        self.session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        self.session = aiohttp.ClientSession()

    async def async_invoke_batch(self, rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
        assert self.session is not None
        async with self.session.post(self.url, json={"ids": [r["n"] for r in rows]}) as response:
            response.raise_for_status()
            scores = (await response.json())["scores"]
        out = [[{"n": r["n"], "score": s}] for r, s in zip(rows, scores, strict=True)]
        return out[: len(out) - self.short_by]

    async def timeout(self, rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
        if not self.fallback:
            raise TimeoutError("batch timed out")
        return [[{"n": r["n"], "score": None}] for r in rows]

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()


def numbers(spark: SparkSession, n: int = 100) -> DataFrame:
    return spark.range(0, n, numPartitions=2).selectExpr("CAST(id AS INT) AS n")


@pytest.mark.parametrize("mode", [OutputMode.ORDERED, "allow_unordered"])
def test_batched_async_map_calls_the_service_once_per_batch(
    spark: SparkSession, service: ScoreService, mode: OutputMode | str
) -> None:
    service.reset()
    metrics_id = f"batched-{mode}"
    out = async_map(
        numbers(spark),
        Scores(service.url),
        SCHEMA,
        timeout=10,
        capacity=2,
        output_mode=mode,
        batch_size=8,
        batch_timeout=5.0,
        metrics_id=metrics_id,
    )
    rows = [tuple(r) for r in out.collect()]
    want = [(n, n * 10) for n in range(100)]
    if mode is OutputMode.ORDERED:
        assert rows == want  # input order, partition by partition
    else:
        assert sorted(rows) == want
    # two partitions of 50 rows: six full batches each, the partial last one flushed at the end
    assert Counter(service.sizes) == {8: 12, 2: 2}
    assert service.seen == Counter(range(100))  # every row sent exactly once
    assert async_map_metrics(metrics_id)["numCompleted"] == 14  # batches


def test_results_equal_per_row_async_map(spark: SparkSession, service: ScoreService) -> None:
    async def per_row(row: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"n": row["n"], "score": row["n"] * 10}]

    df = numbers(spark, 300)
    batched = async_map(df, Scores(service.url), SCHEMA, timeout=10, batch_size=32)
    single = async_map(df, per_row, SCHEMA, timeout=10)
    assert sorted(batched.collect()) == sorted(single.collect())


def test_a_wrong_number_of_results_fails_with_the_batch_size_and_count(
    spark: SparkSession, service: ScoreService
) -> None:
    out = async_map(numbers(spark), Scores(service.url, short_by=1), SCHEMA, 10, batch_size=8)
    with pytest.raises(Exception) as error:
        out.collect()
    assert "returned 7 results for a batch of 8 rows" in str(error.value)


def test_a_failed_batch_fails_the_job_and_a_retried_one_is_called_again(
    spark: SparkSession, service: ScoreService
) -> None:
    failing = async_map(
        numbers(spark), Scores(f"{service.url}?fail=13"), SCHEMA, timeout=10, batch_size=8
    )
    with pytest.raises(Exception) as error:
        failing.collect()
    assert "500" in str(error.value)

    service.reset()
    retry = RetryStrategies.fixed_delay(
        2, 0.01, exception_predicate=RetryPredicates.exception_type(aiohttp.ClientResponseError)
    )
    retried = async_map(
        numbers(spark),
        Scores(f"{service.url}?fail_once=13"),
        SCHEMA,
        timeout=10,
        retry_strategy=retry,
        batch_size=8,
        metrics_id="batched-retry",
    )
    assert sorted(tuple(r) for r in retried.collect()) == [(n, n * 10) for n in range(100)]
    assert async_map_metrics("batched-retry")["numRetries"] == 1
    assert service.seen[13] == 2 and service.seen[12] == 2 and service.seen[20] == 1


def test_with_error_output_a_failed_batch_marks_exactly_its_rows(
    spark: SparkSession, service: ScoreService
) -> None:
    out = async_map(
        numbers(spark),
        Scores(f"{service.url}?fail=13"),
        SCHEMA,
        timeout=10,
        batch_size=8,
        on_error="keep",
        metrics_id="batched-keep",
    )
    good, failed = split_failed(out)
    assert sorted(tuple(r) for r in good.collect()) == [
        (n, n * 10) for n in range(100) if not 8 <= n < 16
    ]
    bad = failed.collect()
    # the batch holding 13 is rows 8..15 of the first partition: each is kept once, marked
    assert sorted(json.loads(r.lookup_error.key)["n"] for r in bad) == list(range(8, 16))
    assert all(r.n is None and "500" in r.lookup_error.message for r in bad)
    assert async_map_metrics("batched-keep")["numFailedRows"] == 8


def test_a_timed_out_batch_reaches_exactly_its_rows(
    spark: SparkSession, service: ScoreService
) -> None:
    out = async_map(
        numbers(spark),
        Scores(f"{service.url}?slow=13", fallback=True),
        SCHEMA,
        timeout=1.0,
        batch_size=8,
    )
    rows = dict(tuple(r) for r in out.collect())
    # partition 0 holds 0..49: the batch of 13 is rows 8..15
    assert rows == {n: None if 8 <= n < 16 else n * 10 for n in range(100)}


class PerRowScore(AsyncFunction[dict[str, Any], dict[str, Any]]):
    async def async_invoke(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        return [row]


@pytest.mark.parametrize(
    ("kwargs", "option", "message"),
    [
        ({"batch_size": 0}, "batch_size", "must be at least 1"),
        ({"batch_size": 8, "batch_timeout": -1}, "batch_timeout", "must be > 0"),
        ({"batch_timeout": 1.0}, "batch_timeout", "unless batch_size is set"),
        ({"fn": PerRowScore(), "batch_size": 8}, "fn", "takes one row"),
        ({"batch_size": None}, "batch_size", "AsyncBatchFunction, which takes a list"),
    ],
)
def test_batching_is_validated_on_the_driver(
    spark: SparkSession, kwargs: dict[str, Any], option: str, message: str
) -> None:
    arguments: dict[str, Any] = {"fn": Scores("http://127.0.0.1:1/scores"), **kwargs}
    with no_spark_job(spark), pytest.raises(ConfigurationError, match=message) as error:
        async_map(numbers(spark), schema=SCHEMA, timeout=1.0, **arguments)
    assert error.value.option == option
