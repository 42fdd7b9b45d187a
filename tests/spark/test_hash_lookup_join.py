"""Hash lookup join (docs/semantics.md §2.7, issue 6): routing, connector partitioners, salting, and
the partitioned FULL cache, checked from the task side."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from asyncio_lookup.connectors import InMemoryConnector
from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.lookup.partitioning import HashPartitioner, key_hash
from asyncio_lookup.spark import LookupTable, lookup_join
from asyncio_lookup.spark.shuffle import exchange_size
from tests.spark.conftest import no_spark_job
from tests.spark.helpers import PartitionRecorder, ReversedModPartitioner, physical_plan

SCHEMA = "id INT, name STRING, pid INT"
DIM = [{"id": i, "name": f"c{i}"} for i in range(200)]
FULL = {"lookup.cache": "FULL", "lookup.full-cache.periodic-reload.interval": "1h"}
NO_SKEW = {"enabled": False}


def probe(spark: SparkSession, hot: int | None = None) -> DataFrame:
    """600 orders over 4 input partitions; keys 0..249 (some miss), ``hot`` in a third of them."""
    rows = [(n, hot if hot is not None and n % 3 == 0 else (n * 7) % 250) for n in range(600)]
    return spark.createDataFrame(rows, "order_id INT, customer_id INT").repartition(4)


def key_partitions(rows: list[Any]) -> dict[int, set[int]]:
    seen: dict[int, set[int]] = defaultdict(set)
    for row in rows:
        seen[row["customer_id"]].add(row["pid"])
    return seen


def without_pid(rows: list[Any]) -> Counter[tuple[Any, ...]]:
    return Counter((r["order_id"], r["customer_id"], r["id"], r["name"]) for r in rows)


def test_spark_xxhash64_and_key_hash_agree(spark: SparkSession) -> None:
    longs = [0, 1, -1, 7, 2**31 - 1, -(2**31), 2**62, -(2**63)]
    strings = ["", "a", "héllo", "日本語", "x" * 40]
    doubles = [0.0, -0.0, 1.5, -2.25, 1e300]
    df = spark.createDataFrame(
        [
            (v, s, d, bytearray(s.encode()))
            for v, s, d in zip(longs, strings * 2, doubles * 2, strict=False)
        ],
        "l BIGINT, s STRING, d DOUBLE, b BINARY",
    )
    d = F.col("d")
    rows = df.select(
        "l",
        "s",
        "d",
        "b",
        F.xxhash64("l").alias("hl"),
        F.xxhash64("s").alias("hs"),
        F.xxhash64(F.when(d == 0.0, F.lit(0.0)).otherwise(d)).alias("hd"),
        F.xxhash64("b").alias("hb"),
        F.xxhash64("l", "s", "d").alias("hmulti"),
    ).collect()
    for row in rows:
        assert row["hl"] == key_hash([row["l"]], ["long"])
        assert row["hs"] == key_hash([row["s"]], ["string"])
        assert row["hd"] == key_hash([row["d"]], ["double"])
        assert row["hb"] == key_hash([bytes(row["b"])], ["binary"])
        assert row["hmulti"] == key_hash(
            [row["l"], row["s"], row["d"]], ["long", "string", "double"]
        )
    # Spark hashes an INT as 4 bytes: why the probe side casts integral keys to BIGINT first.
    as_int, as_long = spark.sql("SELECT xxhash64(7), xxhash64(CAST(7 AS BIGINT))").first()
    assert as_int != as_long == key_hash([7], ["long"])


def test_spark_and_key_hash_agree_on_canonicalised_keys(spark: SparkSession) -> None:
    """The kinds the probe side canonicalises before xxhash64 (shuffle._canonical): the dim
    side's key_hash must give the same hash, whatever the session's time zone."""
    from asyncio_lookup.spark.shuffle import _canonical

    columns = {
        "b": ("BOOLEAN", "boolean", [True, False]),
        "d": (
            "DATE",
            "date",
            [date(1, 1, 1), date(1969, 12, 31), date(1970, 1, 1), date(9999, 12, 31)],
        ),
        "t": (
            "TIMESTAMP",
            "timestamp",
            [
                datetime(1, 1, 1, tzinfo=UTC),
                datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
                datetime(2024, 3, 10, 7, 30, 0, 5, tzinfo=UTC),
                datetime(9999, 12, 31, tzinfo=UTC),
            ],
        ),
        "n": (
            "TIMESTAMP_NTZ",
            "timestamp_ntz",
            [
                datetime(1, 1, 1),
                datetime(1969, 12, 31, 23, 59, 59, 999999),
                datetime(2024, 3, 10, 2, 30, 0, 123456),
                datetime(2024, 11, 3, 1, 30),
            ],
        ),
        "m": (
            "DECIMAL(38,18)",
            "decimal",
            [
                Decimal(0),
                Decimal("-0.5"),
                Decimal(100),
                Decimal("1e-7"),
                Decimal("12345678901234567890.123"),
            ],
        ),
        "z": ("DECIMAL(5,0)", "decimal", [Decimal(100), Decimal(0), Decimal(-10), Decimal(99999)]),
    }
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")  # DST gap on 2024-03-10
    try:
        for name, (sql_type, kind, values) in columns.items():
            df = spark.createDataFrame(list(enumerate(values)), f"i INT, {name} {sql_type}")
            hashed = df.select("i", F.xxhash64(_canonical(F.col(name), kind)).alias("h"))
            for i, h in hashed.collect():
                assert h == key_hash([values[i]], [kind]), (sql_type, values[i])
    finally:
        spark.conf.unset("spark.sql.session.timeZone")


def test_every_key_is_looked_up_in_one_partition_and_results_match(spark: SparkSession) -> None:
    df = probe(spark)
    shuffled = LookupTable("Customers", SCHEMA, PartitionRecorder(DIM))
    out = lookup_join(
        df,
        shuffled,
        on=[("customer_id", "id")],
        how="left",
        hints="SHUFFLE_HASH('Customers')",
        shuffle_partitions=3,
        skew=NO_SKEW,
    )
    plan = physical_plan(out)
    assert "Exchange" in plan and "direct_shuffle_partition_id" in plan
    assert "__asyncio_lookup_partition" not in out.columns
    rows = out.collect()
    hasher = HashPartitioner((0,), ("long",))
    found = [r for r in rows if r["pid"] is not None]
    assert found
    for key, pids in key_partitions(found).items():
        assert pids == {hasher.partition((key,), 3)}, key
    plain = LookupTable("Customers", SCHEMA, PartitionRecorder(DIM))
    expected = lookup_join(df, plain, on=[("customer_id", "id")], how="left").collect()
    assert without_pid(rows) == without_pid(expected)
    assert len({r["pid"] for r in expected if r["pid"] is not None}) == 4  # input partitions


@pytest.mark.parametrize("with_column", [True, False], ids=["spark-column", "python-udf"])
def test_a_connector_partitioner_replaces_the_hash(spark: SparkSession, with_column: bool) -> None:
    partitioner = ReversedModPartitioner(with_column)
    table = LookupTable("Customers", SCHEMA, PartitionRecorder(DIM, partitioner))
    out = lookup_join(
        probe(spark),
        table,
        on=[("customer_id", "id")],
        hints="LOOKUP('table'='Customers', 'shuffle'='true')",
        shuffle_partitions=4,
        skew=NO_SKEW,
    )
    rows = out.collect()
    assert len(rows) == sum(1 for n in range(600) if (n * 7) % 250 < 200)
    for key, pids in key_partitions(rows).items():
        assert pids == {3 - key % 4}, key


def test_a_hot_key_is_salted_over_several_partitions_and_results_stay_right(
    spark: SparkSession,
) -> None:
    df = probe(spark, hot=5)
    table = LookupTable("Customers", SCHEMA, PartitionRecorder(DIM))
    out = lookup_join(
        df,
        table,
        on=[("customer_id", "id")],
        how="left",
        hints="SHUFFLE_HASH('Customers')",
        shuffle_partitions=4,
        skew={"sample_fraction": 1.0},
    )
    assert "CASE WHEN" in physical_plan(out)
    rows = out.collect()
    seen = key_partitions([r for r in rows if r["pid"] is not None])
    assert len(seen.pop(5)) >= 2  # a third of the rows: spread
    hasher = HashPartitioner((0,), ("long",))
    for key, pids in seen.items():
        assert pids == {hasher.partition((key,), 4)}, key  # the others are not salted
    plain = LookupTable("Customers", SCHEMA, PartitionRecorder(DIM))
    expected = lookup_join(df, plain, on=[("customer_id", "id")], how="left").collect()
    assert without_pid(rows) == without_pid(expected)
    unsalted = lookup_join(
        df,
        LookupTable("Customers", SCHEMA, PartitionRecorder(DIM)),
        on=[("customer_id", "id")],
        hints="SHUFFLE_HASH('Customers')",
        shuffle_partitions=4,
        skew=False,
    ).collect()
    assert len(key_partitions(unsalted)[5]) == 1


def test_a_key_ordered_join_keeps_a_hot_key_on_one_task(spark: SparkSession) -> None:
    """Salting spread a hot key's rows over 4 tasks, which looked it up at once: key order
    promises one lookup of a key at a time."""
    df = probe(spark, hot=5)
    hint = "LOOKUP('table'='Customers', 'output-mode'='key_ordered'), SHUFFLE_HASH('Customers')"
    out = lookup_join(
        df,
        LookupTable("Customers", SCHEMA, PartitionRecorder(DIM)),
        on=[("customer_id", "id")],
        hints=hint,
        shuffle_partitions=4,
    ).collect()
    assert len(key_partitions(out)[5]) == 1
    with no_spark_job(spark), pytest.raises(ConfigurationError, match="key_ordered") as error:
        lookup_join(
            df,
            LookupTable("Customers", SCHEMA, PartitionRecorder(DIM)),
            on=[("customer_id", "id")],
            hints=hint,
            skew={"sample_fraction": 1.0},
        )
    assert error.value.option == "skew"
    # key order from the job default, with the hint saying 'allow_unordered': the message
    # named only the hint's 'key_ordered', which the user never wrote
    spark.conf.set("table.exec.async-lookup.key-ordered-enabled", "true")
    try:
        unordered = hint.replace("'key_ordered'", "'allow_unordered'")
        with no_spark_job(spark), pytest.raises(ConfigurationError) as error:
            lookup_join(
                df,
                LookupTable("Customers", SCHEMA, PartitionRecorder(DIM)),
                on=[("customer_id", "id")],
                hints=unordered,
                skew=True,
            )
        assert "table.exec.async-lookup.key-ordered-enabled=true" in str(error.value)
    finally:
        spark.conf.unset("table.exec.async-lookup.key-ordered-enabled")


def test_columns_spark_cannot_hash_stay_out_of_the_row_hash(spark: SparkSession) -> None:
    """A GEOMETRY column anywhere in the input failed every shuffled join (the row hash that
    spreads hot keys and NULL keys took every column); a struct field named like a variant
    left its column out."""
    left = spark.range(40).selectExpr(
        "CAST(IF(id % 4 = 0, NULL, id % 5) AS INT) AS id",
        "ST_GeomFromWKB(X'0101000000000000000000F03F0000000000000040') AS g",
        "named_struct('variant_id', CAST(id AS INT)) AS s",
    )
    table = LookupTable("T", SCHEMA, InMemoryConnector(DIM, ["id"]))
    out = lookup_join(
        left, table, on="id", how="left", hints="SHUFFLE_HASH('T')", shuffle_partitions=2
    )
    assert out.count() == 40
    assert re.search(r"xxhash64\(id#\d+, s#\d+, 42\)", physical_plan(out))  # g left out


@pytest.mark.parametrize(
    ("left_column", "options"),
    [
        ("__Asyncio_Lookup_Partition", {}),  # was replaced: the job failed in the JVM
        ("__ASYNCIO_LOOKUP_METRICS", {}),
        ("x", {"matched_column": "__asyncio_lookup_metrics"}),
        ("x", {"rename": {"name": "__asyncio_lookup_partition"}}),
    ],
)
def test_reserved_column_names_are_refused_in_any_letter_case(
    spark: SparkSession, left_column: str, options: dict[str, Any]
) -> None:
    df = spark.createDataFrame([(1, 2)], f"customer_id INT, `{left_column}` INT")
    table = LookupTable("Customers", SCHEMA, InMemoryConnector(DIM, ["id"]))
    with no_spark_job(spark), pytest.raises(ConfigurationError, match="reserved") as error:
        lookup_join(
            df,
            table,
            on=[("customer_id", "id")],
            hints="SHUFFLE_HASH('Customers')",
            skew=False,
            **options,
        )
    assert error.value.option == "df"


def test_hot_keys_are_not_sampled_through_another_lookup_join(
    spark: SparkSession, caplog: pytest.LogCaptureFixture
) -> None:
    """Sampling the input ran the upstream join in full when the second join was built: its
    service saw every call twice and its metrics counted one run (the sampling job's)."""
    df = probe(spark, hot=5)
    first = LookupTable("Customers", SCHEMA, InMemoryConnector(DIM, ["id"]))
    enriched = lookup_join(df, first, on=[("customer_id", "id")], columns=["name"])
    regions = [{"name": f"c{i}", "region": f"r{i % 3}"} for i in range(200)]
    second = LookupTable(
        "Regions", "name STRING, region STRING", InMemoryConnector(regions, ["name"])
    )
    with no_spark_job(spark):
        out = lookup_join(
            enriched.where(F.col("name").isNotNull()),
            second,
            on="name",
            hints="SHUFFLE_HASH('Regions')",
            shuffle_partitions=4,
            skew={"sample_fraction": 1.0},
        )
    assert "hot keys not looked for" in caplog.text and "'Regions'" in caplog.text
    assert out.count() == df.where(F.col("customer_id") < 200).count()  # DIM's ids
    assert first.metrics()["numLookups"] == df.count()


def test_a_salted_row_goes_to_the_same_partition_whatever_its_position(
    spark: SparkSession,
) -> None:
    # A recomputed map task (stage retry) must route every row as the first attempt did, or
    # the shuffle loses and duplicates rows: the salt may depend on a row, not on its position.
    rows = [(n, 5 if n % 3 == 0 else (n * 7) % 250) for n in range(300)]
    routes = []
    for ordered in (rows, rows[::-1]):
        df = spark.createDataFrame(ordered, "order_id INT, customer_id INT").coalesce(1)
        out = lookup_join(
            df,
            LookupTable("Customers", SCHEMA, PartitionRecorder(DIM)),
            on=[("customer_id", "id")],
            hints="SHUFFLE_HASH('Customers')",
            shuffle_partitions=4,
            skew={"sample_fraction": 1.0},
        ).collect()
        assert len(key_partitions(out)[5]) >= 2  # the hot key is still spread
        routes.append({r["order_id"]: r["pid"] for r in out})
    assert routes[0] == routes[1]


@pytest.mark.parametrize("hot", [None, 5], ids=["uniform", "salted"])
def test_partitioned_full_cache_holds_its_share_and_joins_the_same(
    spark: SparkSession, hot: int | None
) -> None:
    dim = [{"id": i, "name": f"c{i}", "pid": None} for i in range(200)]
    df = probe(spark, hot=hot)
    table = LookupTable("Customers", SCHEMA, InMemoryConnector(dim, ["id"]), FULL)
    out = lookup_join(
        df,
        table,
        on=[("customer_id", "id")],
        how="left",
        hints="SHUFFLE_HASH('Customers')",
        shuffle_partitions=4,
        skew={"sample_fraction": 1.0},
    )
    rows = out.collect()
    whole = LookupTable("Customers", SCHEMA, InMemoryConnector(dim, ["id"]), FULL)
    expected = lookup_join(df, whole, on=[("customer_id", "id")], how="left").collect()
    assert Counter(map(tuple, rows)) == Counter(map(tuple, expected))
    metrics = table.metrics()
    assert metrics["loadCount"] == 4  # one snapshot per partition
    assert metrics["numCachedRecords"] <= 200 / 4 * 1.5  # the largest snapshot: about 1/4
    assert whole.metrics()["numCachedRecords"] == 200


def test_literal_bound_key_parts_are_kept_out_of_the_hash_and_filter_the_snapshot(
    spark: SparkSession,
) -> None:
    dim = [{"id": i, "region": r, "name": f"{r}{i}"} for i in range(100) for r in ("EU", "US")]
    df = spark.createDataFrame([(n, n % 120) for n in range(300)], "order_id INT, cid INT")
    table = LookupTable(
        "Customers",
        "id INT, region STRING, name STRING",
        InMemoryConnector(dim, ["id", "region"]),
        FULL,
    )

    def join(region: str) -> Counter[tuple[int, str]]:
        out = lookup_join(
            df,
            table,
            on=[("cid", "id")],
            literals={"region": region},
            hints="SHUFFLE_HASH('Customers')",
            shuffle_partitions=2,
            skew=False,
        )
        return Counter((r["order_id"], r["name"]) for r in out.collect())

    assert join("EU") == Counter((n, f"EU{n % 120}") for n in range(300) if n % 120 < 100)
    assert table.metrics()["numCachedRecords"] <= 100 / 2 * 1.5  # EU rows only, half of them
    # the same table with another literal: its own snapshots, not the EU rows' (the workers
    # that held those run the next job's tasks)
    assert join("US") == Counter((n, f"US{n % 120}") for n in range(300) if n % 120 < 100)


def test_a_partition_that_receives_no_rows_loads_no_snapshot(spark: SparkSession) -> None:
    """An empty task of a partitioned FULL cache has no partition to load: before, it loaded
    the whole table (and kept it in its process)."""
    dim = [{"id": i, "name": f"c{i}"} for i in range(200)]
    table = LookupTable("Customers", "id INT, name STRING", InMemoryConnector(dim, ["id"]), FULL)
    df = spark.createDataFrame([(n, 7) for n in range(20)], "order_id INT, cid INT")
    out = lookup_join(
        df,
        table,
        on=[("cid", "id")],
        hints="SHUFFLE_HASH('Customers')",
        shuffle_partitions=4,
        skew=False,
    )
    assert sorted(tuple(r) for r in out.collect()) == [(n, 7, 7, "c7") for n in range(20)]
    metrics = table.metrics()
    assert metrics.tasks == 4  # every task reported, the three empty ones too
    assert metrics["loadCount"] == 1 and metrics["numCachedRecords"] <= 200 / 4 * 1.5


def test_shuffle_partitions_default_to_the_task_slots_and_can_be_overridden(
    spark: SparkSession,
) -> None:
    df = probe(spark)  # 4 input partitions
    table = LookupTable("Customers", SCHEMA, PartitionRecorder(DIM))
    hint = "SHUFFLE_HASH('Customers')"
    spark.conf.set("spark.sql.shuffle.partitions", "5")  # not used: local[2,2] has 2 slots
    try:
        default = lookup_join(df, table, on=[("customer_id", "id")], hints=hint, skew=False)
        assert re.search(r"shufflepartitionidpassthrough\(.*, 2\)", physical_plan(default))
        rows = default.collect()
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "2")
    assert {r["pid"] for r in rows} == {0, 1}
    assert all(len(pids) == 1 for pids in key_partitions(rows).values())
    wider = lookup_join(
        df, table, on=[("customer_id", "id")], hints=hint, skew=False, shuffle_partitions=7
    )
    assert re.search(r"shufflepartitionidpassthrough\(.*, 7\)", physical_plan(wider))


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


