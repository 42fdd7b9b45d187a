"""Every driver-side check fails before any Spark job runs, naming the problem (docs/semantics.md
§2.8)."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from asyncio_lookup.connectors import HttpConnector, InMemoryConnector, PostgresConnector
from asyncio_lookup.errors import ConfigurationError, HintError
from asyncio_lookup.spark import LookupTable, async_map, lookup_join
from asyncio_lookup.spark.join import LookupJoinArgs
from tests.spark.conftest import no_spark_job
from tests.spark.helpers import NoCapability, physical_plan

pytestmark = pytest.mark.spark

SCHEMA = "id INT, name STRING, country STRING"
ROWS = [{"id": 1, "name": "a", "country": "NL"}]
RETRY = (
    "'retry-predicate'='lookup_miss', 'retry-strategy'='fixed_delay', "
    "'fixed-delay'='1s', 'max-attempts'='2'"
)


@pytest.fixture(scope="module")
def customers(spark: SparkSession) -> LookupTable:
    return LookupTable("Customers", SCHEMA, InMemoryConnector(ROWS, ["id"]))


@pytest.fixture(scope="module")
def df(spark: SparkSession) -> DataFrame:
    return spark.createDataFrame(
        [(1, "x", 2.0, 0.1)], "customer_id INT, code STRING, amount DOUBLE, ratio FLOAT"
    )


def test_the_no_job_check_sees_jobs(spark: SparkSession) -> None:
    with pytest.raises(AssertionError, match="a Spark job ran"), no_spark_job(spark):
        spark.range(3).count()


@pytest.mark.parametrize(
    ("hint", "named"),
    [
        ("LOOKUP('table'='Customers', 'async'='yes')", ["'async'", "'yes'", "'true' or 'false'"]),
        ("LOOKUP('table'='Customers', 'output-mode'='allow-unordered')", ["'allow-unordered'"]),
        ("LOOKUP('table'='Customers', 'capacity'='0')", ["'capacity'", "'0'"]),
        ("LOOKUP('table'='Customers', 'timeout'='-3s')", ["'timeout'", "'-3s'"]),
        ("LOOKUP('table'='Customers', 'time-out'='3s')", ["'time-out'", "'timeout'", "'shuffle'"]),
        ("LOOKUP('table'='Customers', 'retry-predicate'='lookup_miss')", ["all four of"]),
        (
            f"LOOKUP('table'='Customers', {RETRY.replace('2', '1.5')})",
            ["'max-attempts'", "'1.5'"],
        ),
        (f"LOOKUP('table'='Customers', {RETRY.replace('2', '0')})", ["'max-attempts'", "'0'"]),
        (f"LOOKUP('table'='Customers', {RETRY.replace('1s', '0s')})", ["'fixed-delay'"]),
        (
            f"LOOKUP('table'='Customers', {RETRY.replace('lookup_miss', 'error')})",
            ["'retry-predicate'", "'error'", "'lookup_miss'"],
        ),
        (
            f"LOOKUP('table'='Customers', {RETRY.replace('fixed_delay', 'backoff')})",
            ["'retry-strategy'", "'backoff'", "'fixed_delay'"],
        ),
        ("LOOKUP('async'='true')", ["'table'"]),
        ("LOOKUP('table'='Orders')", ["'Orders'", "'Customers'"]),
        ("SHUFFLE_HASH('Orders')", ["'Orders'", "'Customers'"]),
        ("/*+ BROADCAST('Customers') */", ["unknown hint", "LOOKUP or SHUFFLE_HASH"]),
        ("LOOKUP('table'='Customers'", ["expected"]),
    ],
)
def test_invalid_hints_fail_on_the_driver(
    spark: SparkSession, customers: LookupTable, df: DataFrame, hint: str, named: list[str]
) -> None:
    with no_spark_job(spark), pytest.raises(HintError) as error:
        lookup_join(df, customers, on=[("customer_id", "id")], hints=hint)
    for text in named:
        assert text in str(error.value)


def test_invalid_job_default_in_the_spark_conf(
    spark: SparkSession, customers: LookupTable, df: DataFrame
) -> None:
    spark.conf.set("table.exec.async-lookup.timeout", "soon")
    try:
        with no_spark_job(spark), pytest.raises(ConfigurationError) as error:
            lookup_join(df, customers, on=[("customer_id", "id")])
        assert error.value.option == "table.exec.async-lookup.timeout"
        assert "'soon'" in str(error.value)
    finally:
        spark.conf.unset("table.exec.async-lookup.timeout")


async def _async_predicate(*rows: Any) -> bool:
    return False


@pytest.mark.parametrize(
    ("kwargs", "option", "named"),
    [
        ({"name": " "}, "name", []),
        ({"schema": "id INT,, name"}, "schema", ["DDL"]),
        ({"schema": "id INT, ID STRING"}, "schema", ["appears twice"]),
        ({"schema": 42}, "schema", ["StructType"]),
        ({"options": {"lookup.cache": "SOMETIMES"}}, "lookup.cache", ["'SOMETIMES'"]),
        ({"options": {"lookup.cahce": "PARTIAL"}}, "lookup.cahce", ["lookup.cache"]),
        ({"options": {"lookup.cache": "PARTIAL"}}, "lookup.cache", ["unbounded"]),
        (
            {"options": {"lookup.cache": "FULL"}},
            "lookup.full-cache.periodic-reload.interval",
            ["PERIODIC"],
        ),
        ({"connector": None}, "connector", []),
        # the class, not an instance: a TypeError about 'self' from deep in the chain
        ({"connector": InMemoryConnector}, "connector", ["the class InMemoryConnector"]),
        ({"connector": NoCapability()}, "connector", ["neither a sync nor an async lookup"]),
        ({"connector": 5}, "connector", ["lookup_function()", "none of them"]),
        (
            {
                "connector": NoCapability(),
                "options": {
                    "lookup.cache": "FULL",
                    "lookup.full-cache.periodic-reload.interval": "1h",
                },
            },
            "lookup.cache",
            ["scan()"],
        ),
    ],
)
def test_invalid_lookup_tables(
    spark: SparkSession, kwargs: dict[str, Any], option: str, named: list[str]
) -> None:
    arguments: dict[str, Any] = {
        "name": "Customers",
        "schema": SCHEMA,
        "connector": InMemoryConnector(ROWS, ["id"]),
        "options": None,
        **kwargs,
    }
    with no_spark_job(spark), pytest.raises(ConfigurationError) as error:
        LookupTable(**arguments)
    assert error.value.option == option
    for text in named:
        assert text in str(error.value)


@pytest.mark.parametrize(
    ("kwargs", "option", "named"),
    [
        ({"on": [("customer", "id")]}, "on", ["'customer'", "left DataFrame"]),
        ({"on": [("CUSTOMER_ID", "id")]}, "on", ["did you mean 'customer_id'"]),
        ({"on": [("customer_id", "key")]}, "on", ["'key'", "dim table 'Customers'"]),
        ({"on": [("code", "id")]}, "on", ["'code' is string", "'id' is int"]),
        ({"on": 42}, "on", ["column name"]),
        ({"on": [("customer_id", "id"), ("amount", "id")]}, "on", ["bound twice"]),
        ({"on": "customer_id"}, "on", ["no column 'customer_id' in the dim table"]),
        ({"how": "full"}, "how", ["'inner' or 'left'"]),
        ({"literals": {"name": 3}}, "literals['name']", ["string"]),
        ({"literals": {"nope": 3}}, "literals", ["'nope'"]),
        ({"literals": {"name": None}}, "literals['name']", ["NULL"]),
        ({"columns": ["name", "zip"]}, "columns", ["'zip'"]),
        ({"rename": {"zip": "z"}}, "rename", ["'zip'"]),
        ({"columns": [1]}, "columns", ["1", "'name'"]),
        ({"columns": [None]}, "columns", ["None"]),
        ({"rename": {"name": 5}}, "rename", ["{'name': 5}", "non-empty output name"]),
        ({"rename": {"name": None}}, "rename", ["{'name': None}"]),
        ({"rename": {"name": ""}}, "rename", ["{'name': ''}"]),
        ({"rename": {5: "n"}}, "rename", ["5", "'name'"]),
        ({"rename": {"name": "code"}}, "rename", ["collides with column 'code'"]),
        ({"rename": {"name": "n", "country": "N"}}, "rename", ["collides with column 'n'"]),
        # named 'rename' though none was given
        ({"columns": ["name", "name"]}, "columns", ["collides with column 'name'"]),
        ({"dim_filter": "country = 'NL'"}, "dim_filter", ["callable"]),
        # a coroutine is truthy: an `async def` filter let every row through
        ({"dim_filter": _async_predicate}, "dim_filter", ["`async def`"]),
        ({"condition": _async_predicate}, "condition", ["`async def`"]),
        # ignored silently before: a rename of a column not output, a count for no exchange
        (
            {"columns": ["name"], "rename": {"country": "c"}},
            "rename",
            ["['country']", "not among columns"],
        ),
        ({"shuffle_partitions": 4}, "shuffle_partitions", ["4", "SHUFFLE_HASH"]),
        ({"skew": True}, "skew", ["True", "SHUFFLE_HASH", "would do nothing"]),
        ({"skew": {"sample_fraction": 1.0}}, "skew", ["sample_fraction", "SHUFFLE_HASH"]),
        ({"alias": ""}, "alias", []),
    ],
)
def test_invalid_joins_fail_on_the_driver(
    spark: SparkSession,
    customers: LookupTable,
    df: DataFrame,
    kwargs: dict[str, Any],
    option: str,
    named: list[str],
) -> None:
    arguments: dict[str, Any] = {"on": [("customer_id", "id")], **kwargs}
    with no_spark_job(spark), pytest.raises(ConfigurationError) as error:
        lookup_join(df, customers, **arguments)
    assert error.value.option == option
    for text in named:
        assert text in str(error.value)


def test_float_and_double_keys_do_not_mix(spark: SparkSession, df: DataFrame) -> None:
    # A FLOAT 0.1 reaches Python as 0.10000000149011612 and would silently miss the DOUBLE
    # key 0.1 (an INNER join would lose the row): refused on the driver, in both directions.
    scores = LookupTable(
        "Scores", "score DOUBLE, label STRING", InMemoryConnector([{"score": 0.1}], ["score"])
    )
    with no_spark_job(spark), pytest.raises(ConfigurationError) as error:
        lookup_join(df, scores, on=[("ratio", "score")])
    assert "'ratio' is float" in str(error.value)
    assert "'score' is double" in str(error.value)
    ratios = LookupTable(
        "Ratios", "ratio FLOAT, label STRING", InMemoryConnector([{"ratio": 0.5}], ["ratio"])
    )
    with no_spark_job(spark), pytest.raises(ConfigurationError, match="'amount' is double"):
        lookup_join(df, ratios, on=[("amount", "ratio")])
    with no_spark_job(spark):
        lookup_join(df, ratios, on="ratio", columns=["label"])  # the same type is fine


def test_dim_columns_the_connector_does_not_select_are_an_error(
    spark: SparkSession, df: DataFrame
) -> None:
    connector = PostgresConnector(
        "postgresql://u:pw@127.0.0.1:1/db", "customers", "id", columns=["id", "name"]
    )
    customers = LookupTable("Customers", SCHEMA, connector, verify_target=False)
    with no_spark_job(spark), pytest.raises(ConfigurationError) as error:
        lookup_join(df, customers, on=[("customer_id", "id")])
    assert error.value.option == "columns"
    assert "['country']" in str(error.value)
    assert "always be NULL" in str(error.value)
    with no_spark_job(spark):
        lookup_join(df, customers, on=[("customer_id", "id")], columns=["name"])


def test_name_collisions_are_errors_until_renamed(spark: SparkSession) -> None:
    orders = spark.createDataFrame([(1, 1)], "ID INT, id_x INT")
    customers = LookupTable("Customers", SCHEMA, InMemoryConnector(ROWS, ["id"]))
    with no_spark_job(spark), pytest.raises(ConfigurationError) as error:
        lookup_join(orders, customers, on=[("ID", "id")])
    assert "dim column 'id' of 'Customers' would be output as 'id'" in str(error.value)
    assert "collides with column 'ID'" in str(error.value)
    with no_spark_job(spark):
        renamed = lookup_join(orders, customers, on=[("ID", "id")], rename={"id": "customer_id"})
        prefixed = lookup_join(orders, customers, on=[("ID", "id")], prefix="c_")
        selected = lookup_join(orders, customers, on=[("ID", "id")], columns=["name"])
    assert renamed.columns == ["ID", "id_x", "customer_id", "name", "country"]
    assert prefixed.columns == ["ID", "id_x", "c_id", "c_name", "c_country"]
    assert selected.columns == ["ID", "id_x", "name"]


def test_join_key_must_match_the_connector_key(spark: SparkSession, df: DataFrame) -> None:
    by_name = LookupTable("Customers", SCHEMA, InMemoryConnector(ROWS, ["name"]))
    with no_spark_job(spark), pytest.raises(ConfigurationError) as error:
        lookup_join(df, by_name, on=[("customer_id", "id")])
    assert "the connector's key columns ['name']" in str(error.value)


def test_non_spark_arguments(spark: SparkSession, customers: LookupTable, df: DataFrame) -> None:
    with no_spark_job(spark), pytest.raises(ConfigurationError, match="'table'"):
        lookup_join(df, "Customers", on="id")  # type: ignore[arg-type]
    with no_spark_job(spark), pytest.raises(ConfigurationError, match="'df'"):
        lookup_join([1, 2], customers, on="id")  # type: ignore[arg-type]


async def _echo(row: dict[str, Any]) -> list[dict[str, Any]]:
    return [row]


def _not_async(row: dict[str, Any]) -> list[dict[str, Any]]:
    return [row]


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"capacity": 0}, "capacity"),
        ({"timeout": "soon"}, "timeout"),
        ({"retry_strategy": "fixed"}, "retry_strategy"),
        ({"schema": "n INT,,"}, "schema"),
        ({"fn": _not_async}, "fn"),
        ({"output_mode": "sorted"}, "output_mode"),
    ],
)
def test_invalid_async_map(spark: SparkSession, kwargs: dict[str, Any], option: str) -> None:
    df = spark.range(3)
    arguments: dict[str, Any] = {"fn": _echo, "schema": "id BIGINT", "timeout": 1.0, **kwargs}
    with no_spark_job(spark), pytest.raises(ConfigurationError) as error:
        async_map(df, **arguments)
    assert error.value.option == option


def test_shuffle_hash_without_a_left_key_column_is_ignored_with_a_warning(
    spark: SparkSession, df: DataFrame
) -> None:
    by_country = LookupTable("Customers", SCHEMA, InMemoryConnector(ROWS, ["country"]))
    with (
        no_spark_job(spark),
        pytest.warns(UserWarning, match="SHUFFLE_HASH for 'Customers' ignored"),
    ):
        out = lookup_join(
            df, by_country, on=[], literals={"country": "NL"}, hints="SHUFFLE_HASH('Customers')"
        )
    assert "direct_shuffle_partition_id" not in physical_plan(out, extended=True)
    with no_spark_job(spark):
        shuffled = lookup_join(
            df,
            LookupTable("Customers", SCHEMA, InMemoryConnector(ROWS, ["id"])),
            on=[("customer_id", "id")],
            hints="LOOKUP('table'='Customers', 'shuffle'='true')",
            skew=False,  # hot-key sampling is the one Spark job a shuffled join starts early
        )
    assert "direct_shuffle_partition_id" in physical_plan(shuffled, extended=True)


def test_lookup_join_takes_exactly_the_fields_of_lookup_join_args() -> None:
    # lookup_join lists LookupJoinArgs's fields again in its signature (for users and type
    # checkers): the names, kinds and defaults must stay the same.
    parameters = list(inspect.signature(lookup_join).parameters.values())[2:]  # after df, table
    fields = [f for f in dataclasses.fields(LookupJoinArgs) if f.init]
    assert [p.name for p in parameters] == [f.name for f in fields]
    for parameter, field in zip(parameters, fields, strict=True):
        default = inspect.Parameter.empty if field.default is dataclasses.MISSING else field.default
        assert parameter.default == default, parameter.name
        assert parameter.annotation == field.type, parameter.name
    keyword_only = [p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert keyword_only == [f.name for f in fields][3:]  # on, how, hints may be positional


def test_a_tables_settings_are_fixed() -> None:
    # the workers keep a table's chains (clients, caches) by its id: a changed connector or
    # option would not reach them, and later joins would read the old ones' rows
    table = LookupTable("Fixed", "id INT, v STRING", InMemoryConnector([{"id": 1}], ["id"]))
    for name, value in (
        ("connector", InMemoryConnector([], ["id"])),
        ("options", None),
        ("name", "Other"),
        ("schema", "id INT"),
    ):
        with pytest.raises(AttributeError):
            setattr(table, name, value)


def test_a_full_cache_whose_keys_cannot_match_its_snapshot_is_refused_on_the_driver(
    spark: SparkSession, df: DataFrame, redis_url: str, postgres_dsn: str
) -> None:
    """Both failed every lookup in the tasks (Redis: an INT key against key names read as
    text) or missed what NONE joins (PostgreSQL: char(n) ignores trailing spaces)."""
    from asyncio_lookup.connectors import RedisConnector
    from tests.connectors.test_postgres import _exec

    full = {"lookup.cache": "FULL", "lookup.full-cache.periodic-reload.interval": "1h"}
    redis = RedisConnector(redis_url, "validation:c:{id}")
    table = LookupTable("Customers", SCHEMA, redis, options=full)
    with no_spark_job(spark), pytest.raises(ConfigurationError) as error:
        lookup_join(df, table, on=[("customer_id", "id")])
    assert error.value.option == "key_types" and "no int key equals" in str(error.value)
    with no_spark_job(spark):  # with a converter, or without FULL, it plans
        typed = RedisConnector(redis_url, "validation:c:{id}", key_types={"id": int})
        lookup_join(
            df, LookupTable("Customers", SCHEMA, typed, options=full), on=[("customer_id", "id")]
        )
        lookup_join(df, LookupTable("Customers", SCHEMA, redis), on=[("customer_id", "id")])

    _exec(
        postgres_dsn,
        "DROP TABLE IF EXISTS validation_codes",
        "CREATE TABLE validation_codes (code char(4), name text)",
    )
    try:
        pg = PostgresConnector(postgres_dsn, "validation_codes", "code")
        codes = LookupTable("Codes", "code STRING, name STRING", pg, options=full)
        with no_spark_job(spark), pytest.raises(ConfigurationError) as error:
            lookup_join(df, codes, on=[("code", "code")])
        assert error.value.option == "lookup.cache" and "character(4)" in str(error.value)
        with no_spark_job(spark):
            plain = LookupTable(
                "Codes",
                "code STRING, name STRING",
                PostgresConnector(postgres_dsn, "validation_codes", "code"),
            )
            lookup_join(df, plain, on=[("code", "code")])
    finally:
        _exec(postgres_dsn, "DROP TABLE IF EXISTS validation_codes")


def test_a_retry_delay_past_the_timeout_is_refused_only_where_the_join_retries_async(
    spark: SparkSession, df: DataFrame
) -> None:
    slow = RETRY.replace("'fixed-delay'='1s'", "'fixed-delay'='5min'")
    hint = f"LOOKUP('table'='Customers', {slow})"
    on = [("customer_id", "id")]
    with no_spark_job(spark):
        with pytest.raises(HintError, match="shorter than the timeout"):
            lookup_join(
                df,
                LookupTable("Customers", SCHEMA, InMemoryConnector(ROWS, ["id"])),
                on,
                hints=hint,
            )
        full = LookupTable(
            "Customers",
            SCHEMA,
            InMemoryConnector(ROWS, ["id"]),
            {"lookup.cache": "FULL", "lookup.full-cache.periodic-reload.interval": "1h"},
        )
        lookup_join(df, full, on, hints=hint)  # a FULL cache never retries


def test_a_batch_wait_past_the_timeout_is_refused_before_any_task(
    spark: SparkSession, df: DataFrame
) -> None:
    """It failed every row on the executors with a timeout naming only 'timeout'."""
    batching = {"lookup.batch.max-size": "8", "lookup.batch.max-wait": "5 s"}
    hint = "LOOKUP('table'='Customers', 'timeout'='1 s')"
    on = [("customer_id", "id")]
    with no_spark_job(spark):
        table = LookupTable("Customers", SCHEMA, InMemoryConnector(ROWS, ["id"]), batching)
        with pytest.raises(ConfigurationError, match=r"'lookup.batch.max-wait'.*shorter than"):
            lookup_join(df, table, on, hints=hint)
        lookup_join(df, table, on, hints="LOOKUP('table'='Customers', 'timeout'='10 s')")
        unbatched = {**batching, "lookup.batch.max-size": "1"}
        lookup_join(
            df,
            LookupTable("Customers", SCHEMA, InMemoryConnector(ROWS, ["id"]), unbatched),
            on,
            hints=hint,
        )
        # a connector without batch calls never waits for a batch
        point_only = HttpConnector("http://127.0.0.1:9/c/{id}")
        lookup_join(df, LookupTable("Customers", SCHEMA, point_only, batching), on, hints=hint)
