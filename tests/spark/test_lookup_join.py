"""lookup_join and async_map end to end on local Spark (one shared SparkSession)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from asyncio_lookup.connectors import InMemoryConnector
from asyncio_lookup.connectors.http_connector import HttpConnector
from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.runtime import OutputMode, RetryPredicates, RetryStrategies
from asyncio_lookup.spark import LookupTable, async_map, async_map_metrics, lookup_join
from asyncio_lookup.spark.join import LookupJoinArgs, plan_lookup_join
from tests.spark.conftest import no_spark_job
from tests.spark.helpers import (
    DimService,
    FailingConnector,
    FlakyDouble,
    FlakyError,
    ScanOnly,
    physical_plan,
)

pytestmark = pytest.mark.spark

SCHEMA = "id INT, name STRING, country STRING"
DIM = [{"id": i, "name": f"c{i}", "country": ["NL", "DE", "FR"][i % 3]} for i in range(1, 30)]
DIM.insert(3, {"id": 2, "name": "c2-second", "country": "BE"})  # two rows for id 2
DIM_BY_ID: dict[int, list[dict[str, Any]]] = {}
for _row in DIM:
    DIM_BY_ID.setdefault(_row["id"], []).append(_row)

ORDERS = [(n, None if n % 9 == 0 else (n * 11) % 35, float(n)) for n in range(120)]


def orders(spark: SparkSession, partitions: int = 2) -> DataFrame:
    return (
        spark.createDataFrame(ORDERS, "order_id INT, customer_id INT, amount DOUBLE")
        .repartition(partitions, "order_id")
        .sortWithinPartitions("order_id")
    )


def expected(how: str, rows: list[tuple[int, Any, float]] = ORDERS) -> Counter[tuple[Any, ...]]:
    out: Counter[tuple[Any, ...]] = Counter()
    for order_id, customer_id, amount in rows:
        matches = DIM_BY_ID.get(customer_id, []) if customer_id is not None else []
        for m in matches:
            out[(order_id, customer_id, amount, m["id"], m["name"], m["country"])] += 1
        if not matches and how == "left":
            out[(order_id, customer_id, amount, None, None, None)] += 1
    return out


def table(options: dict[str, str] | None = None, latency: float = 0.0) -> LookupTable:
    return LookupTable(
        "Customers", SCHEMA, InMemoryConnector(DIM, ["id"], latency=latency), options
    )


@pytest.mark.parametrize(
    "hint",
    [
        "LOOKUP('table'='Customers', 'async'='true', 'capacity'='8')",
        "LOOKUP('table'='Customers', 'async'='true', 'output-mode'='allow_unordered')",
        "LOOKUP('table'='Customers', 'async'='false')",
    ],
    ids=["async-ordered", "async-unordered", "sync"],
)
def test_inner_and_left_null_keys_and_multiple_matches(spark: SparkSession, hint: str) -> None:
    dim = table(latency=0.001)
    df = orders(spark)
    for how in ("inner", "left"):
        out = lookup_join(df, dim, on=[("customer_id", "id")], how=how, hints=hint)
        assert out.columns == ["order_id", "customer_id", "amount", "id", "name", "country"]
        rows = [tuple(r) for r in out.collect()]
        assert Counter(rows) == expected(how)
        if "unordered" not in hint:
            # ordered mode keeps each partition's input order (order_id ascending)
            per_partition: dict[int, list[int]] = {}
            tagged = out.select(F.spark_partition_id().alias("p"), "order_id").collect()
            for p, order_id in tagged:
                per_partition.setdefault(p, []).append(order_id)
            for ids in per_partition.values():
                assert ids == sorted(ids)
            multi = [r[4] for r in rows if r[1] == 2]
            assert multi[:2] == ["c2", "c2-second"]  # connector order within one input row


def test_literal_key_columns(spark: SparkSession) -> None:
    rows = [
        {"region": region, "id": i, "label": f"{region}-{i}"}
        for region in ("EU", "US")
        for i in range(5)
    ]
    regional = LookupTable(
        "Regional",
        "region STRING, id INT, label STRING",
        InMemoryConnector(rows, ["region", "id"]),
    )
    df = spark.createDataFrame([(i,) for i in range(7)], "cid INT")
    out = lookup_join(
        df, regional, on=[("cid", "id")], literals={"region": "US"}, columns=["label"], how="left"
    )
    assert sorted(tuple(r) for r in out.collect()) == [
        (0, "US-0"),
        (1, "US-1"),
        (2, "US-2"),
        (3, "US-3"),
        (4, "US-4"),
        (5, None),
        (6, None),
    ]


def test_a_literal_is_the_key_columns_value_or_refused(spark: SparkSession) -> None:
    rows = [{"id": 7, "ver": v, "label": f"seven-v{v}"} for v in (1, 2)]
    versions = LookupTable(
        "Versions", "id BIGINT, ver BIGINT, label STRING", InMemoryConnector(rows, ["id", "ver"])
    )
    df = spark.createDataFrame([(7,)], "cid BIGINT")
    # Spark SQL joins ver = 1.0 with the BIGINT 1; so does the literal, as the key's 1
    sql = spark.createDataFrame(rows).where(F.col("ver") == F.lit(1.0)).select("label").collect()
    joined = lookup_join(
        df, versions, on=[("cid", "id")], literals={"ver": 1.0}, columns=["label"]
    ).collect()
    assert [tuple(r) for r in joined] == [(7, "seven-v1")] and [r[0] for r in sql] == ["seven-v1"]
    for bad in (1.5, "1", b"1"):
        with pytest.raises(ConfigurationError, match=r"literals\['ver'\].*exactly"):
            lookup_join(df, versions, on=[("cid", "id")], literals={"ver": bad})
    texts = LookupTable("Texts", "t STRING, b BINARY", InMemoryConnector([], ["t", "b"]))
    with pytest.raises(ConfigurationError, match=r"literals\['b'\]"):
        lookup_join(df, texts, on=[], literals={"t": "x", "b": "x"})
    with pytest.raises(ConfigurationError, match=r"literals\['t'\]"):
        lookup_join(df, texts, on=[], literals={"t": b"x", "b": b"x"})


def test_nan_keys_join_as_in_spark_sql(spark: SparkSession) -> None:
    nan = float("nan")
    dim = [{"k": nan, "v": "nan-row"}, {"k": 0.0, "v": "zero-row"}, {"k": 1.5, "v": "one"}]
    df = spark.createDataFrame([(nan,), (-0.0,), (1.5,), (nan,), (None,)], "x DOUBLE")
    right = spark.createDataFrame([tuple(r.values()) for r in dim], "k DOUBLE, v STRING")
    sql = df.join(right, df.x == right.k).select("x", "v").collect()
    expected = Counter(str(tuple(r)) for r in sql)
    assert sum(expected.values()) == 4  # both NaNs, -0.0 with 0.0, 1.5
    for options in (
        {},
        {"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "10"},
        {
            "lookup.cache": "FULL",
            "lookup.full-cache.periodic-reload.interval": "1 h",
        },
    ):
        nans = LookupTable("Nans", "k DOUBLE, v STRING", InMemoryConnector(dim, ["k"]), options)
        out = lookup_join(df.coalesce(1), nans, on=[("x", "k")], columns=["v"]).collect()
        assert Counter(str(tuple(r)) for r in out) == expected, options
    # a NaN literal too (it was refused as "does not convert exactly": NaN != NaN)
    nans = LookupTable("Nans", "k DOUBLE, v STRING", InMemoryConnector(dim, ["k"]))
    out = lookup_join(df.limit(1), nans, on=[], literals={"k": nan}, columns=["v"]).collect()
    assert [r.v for r in out] == ["nan-row"]


def test_keys_python_cannot_compare_as_spark_does_are_refused(spark: SparkSession) -> None:
    lcase = spark.createDataFrame([("ABC",)], "c STRING").select(
        F.col("c").cast("string collate UTF8_LCASE").alias("c")
    )
    codes = LookupTable("Codes", "code STRING, v STRING", InMemoryConnector([], ["code"]))
    with pytest.raises(ConfigurationError, match="UTF8_LCASE"):
        lookup_join(lcase, codes, on=[("c", "code")])
    lcase_dim = LookupTable(
        "Codes", "code STRING COLLATE UTF8_LCASE, v STRING", InMemoryConnector([], ["code"])
    )
    plain = spark.createDataFrame([("ABC",)], "c STRING")
    with pytest.raises(ConfigurationError, match="collation"):
        lookup_join(plain, lcase_dim, on=[("c", "code")])
    nested = spark.createDataFrame([((1,),)], "k STRUCT<a: INT>")
    structs = LookupTable("S", "s STRUCT<a: INT>, v STRING", InMemoryConnector([], ["s"]))
    with pytest.raises(ConfigurationError, match="atomic type"):
        lookup_join(nested, structs, on=[("k", "s")])


def test_post_lookup_filters_and_left_condition(
    spark: SparkSession, dim_service: DimService
) -> None:
    for key in range(1000, 1006):
        dim_service.add(key, [{"id": key, "name": f"n{key}", "country": "NL" if key % 2 else "DE"}])
    http = LookupTable("Customers", SCHEMA, HttpConnector(f"{dim_service.url}/customers/{{id}}"))
    df = spark.createDataFrame([(k, k % 3) for k in range(1000, 1006)], "cid INT, flag INT")
    out = lookup_join(
        df,
        http,
        on=[("cid", "id")],
        how="left",
        columns=["name", "country"],
        dim_filter=lambda d: d["country"] == "NL",
        condition=lambda left, d: left["flag"] != 2,
        left_condition=lambda left: left["flag"] != 0,
    )
    got = sorted(tuple(r) for r in out.collect())
    assert got == [
        (1000, 1, None, None),  # DE filtered out by dim_filter
        (1001, 2, None, None),  # NL but condition(flag != 2) fails
        (1002, 0, None, None),  # left_condition fails: not looked up
        (1003, 1, "n1003", "NL"),
        (1004, 2, None, None),
        (1005, 0, None, None),
    ]
    assert dim_service.calls(1002) == 0 and dim_service.calls(1005) == 0
    assert dim_service.calls(1000) == 1  # a filtered row never triggers a retry or a 2nd call


def test_hint_defaults_come_from_the_spark_conf(
    spark: SparkSession, dim_service: DimService
) -> None:
    keys = {
        "table.exec.async-lookup.output-mode": "ALLOW_UNORDERED",
        "table.exec.async-lookup.buffer-capacity": "3",
        "table.exec.async-lookup.timeout": "200ms",
    }
    for key, value in keys.items():
        spark.conf.set(key, value)
    try:
        dim_service.add(1100, [{"id": 1100, "name": "slow", "country": "NL"}])
        slow = LookupTable(
            "Customers",
            SCHEMA,
            HttpConnector(f"{dim_service.url}/customers/{{id}}?delay=3", timeout=10),
        )
        df = spark.createDataFrame([(1100,)], "cid INT")
        task, _ = plan_lookup_join(df, slow, LookupJoinArgs(on=[("cid", "id")]))
        hint = task.hint
        assert (OutputMode(hint.output_mode), hint.capacity, hint.timeout) == (
            OutputMode.UNORDERED,
            3,
            0.2,
        )
        with pytest.raises(Exception, match="did not finish within 200 ms"):
            lookup_join(df, slow, on=[("cid", "id")]).collect()
        # a hint option beats the conf default
        args = LookupJoinArgs(
            on=[("cid", "id")], hints="LOOKUP('table'='Customers', 'capacity'='9')"
        )
        task, _ = plan_lookup_join(df, slow, args)
        assert (task.hint.capacity, task.hint.timeout) == (9, 0.2)
    finally:
        for key in keys:
            spark.conf.unset(key)


def test_job_defaults_are_read_as_spark_submit_passes_them_on(spark: SparkSession) -> None:
    """spark-submit --conf drops keys outside spark.*: table.exec.async-lookup.timeout could
    be set only from code; spark.table.exec.async-lookup.timeout is read too."""
    key = "spark.table.exec.async-lookup.timeout"
    spark.conf.set(key, "7s")
    try:
        table = LookupTable("Customers", SCHEMA, InMemoryConnector([], ["id"]))
        df = spark.createDataFrame([(1,)], "cid INT")
        task, _ = plan_lookup_join(df, table, LookupJoinArgs(on=[("cid", "id")]))
        assert task.hint.timeout == 7.0
    finally:
        spark.conf.unset(key)


def test_a_conf_key_the_session_refuses_to_read_is_unset() -> None:
    # a managed Connect server may refuse reads of some keys: the library's defaults apply
    from asyncio_lookup.spark.conf import conf_get, library_conf
    from asyncio_lookup.spark.rate_share import task_slots

    class Refusing:
        def get(self, key: str, default: Any = None) -> Any:
            if key.startswith("spark.master"):
                raise RuntimeError("[CONFIG_NOT_AVAILABLE] spark.master")
            return {"spark.asyncio_lookup.worker.gc-young-threshold": "5000"}.get(key, default)

    assert conf_get(Refusing(), "spark.master") is None
    assert task_slots(Refusing())[0] is None
    assert library_conf(Refusing(), "asyncio_lookup.worker.gc-young-threshold") == (
        "spark.asyncio_lookup.worker.gc-young-threshold",
        "5000",
    )


def test_a_bad_conf_value_is_named_by_the_key_it_was_set_under() -> None:
    from types import SimpleNamespace

    from asyncio_lookup.spark.join import async_defaults
    from asyncio_lookup.spark.worker_gc import gc_threshold_from_conf

    conf = {
        "spark.table.exec.async-lookup.timeout": "soon",
        "spark.asyncio_lookup.worker.gc-young-threshold": "lots",
    }
    with pytest.raises(ConfigurationError, match=r"'spark\.table\.exec\.async-lookup\.timeout'"):
        async_defaults(SimpleNamespace(sparkSession=SimpleNamespace(conf=conf)))  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"'spark\.asyncio_lookup\.worker\.gc-young"):
        gc_threshold_from_conf(conf)


@pytest.mark.parametrize("client", ["asyncio", "aiohttp"])
@pytest.mark.parametrize("mode", ["async", "sync"])
def test_late_row_found_by_miss_retry_and_call_bound(
    spark: SparkSession, dim_service: DimService, mode: str, client: str
) -> None:
    """On both HTTP clients (the project's and aiohttp), async and sync."""
    base = (2000 if mode == "async" else 2100) + (0 if client == "asyncio" else 200)
    late, never, too_late = base, base + 1, base + 2
    dim_service.add_late(late, [{"id": late, "name": "late", "country": "NL"}], after_calls=3)
    dim_service.add_late(too_late, [{"id": too_late, "name": "x", "country": "NL"}], after_calls=9)
    connector = HttpConnector(f"{dim_service.url}/customers/{{id}}", client=client)
    http = LookupTable("Customers", SCHEMA, connector)
    df = spark.createDataFrame([(late,), (never,), (too_late,)], "cid INT").repartition(2)
    hint = (
        f"LOOKUP('table'='Customers', 'async'='{str(mode == 'async').lower()}', "
        "'retry-predicate'='lookup_miss', 'retry-strategy'='fixed_delay', "
        "'fixed-delay'='20ms', 'max-attempts'='3')"
    )
    out = lookup_join(df, http, on=[("cid", "id")], how="left", hints=hint, columns=["name"])
    assert sorted(tuple(r) for r in out.collect()) == [
        (late, "late"),
        (never, None),
        (too_late, None),
    ]
    assert dim_service.calls(late) == 3
    assert dim_service.calls(never) == 4  # max-attempts + 1
    assert dim_service.calls(too_late) == 4
    metrics = http.metrics()
    assert metrics["numLookupMissRetries"] == 2 + 3 + 3


def test_async_timeout_fails_the_job_with_a_clear_error(
    spark: SparkSession, dim_service: DimService
) -> None:
    dim_service.add(1200, [{"id": 1200, "name": "slow", "country": "NL"}])
    slow = LookupTable(
        "Customers", SCHEMA, HttpConnector(f"{dim_service.url}/customers/{{id}}?delay=5")
    )
    df = spark.createDataFrame([(1200,)], "cid INT")
    out = lookup_join(
        df, slow, on=[("cid", "id")], hints="LOOKUP('table'='Customers', 'timeout'='300ms')"
    )
    with pytest.raises(Exception) as error:
        out.collect()
    message = str(error.value)
    assert "TimeoutError" in message
    assert "lookup table 'Customers' (HTTP http://127.0.0.1:" in message
    assert "key (1200,): did not finish within 300 ms" in message


def test_a_raising_lookup_function_fails_the_job_with_the_original_error(
    spark: SparkSession,
) -> None:
    failing = LookupTable(
        "Customers", SCHEMA, FailingConnector({1: [{"id": 1, "name": "a", "country": "NL"}]}, 13)
    )
    df = spark.createDataFrame([(i,) for i in range(20)], "cid INT")
    for mode in ("true", "false"):
        out = lookup_join(
            df, failing, on=[("cid", "id")], hints=f"LOOKUP('table'='Customers', 'async'='{mode}')"
        )
        with pytest.raises(Exception) as error:
            out.collect()
        message = str(error.value)
        assert "BoomError" in message
        assert "boom: the dim store rejected key 13" in message


def test_partial_cache_and_metrics_after_an_action(
    spark: SparkSession, dim_service: DimService
) -> None:
    keys = list(range(1300, 1310))
    for key in keys:
        dim_service.add(key, [{"id": key, "name": f"n{key}", "country": "NL"}])
    cached = LookupTable(
        "Customers",
        SCHEMA,
        HttpConnector(f"{dim_service.url}/customers/{{id}}"),
        {"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "100"},
    )
    assert cached.metrics() == {}
    # one task, sync mode: exact cache counts
    df = spark.createDataFrame([(keys[i % 10], i) for i in range(50)], "cid INT, n INT").coalesce(1)
    out = lookup_join(
        df, cached, on=[("cid", "id")], hints="LOOKUP('table'='Customers', 'async'='false')"
    )
    assert out.count() == 50
    metrics = cached.metrics()
    assert metrics["missCount"] == 10
    assert metrics["hitCount"] == 40
    assert metrics["loadCount"] == 10
    assert metrics["numCachedRecords"] == 10
    assert metrics["numLookups"] == 50
    assert all(dim_service.calls(k) == 1 for k in keys)
    # async run of the same table: operator metrics join the cache metrics
    out = lookup_join(df, cached, on=[("cid", "id")])
    assert out.count() == 50
    metrics = cached.metrics()
    assert metrics["numLookups"] == 100
    assert metrics["numCompleted"] == 50
    assert metrics["numInFlight"] == 0
    assert metrics["numTimeouts"] == 0


def test_full_cache_answers_from_its_snapshot(spark: SparkSession) -> None:
    full = LookupTable(
        "Customers",
        SCHEMA,
        ScanOnly(DIM),
        {"lookup.cache": "FULL", "lookup.full-cache.periodic-reload.interval": "1h"},
    )
    df = orders(spark)
    for hint in (None, "LOOKUP('table'='Customers', 'async'='false')"):
        out = lookup_join(df, full, on=[("customer_id", "id")], how="left", hints=hint)
        assert Counter(tuple(r) for r in out.collect()) == expected("left")
    metrics = full.metrics()
    lookups = 2 * sum(1 for _, c, _ in ORDERS if c is not None)
    assert metrics["numLookups"] == lookups
    assert metrics["hitCount"] == lookups
    assert metrics["missCount"] == 0
    assert metrics["loadCount"] >= 1
    assert metrics["numExternalCalls"] == 0
    assert metrics["numCompleted"] == len(ORDERS)  # the async run only; the sync one has none


def test_on_a_name_both_sides_have_outputs_that_column_once(spark: SparkSession) -> None:
    """``on='sku'`` as ``DataFrame.join(other, on='sku')``: one ``sku`` column (the left's);
    the dim key column comes out too only when ``columns``, ``rename`` or ``prefix`` ask."""
    df = spark.createDataFrame([(1, "a"), (2, "zz")], "order_id INT, sku STRING")
    products = LookupTable(
        "Products",
        "sku STRING, title STRING",
        InMemoryConnector([{"sku": "a", "title": "apple"}], "sku"),
    )
    for on in ("sku", ["sku"], [("sku", "sku")], {"sku": "sku"}):
        out = lookup_join(df, products, on=on, how="left")
        assert out.columns == ["order_id", "sku", "title"]
        assert sorted(tuple(r) for r in out.collect()) == [(1, "a", "apple"), (2, "zz", None)]
    prefixed = lookup_join(df, products, on="sku", prefix="p_")
    assert prefixed.columns == ["order_id", "sku", "p_sku", "p_title"]
    renamed = lookup_join(df, products, on="sku", rename={"sku": "dim_sku"})
    assert renamed.columns == ["order_id", "sku", "dim_sku", "title"]
    with pytest.raises(ConfigurationError, match="collides with column 'sku'"):
        lookup_join(df, products, on="sku", columns=["sku", "title"])  # asked for by name


def test_shuffle_hash_partitions_by_the_key_first(spark: SparkSession) -> None:
    dim = table()
    df = orders(spark)
    out = lookup_join(df, dim, on=[("customer_id", "id")], hints="SHUFFLE_HASH('Customers')")
    plan = physical_plan(out)
    assert "Exchange shufflepartitionidpassthrough" in plan
    assert "xxhash64(cast(customer_id" in plan
    assert Counter(tuple(r) for r in out.collect()) == expected("inner")


def test_structured_streaming_into_a_memory_sink(spark: SparkSession, tmp_path: Path) -> None:
    source = tmp_path / "orders"
    source.mkdir()
    for part in range(3):
        rows = [
            {"order_id": n, "customer_id": c, "amount": a}
            for n, c, a in ORDERS[part * 40 : (part + 1) * 40]
        ]
        (source / f"part-{part}.json").write_text("\n".join(json.dumps(r) for r in rows))
    stream = (
        spark.readStream.schema("order_id INT, customer_id INT, amount DOUBLE")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
    )
    assert stream.isStreaming
    dim = table(options={"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "1000"})
    enriched = lookup_join(stream, dim, on=[("customer_id", "id")], how="left")
    query = (
        enriched.writeStream.format("memory")
        .queryName("enriched_orders")
        .outputMode("append")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(120)
        assert query.exception() is None
        got = Counter(tuple(r) for r in spark.table("enriched_orders").collect())
        batches = [dim.progress_metrics(p) for p in query.recentProgress]
        assert dim.progress_metrics(query.lastProgress) == batches[-1]
    finally:
        query.stop()
    assert got == expected("left")
    # per micro-batch, from each progress's observed metrics (one batch per file)
    with_rows = [m for m in batches if m.get("numLookups")]
    assert len(with_rows) == 3
    assert sum(m["numLookups"] for m in with_rows) == sum(1 for _, c, _ in ORDERS if c is not None)
    assert all(isinstance(m["numLookups"], int) for m in with_rows)
    assert dim.metrics() == {}  # batch actions only


async def _twice_or_none(row: dict[str, Any]) -> list[dict[str, Any]]:
    n = row["n"]
    if n % 5 == 0:
        return []
    return [{"n": n, "copy": k, "label": f"#{n}"} for k in range(1 + n % 2)]


@pytest.mark.parametrize("mode", [OutputMode.ORDERED, OutputMode.UNORDERED, "allow_unordered"])
def test_async_map_runs_any_async_function(spark: SparkSession, mode: OutputMode | str) -> None:
    df = spark.range(0, 200, numPartitions=2).selectExpr("CAST(id AS INT) AS n")
    metrics_id = f"twice-{mode}"
    out = async_map(
        df,
        _twice_or_none,
        "n INT, copy INT, label STRING",
        timeout=10,
        capacity=16,
        output_mode=mode,
        retry_strategy=RetryStrategies.NO_RETRY,
        metrics_id=metrics_id,
    )
    rows = [tuple(r) for r in out.collect()]
    want = [(n, k, f"#{n}") for n in range(200) if n % 5 for k in range(1 + n % 2)]
    assert Counter(rows) == Counter(want)
    if mode is OutputMode.ORDERED:
        assert rows == want
    assert async_map_metrics(metrics_id)["numCompleted"] == 200


@pytest.mark.parametrize("metrics_id", ["enrich:2", "enrich#2", ""])
def test_an_async_map_metrics_id_that_would_read_another_s_is_refused(
    spark: SparkSession, metrics_id: str
) -> None:
    # the streaming observation of 'enrich:2' was read as one of 'enrich'
    df = spark.range(1).selectExpr("CAST(id AS INT) AS n")
    with no_spark_job(spark), pytest.raises(ConfigurationError, match="'metrics_id'"):
        async_map(df, _twice_or_none, "n INT, copy INT, label STRING", 10, metrics_id=metrics_id)


def test_async_map_retry_strategy_and_errors(spark: SparkSession) -> None:
    df = spark.range(0, 40, numPartitions=2).selectExpr("CAST(id AS INT) AS n")
    schema = "n INT, double INT, attempts INT"
    retrying = async_map(
        df,
        FlakyDouble(),
        schema,
        timeout=30,
        retry_strategy=RetryStrategies.fixed_delay(
            max_attempts=1,
            delay=0.01,
            exception_predicate=RetryPredicates.exception_type(FlakyError),
        ),
        metrics_id="flaky-retry",
    )
    assert sorted(tuple(r) for r in retrying.collect()) == [(n, 2 * n, 2) for n in range(40)]
    assert async_map_metrics("flaky-retry")["numRetries"] == 40
    failing = async_map(df, FlakyDouble(), schema, timeout=30)
    with pytest.raises(Exception) as error:
        failing.collect()
    assert "FlakyError" in str(error.value)
    assert "first attempt for row" in str(error.value)


def test_predicates_that_cannot_take_their_rows_are_refused_on_the_driver() -> None:
    """``condition=lambda d: ...`` failed with a TypeError in the task, at its first row."""
    for name, bad, good in [
        ("condition", lambda dim: True, lambda left, dim: True),
        ("dim_filter", lambda left, dim: True, lambda dim: True),
        ("left_condition", lambda: True, lambda left: True),
    ]:
        with pytest.raises(ConfigurationError, match="allowed: a callable \\(") as info:
            LookupJoinArgs(("k", "id"), **{name: bad})
        assert info.value.option == name
        LookupJoinArgs(("k", "id"), **{name: good})
    LookupJoinArgs(("k", "id"), condition=lambda *rows: True, left_condition=bool)


def test_matched_column_tells_joined_rows_from_null_padded_and_failed_ones(
    spark: SparkSession,
) -> None:
    dim = [{"id": 1, "name": None, "country": None}, {"id": 2, "name": "x", "country": "NL"}]
    dim.append({"id": 3, "name": "y", "country": 7})  # does not fit STRING: a failed row
    customers = LookupTable("Customers", SCHEMA, InMemoryConnector(dim, ["id"]))
    df = spark.createDataFrame([(1,), (2,), (3,), (4,), (None,)], "customer_id INT")
    left = lookup_join(
        df.where("customer_id IS NULL OR customer_id != 3"),
        customers,
        on=[("customer_id", "id")],
        how="left",
        matched_column="matched",
    )
    assert left.schema["matched"].nullable is False and left.columns[-1] == "matched"
    assert sorted((r["customer_id"] or 0, r["matched"]) for r in left.collect()) == [
        (0, False),
        (1, True),  # every dim column NULL, but joined
        (2, True),
        (4, False),
    ]
    kept = lookup_join(
        df.where("customer_id = 3 OR customer_id = 1"),
        customers,
        on=[("customer_id", "id")],
        how="left",
        on_error="keep",
        matched_column="matched",
    )
    assert kept.columns[-2:] == ["lookup_error", "matched"]
    by_key = {r["customer_id"]: (r["matched"], r["lookup_error"] is None) for r in kept.collect()}
    assert by_key == {1: (True, True), 3: (False, False)}
    with pytest.raises(ConfigurationError, match="already has a column 'name'") as info:
        lookup_join(df, customers, on=[("customer_id", "id")], matched_column="NAME")
    assert info.value.option == "matched_column"


def test_char_and_varchar_columns_are_strings(spark: SparkSession) -> None:
    # Flink-style DDL was refused: Arrow has no VARCHAR(n)
    dim = [{"id": 1, "name": "ab", "code": "x", "tags": ["q"]}]
    schema = "id INT, name VARCHAR(20), code CHAR(3), tags ARRAY<VARCHAR(5)>"
    customers = LookupTable("Customers", schema, InMemoryConnector(dim, ["id"]))
    assert customers.schema.simpleString() == (
        "struct<id:int,name:string,code:string,tags:array<string>>"
    )
    df = spark.createDataFrame([(1,)], "customer_id INT")
    rows = lookup_join(df, customers, on=[("customer_id", "id")]).collect()
    assert [tuple(r) for r in rows] == [(1, 1, "ab", "x", ["q"])]