class _Frame:
    def __init__(self, values: dict[str, str], streaming: bool = False) -> None:
        self.sparkSession = type("Session", (), {"conf": _Conf(values)})()
        self.isStreaming = streaming


DYNAMIC = {"spark.master": "yarn", "spark.dynamicAllocation.enabled": "true"}


@pytest.mark.parametrize(
    ("conf", "full", "expected"),
    [
        ({"spark.master": "local[3]"}, False, (3, True)),
        ({"spark.master": "local[3]"}, True, (3, True)),
        (
            {"spark.master": "yarn", "spark.executor.instances": "4", "spark.executor.cores": "2"},
            False,
            (8, True),
        ),
        # slots unknown (dynamic allocation without a maximum): AQE coalesces 200 ids ...
        (DYNAMIC, False, (200, False)),
        # ... not for a FULL cache (a task loads its one partition's rows), nor without AQE
        (DYNAMIC, True, (200, True)),
        ({**DYNAMIC, "spark.sql.adaptive.enabled": "false"}, False, (200, True)),
        ({**DYNAMIC, "spark.sql.shuffle.partitions": "64"}, False, (64, False)),
    ],
)
def test_exchange_size_from_the_conf(
    conf: dict[str, str], full: bool, expected: tuple[int, bool]
) -> None:
    size = exchange_size(_Frame(conf), None, full_cache=full)  # type: ignore[arg-type]
    assert (size.partitions, size.exact) == expected
    assert exchange_size(_Frame(conf), 9).partitions == 9  # type: ignore[arg-type]


