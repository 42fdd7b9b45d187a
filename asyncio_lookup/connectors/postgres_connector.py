"""PostgreSQL as a dim table: asyncpg for async lookups, psycopg 3 for sync ones.

SQL is built only from quoted identifiers (table, columns) and, for composite batches, type
names the server itself returns (``format_type``); key values are always bind parameters.
Statements are prepared (asyncpg's per-connection statement cache; psycopg ``prepare=True``).
Every session is read-only (``default_transaction_read_only``), so a ``query`` source cannot
write. Batches are one ``= ANY($1)`` query (single key column) or one join against
``unnest($1, $2, ...) WITH ORDINALITY`` (composite keys). A scan streams through a server-side
cursor (asyncpg cursor in a transaction / psycopg named cursor).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Collection, Iterator, Sequence
from typing import Any
from urllib.parse import quote, urlencode

import asyncpg
import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from asyncio_lookup.connectors._common import Scan
from asyncio_lookup.connectors._keys import has_null
from asyncio_lookup.connectors._secrets import mask_url, redact, url_secrets
from asyncio_lookup.errors import ConfigurationError, TransientError
from asyncio_lookup.lookup.functions import AsyncLookupFunction, Key, LookupFunction, Row

log = logging.getLogger(__name__)

_KEY = "__asyncio_lookup_key"
_ASYNC_TRANSIENT: tuple[type[BaseException], ...] = (
    asyncpg.PostgresConnectionError,  # SQLSTATE class 08
    asyncpg.exceptions.OperatorInterventionError,  # 57: admin shutdown, cannot connect now
    asyncpg.exceptions.InsufficientResourcesError,  # 53: too many connections
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.InternalClientError,
    ConnectionError,
    OSError,
    asyncio.TimeoutError,
)
_SYNC_TRANSIENT: tuple[type[BaseException], ...] = (psycopg.OperationalError, OSError)
_PERMANENT_SQLSTATES = ("28000", "28P01", "3D000")  # bad user / password / database


def quote_ident(name: str) -> str:
    """A PostgreSQL identifier in double quotes (``"`` doubled), never interpreted as SQL."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise ConfigurationError("identifier", name, "a non-empty name without NUL characters")
    return '"' + name.replace('"', '""') + '"'


def _names(option: str, value: Sequence[str] | str | None) -> tuple[str, ...]:
    if value is None:
        return ()
    names = (value,) if isinstance(value, str) else tuple(value)
    for name in names:
        quote_ident(name)
    if len(set(names)) != len(names):
        raise ConfigurationError(option, list(names), "distinct column names")
    return names


class PostgresConnector:
    """A dim table (or read-only query) in PostgreSQL. Picklable; pools open on the executor.

    ``table`` is ``"name"``, ``"schema.name"`` or a ``(schema, name)`` tuple; ``query`` is a
    ``SELECT`` used as a subquery instead. ``columns=None`` selects every column.
    """

    def __init__(
        self,
        dsn: str,
        table: str | tuple[str, str] | None = None,
        key_columns: Sequence[str] | str = ("id",),
        columns: Sequence[str] | None = None,
        *,
        query: str | None = None,
        pool_size: int = 10,
        command_timeout: float | None = 30.0,
        connect_timeout: float = 10.0,
        scan_batch_size: int = 10_000,
        application_name: str = "asyncio-lookup",
    ) -> None:
        if not isinstance(dsn, str) or not dsn:
            raise ConfigurationError("dsn", "<not shown>", "a libpq DSN or postgresql:// URL")
        self.dsn = dsn
        if (table is None) == (query is None):
            raise ConfigurationError(
                "table", table, "exactly one of table=... or query=...", "give one, not both"
            )
        if isinstance(table, str):
            table = tuple(table.split(".", 1))  # type: ignore[assignment]
        self.table: tuple[str, ...] | None = tuple(table) if table is not None else None
        if self.table is not None:
            for part in self.table:
                quote_ident(part)
        if query is not None and (not isinstance(query, str) or not query.strip()):
            raise ConfigurationError("query", query, "a SELECT statement")
        self.query = query.strip().rstrip(";") if query is not None else None
        self.key_columns = _names("key_columns", key_columns)
        if not self.key_columns:
            raise ConfigurationError("key_columns", key_columns, "one or more column names")
        self.columns = _names("columns", columns) if columns is not None else None
        for option, value in (("pool_size", pool_size), ("scan_batch_size", scan_batch_size)):
            if not isinstance(value, int) or value < 1:
                raise ConfigurationError(option, value, "an integer >= 1")
        self.pool_size = pool_size
        self.command_timeout = command_timeout
        self.connect_timeout = connect_timeout
        self.scan_batch_size = scan_batch_size
        self.application_name = application_name

    def __repr__(self) -> str:
        source = f"table={'.'.join(self.table)!r}" if self.table else f"query={self.query!r}"
        return (
            f"PostgresConnector(dsn={mask_url(self.dsn)!r}, {source}, "
            f"key_columns={list(self.key_columns)}, columns="
            f"{list(self.columns) if self.columns is not None else None})"
        )

    # -- LookupTableSource -------------------------------------------------------------------

    def lookup_function(self) -> LookupFunction:
        return _SyncPostgresLookup(self)

    def async_lookup_function(self) -> AsyncLookupFunction:
        return _AsyncPostgresLookup(self)

    def scan(self) -> Scan:
        return Scan(self._scan_sync, self._scan_async, repr(self))

    # -- SQL ---------------------------------------------------------------------------------

    def source_sql(self) -> str:
        if self.table is not None:
            return ".".join(quote_ident(p) for p in self.table) + " AS src"
        return f"({self.query}) AS src"

    def select_sql(self) -> str:
        if self.columns is None:
            return "src.*"
        return ", ".join(f"src.{quote_ident(c)}" for c in self.columns)

    def point_sql(self, placeholder: str) -> str:
        """``placeholder`` is ``$`` (asyncpg) or ``%s`` (psycopg)."""
        where = " AND ".join(
            f"src.{quote_ident(k)} = {self._param(placeholder, i)}"
            for i, k in enumerate(self.key_columns)
        )
        return f"SELECT {self.select_sql()} FROM {self.source_sql()} WHERE {where}"

    def batch_sql(self, key_types: Sequence[str]) -> str:
        """One query for many keys; each result row carries which key it belongs to."""
        if len(self.key_columns) == 1:
            key = f"src.{quote_ident(self.key_columns[0])}"
            return (
                f"SELECT {self.select_sql()}, {key} AS {_KEY} FROM {self.source_sql()} "
                f"WHERE {key} = ANY($1::{key_types[0]}[])"
            )
        arrays = ", ".join(f"${i + 1}::{t}[]" for i, t in enumerate(key_types))
        names = ", ".join(f"k{i}" for i in range(len(key_types)))
        on = " AND ".join(f"src.{quote_ident(c)} = k.k{i}" for i, c in enumerate(self.key_columns))
        return (
            f"SELECT {self.select_sql()}, k.ord AS {_KEY} "
            f"FROM unnest({arrays}) WITH ORDINALITY AS k({names}, ord) "
            f"JOIN {self.source_sql()} ON {on} ORDER BY k.ord"
        )

    def key_type_probe_sql(self, placeholder: str) -> str:
        cols = ", ".join(f"src.{quote_ident(k)}" for k in self.key_columns)
        return f"SELECT {cols} FROM {self.source_sql()} LIMIT 0"

    def scan_sql(self) -> str:
        return f"SELECT {self.select_sql()} FROM {self.source_sql()}"

    @staticmethod
    def _param(placeholder: str, index: int) -> str:
        return f"${index + 1}" if placeholder == "$" else "%s"

    # -- errors ------------------------------------------------------------------------------

    def secrets(self) -> list[str]:
        return url_secrets(self.dsn)

    def transient(self, error: BaseException, action: str) -> TransientError:
        message = redact(
            f"PostgreSQL {action} failed on {mask_url(self.dsn)}: {type(error).__name__}: {error}",
            self.secrets(),
        )
        log.warning("%s", message)
        return TransientError(message)

    def is_sync_transient(self, error: BaseException) -> bool:
        return isinstance(error, _SYNC_TRANSIENT) and (
            getattr(error, "sqlstate", None) not in _PERMANENT_SQLSTATES
        )

    # -- scan --------------------------------------------------------------------------------

    def _scan_sync(self) -> Iterator[Row]:
        try:
            conn = _sync_connect(self, autocommit=False)
        except _SYNC_TRANSIENT as error:
            if not self.is_sync_transient(error):
                raise
            raise self.transient(error, "scan") from error
        try:
            with conn.transaction(), conn.cursor(name="asyncio_lookup_scan") as cur:
                cur.itersize = self.scan_batch_size
                try:
                    cur.execute(self.scan_sql())
                    yield from cur
                except _SYNC_TRANSIENT as error:
                    if not self.is_sync_transient(error):
                        raise
                    raise self.transient(error, "scan") from error
        finally:
            conn.close()

    async def _scan_async(self) -> AsyncIterator[Row]:
        try:
            conn = await asyncpg.connect(asyncpg_dsn(self.dsn), **_asyncpg_options(self))
        except _ASYNC_TRANSIENT as error:
            raise self.transient(error, "scan") from error
        try:
            async with conn.transaction(readonly=True, isolation="repeatable_read"):
                try:
                    cursor = conn.cursor(self.scan_sql(), prefetch=self.scan_batch_size)
                    async for record in cursor:
                        yield dict(record)
                except _ASYNC_TRANSIENT as error:
                    raise self.transient(error, "scan") from error
        finally:
            await conn.close()


def asyncpg_dsn(dsn: str) -> str:
    """asyncpg takes URLs only: a libpq keyword/value DSN is rewritten as a URL."""
    if "://" in dsn:
        return dsn
    params = conninfo_to_dict(dsn)
    user = quote(str(params.pop("user", "")), safe="")
    password = params.pop("password", None)
    userinfo = user + (":" + quote(str(password), safe="") if password is not None else "")
    host = str(params.pop("host", ""))
    port = params.pop("port", None)
    database = quote(str(params.pop("dbname", "")), safe="")
    netloc = (userinfo + "@" if userinfo else "") + (f"[{host}]" if ":" in host else host)
    netloc += f":{port}" if port else ""
    query = urlencode({k: str(v) for k, v in params.items()})
    return f"postgresql://{netloc}/{database}" + (f"?{query}" if query else "")


def _asyncpg_options(c: PostgresConnector) -> dict[str, Any]:
    """asyncpg connection options shared by the lookup pool and the scan connection."""
    return {
        "timeout": c.connect_timeout,
        "command_timeout": c.command_timeout,
        "server_settings": {
            "application_name": c.application_name,
            "default_transaction_read_only": "on",
        },
    }


def _sync_connect(c: PostgresConnector, autocommit: bool) -> psycopg.Connection[dict[str, Any]]:
    conn = psycopg.connect(
        c.dsn,
        autocommit=autocommit,
        row_factory=dict_row,
        connect_timeout=max(1, int(c.connect_timeout)),
        application_name=c.application_name,
    )
    conn.execute("SET default_transaction_read_only = on")
    if c.command_timeout:
        conn.execute(
            "SELECT set_config('statement_timeout', %s, false)",
            (f"{int(c.command_timeout * 1000)}ms",),
        )
    if not autocommit:
        conn.commit()
    return conn


def _group(
    keys: Sequence[Key], records: Sequence[Any], single: bool
) -> list[Collection[Row] | BaseException]:
    """Results aligned with ``keys`` from rows tagged with their key (single) or ordinal."""
    out: list[list[Row]] = [[] for _ in keys]
    positions: dict[Any, list[int]] = {}
    if single:
        for i, key in enumerate(keys):
            if not has_null(key):
                positions.setdefault(key[0], []).append(i)
    for record in records:
        row = dict(record)
        tag = row.pop(_KEY)
        targets = positions.get(tag, ()) if single else (tag - 1,)
        for i in targets:
            out[i].append(row if len(targets) == 1 else dict(row))
    return list(out)


class _SyncPostgresLookup(LookupFunction):
    """One psycopg connection per function instance (sync lookups run one at a time)."""

    def __init__(self, connector: PostgresConnector) -> None:
        self.connector = connector
        self.conn: psycopg.Connection[dict[str, Any]] | None = None
        self.lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"connector": self.connector}  # never a live connection

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["connector"])  # type: ignore[misc]

    def open(self) -> None:
        c = self.connector
        with self.lock:
            if self.conn is not None and not self.conn.closed:
                return
            try:
                self.conn = _sync_connect(c, autocommit=True)
            except _SYNC_TRANSIENT as error:
                if not c.is_sync_transient(error):
                    raise
                raise c.transient(error, "connect") from error

    def lookup(self, key: Key) -> Collection[Row]:
        key = tuple(key)
        c = self.connector
        if len(key) != len(c.key_columns):
            raise ConfigurationError("key", key, f"a tuple for key columns {list(c.key_columns)}")
        if has_null(key):
            return []
        self.open()
        with self.lock:
            conn = self.conn
            assert conn is not None
            try:
                return conn.execute(c.point_sql("%s"), key, prepare=True).fetchall()
            except _SYNC_TRANSIENT as error:
                if conn.closed or conn.broken:
                    self.conn = None  # reconnect on the next call
                    conn.close()
                if not c.is_sync_transient(error):
                    raise
                raise c.transient(error, "lookup") from error

    def close(self) -> None:
        with self.lock:
            if self.conn is not None:
                self.conn.close()
                self.conn = None


