"""LookupSQL's errors: every one raised by ``sql()`` on the driver before any Spark job, naming
what is wrong and what is allowed; DDL handling; passwords never shown."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import asyncpg
import pytest
from pyspark.sql import SparkSession

from asyncio_lookup.connectors import InMemoryConnector, register_connector
from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.spark import LookupSQL, LookupTable
from asyncio_lookup.spark.sql import SqlError, SqlParseError
from tests.spark.conftest import no_spark_job
from tests.spark.helpers import NoCapability, physical_plan

pytestmark = pytest.mark.spark

SECRET = "hunter2-s3cret"
DDL = """CREATE TEMPORARY TABLE Customers (
  id INT, name STRING, country STRING, zip STRING, PRIMARY KEY (id) NOT ENFORCED
) WITH (
  'connector' = 'jdbc',
  'url' = 'jdbc:postgresql://127.0.0.1:5432/test',
  'table-name' = '{table}',
  'username' = 'postgres',
  'password' = '{secret}'{extra}
)"""
JOIN = "FROM Orders o JOIN Customers FOR SYSTEM_TIME AS OF o.proc_time AS c ON o.customer_id = c.id"


@pytest.fixture(scope="module")
def customers_table(postgres_dsn: str) -> Iterator[str]:
    """A real (empty) PostgreSQL table behind the DDL: the driver checks it exists."""
    name = f"customers_{uuid.uuid4().hex[:10]}"

    async def execute(statement: str) -> None:
        conn = await asyncpg.connect(postgres_dsn)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    asyncio.run(execute(f'CREATE TABLE "{name}" (id int, name text, country text, zip text)'))
    yield name
    asyncio.run(execute(f'DROP TABLE IF EXISTS "{name}"'))


@pytest.fixture(scope="module")
def sql(spark: SparkSession, customers_table: str) -> LookupSQL:
    spark.createDataFrame(
        [(1, 10, 2.0, "t")], "order_id INT, customer_id INT, total DOUBLE, proc_time STRING"
    ).createOrReplaceTempView("Orders")
    lookup = LookupSQL(spark)
    lookup.sql(DDL.format(secret=SECRET, extra="", table=customers_table))
    rows = [{"id": 1, "region": "EU", "name": "r"}]
    lookup.register(
        LookupTable(
            "Regions",
            "id INT, region STRING, name STRING",
            InMemoryConnector(rows, ["id", "region"]),
        )
    )
    return lookup


@pytest.mark.parametrize(
    ("statement", "named"),
    [
        ("SELECT o.order_id\nFROM Orders o JOIN", ["line 2", "column"]),
        ("SELECT 1; SELECT 2", ["exactly one statement"]),
        (
            "SELECT * FROM Orders o JOIN Orders FOR SYSTEM_TIME AS OF o.proc_time p "
            "ON o.order_id = p.order_id",
            ["'Orders' is not a lookup table", "FOR SYSTEM_TIME AS OF"],
        ),
        (
            "SELECT * FROM Orders o JOIN Customers c ON o.customer_id = c.id",
            ["'Customers'", "FOR SYSTEM_TIME"],
        ),
        ("SELECT * FROM Customers", ["'Customers' is a lookup table"]),
        (f"SELECT c.nope {JOIN}", ["'c.nope'", "'country'", "no such column"]),
        (f"SELECT o.nope {JOIN}", ["'o.nope'", "'proc_time'"]),
        (
            "SELECT 1 FROM Orders o RIGHT JOIN Customers FOR SYSTEM_TIME AS OF o.proc_time c "
            "ON o.customer_id = c.id",
            ["RIGHT", "LEFT [OUTER] JOIN"],
        ),
        (
            "SELECT 1 FROM Orders o FULL OUTER JOIN Customers FOR SYSTEM_TIME AS OF o.proc_time c "
            "ON o.customer_id = c.id",
            ["FULL", "LEFT [OUTER] JOIN"],
        ),
        (
            "SELECT 1 FROM Orders o CROSS JOIN Customers FOR SYSTEM_TIME AS OF o.proc_time c",
            ["CROSS", "LEFT [OUTER] JOIN"],
        ),
        (  # the user wrote no CROSS JOIN
            "SELECT 1 FROM Orders o, Customers FOR SYSTEM_TIME AS OF o.proc_time c "
            "WHERE o.customer_id = c.id",
            ["a comma join", "LEFT [OUTER] JOIN"],
        ),
        (  # a key from the outer query of a correlated subquery: Spark's bare UNRESOLVED_COLUMN
            "SELECT o.order_id, (SELECT max(c.id) FROM (SELECT current_timestamp() AS ts) k "
            "JOIN Customers FOR SYSTEM_TIME AS OF k.ts AS c ON c.id = o.customer_id) FROM Orders o",
            ["o.customer_id is a column of no source of this FROM", "'c.id = o.customer_id'"],
        ),
        (
            "SELECT 1 FROM Orders o JOIN Customers FOR SYSTEM_TIME AS OF o.total + 1 c "
            "ON o.customer_id = c.id",
            ["a column of the probe side"],
        ),
        (
            "SELECT 1 FROM Orders o JOIN Customers FOR SYSTEM_TIME AS OF c.id c "
            "ON o.customer_id = c.id",
            ["a column of the probe side"],
        ),
        (
            "SELECT 1 FROM Orders o JOIN Customers FOR SYSTEM_TIME AS OF o.proc_time c "
            "ON o.customer_id > c.id",
            ["no lookup key"],
        ),
        (
            "SELECT 1 FROM Orders o JOIN Regions FOR SYSTEM_TIME AS OF o.proc_time r "
            "ON o.customer_id = r.id",
            ["['region'] not bound", "'id', 'region'"],
        ),
        (f"SELECT /*+ LOOKUP('table'='c', 'async'='yes') */ 1 {JOIN}", ["'async'", "'yes'"]),
        (
            f"SELECT /*+ LOOKUP('table'='c', 'time-out'='1s') */ 1 {JOIN}",
            ["'time-out'", "'timeout'"],
        ),
        (
            f"SELECT /*+ LOOKUP('table'='Customers', 'retry-predicate'='lookup_miss') */ 1 {JOIN}",
            ["all four of"],
        ),
        (f"SELECT /*+ LOOKUP('table'='Orders') */ 1 {JOIN}", ["'Orders'", "'c'"]),
        (f"SELECT /*+ SHUFFLE_HASH(Nope) */ 1 {JOIN}", ["'Nope'", "'c'"]),
        (f"SELECT /*+ LOOKUP('table'='Customers' */ 1 {JOIN}", ["expected"]),
        (
            "SELECT * FROM (SELECT /*+ LOOKUP('table'='c') */ * FROM Orders) o2, "
            f"(SELECT 1 {JOIN})",
            ["names no lookup join"],
        ),
        (
            f"SELECT o.order_id {JOIN.replace('o.customer_id = c.id', 'o.proc_time = c.id')}",
            ["'o.proc_time'", "compatible types"],
        ),
        (
            "SELECT * FROM Nowhere n JOIN Customers FOR SYSTEM_TIME AS OF n.t c ON n.a = c.id",
            ["Nowhere"],
        ),
    ],
)
def test_query_errors_raise_before_any_job(
    spark: SparkSession, sql: LookupSQL, statement: str, named: list[str]
) -> None:
    with no_spark_job(spark), pytest.raises(Exception) as error:
        sql.sql(statement)
    for text in named:
        assert text in str(error.value)


def test_parse_errors_carry_line_and_column(sql: LookupSQL) -> None:
    with pytest.raises(SqlParseError) as error:
        sql.sql("SELECT o.order_id\n  FROM Orders o\n  JOIN WHERE")
    assert error.value.line == 3
    assert error.value.column is not None


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (",\n  'lookup.cache' = 'SOMETIMES'", ["'lookup.cache'", "'SOMETIMES'", "PARTIAL"]),
        (",\n  'lookup.cash' = 'FULL'", ["'lookup.cash'", "lookup.cache"]),
        (
            ",\n  'fetch-size' = '10'",
            ["'fetch-size'", "'table-name'", "'scan.fetch-size'", "lookup.partial-cache.max-rows"],
        ),
        (",\n  'driver' = 'com.mysql.Driver'", ["jdbc:postgresql://host:port/database"]),
        (",\n  'password' = 'again'", ["'password'", "given twice"]),
    ],
)
def test_ddl_errors_list_the_valid_options_and_hide_passwords(
    spark: SparkSession, sql: LookupSQL, extra: str, named: list[str]
) -> None:
    statement = DDL.format(secret=SECRET, extra=extra, table="customers").replace(
        "Customers", "Customers2"
    )
    with no_spark_job(spark), pytest.raises(ConfigurationError) as error:
        sql.sql(statement)
    for text in named:
        assert text in str(error.value)
    assert SECRET not in str(error.value) and SECRET not in repr(error.value)


@pytest.mark.parametrize(
    ("ddl", "named"),
    [
        ("CREATE TABLE T (id INT) WITH ('connector' = 'kafka')", ["'kafka'", "'jdbc'", "'http'"]),
        (
            "CREATE TABLE T (id INT) WITH ('connector' = 'jdbc', "
            "'url' = 'jdbc:mysql://u:" + SECRET + "@h:3306/db', 'table-name' = 't')",
            ["jdbc:postgresql://host:port/database"],
        ),
        ("CREATE TABLE T (id INT) WITH ('connector' = 'jdbc', 'table-name' = 't')", ["'url'"]),
        (
            "CREATE TABLE T (id INT) WITH ('connector' = 'http', 'url' = 'http://h/x/{nope}')",
            ["'nope'"],
        ),
        (
            "CREATE TABLE T (id INT) WITH ('connector' = 'redis', 'url' = 'redis://h', "
            "'key-template' = 'c:{id}', 'value-format' = 'xml')",
            ["'xml'", "json"],
        ),
        (
            "CREATE TABLE T (id INT, PRIMARY KEY (nope) NOT ENFORCED) WITH ("
            "'connector' = 'postgres', 'url' = 'postgresql://h/db', 'table-name' = 't')",
            ["'nope'"],
        ),
        (
            "CREATE TABLE T (id INT) WITH ('connector' = 'http', 'url' = 'http://h/{id}', "
            "'bearer-token' = '" + SECRET + "', 'timeout' = 'soon')",
            ["'timeout'", "'soon'"],
        ),
        (
            "CREATE TABLE db.T (id INT) WITH ('connector' = 'http', 'url' = 'http://h/{id}')",
            ["unqualified"],
        ),
        (  # a secret query parameter of an option given twice, or of an unknown option
            "CREATE TABLE T (id INT) WITH ('connector' = 'http', "
            "'url' = 'http://h/{id}?api_key=" + SECRET + "', "
            "'URL' = 'http://h/{id}?api_key=" + SECRET + "')",
            ["given twice", "api_key=***"],
        ),
        (
            "CREATE TABLE T (id INT) WITH ('connector' = 'http', 'url' = 'http://h/{id}', "
            "'batch-urll' = 'http://h/b?token=" + SECRET + "')",
            ["'batch-urll'", "'batch-url'", "token=***"],
        ),
        (  # the integers every other option takes: ASCII digits, no separators
            "CREATE TABLE T (id INT) WITH ('connector' = 'postgres', 'url' = 'postgresql://h/db', "
            "'table-name' = 't', 'pool-size' = '1_000')",
            ["'pool-size'", "'1_000'", "a whole number"],
        ),
        (
            "CREATE TABLE T (id INT) WITH ('connector' = 'postgres', 'url' = 'postgresql://h/db', "
            "'table-name' = 't', 'pool-size' = '\u0663')",
            ["'pool-size'", "a whole number"],
        ),
        (
            "CREATE TABLE T (id INT) WITH ('connector' = 'redis', 'url' = 'redis://h', "
            "'key-template' = 'c:{id}', 'scan-count' = '7', 'scan-count' = 'x')",
            ["'scan-count'", "given twice"],
        ),
    ],
)
def test_bad_ddl_raises_naming_the_problem(
    spark: SparkSession, sql: LookupSQL, ddl: str, named: list[str]
) -> None:
    with no_spark_job(spark), pytest.raises(ConfigurationError) as error:
        sql.sql(ddl)
    for text in named:
        assert text in str(error.value)
    assert SECRET not in str(error.value)


def test_passwords_never_appear_in_reprs_or_plans(spark: SparkSession, sql: LookupSQL) -> None:
    df = sql.sql(f"SELECT o.order_id, c.zip {JOIN}")
    shown = [repr(sql), repr(sql.table("Customers")), repr(sql.table("Customers").connector)]
    shown.append(physical_plan(df, extended=True))
    for text in shown:
        assert SECRET not in text


def test_ddl_if_not_exists_drop_and_register(spark: SparkSession) -> None:
    lookup = LookupSQL(spark)
    ddl = "CREATE TEMPORARY TABLE T (id INT, v STRING) WITH ('connector' = 'http', 'url' = 'http://h/{id}')"
    with no_spark_job(spark):
        assert lookup.sql(ddl + ";").columns == []
        assert lookup.sql(ddl.replace("TABLE T", "TABLE IF NOT EXISTS T")).columns == []
        with pytest.raises(SqlError, match="exists"):
            lookup.sql(ddl)
        assert lookup.tables() == ["T"]
        assert lookup.table("t").connector.key_columns == ("id",)
        lookup.sql("DROP TEMPORARY TABLE T")
        lookup.sql("DROP TEMPORARY TABLE IF EXISTS T")
        with pytest.raises(SqlError, match="no such table"):
            lookup.sql("DROP TEMPORARY TABLE T")
        with pytest.raises(SqlError, match="'T'"):
            lookup.table("T")
    table = LookupTable("Dim", "id INT, v STRING", InMemoryConnector([{"id": 1, "v": "x"}], ["id"]))
    assert lookup.register(table, "Other") is table
    assert lookup.table("other") is table


def test_a_registered_connector_takes_its_parameters_as_options(spark: SparkSession) -> None:
    class Fixed:
        def __init__(
            self,
            rows: str,
            key_columns: tuple[str, ...] = ("id",),
            scale: int = 1,
            delay: float = 0.0,
        ) -> None:
            parsed = [{"id": int(p), "v": int(p) * scale} for p in rows.split(",")]
            self.inner = InMemoryConnector(parsed, list(key_columns))
            self.delay = delay

        def lookup_function(self):  # type: ignore[no-untyped-def]
            return self.inner.lookup_function()

        def async_lookup_function(self):  # type: ignore[no-untyped-def]
            return self.inner.async_lookup_function()

        def scan(self):  # type: ignore[no-untyped-def]
            return self.inner.scan()

    register_connector("sql-test-fixed", Fixed, replace=True)
    lookup = LookupSQL(spark)
    with pytest.raises(SqlError) as error:
        lookup.sql("CREATE TABLE F (id INT, v INT) WITH ('connector'='sql-test-fixed', 'rowz'='1')")
    assert "'rows'" in str(error.value) and "'key-columns'" in str(error.value)
    lookup.sql(
        "CREATE TABLE F (id INT, v INT) WITH ('connector'='sql-test-fixed', 'rows'='1,2,3', "
        "'scale'='10', 'delay'='5 ms')"
    )
    spark.createDataFrame(
        [(1, "t"), (3, "t"), (4, "t")], "k INT, pt STRING"
    ).createOrReplaceTempView("Keys")
    df = lookup.sql(
        "SELECT k, f.v FROM Keys LEFT JOIN F FOR SYSTEM_TIME AS OF Keys.pt AS f ON f.id = k"
    )
    assert sorted(tuple(r) for r in df.collect()) == [(1, 10), (3, 30), (4, None)]


@pytest.mark.parametrize(
    ("user", "password"), [("postgres", "p\\w"), ("o'neil", "it's"), ("a b", "c d = 'e'")]
)
def test_ddl_credentials_reach_a_libpq_dsn_as_written(user: str, password: str) -> None:
    # pasted into user=... password='...' unquoted, a backslash was dropped, a quote broke it
    from urllib.parse import unquote, urlsplit

    from asyncio_lookup.spark.sql.connectors import plan_connector

    options = {"url": "host=127.0.0.1 dbname=test", "table-name": "t"}
    options.update(username=user, password=password)
    connector = plan_connector("postgres", options, ("id",), {"id": "INT"}).build(("id",))
    parts = urlsplit(connector.url)
    assert (unquote(parts.username or ""), unquote(parts.password or "")) == (user, password)


def test_pgjdbc_url_parameters_are_renamed_or_refused_naming_the_url(postgres_dsn: str) -> None:
    """?currentSchema=public reached the server as a setting: "unrecognized configuration
    parameter" in every task, naming no option."""
    import asyncio

    from asyncio_lookup.spark.sql.connectors import plan_connector

    url = "jdbc:postgresql://127.0.0.1:5432/test?currentSchema=public&ApplicationName=ddl"
    options = {"url": url, "table-name": "pg_catalog.pg_type", "username": "postgres"}
    connector = plan_connector("jdbc", options, ("typname",), {"typname": "STRING"}).build(
        ("typname",)
    )

    async def settings() -> str:
        import asyncpg

        connection = await asyncpg.connect(connector.url)
        try:
            return str(await connection.fetchval("SHOW search_path"))
        finally:
            await connection.close()

    assert asyncio.run(settings()) == "public"
    # the connector's own server setting, which asyncpg lets win over the URL's
    assert connector.application_name == "ddl"
    options["url"] = "jdbc:postgresql://127.0.0.1:5432/test?prepareThreshold=0&password=s3cret"
    with pytest.raises(SqlError, match="prepareThreshold") as info:
        plan_connector("jdbc", options, ("typname",), {"typname": "STRING"})
    assert info.value.option == "url" and "s3cret" not in str(info.value)