class _Planned:
    def _explain_string(self, mode: str) -> str:
        return "== Physical Plan ==\n*(1) Range (0, 1, step=1, splits=6)"


def test_without_slots_in_the_conf_the_default_parallelism_sizes_the_exchange() -> None:
    """A standalone cluster without spark.cores.max (the application takes every core) ran a
    FULL-cache SHUFFLE_HASH join as 200 tasks, each loading the whole table."""
    standalone = _Frame({"spark.master": "spark://h:7077"})
    standalone.sparkSession.range = lambda n: _Planned()  # type: ignore[attr-defined]
    for full in (True, False):
        size = exchange_size(standalone, None, full_cache=full)  # type: ignore[arg-type]
        assert (size.partitions, size.exact) == (6, True)
        assert size.source.startswith("the default parallelism (spark.master=spark://h:7077")
    dynamic = _Frame(DYNAMIC)
    dynamic.sparkSession.range = lambda n: _Planned()  # type: ignore[attr-defined]
    # under dynamic allocation executors come later: AQE sizes a join, a FULL cache is exact
    assert exchange_size(dynamic, None, full_cache=True).partitions == 6  # type: ignore[arg-type]
    assert exchange_size(dynamic, None).partitions == 200  # type: ignore[arg-type]


def test_a_full_cache_gets_one_exact_partition_per_task_slot(spark: SparkSession) -> None:
    df = probe(spark)
    spark.conf.set("spark.sql.shuffle.partitions", "5")  # not used: local[2,2] has 2 slots
    try:
        table = LookupTable("Customers", SCHEMA, PartitionRecorder(DIM), options=FULL)
        out = lookup_join(
            df, table, on=[("customer_id", "id")], hints="SHUFFLE_HASH(Customers)", skew=False
        )
        assert re.search(r"shufflepartitionidpassthrough\(.*, 2\)", physical_plan(out))
        rows = out.collect()
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "2")
    assert len(rows) == sum(1 for n in range(600) if (n * 7) % 250 < 200)
    assert table.metrics()["numCachedRecords"] <= 200 / 2 * 1.5  # each task: about half


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"shuffle_partitions": 0}, "shuffle_partitions"),
        ({"shuffle_partitions": "8"}, "shuffle_partitions"),
        ({"skew": {"treshold": 0.1}}, "skew"),
        ({"skew": {"threshold": 2}}, "skew.threshold"),
        ({"skew": {"sample_fraction": 0}}, "skew.sample_fraction"),
        ({"skew": "yes"}, "skew"),
        ({"skew": {"seed": "42"}}, "skew.seed"),  # failed in the sampling job
    ],
)
def test_invalid_shuffle_settings(spark: SparkSession, kwargs: dict[str, Any], option: str) -> None:
    table = LookupTable("Customers", SCHEMA, PartitionRecorder(DIM))
    with no_spark_job(spark), pytest.raises(ConfigurationError) as error:
        lookup_join(
            probe(spark),
            table,
            on=[("customer_id", "id")],
            hints="SHUFFLE_HASH('Customers')",
            **kwargs,
        )
    assert error.value.option == option