class _AsyncPostgresLookup(AsyncLookupFunction):
    """An asyncpg pool per function instance; broken connections are replaced by the pool."""

    def __init__(self, connector: PostgresConnector) -> None:
        self.connector = connector
        self.pool: asyncpg.Pool | None = None
        self.batch_sql: str | None = None
        self.point_sql = connector.point_sql("$")
        self._opening: asyncio.Lock | None = None

    async def open(self) -> None:
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self.pool is not None:
                return
            c = self.connector
            try:
                pool = await asyncpg.create_pool(
                    asyncpg_dsn(c.dsn), min_size=1, max_size=c.pool_size, **_asyncpg_options(c)
                )
            except _ASYNC_TRANSIENT as error:
                raise c.transient(error, "connect") from error
            try:
                self.batch_sql = c.batch_sql(await self._key_types(pool))
            except BaseException:
                await pool.close()
                raise
            self.pool = pool

    async def _key_types(self, pool: asyncpg.Pool) -> list[str]:
        async with pool.acquire() as conn:
            statement = await conn.prepare(self.connector.key_type_probe_sql("$"))
            oids = [a.type.oid for a in statement.get_attributes()]
            rows = await conn.fetch(
                "SELECT format_type(t.oid, NULL) AS name FROM unnest($1::oid[]) "
                "WITH ORDINALITY AS t(oid, ord) ORDER BY t.ord",
                oids,
            )
        return [r["name"] for r in rows]

    async def _pool(self) -> asyncpg.Pool:
        if self.pool is None:
            try:
                await self.open()
            except _ASYNC_TRANSIENT as error:
                raise self.connector.transient(error, "connect") from error
        assert self.pool is not None
        return self.pool

    async def async_lookup(self, key: Key) -> Collection[Row]:
        key = tuple(key)
        c = self.connector
        if len(key) != len(c.key_columns):
            raise ConfigurationError("key", key, f"a tuple for key columns {list(c.key_columns)}")
        if has_null(key):
            return []
        pool = await self._pool()
        try:
            records = await pool.fetch(self.point_sql, *key)
        except _ASYNC_TRANSIENT as error:
            raise c.transient(error, "lookup") from error
        return [dict(r) for r in records]

    async def async_lookup_batch(
        self, keys: Sequence[Key]
    ) -> Sequence[Collection[Row] | BaseException]:
        keys = [tuple(k) for k in keys]
        c = self.connector
        width = len(c.key_columns)
        for key in keys:
            if len(key) != width:
                raise ConfigurationError(
                    "key", key, f"a tuple for key columns {list(c.key_columns)}"
                )
        pool = await self._pool()
        assert self.batch_sql is not None
        single = width == 1
        if single:
            args: list[Any] = [list({k[0] for k in keys if k[0] is not None})]
        else:
            # A NULL-containing key is sent as NULLs: `=` never matches, positions stay aligned.
            args = [[None if has_null(k) else k[i] for k in keys] for i in range(width)]
        if all(has_null(k) for k in keys):
            return [[] for _ in keys]
        try:
            records = await pool.fetch(self.batch_sql, *args)
        except _ASYNC_TRANSIENT as error:
            raise c.transient(error, "batch lookup") from error
        return _group(keys, records, single)

    async def close(self) -> None:
        if self.pool is not None:
            pool, self.pool = self.pool, None
            await pool.close()
