"""PostgreSQL behind a loopback fault proxy: refusal at open, a drop mid-query, a blackhole.

Every connection failure is a ``TransientError`` (never a raw asyncpg error), opening the pool
is covered by the lookups' failure retry, and a lookup's own time bound abandons a blackholed
connection (the pool replaces it) instead of waiting for ``command_timeout``.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from asyncio_lookup.connectors import PostgresConnector
from asyncio_lookup.connectors.postgres_connection import is_connection_error
from asyncio_lookup.errors import TransientError
from asyncio_lookup.lookup.chain import LookupChain
from asyncio_lookup.lookup.options import LookupOptions
from tests.connectors.proxy import TcpProxy
from tests.connectors.test_postgres import _exec

pytestmark = pytest.mark.postgres


@pytest.fixture
def table(postgres_dsn: str, pg_table: str) -> str:
    _exec(
        postgres_dsn,
        f'CREATE TABLE "{pg_table}" (id int primary key, v int)',
        f'INSERT INTO "{pg_table}" SELECT g, g * 3 FROM generate_series(1, 100) g',
    )
    return pg_table


def _later(seconds: float, action: object) -> threading.Timer:
    timer = threading.Timer(seconds, action)  # type: ignore[arg-type]
    timer.start()
    return timer


@pytest.mark.parametrize("prefer_async", [True, False])
async def test_refusal_at_open_is_retried_like_a_lookup(table: str, prefer_async: bool) -> None:
    """The pool cannot open (refused) when the chain opens; the first lookup's failure retry
    opens it once the server is back."""
    with TcpProxy("127.0.0.1", 5432) as proxy:
        proxy._call(proxy._stop())  # refusing from the start
        c = PostgresConnector(f"postgresql://postgres@127.0.0.1:{proxy.port}/test", table, "id")
        chain = LookupChain.create(c, LookupOptions(max_retries=6), prefer_async=prefer_async)
        await chain.open()  # no raise: the refusal is left to the lookups' retry
        timer = _later(0.3, lambda: proxy._call(proxy._listen()))
        try:
            if prefer_async:
                rows = await chain.async_lookup((2,))
            else:
                rows = await asyncio.to_thread(chain.lookup, (2,))
        finally:
            timer.join()
            await chain.close()
    assert rows == [{"id": 2, "v": 6}]
    assert chain.metrics.snapshot()["numFailureRetries"] >= 1


async def test_drop_mid_query_is_transient_never_raw(postgres_dsn: str, table: str) -> None:
    with TcpProxy("127.0.0.1", 5432) as proxy:
        c = PostgresConnector(
            f"postgresql://postgres@127.0.0.1:{proxy.port}/test",
            query=f'SELECT id, v, pg_sleep(CASE WHEN id = 9 THEN 2 ELSE 0 END) FROM "{table}"',
            key_columns="id",
            columns=["v"],
        )
        fn = c.async_lookup_function()
        await fn.open()
        try:
            assert list(await fn.async_lookup((1,))) == [{"v": 3}]
            timer = _later(0.3, lambda: proxy.restart(0.1))
            with pytest.raises(TransientError) as info:
                await fn.async_lookup((9,))  # cut while the server sleeps
            timer.join()
            assert info.value.__cause__ is not None
            assert is_connection_error(info.value.__cause__)
            assert list(await fn.async_lookup((1,))) == [{"v": 3}]  # a new connection
            # a batch too
            timer = _later(0.3, lambda: proxy.restart(0.1))
            with pytest.raises(TransientError):
                await fn.async_lookup_batch([(9,), (1,)])
            timer.join()
            assert [list(r) for r in await fn.async_lookup_batch([(1,), (2,)])] == [
                [{"v": 3}],
                [{"v": 6}],
            ]
        finally:
            await fn.close()


async def test_blackhole_shorter_than_command_timeout_is_bounded_by_the_lookup(
    table: str,
) -> None:
    """A blackholed connection is abandoned when the lookup's own time bound cancels the call,
    not after command_timeout (30 s); once the network is back a new connection serves."""
    with TcpProxy("127.0.0.1", 5432) as proxy:
        c = PostgresConnector(
            f"postgresql://postgres@127.0.0.1:{proxy.port}/test",
            table,
            "id",
            ["v"],
            command_timeout=30,
            connect_timeout=5,
        )
        fn = c.async_lookup_function()
        await fn.open()
        try:
            assert list(await fn.async_lookup((1,))) == [{"v": 3}]
            proxy.blackhole(True)
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(fn.async_lookup((2,)), 0.5)  # the lookup timeout
            assert time.monotonic() - started < 1.5, "the cancelled call must not wait on it"
            proxy.blackhole(False)  # back after ~1 s: far shorter than command_timeout
            started = time.monotonic()
            assert list(await asyncio.wait_for(fn.async_lookup((2,)), 5)) == [{"v": 6}]
            assert time.monotonic() - started < 3
        finally:
            await fn.close()


async def test_blackhole_shorter_than_the_lookup_timeout_is_waited_out(table: str) -> None:
    with TcpProxy("127.0.0.1", 5432) as proxy:
        c = PostgresConnector(f"postgresql://postgres@127.0.0.1:{proxy.port}/test", table, "id")
        fn = c.async_lookup_function()
        await fn.open()
        try:
            assert list(await fn.async_lookup((1,))) == [{"id": 1, "v": 3}]
            proxy.blackhole(True)
            timer = _later(0.3, lambda: proxy.blackhole(False))
            started = time.monotonic()
            rows = await asyncio.wait_for(fn.async_lookup((2,)), 2.0)
            timer.join()
            assert rows == [{"id": 2, "v": 6}]
            assert 0.25 < time.monotonic() - started < 2.0
        finally:
            await fn.close()


async def test_a_silently_dead_connection_is_abandoned_and_replaced(table: str) -> None:
    """The pool's only connection stops answering for good (no FIN, no RST): the lookup that
    hangs on it ends at its own time bound, and the next one runs on a new connection."""
    with TcpProxy("127.0.0.1", 5432) as proxy:
        c = PostgresConnector(
            f"postgresql://postgres@127.0.0.1:{proxy.port}/test",
            table,
            "id",
            ["v"],
            pool_size=1,
            command_timeout=30,
        )
        fn = c.async_lookup_function()
        await fn.open()
        try:
            assert list(await fn.async_lookup((1,))) == [{"v": 3}]
            proxy.silence()
            await asyncio.sleep(0.05)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(fn.async_lookup((2,)), 0.5)
            started = time.monotonic()
            assert list(await asyncio.wait_for(fn.async_lookup((2,)), 5)) == [{"v": 6}]
            assert time.monotonic() - started < 2
        finally:
            await fn.close()


async def test_close_does_not_hang_on_a_blackholed_pool(table: str) -> None:
    with TcpProxy("127.0.0.1", 5432) as proxy:
        c = PostgresConnector(
            f"postgresql://postgres@127.0.0.1:{proxy.port}/test", table, "id", connect_timeout=1
        )
        fn = c.async_lookup_function()
        await fn.open()
        assert list(await fn.async_lookup((1,))) == [{"id": 1, "v": 3}]
        proxy.blackhole(True)
        started = time.monotonic()
        await fn.close()
        assert time.monotonic() - started < 3
        proxy.blackhole(False)