def test_an_explicit_null_constraint_is_nullable(sql: LookupSQL) -> None:
    sql.sql(
        "CREATE TEMPORARY TABLE NullableName (id INT, name STRING NULL, tier INT NOT NULL) "
        "WITH ('connector'='redis', 'url'='redis://127.0.0.1:6379/0', 'key-template'='n:{id}')"
    )
    fields = {f.name: f.nullable for f in sql.table("NullableName").schema.fields}
    assert fields == {"id": True, "name": True, "tier": False}


@pytest.mark.parametrize("name", ["redis", "jdbc"])
def test_a_connector_registered_under_a_builtin_name_is_the_one_the_ddl_builds(name: str) -> None:
    # register_connector(..., replace=True) was honoured by create_connector, not by the DDL
    from asyncio_lookup.connectors import RedisConnector
    from asyncio_lookup.connectors import registry as connector_registry
    from asyncio_lookup.spark.sql.connectors import plan_connector

    def mine(key_columns: list[str], rows: str = "") -> InMemoryConnector:
        return InMemoryConnector([{"id": int(r)} for r in rows.split(",") if r], key_columns)

    before = dict(connector_registry._registry())
    register_connector(name, mine, replace=True)
    try:
        plan = plan_connector(name, {"rows": "1,2"}, ("id",), {"id": "INT"})
        assert isinstance(plan.build(("id",)), InMemoryConnector)
    finally:
        connector_registry._factories.clear()
        connector_registry._factories.update(before)
    redis = {"url": "redis://127.0.0.1:6379/0", "key-template": "c:{id}"}
    assert isinstance(
        plan_connector("redis", redis, ("id",), {"id": "INT"}).build(("id",)), RedisConnector
    )


