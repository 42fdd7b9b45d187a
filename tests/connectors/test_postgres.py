"""PostgresConnector against the machine's PostgreSQL (unique table per test, dropped after)."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import pickle
import threading
import uuid
from decimal import Decimal
from typing import Any

import asyncpg
import psycopg
import pytest

from asyncio_lookup.connectors import PostgresConnector
from asyncio_lookup.connectors.postgres_connection import is_connection_error, quote_ident
from asyncio_lookup.errors import ConfigurationError, DataFormatError, TransientError
from tests.connectors.conftest import (
    RetryRecorder,
    blocking,
    kill_postgres_backends,
    lookups_across_restart,
)
from tests.connectors.proxy import TcpProxy

pytestmark = pytest.mark.postgres

NASTY = ["1; DROP TABLE x", "' OR '1'='1", "'; DELETE FROM t; --", "$1", "%s", "\\", '"']


UUID = "6f1c2a9e-1d2b-4c3d-9e8f-0a1b2c3d4e5f"


def _exec(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


@pytest.fixture
def customers(postgres_dsn: str, pg_table: str) -> str:
    _exec(
        postgres_dsn,
        f'CREATE TABLE "{pg_table}" (id int, region text, name text, score numeric, note text)',
        f"""INSERT INTO "{pg_table}" VALUES
            (1, 'EU', 'Ada', 1.5, NULL), (2, 'US', 'Grace', NULL, 'x'),
            (7, 'EU', 'Seven-a', 7, NULL), (7, 'EU', 'Seven-b', 7, 'dup'),
            (7, 'US', 'Seven-c', 0, NULL),
            (NULL, 'EU', 'no id', 0, NULL), (8, NULL, 'no region', 0, NULL)""",
    )
    return pg_table


async def _all_paths(c: PostgresConnector, keys: list[tuple]) -> list[list[dict]]:
    sync = c.lookup_function()
    sync.open()
    fn = c.async_lookup_function()
    await fn.open()
    try:
        s = [sorted(await blocking(sync.lookup, k), key=repr) for k in keys]
        a = [sorted(await fn.async_lookup(k), key=repr) for k in keys]
        b = [sorted(r, key=repr) for r in await fn.async_lookup_batch(keys)]
    finally:
        sync.close()
        await fn.close()
    assert s == a == b, "sync, async and batched lookups must return the same rows"
    return a


async def test_single_key_point_batch_missing_multi_null(postgres_dsn: str, customers: str) -> None:
    c = PostgresConnector(postgres_dsn, customers, "id", ["name", "score", "note"])
    rows = await _all_paths(c, [(1,), (2,), (404,), (7,), (None,), (1,)])
    assert rows == [
        [{"name": "Ada", "score": Decimal("1.5"), "note": None}],
        [{"name": "Grace", "score": None, "note": "x"}],
        [],
        sorted(
            [
                {"name": "Seven-a", "score": 7, "note": None},
                {"name": "Seven-b", "score": 7, "note": "dup"},
                {"name": "Seven-c", "score": 0, "note": None},
            ],
            key=repr,
        ),
        [],
        [{"name": "Ada", "score": Decimal("1.5"), "note": None}],
    ]


async def test_a_row_python_cannot_hold_fails_its_key_alone(
    postgres_dsn: str, pg_table: str
) -> None:
    """A BC date or the year 10000 (asyncpg: ValueError, OverflowError) failed every key of
    the batch, naming nothing."""
    from asyncio_lookup.connectors.postgres_connector import UndecodableRow

    _exec(
        postgres_dsn,
        f'CREATE TABLE "{pg_table}" (k int, d date)',
        f"""INSERT INTO "{pg_table}" VALUES (1, '0044-03-15 BC'), (2, '2024-01-01'),
            (3, '10000-01-01'), (4, '2024-01-03')""",
    )
    c = PostgresConnector(postgres_dsn, pg_table, "k", pool_size=1)
    fn = c.async_lookup_function()
    await fn.open()
    try:
        one, two, three, four = await fn.async_lookup_batch([(1,), (2,), (3,), (4,)])
        assert isinstance(one, UndecodableRow) and isinstance(three, UndecodableRow)
        assert pg_table in str(one) and "as text" in str(one)
        assert [r["d"] for r in two] == [dt.date(2024, 1, 1)]
        assert [r["d"] for r in four] == [dt.date(2024, 1, 3)]
        with pytest.raises(DataFormatError):
            await fn.async_lookup((1,))
    finally:
        await fn.close()


async def test_a_libpq_dsn_naming_a_socket_directory_connects_through_it(
    postgres_dsn: str,
) -> None:
    """host=/var/run/postgresql became postgresql://@/var/run/postgresql/test: asyncpg read
    the database as 'var/run/postgresql/test' and every connection failed."""
    import asyncpg

    conn = await asyncpg.connect(postgres_dsn)
    try:  # where this server listens, as its own setting says
        directory = str(await conn.fetchval("SHOW unix_socket_directories")).split(",")[0]
        port = await conn.fetchval("SHOW port")
        user = await conn.fetchval("SELECT current_user")
    finally:
        await conn.close()
    dsn = f"host={directory.strip()} port={port} dbname=test user={user}"
    c = PostgresConnector(dsn, "pg_class", "relname", columns=["relname"])
    fn = c.async_lookup_function()
    await fn.open()
    try:
        assert await fn.async_lookup(("pg_class",)) == [{"relname": "pg_class"}]
    finally:
        await fn.close()


async def test_composite_keys(postgres_dsn: str, customers: str) -> None:
    c = PostgresConnector(postgres_dsn, f"public.{customers}", ["id", "region"], ["name"])
    rows = await _all_paths(
        c, [(7, "EU"), (7, "US"), (1, "US"), (8, None), (None, "EU"), (7, "EU")]
    )
    assert rows == [
        [{"name": "Seven-a"}, {"name": "Seven-b"}],
        [{"name": "Seven-c"}],
        [],
        [],
        [],
        [{"name": "Seven-a"}, {"name": "Seven-b"}],
    ]


async def test_all_columns_and_query_source(postgres_dsn: str, customers: str) -> None:
    c = PostgresConnector(postgres_dsn, customers, "id")
    assert (await _all_paths(c, [(2,)])) == [
        [{"id": 2, "region": "US", "name": "Grace", "score": None, "note": "x"}]
    ]
    q = PostgresConnector(
        postgres_dsn,
        query=f"SELECT id, upper(name) AS name FROM \"{customers}\" WHERE region = 'EU';",
        key_columns="id",
    )
    assert (await _all_paths(q, [(7,), (2,)])) == [
        [{"id": 7, "name": "SEVEN-A"}, {"id": 7, "name": "SEVEN-B"}],
        [],
    ]


async def test_keys_are_parameters_never_sql(postgres_dsn: str, pg_table: str) -> None:
    _exec(
        postgres_dsn,
        f'CREATE TABLE "{pg_table}" (k text, v int)',
        f"""INSERT INTO "{pg_table}" VALUES ('1; DROP TABLE x', 1), ('plain', 2)""",
    )
    c = PostgresConnector(postgres_dsn, pg_table, "k", ["v"])
    rows = await _all_paths(c, [(k,) for k in NASTY] + [("plain",)])
    assert rows == [[{"v": 1}]] + [[] for _ in NASTY[1:]] + [[{"v": 2}]]
    with psycopg.connect(postgres_dsn) as conn:  # nothing dropped or deleted
        assert conn.execute(f'SELECT count(*) FROM "{pg_table}"').fetchone() == (2,)
    composite = PostgresConnector(postgres_dsn, pg_table, ["k", "v"], ["v"])
    assert (await _all_paths(composite, [("' OR '1'='1", 1), ("1; DROP TABLE x", 1)])) == [
        [],
        [{"v": 1}],
    ]


async def test_identifiers_are_quoted(postgres_dsn: str) -> None:
    table = f'alt_{uuid.uuid4().hex[:6]}"; DROP TABLE y; --'
    column = 'we"ird col'
    _exec(
        postgres_dsn,
        f"CREATE TABLE {quote_ident(table)} ({quote_ident(column)} int, v text)",
        f"INSERT INTO {quote_ident(table)} VALUES (1, 'one')",
    )
    try:
        c = PostgresConnector(postgres_dsn, (("public", table)), [column], ["v"])
        assert (await _all_paths(c, [(1,), (2,)])) == [[{"v": "one"}], []]
    finally:
        _exec(postgres_dsn, f"DROP TABLE IF EXISTS {quote_ident(table)}")


async def test_sessions_are_read_only(postgres_dsn: str, customers: str) -> None:
    _exec(postgres_dsn, f'CREATE SEQUENCE "{customers}_seq"')
    c = PostgresConnector(
        postgres_dsn,
        query=f'SELECT id, nextval(\'"{customers}_seq"\') AS n FROM "{customers}"',
        key_columns="id",
    )
    fn = c.async_lookup_function()
    await fn.open()
    try:
        with pytest.raises(asyncpg.exceptions.ReadOnlySQLTransactionError):
            await fn.async_lookup((1,))
    finally:
        await fn.close()
    with pytest.raises(asyncpg.exceptions.ReadOnlySQLTransactionError):
        await blocking(c.lookup_function().lookup, (1,))
    with psycopg.connect(postgres_dsn) as conn:
        assert conn.execute(f'SELECT last_value FROM "{customers}_seq"').fetchone() == (1,)
        assert conn.execute(f'SELECT is_called FROM "{customers}_seq"').fetchone() == (False,)
    _exec(postgres_dsn, f'DROP SEQUENCE "{customers}_seq"')


async def test_bad_sql_is_not_transient(postgres_dsn: str, customers: str) -> None:
    c = PostgresConnector(postgres_dsn, customers, "nope")
    with pytest.raises(asyncpg.exceptions.UndefinedColumnError):
        await c.async_lookup_function().open()
    with pytest.raises(asyncpg.exceptions.UndefinedColumnError):
        await blocking(c.lookup_function().lookup, (1,))


def test_configuration_errors(postgres_dsn: str) -> None:
    with pytest.raises(ConfigurationError, match="exactly one of table"):
        PostgresConnector(postgres_dsn)
    with pytest.raises(ConfigurationError, match="exactly one of table"):
        PostgresConnector(postgres_dsn, "t", query="SELECT 1")
    with pytest.raises(ConfigurationError, match="key_columns"):
        PostgresConnector(postgres_dsn, "t", [])
    with pytest.raises(ConfigurationError, match="identifier"):
        PostgresConnector(postgres_dsn, "t", ["a\x00b"])
    with pytest.raises(ConfigurationError, match="pool_size"):
        PostgresConnector(postgres_dsn, "t", pool_size=0)


async def test_full_scan_100k(postgres_dsn: str, pg_table: str) -> None:
    n = 100_000
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE TABLE "{pg_table}" (id int, v text)')
        with conn.cursor().copy(f'COPY "{pg_table}" (id, v) FROM STDIN') as copy:
            for i in range(n):
                copy.write_row((i, f"v{i}"))
    c = PostgresConnector(postgres_dsn, pg_table, "id", scan_batch_size=5000)
    scan = c.scan()
    rows = [r async for r in scan]
    assert len(rows) == n and sorted(r["id"] for r in rows) == list(range(n))
    assert all(r["v"] == f"v{r['id']}" for r in rows)
    again = [r async for r in scan]  # each pass opens its own connection
    assert len(again) == n and sorted(r["id"] for r in again) == list(range(n))


async def test_a_key_the_column_type_cannot_read_fails_alone_in_a_batch(
    postgres_dsn: str, pg_table: str
) -> None:
    # "angry" is no label of the enum: the batch statement failed, and with it every key
    mood = f"{pg_table}_mood"
    _exec(
        postgres_dsn,
        f"CREATE TYPE \"{mood}\" AS ENUM ('happy', 'sad')",
        f'CREATE TABLE "{pg_table}" (k "{mood}", u uuid, n name, v text)',
        f"INSERT INTO \"{pg_table}\" VALUES ('happy', '{UUID}', 'short', 'row')",
    )
    # a name key of 64 bytes or more: "identifier too long" (42622, no DataError)
    cases = [
        ("k", "happy", "angry", asyncpg.DataError),
        ("u", UUID, "not-a-uuid", asyncpg.DataError),
        ("n", "short", "x" * 70, asyncpg.exceptions.NameTooLongError),
    ]
    try:
        for column, good, bad, error in cases:
            fn = PostgresConnector(postgres_dsn, pg_table, column, ["v"]).async_lookup_function()
            await fn.open()
            try:
                keys = [(good,), (bad,), (None,), (good,)]
                out = await fn.async_lookup_batch(keys)
                with pytest.raises(error):
                    await fn.async_lookup((bad,))
            finally:
                await fn.close()
            assert out[0] == out[3] == [{"v": "row"}] and out[2] == []
            assert isinstance(out[1], error)
    finally:
        _exec(postgres_dsn, f'DROP TABLE IF EXISTS "{pg_table}"', f'DROP TYPE IF EXISTS "{mood}"')


@pytest.mark.parametrize(
    ("column", "first", "last"),
    [
        ("date", dt.date.min, dt.date.max),
        ("timestamp", dt.datetime.min, dt.datetime.max),
        (
            "timestamptz",
            dt.datetime.min.replace(tzinfo=dt.UTC),
            dt.datetime.max.replace(tzinfo=dt.UTC),
        ),
    ],
)
async def test_the_first_and_last_day_are_keys_never_infinity(
    postgres_dsn: str, pg_table: str, column: str, first: Any, last: Any
) -> None:
    """asyncpg binds date.max / datetime.max as 'infinity' (min as '-infinity') and reads
    infinity back as them: the key 9999-12-31 (an SCD2 table's open end) joined the infinity
    rows and missed its own, and a FULL scan indexed the infinity rows under it too."""
    _exec(
        postgres_dsn,
        f'CREATE TABLE "{pg_table}" (k {column}, v text)',
        f"""INSERT INTO "{pg_table}" VALUES ('-infinity', '-inf'), ('infinity', 'inf'),
            ('{first.isoformat()}', 'first'), ('{last.isoformat()}', 'last'),
            ('{last.isoformat()}', 'last again')""",
    )
    c = PostgresConnector(postgres_dsn, pg_table, "k", ["v"])
    rows = await _all_paths(c, [(first,), (last,)])
    assert rows == [[{"v": "first"}], [{"v": "last again"}, {"v": "last"}]]  # sorted by repr
    scanned = sorted([r["v"] async for r in c.scan()])
    assert scanned == ["first", "last", "last again"]  # no Spark key equals infinity


async def test_a_time_with_no_utc_instant_fails_its_key_alone_in_a_batch(
    postgres_dsn: str, pg_table: str
) -> None:
    """datetime.min nine hours east of UTC is no instant Python can hold in UTC: its text
    could not be written, and the error failed the batch's other keys."""
    _exec(
        postgres_dsn,
        f'CREATE TABLE "{pg_table}" (k timestamptz, v text)',
        f"INSERT INTO \"{pg_table}\" VALUES ('2024-01-01 00:00:00+00', 'row')",
    )
    tokyo = dt.timezone(dt.timedelta(hours=9))
    never = dt.datetime.min.replace(tzinfo=tokyo)
    good = dt.datetime(2024, 1, 1, 9, tzinfo=tokyo)
    fn = PostgresConnector(postgres_dsn, pg_table, "k", ["v"]).async_lookup_function()
    await fn.open()
    try:
        out = await fn.async_lookup_batch([(never,), (good,)])
    finally:
        await fn.close()
    assert isinstance(out[0], asyncpg.DataError) and list(out[1]) == [{"v": "row"}]


@pytest.mark.parametrize(("command_timeout", "shown"), [(0.3, "800ms"), (None, "0")])
async def test_the_server_ends_a_statement_just_after_command_timeout(
    postgres_dsn: str, customers: str, command_timeout: float | None, shown: str
) -> None:
    """A connection the client gave up on is terminated, and asyncpg's cancel request may never
    leave (Spark's worker loop stands still between batches): under a table lock, each job of
    a Spark join left its timed-out statements waiting on the server (5, 10, 18 sessions for
    a pool of 2), until the server refused clients. The server now ends them itself."""
    c = PostgresConnector(postgres_dsn, customers, "id", command_timeout=command_timeout)
    fn = c.async_lookup_function()
    await fn.open()
    try:
        assert fn.pool is not None  # type: ignore[attr-defined]
        async with fn.pool.acquire() as conn:  # type: ignore[attr-defined]
            assert await conn.fetchval("SHOW statement_timeout") == shown
    finally:
        await fn.close()


async def test_a_uuid_key_is_read_by_the_server(postgres_dsn: str, pg_table: str) -> None:
    """asyncpg read a STRING key for a uuid column by rules of its own: it joined text
    PostgreSQL refuses (hyphens anywhere) and failed text PostgreSQL reads (braces)."""
    _exec(
        postgres_dsn,
        f'CREATE TABLE "{pg_table}" (u uuid, v text)',
        f"INSERT INTO \"{pg_table}\" VALUES ('{UUID}', 'row')",
    )
    fn = PostgresConnector(postgres_dsn, pg_table, "u", ["v"]).async_lookup_function()
    await fn.open()
    try:
        read = ["{" + UUID + "}", UUID.upper(), UUID.replace("-", ""), uuid.UUID(UUID)]
        assert [list(await fn.async_lookup((k,))) for k in read] == [[{"v": "row"}]] * 4
        assert [list(r) for r in await fn.async_lookup_batch([(k,) for k in read])] == [
            [{"v": "row"}]
        ] * 4
        misplaced = UUID[:8] + UUID[9:12] + "-" + UUID[12:]  # the hyphens moved by one
        with pytest.raises(asyncpg.DataError):
            await fn.async_lookup((misplaced,))
        out = await fn.async_lookup_batch([(misplaced,), (UUID,)])
        assert isinstance(out[0], asyncpg.DataError) and list(out[1]) == [{"v": "row"}]
    finally:
        await fn.close()


async def test_a_scan_reads_the_key_columns_that_columns_leaves_out(
    postgres_dsn: str, pg_table: str
) -> None:
    # a full cache indexes the scanned rows by their key: every load failed without it
    _exec(postgres_dsn, f'CREATE TABLE "{pg_table}" (id int, name text, extra text)')
    _exec(postgres_dsn, f"INSERT INTO \"{pg_table}\" VALUES (1, 'a', 'x'), (2, 'b', 'y')")
    c = PostgresConnector(postgres_dsn, pg_table, "id", ["name"])
    rows = sorted([r async for r in c.scan()], key=lambda r: r["id"])
    assert rows == [{"name": "a", "id": 1}, {"name": "b", "id": 2}]


async def test_restart_mid_run_recovers_without_loss_or_duplicates(
    postgres_dsn: str, pg_table: str
) -> None:
    """The server goes away mid-wave behind a proxy (connections cut, refused for a while);
    point and batched lookups recover through the failure retry, every row exactly once."""
    n, batch = 3000, 100
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE TABLE "{pg_table}" (id int primary key, v int)')
        conn.execute(f'INSERT INTO "{pg_table}" SELECT g, g * 3 FROM generate_series(0, {n - 1}) g')
    retry = RetryRecorder(max_retries=20)
    with TcpProxy("127.0.0.1", 5432) as proxy:
        dsn = f"postgresql://postgres@127.0.0.1:{proxy.port}/test"
        fn = PostgresConnector(dsn, pg_table, "id", ["v"], pool_size=4).async_lookup_function()
        await retry.call_async(fn.open)
        try:
            results = await lookups_across_restart(
                fn, retry, lambda: proxy.restart(0.3), n, batch, point_every=500, settle=0.02
            )
        finally:
            await fn.close()
    assert any(isinstance(e, TransientError) for e in retry.errors), "restart must be seen"
    assert sorted(results) == list(range(n))
    assert all(results[i] == [{"v": i * 3}] for i in range(n))


async def test_terminated_backends_reconnect(postgres_dsn: str, customers: str) -> None:
    """pg_terminate_backend on our own sessions (by application_name), sync and async."""
    app = f"alt-test-{uuid.uuid4().hex[:8]}"
    c = PostgresConnector(postgres_dsn, customers, "id", ["name"], application_name=app)
    fn = c.async_lookup_function()
    sync = c.lookup_function()
    await fn.open()
    sync.open()
    retry = RetryRecorder(max_retries=5)
    try:
        assert list(await fn.async_lookup((1,))) == [{"name": "Ada"}]
        assert list(await blocking(sync.lookup, (1,))) == [{"name": "Ada"}]
        assert kill_postgres_backends(postgres_dsn, app) >= 2
        try:  # the pool may see the connection closed before the query, or by failing it
            rows = await blocking(sync.lookup, (2,))
        except TransientError as error:  # the broken connection is discarded...
            assert error.__cause__ is not None and is_connection_error(error.__cause__)
            rows = await blocking(sync.lookup, (2,))
        assert list(rows) == [{"name": "Grace"}]  # ...and replaced
        for _ in range(3):
            batch = await retry.call_async(lambda: fn.async_lookup_batch([(1,), (2,)]))
            assert [list(r) for r in batch] == [[{"name": "Ada"}], [{"name": "Grace"}]]
            await asyncio.to_thread(kill_postgres_backends, postgres_dsn, app)
    finally:
        sync.close()
        await fn.close()


async def test_password_never_shown(
    postgres_dsn: str, customers: str, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "pg-S3cret-pass"
    caplog.set_level(logging.DEBUG)
    # trust auth accepts any password: the connector works with it in the DSN
    dsn = f"postgresql://postgres:{secret}@127.0.0.1:5432/test"
    c = PostgresConnector(dsn, customers, "id", ["name"])
    assert list(await blocking(c.lookup_function().lookup, (1,))) == [{"name": "Ada"}]
    texts = [repr(c), repr(pickle.loads(pickle.dumps(c))), repr(c.scan())]
    errors: list[BaseException] = []
    bad = PostgresConnector(dsn, customers, "missing_column")
    with pytest.raises(asyncpg.PostgresError) as bad_sync:
        await blocking(bad.lookup_function().lookup, (1,))
    errors.append(bad_sync.value)
    for refused_dsn in (
        f"postgresql://postgres:{secret}@127.0.0.1:9/test",
        f"host=127.0.0.1 port=9 user=postgres password={secret} dbname=test",
    ):
        refused = PostgresConnector(refused_dsn, "t", "id", connect_timeout=2)
        texts.append(repr(refused))
        with pytest.raises(TransientError) as r1:
            await blocking(refused.lookup_function().lookup, (1,))
        with pytest.raises(TransientError) as r2:
            await refused.async_lookup_function().async_lookup((1,))
        with pytest.raises(TransientError) as r3:
            [r async for r in refused.scan()]
        errors += [r1.value, r2.value, r3.value]
    for error in errors:
        while error is not None:
            texts += [str(error), repr(error)]
            error = error.__cause__ or error.__context__
    texts += [r.getMessage() for r in caplog.records]
    assert "***" in texts[0]
    for text in texts:
        assert secret not in text, text


async def test_full_cache_through_the_lookup_chain(postgres_dsn: str, customers: str) -> None:
    """The lookup layer's FULL cache loads through scan() and answers from its snapshot."""
    from asyncio_lookup.lookup.chain import LookupChain
    from asyncio_lookup.lookup.options import LookupOptions

    c = PostgresConnector(postgres_dsn, customers, ["id", "region"], ["id", "region", "name"])
    chain = LookupChain.create(
        c,
        LookupOptions.from_dict(
            {"lookup.cache": "FULL", "lookup.full-cache.periodic-reload.interval": "1h"}
        ),
        prefer_async=True,
        key_columns=c.key_columns,
    )
    await chain.open()
    try:
        assert sorted(r["name"] for r in await chain.async_lookup((7, "EU"))) == [
            "Seven-a",
            "Seven-b",
        ]
        assert await chain.async_lookup((8, None)) == []
        assert await chain.async_lookup((404, "EU")) == []
    finally:
        await chain.close()


async def test_fraction_keys_miss_on_integral_key_columns(postgres_dsn: str, pg_table: str) -> None:
    """asyncpg's integer encoder truncates 1.5 to 1: such a key is a miss, never id=1's row;
    an integral float or Decimal still matches."""
    _exec(
        postgres_dsn,
        f'CREATE TABLE "{pg_table}" (id int, tag text, v text)',
        f"""INSERT INTO "{pg_table}" VALUES (1, 't', 'one'), (2, 't', 'two')""",
    )
    values = [Decimal("1.50"), 1.5, Decimal("2.7"), 2.7, float("nan"), float("inf")]
    values += [Decimal("NaN"), Decimal("1E+400"), 2.0, Decimal("2.00"), 1]
    expected = [[] for _ in values[:-3]] + [[{"v": "two"}], [{"v": "two"}], [{"v": "one"}]]
    single = PostgresConnector(postgres_dsn, pg_table, "id", ["v"])
    assert (await _all_paths(single, [(v,) for v in values])) == expected
    composite = PostgresConnector(postgres_dsn, pg_table, ["id", "tag"], ["v"])
    assert (await _all_paths(composite, [(v, "t") for v in values])) == expected


async def test_a_text_key_holding_a_nul_misses(postgres_dsn: str, pg_table: str) -> None:
    """No PostgreSQL value holds a NUL, and the server refuses one in a parameter: the key
    failed its lookup (and a FULL cache missed it); it is a miss on every path."""
    _exec(
        postgres_dsn,
        f'CREATE TABLE "{pg_table}" (id text, n int, v text)',
        f"""INSERT INTO "{pg_table}" VALUES ('a', 1, 'one'), ('ab', 2, 'two')""",
    )
    keys = [("a\x00b",), ("a",), ("\x00",), ("ab",)]
    expected = [[], [{"v": "one"}], [], [{"v": "two"}]]
    assert (await _all_paths(PostgresConnector(postgres_dsn, pg_table, "id", ["v"]), keys)) == (
        expected
    )
    composite = PostgresConnector(postgres_dsn, pg_table, ["id", "n"], ["v"])
    assert (await _all_paths(composite, [("a\x00", 1), ("a", 1)])) == [[], [{"v": "one"}]]


async def test_out_of_range_keys_miss(postgres_dsn: str, pg_table: str) -> None:
    """A key outside the key column's type (70000 for a smallint) is a miss, not a DataError
    that fails the lookup and its whole batch."""
    _exec(
        postgres_dsn,
        f'CREATE TABLE "{pg_table}" (small smallint, big bigint, v text)',
        f"""INSERT INTO "{pg_table}" VALUES (1, 1, 'one'),
            (32767, 9223372036854775807, 'max'), (-32768, -9223372036854775808, 'min')""",
    )
    small = PostgresConnector(postgres_dsn, pg_table, "small", ["v"])
    keys = [(1,), (70000,), (32768,), (-32769,), (32767,), (-32768,), (70000.0,)]
    hit_miss = [[{"v": "one"}], [], [], [], [{"v": "max"}], [{"v": "min"}], []]
    assert (await _all_paths(small, keys)) == hit_miss
    big = PostgresConnector(postgres_dsn, pg_table, "big", ["v"])
    keys = [(1,), (2**63,), (-(2**63) - 1,), (2**63 - 1,), (-(2**63),), (Decimal(2**64),)]
    assert (await _all_paths(big, keys)) == [
        [{"v": "one"}],
        [],
        [],
        [{"v": "max"}],
        [{"v": "min"}],
        [],
    ]
    composite = PostgresConnector(postgres_dsn, pg_table, ["small", "big"], ["v"])
    assert (await _all_paths(composite, [(1, 1), (70000, 1), (1, 2**63), (32767, 2**63 - 1)])) == [
        [{"v": "one"}],
        [],
        [],
        [{"v": "max"}],
    ]


async def test_batch_matches_what_the_server_compares_equal(
    postgres_dsn: str, pg_table: str
) -> None:
    """A batch finds what the point lookups find where PostgreSQL's `=` differs from Python's:
    char(n) padding, a case-insensitive collation, NaN, a naive key for a timestamptz column."""
    collation = f"{pg_table}_ci"
    _exec(
        postgres_dsn,
        f'CREATE COLLATION "{collation}" '
        "(provider = icu, locale = 'und-u-ks-level2', deterministic = false)",
        f'CREATE TABLE "{pg_table}" (ch char(5), ci text COLLATE "{collation}", '
        "fl double precision, tz timestamptz, v text)",
        f"""INSERT INTO "{pg_table}" VALUES ('ab', 'abc', 'NaN', '2024-01-01 12:00+00', 'a'),
            ('xyz', 'ABC', 1.5, '2024-01-02 12:00+00', 'b')""",
    )
    try:
        ch = PostgresConnector(postgres_dsn, pg_table, "ch", ["v"])
        assert (await _all_paths(ch, [("ab",), ("xyz",), ("ab   ",), ("zz",)])) == [
            [{"v": "a"}],
            [{"v": "b"}],
            [{"v": "a"}],
            [],
        ]
        ci = PostgresConnector(postgres_dsn, pg_table, "ci", ["v"])
        both = [{"v": "a"}, {"v": "b"}]
        assert (await _all_paths(ci, [("ABC",), ("abc",), ("Abc",), ("abd",)])) == [
            both,
            both,
            both,
            [],
        ]
        fl = PostgresConnector(postgres_dsn, pg_table, "fl", ["v"])
        nan = [(float("nan"),), (float("nan"),), (1.5,)]
        assert (await _all_paths(fl, nan)) == [[{"v": "a"}], [{"v": "a"}], [{"v": "b"}]]
        tz = PostgresConnector(postgres_dsn, pg_table, "tz", ["v"])
        naive = [(dt.datetime(2024, 1, 1, 12),), (dt.datetime(2024, 1, 2, 12),)]
        assert (await _all_paths(tz, naive)) == [[{"v": "a"}], [{"v": "b"}]]
        composite = PostgresConnector(postgres_dsn, pg_table, ["ch", "ci"], ["v"])
        assert (await _all_paths(composite, [("ab", "ABC"), ("xyz", "abc")])) == [
            [{"v": "a"}],
            [{"v": "b"}],
        ]
    finally:
        _exec(
            postgres_dsn,
            f'DROP TABLE IF EXISTS "{pg_table}"',
            f'DROP COLLATION IF EXISTS "{collation}"',
        )


async def test_a_column_named_like_the_batch_tag_is_kept(postgres_dsn: str, pg_table: str) -> None:
    tag = "__asyncio_lookup_key"
    _exec(
        postgres_dsn,
        f'CREATE TABLE "{pg_table}" (id int, "{tag}" text)',
        f"""INSERT INTO "{pg_table}" VALUES (1, 'user data'), (2, 'more'), (2, 'again')""",
    )
    for key_columns, keys in (
        ("id", [(1,), (2,), (3,)]),
        (["id", tag], [(1, "user data"), (2, "more"), (3, "none")]),
    ):
        for columns in (None, ["id", tag], [tag]):
            c = PostgresConnector(postgres_dsn, pg_table, key_columns, columns)
            rows = await _all_paths(c, keys)
            assert [r[tag] for r in rows[0]] == ["user data"], columns
            assert all(list(r) == (columns or ["id", tag]) for found in rows for r in found)
            assert [len(found) for found in rows] == (
                [1, 2, 0] if key_columns == "id" else [1, 1, 0]
            )


def test_cache_identity() -> None:
    """Stable text of what the answers depend on: equal for equal configurations (a pickled
    copy included), different when the query text, database or columns differ; no password."""
    dsn = "postgresql://app:S3cret@db.example:5432/shop?sslmode=require&password=Other"
    base = PostgresConnector(dsn, query="SELECT id, name FROM t", key_columns="id")
    same = PostgresConnector(
        "host=db.example port=5432 user=app password=X dbname=shop sslmode=require",
        query="SELECT id, name FROM t;",
        key_columns=["id"],
    )
    assert base.cache_identity == same.cache_identity
    assert pickle.loads(pickle.dumps(base)).cache_identity == base.cache_identity
    assert "S3cret" not in base.cache_identity and "Other" not in base.cache_identity
    assert "0x" not in base.cache_identity
    others = [
        PostgresConnector(dsn, query="SELECT id, name FROM t WHERE id > 0", key_columns="id"),
        PostgresConnector(dsn, "t", "id"),
        PostgresConnector(dsn.replace("/shop", "/shop2"), query=base.query, key_columns="id"),
        PostgresConnector(dsn.replace("app:", "other:"), query=base.query, key_columns="id"),
        PostgresConnector(dsn.replace(":5432", ":5433"), query=base.query, key_columns="id"),
        PostgresConnector(dsn.replace("db.", "db2."), query=base.query, key_columns="id"),
        PostgresConnector(dsn.replace("require", "disable"), query=base.query, key_columns="id"),
        PostgresConnector(dsn, query=base.query, key_columns="name"),
        PostgresConnector(dsn, query=base.query, key_columns="id", columns=["name"]),
    ]
    identities = {base.cache_identity} | {c.cache_identity for c in others}
    assert len(identities) == len(others) + 1
    # settings that do not change the rows do not change it
    tuned = PostgresConnector(
        dsn, query=base.query, key_columns="id", pool_size=3, command_timeout=None
    )
    assert tuned.cache_identity == base.cache_identity
    assert (
        PostgresConnector("postgresql://app@db.example/shop", "public.t", "id").cache_identity
        == PostgresConnector(
            "postgresql://app@db.example:5432/shop", ("public", "t"), "id"
        ).cache_identity
        != PostgresConnector("postgresql://app@db.example/shop", "other.t", "id").cache_identity
    )


async def test_an_interval_with_months_fails_its_key_never_comes_as_30_days(
    postgres_dsn: str, pg_table: str
) -> None:
    # asyncpg's decoder counts a month as 30 days: '1 mon' came back as timedelta(days=30)
    _exec(
        postgres_dsn,
        f'CREATE TABLE "{pg_table}" (id int, iv interval)',
        f"""INSERT INTO "{pg_table}" VALUES (1, '1 mon'), (2, '3 days 04:05:06.5'),
            (3, '-1 day +02:00')""",
    )
    fn = PostgresConnector(postgres_dsn, pg_table, "id", ["iv"]).async_lookup_function()
    await fn.open()
    try:
        with pytest.raises(DataFormatError, match="1 month"):
            await fn.async_lookup((1,))
        out = await fn.async_lookup_batch([(1,), (2,), (3,)])
    finally:
        await fn.close()
    assert isinstance(out[0], DataFormatError)
    assert out[1] == [{"iv": dt.timedelta(days=3, seconds=14706, microseconds=500000)}]
    assert out[2] == [{"iv": dt.timedelta(days=-1, hours=2)}]
    # A scan decodes a page of rows at once, so it cannot tell which key holds the value: the
    # load fails, but names the table and what to do (it named neither).
    scan = PostgresConnector(postgres_dsn, pg_table, "id", ["iv"]).scan()
    with pytest.raises(DataFormatError, match=rf"{pg_table}.*1 month.*::text"):
        [row async for row in scan]


async def test_a_server_that_refuses_the_interval_codec_still_serves(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A PostgreSQL-like server (a pooler, a compatible database) whose type introspection
    fails: the connection is kept, with a warning, not failed for every lookup."""
    from asyncio_lookup.connectors.postgres_connector import _exact_intervals

    class Refusing:
        async def set_type_codec(self, *args: Any, **kwargs: Any) -> None:
            raise asyncpg.FeatureNotSupportedError("no introspection here")

    with caplog.at_level(logging.WARNING):
        await _exact_intervals(Refusing())  # type: ignore[arg-type]
    assert "interval codec could not be set" in caplog.text

    class Lost:
        async def set_type_codec(self, *args: Any, **kwargs: Any) -> None:
            raise asyncpg.ConnectionDoesNotExistError("gone")

    with pytest.raises(asyncpg.ConnectionDoesNotExistError):
        await _exact_intervals(Lost())  # type: ignore[arg-type]


async def test_a_statement_a_standby_cancels_is_retried(postgres_dsn: str, pg_table: str) -> None:
    """A hot standby's "canceling statement due to conflict with recovery" (40001) and a
    deadlock (40P01) failed the row at once (attempts=1): they are the server's, not the
    statement's, and a retry runs."""
    from asyncio_lookup.lookup.chain import LookupChain
    from asyncio_lookup.lookup.options import LookupOptions

    control = f"{pg_table}_control"
    _exec(
        postgres_dsn,
        f'CREATE TABLE "{pg_table}" (id int, v text)',
        f"INSERT INTO \"{pg_table}\" VALUES (7, 'seven')",
        f'CREATE TABLE "{control}" (code text)',
        f"""CREATE FUNCTION "{pg_table}_gate"() RETURNS boolean AS $$
        DECLARE failing text := (SELECT code FROM "{control}" LIMIT 1);
        BEGIN
          IF failing IS NOT NULL THEN
            RAISE EXCEPTION 'canceling statement due to conflict with recovery'
              USING ERRCODE = failing;
          END IF;
          RETURN true;
        END $$ LANGUAGE plpgsql STABLE""",
    )

    async def retry_wait(seconds: float) -> None:  # the standby caught up meanwhile
        _exec(postgres_dsn, f'TRUNCATE "{control}"')

    try:
        for code in ("40001", "40P01"):
            _exec(postgres_dsn, f"INSERT INTO \"{control}\" VALUES ('{code}')")
            c = PostgresConnector(
                postgres_dsn,
                query=f'SELECT id, v FROM "{pg_table}" WHERE "{pg_table}_gate"()',
                key_columns=("id",),
            )
            options = LookupOptions.from_dict({})
            chain = LookupChain.create(
                c, options, prefer_async=True, key_columns=("id",), async_sleep=retry_wait
            )
            await chain.open()
            try:
                assert list(await chain.async_lookup((7,))) == [{"id": 7, "v": "seven"}]
            finally:
                await chain.close()
            assert chain.metrics.snapshot()["numFailureRetries"] == 1
        # a FULL cache's scan, which such a conflict meets the most (its retries sleep apart)
        _exec(postgres_dsn, f"INSERT INTO \"{control}\" VALUES ('40001')")
        c = PostgresConnector(
            postgres_dsn,
            query=f'SELECT id, v FROM "{pg_table}" WHERE "{pg_table}_gate"()',
            key_columns=("id",),
        )
        full = LookupOptions.from_dict(
            {"lookup.cache": "FULL", "lookup.full-cache.periodic-reload.interval": "1h"}
        )
        chain = LookupChain.create(c, full, prefer_async=True, key_columns=("id",))
        timer = threading.Timer(0.3, _exec, (postgres_dsn, f'TRUNCATE "{control}"'))
        timer.start()
        await chain.open()
        try:
            assert list(await chain.async_lookup((7,))) == [{"id": 7, "v": "seven"}]
        finally:
            await chain.close()
            timer.join()
    finally:
        _exec(
            postgres_dsn,
            f'DROP FUNCTION IF EXISTS "{pg_table}_gate"()',
            f'DROP TABLE IF EXISTS "{pg_table}"',
            f'DROP TABLE IF EXISTS "{control}"',
        )


async def test_a_statement_past_command_timeout_says_so(postgres_dsn: str) -> None:
    """asyncpg's TimeoutError has no text: the message ended in 'TimeoutError: '."""
    c = PostgresConnector(
        postgres_dsn,
        query="SELECT k AS id, pg_sleep(2) IS NULL AS slept FROM (SELECT 1 AS k) AS s",
        key_columns=("id",),
        command_timeout=0.2,
    )
    fn = c.async_lookup_function()
    await fn.open()
    try:
        with pytest.raises(TransientError, match=r"TimeoutError: no answer within command_timeout"):
            await fn.async_lookup((1,))
    finally:
        await fn.close()
