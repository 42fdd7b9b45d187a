"""Options and hint values that silently did nothing or meant nonsense now fail on the driver,
before any Spark job, naming the option, the value and what is allowed (issue 11 part 4)."""

from __future__ import annotations

import pytest
from pyspark.sql import DataFrame, SparkSession

from asyncio_lookup.connectors import InMemoryConnector
from asyncio_lookup.errors import ConfigurationError, HintError
from asyncio_lookup.spark import LookupTable, lookup_join
from tests.spark.conftest import no_spark_job

pytestmark = pytest.mark.spark

SCHEMA = "id INT, name STRING"
ROWS = [{"id": 1, "name": "a"}]


@pytest.mark.parametrize(
    ("options", "option", "named"),
    [
        ({"lookup-cache": "PARTIAL"}, "lookup-cache", ["did you mean 'lookup.cache'?"]),
        ({"cache": "PARTIAL"}, "cache", ["did you mean 'lookup.cache'?"]),
        ({" lookup.cache": "PARTIAL"}, " lookup.cache", ["did you mean 'lookup.cache'?"]),
        (
            {"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "0"},
            "lookup.partial-cache.max-rows",
            ["'0'", "an integer >= 1"],
        ),
        (
            {"lookup.cache": "PARTIAL", "lookup.partial-cache.expire-after-write": "0"},
            "lookup.partial-cache.expire-after-write",
            ["'0'", "a duration > 0"],
        ),
        ({"lookup.max-retry-backoff": "0s"}, "lookup.max-retry-backoff", ["'0s'", "> 0"]),
    ],
)
def test_unknown_keys_and_senseless_values_fail_when_the_table_is_made(
    spark: SparkSession, options: dict[str, str], option: str, named: list[str]
) -> None:
    with no_spark_job(spark), pytest.raises(ConfigurationError) as error:
        LookupTable("Customers", SCHEMA, InMemoryConnector(ROWS, ["id"]), options=options)
    assert error.value.option == option
    for text in named:
        assert text in str(error.value)


@pytest.mark.parametrize(
    ("hint", "option", "named"),
    [
        ("LOOKUP('table'='Customers', 'capacity'='1000000000000')", "capacity", ["at most"]),
        ("LOOKUP('table'='Customers', 'capacity'='0')", "capacity", ["> 0"]),
        ("LOOKUP('table'='Customers', 'timeout'='0')", "timeout", ["a duration > 0"]),
        ("LOOKUP('table'='Customers', 'timeout'='-1 s')", "timeout", ["a duration > 0"]),
    ],
)
def test_senseless_hint_values_fail_before_any_job(
    spark: SparkSession, hint: str, option: str, named: list[str]
) -> None:
    table = LookupTable("Customers", SCHEMA, InMemoryConnector(ROWS, ["id"]))
    df: DataFrame = spark.createDataFrame([(1,)], "customer_id INT")
    with no_spark_job(spark), pytest.raises(HintError) as error:
        lookup_join(df, table, on=[("customer_id", "id")], hints=hint)
    assert error.value.option == option
    for text in named:
        assert text in str(error.value)