REDIS_DDL = "'connector'='redis', 'url'='redis://127.0.0.1:6379/0', 'key-template'='d:{id}'"


def test_flink_timestamps_map_to_spark_s_by_their_meaning(sql: LookupSQL) -> None:
    """Flink's TIMESTAMP(3) has no zone; it became Spark's TIMESTAMP, an instant: a key's text
    in another zone (a silent miss), a PostgreSQL timestamp key refused."""
    sql.sql(
        "CREATE TEMPORARY TABLE Stamps (id INT, at TIMESTAMP(3), instant TIMESTAMP_LTZ(3)) "
        f"WITH ({REDIS_DDL})"
    )
    types = {f.name: f.dataType.simpleString() for f in sql.table("Stamps").schema.fields}
    assert types == {"id": "int", "at": "timestamp_ntz", "instant": "timestamp"}


@pytest.mark.parametrize(
    ("options", "option", "words"),
    [
        # a bare number was read as milliseconds: 'timeout'=30 timed every request out
        (f"{REDIS_DDL}, 'socket-timeout'=30", "socket-timeout", "bare number"),
        (f"{REDIS_DDL}, 'URL'='redis://127.0.0.1:6379/5'", "URL", "given twice"),  # last won
    ],
)
def test_ddl_options_flink_would_refuse_are_refused(
    sql: LookupSQL, options: str, option: str, words: str
) -> None:
    with pytest.raises(SqlError, match=words) as info:
        sql.sql(f"CREATE TEMPORARY TABLE Refused (id INT, v STRING) WITH ({options})")
    assert info.value.option == option