_DAY0 = date(2024, 1, 1)


@pytest.mark.parametrize(
    ("left_type", "dim_type", "left", "dim"),
    [
        # looked up at the table's scale: 0.250 as 0.25; 0.255 misses (Spark's rounding cast
        # makes it 0.26, in the dim table: the probe side routes it by that)
        (
            "DECIMAL(12,3)",
            "DECIMAL(10,2)",
            lambda i: Decimal(i) / 4 + (Decimal("0.005") if i % 5 == 1 else 0),
            None,
        ),
        ("DECIMAL(10,2)", "DECIMAL(10,2)", lambda i: Decimal(i) / 4, lambda i: Decimal(i) / 4),
        ("DATE", "DATE", lambda i: _DAY0 + timedelta(days=i - 20), None),
        (
            "TIMESTAMP",
            "TIMESTAMP",
            lambda i: datetime(1969, 12, 31, 23, tzinfo=UTC) + timedelta(minutes=i, microseconds=i),
            lambda i: datetime(1969, 12, 31, 23, tzinfo=UTC) + timedelta(minutes=i, microseconds=i),
        ),
        (
            "TIMESTAMP_NTZ",
            "TIMESTAMP_NTZ",
            lambda i: datetime(2024, 3, 10, 1) + timedelta(minutes=9 * i, microseconds=i),
            None,
        ),
        ("BOOLEAN", "BOOLEAN", lambda i: i % 2 == 0, None),
    ],
    ids=["decimal-rescaled", "decimal", "date", "timestamp", "timestamp-ntz", "boolean"],
)
def test_every_key_type_gets_a_partitioned_full_cache(
    spark: SparkSession, left_type: str, dim_type: str, left: Any, dim: Any
) -> None:
    """DATE, TIMESTAMP, DECIMAL and BOOLEAN keys were hashed by Spark alone: every task loaded
    the whole table. The dim side now hashes them as the probe side canonicalises them (in a
    session time zone with a DST gap, which must not count)."""
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        probe_keys = [left(0 if n % 3 == 0 else n % 50) for n in range(200)]  # 0 is hot
        if dim is None:  # the dim table holds the keys as they are looked up
            df = spark.createDataFrame([(k,) for k in probe_keys], f"k {left_type}")
            looked_up = df.select(F.col("k").cast(dim_type).alias("k")).distinct().collect()
            keys = sorted((r.k for r in looked_up), key=repr)[:40]
        else:
            keys = [dim(i) for i in range(40)]
        rows = [{"code": k, "name": f"d{i}"} for i, k in enumerate(keys)]
        df = spark.createDataFrame(list(enumerate(probe_keys)), f"order_id INT, code {left_type}")
        schema = f"code {dim_type}, name STRING"
        table = LookupTable("Codes", schema, InMemoryConnector(rows, ["code"]), FULL)
        out = lookup_join(
            df,
            table,
            on="code",
            columns=["name"],
            how="left",
            hints="SHUFFLE_HASH('Codes')",
            shuffle_partitions=4,
            skew={"sample_fraction": 1.0, "min_sampled_rows": 1},
        )
        got = Counter((r["order_id"], r["name"]) for r in out.collect())
        whole = LookupTable("Codes", schema, InMemoryConnector(rows, ["code"]), FULL)
        plain = lookup_join(df, whole, on="code", columns=["name"], how="left")
        expected = Counter((r["order_id"], r["name"]) for r in plain.collect())
    finally:
        spark.conf.unset("spark.sql.session.timeZone")
    assert got == expected
    assert sum(1 for (_, name) in got.elements() if name is not None) >= 2  # keys do match
    assert whole.metrics()["numCachedRecords"] == len(rows)
    if len(rows) >= 8:  # a share of the table, not all of it
        assert table.metrics()["numCachedRecords"] < len(rows)