def test_ddl_header_credentials_never_show() -> None:
    from asyncio_lookup.spark.sql.parse import is_secret

    assert is_secret("header.Authorization") and is_secret("header.X-Api-Key")
    assert not is_secret("header.Accept")


def test_ddl_username_alone_keeps_the_urls_password() -> None:
    from asyncio_lookup.spark.sql.connectors import plan_connector

    options = {"url": "redis://:urlpw@127.0.0.1:6379/0", "key-template": "d:{id}"}
    plan = plan_connector("redis", {**options, "username": "bob"}, ("id",), {"id": "INT"})
    assert plan.kwargs["url"] == "redis://bob:urlpw@127.0.0.1:6379/0"


def test_ddl_named_primary_key_constraint_and_http_options_without_their_url(
    sql: LookupSQL,
) -> None:
    sql.sql(
        "CREATE TEMPORARY TABLE Named (id INT, v STRING, CONSTRAINT pk_named PRIMARY KEY (id) "
        f"NOT ENFORCED) WITH ({REDIS_DDL})"
    )
    assert sql.table("Named") is not None
    with pytest.raises(SqlError, match="'batch-mode', 'batch-size'") as info:
        sql.sql(
            "CREATE TEMPORARY TABLE Unbatched (id INT, v STRING) WITH ('connector'='http', "
            "'url'='http://127.0.0.1:1/c/{id}', 'batch-mode'='query', 'batch-size'='10')"
        )
    assert info.value.option == "batch-url"


def test_a_registered_connector_without_key_columns_needs_a_primary_key(sql: LookupSQL) -> None:
    """It looked rows up by whatever a join's ON bound: another column's rows."""

    def keyless(rows: str = "") -> NoCapability:  # and says not which columns it keys by
        return NoCapability()

    register_connector("sql-test-keyless", keyless, replace=True)
    with pytest.raises(SqlError, match="neither takes nor declares") as info:
        sql.sql(
            "CREATE TEMPORARY TABLE Keyless (id STRING, name STRING) "
            "WITH ('connector'='sql-test-keyless')"
        )
    assert info.value.option == "PRIMARY KEY"


def test_ddl_values_keep_their_backslashes_as_flink_reads_them(sql: LookupSQL) -> None:
    """Spark's escapes changed 'a\\d' to 'ad' and a password's backslash vanished."""
    sql.sql(
        "CREATE TEMPORARY TABLE Slashed (id INT, v STRING) WITH ('connector'='http', "
        r"'url'='http://127.0.0.1:1/a\d/{id}', 'header.X-Note'='it''s C:\temp')"
    )
    connector = sql.table("Slashed").connector
    assert connector.template.template == r"http://127.0.0.1:1/a\d/{id}"
    assert connector.headers == {"X-Note": r"it's C:\temp"}


def test_a_redis_hash_field_declared_other_than_string_is_refused_at_create(
    sql: LookupSQL,
) -> None:
    """Every task failed: a hash field is text ('42' does not fit INT)."""
    with pytest.raises(SqlError, match="Redis hash") as info:
        sql.sql(
            "CREATE TEMPORARY TABLE Hashed (id INT, name STRING, age INT) "
            f"WITH ({REDIS_DDL}, 'value-format'='hash')"
        )
    assert info.value.option == "age"