def test_rows_whose_key_holds_a_null_are_spread_over_the_tasks(spark: SparkSession) -> None:
    """A NULL key (never looked up: an SQL LEFT join's ON pre-filter makes many) hashed to one
    partition: 90 % of the rows in one task."""
    df = spark.range(4000).select(
        F.when(F.col("id") % 10 == 0, (F.col("id") % 97).cast("int")).alias("customer_id"),
        F.col("id").alias("n"),
    )
    table = LookupTable("Customers", "id INT, name STRING", InMemoryConnector([], ["id"]))
    out = lookup_join(
        df,
        table,
        on=[("customer_id", "id")],
        how="left",
        hints="SHUFFLE_HASH('Customers')",
        shuffle_partitions=2,
        skew=False,
    )
    sizes = [r[1] for r in out.groupBy(F.spark_partition_id()).count().collect()]
    assert sum(sizes) == 4000 and max(sizes) < 0.6 * 4000, sizes


class _TextPartitioner:
    """Routes by the key's text, as a sharded store (a Redis cluster's slots) would."""

    def partition(self, key: tuple[Any, ...], n: int) -> int:
        return sum(str(key[0]).encode()) % n


class _FarPartitioner:
    """A partition expression in the contract's words, ``(key + 2**40) mod n``, whose Spark
    column is left unreduced: a long far outside [0, n)."""

    def partition(self, key: tuple[Any, ...], n: int) -> int:
        return (key[0] + 2**40) % n

    def spark_column(self, columns: list[Any], n: int) -> Any:
        return columns[0].cast("long") + F.lit(2**40)


class _Partitioned(InMemoryConnector):
    """In-memory rows with a connector-supplied partitioner."""

    def __init__(self, rows: list[dict[str, Any]], partitioner: Any) -> None:
        super().__init__(rows, ["id"])
        self._partitioner = partitioner

    def partitioner(self, key_columns: Any) -> Any:
        return self._partitioner


def _assert_every_row_joins(
    spark: SparkSession, partitioner: Any, types: tuple[str, str], left: Any, dim: Any
) -> None:
    """40 probe rows over 20 keys, shuffled to 4 partitions with a partitioned FULL cache: each
    row joins its key's dim row."""
    left_type, dim_type = types
    rows = [{"id": dim(i), "name": f"c{i}"} for i in range(20)]
    probe = spark.createDataFrame([(n, left(n % 20)) for n in range(40)], f"oid INT, k {left_type}")
    table = LookupTable("D", f"id {dim_type}, name STRING", _Partitioned(rows, partitioner), FULL)
    hint = "SHUFFLE_HASH('D')"
    out = lookup_join(probe, table, on=[("k", "id")], hints=hint, shuffle_partitions=4, skew=False)
    assert sorted((r.oid, r.name) for r in out.collect()) == [(n, f"c{n % 20}") for n in range(40)]


@pytest.mark.parametrize(
    ("left_type", "dim_type", "left", "dim"),
    [
        ("DECIMAL(12,2)", "DECIMAL(10,0)", lambda i: Decimal(i).quantize(Decimal("0.01")), Decimal),
        (
            "TIMESTAMP",
            "TIMESTAMP",
            lambda i: datetime(2024, 1, 1, i, tzinfo=UTC),
            lambda i: datetime(2024, 1, 1, i, tzinfo=UTC),
        ),
        ("DOUBLE", "DOUBLE", lambda i: -0.0 if i == 0 else float(i), float),
    ],
)
def test_a_connector_partitioner_sees_the_key_that_is_looked_up(
    spark: SparkSession, left_type: str, dim_type: str, left: Any, dim: Any
) -> None:
    """It got the left column's values (1.00 for the DECIMAL(10,0) key 1, a naive time for an
    aware one, -0.0): the probe row and its dim row took different partitions, and the
    partitioned FULL cache missed 28 of 40 rows."""
    _assert_every_row_joins(spark, _TextPartitioner(), (left_type, dim_type), left, dim)


def test_a_spark_column_beyond_the_int_range_is_reduced_before_its_cast(
    spark: SparkSession,
) -> None:
    """It was cast to int first: Spark 4's ANSI mode failed every task (CAST_OVERFLOW)."""
    _assert_every_row_joins(spark, _FarPartitioner(), ("INT", "INT"), int, int)
