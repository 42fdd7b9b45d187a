"""PostgreSQL as a dim table, read with asyncpg (the sync mode runs the same code).

SQL is built only from quoted identifiers (table, columns) and, for composite batches, type
names the server itself returns (``format_type``); key values are always bind parameters.
Statements are prepared (asyncpg's per-connection statement cache). Every session is read-only
(``default_transaction_read_only``), so a ``query`` source cannot write. A batch is one join
against ``unnest($1, $2, ...) WITH ORDINALITY`` (the distinct values for a single key column,
every key for composite ones); each row comes back tagged, in its last column, with the
ordinal of its key, so a batch matches exactly what the point lookups match (``=`` on the
server decides, never Python equality: ``char(n)`` padding, ``citext``, NaN, time zones). A
key an integral key column cannot hold (a fraction, out of the type's range), or text holding
a NUL (which no PostgreSQL value holds), is a miss, never sent (the driver would truncate 1.5
to 1, the server would fail the statement). A scan streams through a
server-side cursor.

Failures of the connection kind (refused, closed, dropped mid-query, admin shutdown, too many
connections, timeouts) raise :class:`~asyncio_lookup.errors.TransientError`, whether they happen
while the pool opens, while the key types are probed or in a query, so ``lookup.max-retries``
covers them all. A connection whose query is interrupted (a failure, a timeout, the lookup's
cancellation) is terminated, never waited for, and the pool opens a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import uuid
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import asyncpg

from asyncio_lookup.connectors._args import MAX_POOL, count, optional_seconds, seconds, text
from asyncio_lookup.connectors._secrets import identity_digest, mask_url, redact, url_secrets
from asyncio_lookup.connectors.keys import has_null
from asyncio_lookup.connectors.postgres_connection import (
    asyncpg_dsn,
    is_connection_error,
    is_retryable_statement_error,
    quote_ident,
)
from asyncio_lookup.connectors.postgres_schema import check_columns
from asyncio_lookup.connectors.source import AsyncFirstSource
from asyncio_lookup.errors import ConfigurationError, DataFormatError, TransientError
from asyncio_lookup.lookup.functions import AsyncLookupFunction, Key, Row
from asyncio_lookup.masking import SECRET_PARAM
from asyncio_lookup.runtime.loop import new_event_loop

log = logging.getLogger(__name__)

_KEY = "__asyncio_lookup_key"  # the batch tag's alias; read by position (a column may share it)
# An integral key column's type (format_type) -> its bound: values v with -bound <= v < bound.
_INTEGRAL_BOUNDS = {"smallint": 2**15, "integer": 2**31, "bigint": 2**63}
# format_type names whose bare form in a cast means length 1 (char(1), bit(1)): their
# unconstrained spelling, so a key array keeps every character (char(n) keys are padded).
_CAST_NAMES = {"character": "bpchar", "bit": '"bit"'}
_IDENTITY_VERSION = 3  # bumped when the connector's answers to the same configuration change
#: Key column types whose keys are bound as text, for the server to read: asyncpg's own
#: encoders send date.max / datetime.max as 'infinity' (and min as '-infinity'), so the key
#: 9999-12-31 matched the infinity rows and missed its own, and read a uuid's text by rules
#: of their own (hyphens anywhere; no braces).
_TEXT_BOUND = {
    "date": "date",
    "timestamp without time zone": "timestamp",
    "timestamp with time zone": "timestamptz",
    "uuid": "uuid",
}
#: Key column types with 'infinity': no Spark key equals it, and asyncpg reads it as the
#: type's max (min), so a FULL scan leaves such rows out rather than index them as 9999-12-31.
_INFINITE = ("date", "timestamp without time zone", "timestamp with time zone")


def _names(option: str, value: Sequence[str] | str | None) -> tuple[str, ...]:
    if value is None:
        return ()
    names = (value,) if isinstance(value, str) else tuple(value)
    for name in names:
        quote_ident(name)
    if len(set(names)) != len(names):
        raise ConfigurationError(option, list(names), "distinct column names")
    return names


#: Key types whose ``=`` in PostgreSQL is ``==`` of the values asyncpg returns (with a
#: deterministic collation): a FULL cache's snapshot finds what a point lookup finds.
_PYTHON_EQUALITY = (
    "smallint",
    "integer",
    "bigint",
    "numeric",
    "real",
    "double precision",
    "text",
    "character varying",
    "name",
    "boolean",
    "date",
    "timestamp without time zone",
    "timestamp with time zone",
    "time without time zone",
    "bytea",
    "oid",
    '"char"',
)

#: Per type oid, in order: its name, its base type under any domains, that type's
#: ``typtype`` and whether values of it have a collation.
_KEY_TYPES_SQL = """
WITH RECURSIVE chain AS (
  SELECT t.ord, t.oid AS start, t.oid, 0 AS depth
  FROM unnest($1::oid[]) WITH ORDINALITY AS t(oid, ord)
  UNION ALL
  SELECT chain.ord, chain.start, ty.typbasetype, chain.depth + 1
  FROM chain JOIN pg_type ty ON ty.oid = chain.oid
  WHERE ty.typtype = 'd' AND chain.depth < 32
)
SELECT format_type(chain.start, NULL) AS type, format_type(chain.oid, NULL) AS base,
  bt.typtype::text AS kind, bt.typcollation <> 0 AS collatable
FROM chain JOIN pg_type bt ON bt.oid = chain.oid
WHERE bt.typtype <> 'd' ORDER BY chain.ord
"""


#: Errors a key alone can cause (the column's type cannot take it): class 22, and a ``name``
#: key of 64 bytes or more, which PostgreSQL's binary input refuses as "identifier too long".
_ONE_KEY_ERRORS = (asyncpg.DataError, asyncpg.exceptions.NameTooLongError)


class UndecodableRow(DataFormatError):
    """A row holds a value asyncpg cannot decode into Python's type."""


def _with_modifier(described: str | None, name: str) -> str:
    """A type's name with its modifier (``character(4)``) where the catalog gave one."""
    if described is not None and described.split("(", 1)[0] == name:
        return described
    return name


class PostgresConnector(AsyncFirstSource):
    """A dim table (or read-only query) in PostgreSQL. Picklable; pools open on the executor.

    ``table`` is ``"name"``, ``"schema.name"`` or a ``(schema, name)`` tuple; ``query`` is a
    ``SELECT`` used as a subquery instead. ``columns=None`` selects every column.
    ``pool_size`` connections per executor process; ``connect_timeout`` bounds opening one;
    ``command_timeout`` (``None``: no limit) bounds each statement (a lookup in async mode is
    also bounded by the lookup's own timeout, which abandons its connection).
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
        self.url = asyncpg_dsn(dsn)
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
        if self.columns == ():  # SELECT  FROM ...: every batch a syntax error
            raise ConfigurationError("columns", [], "None (every column) or column names")
        self.pool_size = count("pool_size", pool_size, maximum=MAX_POOL)
        self.scan_batch_size = count("scan_batch_size", scan_batch_size)
        self.command_timeout = optional_seconds("command_timeout", command_timeout)
        self.connect_timeout = seconds("connect_timeout", connect_timeout)
        self.application_name = text("application_name", application_name)

    def __repr__(self) -> str:
        source = f"table={'.'.join(self.table)!r}" if self.table else f"query={self.query!r}"
        return (
            f"PostgresConnector(dsn={mask_url(self.dsn)!r}, {source}, "
            f"key_columns={list(self.key_columns)}, columns="
            f"{list(self.columns) if self.columns is not None else None})"
        )

    @property
    def target(self) -> str:
        """What run-time errors name: the server and the relation (password masked)."""
        source = f"table {'.'.join(self.table)}" if self.table else "query"
        return f"PostgreSQL {mask_url(self.dsn)}, {source}"

    @property
    def cache_identity(self) -> str:
        """A digest of what the answers depend on (no password: rotating it keeps entries)."""
        parts = urlsplit(self.url)
        userinfo, _, hosts = parts.netloc.rpartition("@")
        return identity_digest(
            "postgresql",
            {
                "version": _IDENTITY_VERSION,
                "hosts": [_host_port(h) for h in hosts.lower().split(",")],
                "database": unquote(parts.path.lstrip("/")),
                "user": unquote(userinfo.split(":", 1)[0]),
                "params": sorted(  # options=-c search_path=... may change the rows
                    (k, v)
                    for k, v in parse_qsl(parts.query, keep_blank_values=True)
                    if not SECRET_PARAM.search(k)
                ),
                "table": list(self.table) if self.table is not None else None,
                "query": self.query,
                "key_columns": list(self.key_columns),
                "columns": list(self.columns) if self.columns is not None else None,
            },
        )

    # -- LookupTableSource -------------------------------------------------------------------

    def async_lookup_function(self) -> AsyncLookupFunction:
        return _PostgresLookup(self)

    # -- driver-side check -------------------------------------------------------------------

    def check_schema(self, fields: Sequence[tuple[str, Any]] | Mapping[str, Any]) -> None:
        """Check, with one catalog query, that the table (or query) exists and has the declared
        columns with types their values convert to losslessly, a key column's declared so its
        keys compare exactly (an integral type or ``decimal(p,0)`` for an integer column,
        ``timestamp_ntz`` for a ``timestamp without time zone`` one).

        ``fields``: the declared dim columns, ``(name, type)`` pairs or a mapping, each type a
        Spark SQL type name (``"bigint"``, ``"decimal(12,2)"``), a pyspark ``DataType`` or a
        pyarrow type. Raises :class:`ConfigurationError` naming the table, the column, its
        PostgreSQL type, the declared type and what to declare instead; a refused connection
        raises :class:`TransientError`. Blocking: call it on the driver, outside a running loop.
        """
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            runner.run(self.check_schema_async(fields))

    async def check_schema_async(
        self, fields: Sequence[tuple[str, Any]] | Mapping[str, Any]
    ) -> None:
        """:meth:`check_schema` on the running loop."""
        declared = list(fields.items()) if isinstance(fields, Mapping) else list(fields)
        conn = await self._connect("schema check")
        try:
            try:
                actual = await self._column_types(conn)
            except Exception as error:
                if self.query is not None and isinstance(error, asyncpg.PostgresError):
                    raise ConfigurationError(
                        "query",
                        self.query if len(self.query) <= 200 else self.query[:200] + "...",
                        "one SELECT statement, read as the subquery SELECT * FROM (<query>) AS src",
                        f"PostgreSQL refused it: {type(error).__name__}: {error}",
                    ) from error
                raise
            needed = [name for name in self.key_columns + (self.columns or ()) if name]
            check_columns(self.relation_name(), actual, declared, needed, self.key_columns)
            self._key_equality = await self._key_equality_of(conn, actual or {})
        except Exception as error:
            if is_connection_error(error):
                raise self.transient(error, "schema check") from error
            raise
        finally:
            conn.terminate()

    def check_full_cache(self, fields: Sequence[tuple[str, Any]]) -> None:
        """Refuse a FULL cache over key columns whose ``=`` in PostgreSQL may not be Python's
        (known once :meth:`check_schema` ran): ``character(n)`` ignores trailing spaces,
        ``citext`` and nondeterministic collations case or accents, ``jsonb`` spacing, and a
        domain is its base type; the snapshot, indexed by the values themselves, would miss
        rows that NONE and PARTIAL join. Key types: :data:`_PYTHON_EQUALITY`, and enums."""
        for column, (pg_type, base, kind, deterministic) in getattr(
            self, "_key_equality", {}
        ).items():
            domain = kind != "e" and pg_type.split("(", 1)[0] != base
            shown = f"{pg_type} (a domain over {base})" if domain else pg_type
            if not deterministic:
                why = "its collation is nondeterministic (= ignores case or accents)"
            elif kind != "e" and base not in _PYTHON_EQUALITY:
                why = "PostgreSQL decides its = (trailing spaces, case, spelling)"
            else:
                continue
            raise ConfigurationError(
                "lookup.cache",
                "FULL",
                "NONE or PARTIAL, or a query= that selects the key normalised (rtrim(k) for "
                "character(n), lower(k) for citext or a case-insensitive collation, k::text "
                f"for other types) with keys normalised alike; FULL takes key types "
                f"{', '.join(_PYTHON_EQUALITY)} and enums",
                f"key column {self.relation_name()}.{column} is {shown}: {why}, and a "
                "snapshot compares values as Python does",
            )

    async def _key_equality_of(
        self, conn: asyncpg.Connection, catalog_types: Mapping[str, str]
    ) -> dict[str, tuple[str, str, str, bool]]:
        """Per key column: its type, the base type under its domains, that type's kind
        (``pg_type.typtype``) and whether its collation (a ``COLLATE`` in a ``query=`` too)
        is deterministic."""
        keys = list(self.key_columns)
        probes = [f"(SELECT src.{quote_ident(k)} FROM {self.source_sql()} LIMIT 0)" for k in keys]
        oids = await conn.fetchrow("SELECT " + ", ".join(f"pg_typeof({p})::oid" for p in probes))
        types = await conn.fetch(_KEY_TYPES_SQL, list(oids))
        collatable = [p for p, t in zip(probes, types, strict=True) if t["collatable"]]
        deterministic: Sequence[bool] = [True] * len(collatable)
        if collatable:
            # no regcollation before PostgreSQL 13 (nor, before 12, nondeterministic
            # collations): there, 12's are not seen
            with contextlib.suppress(asyncpg.UndefinedObjectError, asyncpg.UndefinedColumnError):
                deterministic = await conn.fetchrow(
                    "SELECT "
                    + ", ".join(
                        "coalesce((SELECT c.collisdeterministic FROM pg_collation c WHERE "
                        f"c.oid = pg_collation_for({p})::regcollation), true)"
                        for p in collatable
                    )
                )
        collations = iter(deterministic)
        return {
            k: (
                _with_modifier(catalog_types.get(k), t["type"]),
                t["base"],
                t["kind"],
                next(collations) if t["collatable"] else True,
            )
            for k, t in zip(keys, types, strict=True)
        }

    def relation_name(self) -> str:
        return ".".join(self.table) if self.table is not None else "query"

    async def _column_types(self, conn: asyncpg.Connection) -> dict[str, str] | None:
        """Column name -> PostgreSQL type (``format_type``); ``None``: no such relation."""
        if self.table is not None:
            records = await conn.fetch(
                "SELECT c.oid IS NOT NULL AS found, a.attname AS name, "
                "format_type(a.atttypid, a.atttypmod) AS type "
                "FROM (SELECT to_regclass($1)::oid AS oid) AS c "
                "LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 "
                "AND NOT a.attisdropped ORDER BY a.attnum",
                ".".join(quote_ident(p) for p in self.table),
            )
            if not records or not records[0]["found"]:
                return None
            return {r["name"]: r["type"] for r in records if r["name"] is not None}
        statement = await conn.prepare(f"SELECT * FROM {self.source_sql()} LIMIT 0")
        attributes = statement.get_attributes()
        types = await conn.fetch(
            "SELECT format_type(t.oid, NULL) AS name FROM unnest($1::oid[]) "
            "WITH ORDINALITY AS t(oid, ord) ORDER BY t.ord",
            [a.type.oid for a in attributes],
        )
        return {a.name: t["name"] for a, t in zip(attributes, types, strict=True)}

    # -- SQL ---------------------------------------------------------------------------------

    def source_sql(self) -> str:
        if self.table is not None:
            return ".".join(quote_ident(p) for p in self.table) + " AS src"
        return f"({self.query}\n) AS src"  # \n: a query may end in a -- comment

    def select_sql(self) -> str:
        if self.columns is None:
            return "src.*"
        return ", ".join(f"src.{quote_ident(c)}" for c in self.columns)

    def point_sql(self, key_types: Sequence[str] = ()) -> str:
        """One key's rows; a key column of a :data:`_TEXT_BOUND` type (once ``key_types`` are
        known) is bound as text and cast by the server."""
        where = " AND ".join(
            f"src.{quote_ident(k)} = ${i + 1}{_text_cast(key_types, i)}"
            for i, k in enumerate(self.key_columns)
        )
        return f"SELECT {self.select_sql()} FROM {self.source_sql()} WHERE {where}"

    def batch_sql(self, key_types: Sequence[str]) -> str:
        """One query for many keys: one array per key column, joined by ``=`` as the point
        lookup compares; each result row carries, in its last column, its key's ordinal."""
        arrays = ", ".join(
            f"${i + 1}::text[]::{_TEXT_BOUND[t]}[]"
            if t in _TEXT_BOUND
            else f"${i + 1}::{_cast_name(t)}[]"
            for i, t in enumerate(key_types)
        )
        names = ", ".join(f"k{i}" for i in range(len(key_types)))
        on = " AND ".join(f"src.{quote_ident(c)} = k.k{i}" for i, c in enumerate(self.key_columns))
        return (
            f"SELECT {self.select_sql()}, k.ord AS {_KEY} "
            f"FROM unnest({arrays}) WITH ORDINALITY AS k({names}, ord) "
            f"JOIN {self.source_sql()} ON {on}"
        )

    def key_type_probe_sql(self) -> str:
        cols = ", ".join(f"src.{quote_ident(k)}" for k in self.key_columns)
        return f"SELECT {cols} FROM {self.source_sql()} LIMIT 0"

    def scan_sql(self, key_types: Sequence[str] = ()) -> str:
        """Every row, with its key columns even when ``columns`` leaves them out (a full cache
        indexes the rows by them); a row whose date or timestamp key is ±infinity is left out
        (:data:`_INFINITE`)."""
        select = self.select_sql()
        if self.columns is not None:
            extra = [k for k in self.key_columns if k not in self.columns]
            select = ", ".join([select, *(f"src.{quote_ident(k)}" for k in extra)])
        finite = [
            f"isfinite(src.{quote_ident(k)})"
            for k, t in zip(self.key_columns, key_types, strict=False)
            if t in _INFINITE
        ]
        where = f" WHERE {' AND '.join(finite)}" if finite else ""
        return f"SELECT {select} FROM {self.source_sql()}{where}"

    # -- errors ------------------------------------------------------------------------------

    def secrets(self) -> list[str]:
        return url_secrets(self.dsn) + url_secrets(self.url)

    def transient(self, error: BaseException, action: str) -> TransientError:
        said = str(error)
        if not said and isinstance(error, TimeoutError) and self.command_timeout is not None:
            said = f"no answer within command_timeout={self.command_timeout:g} s"  # asyncpg: ''
        message = redact(
            f"PostgreSQL {action} failed on {mask_url(self.dsn)}: {type(error).__name__}: {said}",
            self.secrets(),
        )
        log.debug("%s", message)  # per attempt; the error that ends the retries says it once
        return TransientError(message)

    # -- scan --------------------------------------------------------------------------------

    async def _connect(self, action: str) -> asyncpg.Connection:
        """A connection of its own (not the pool's), for ``action``."""
        try:
            conn = await asyncpg.connect(self.url, **_asyncpg_options(self))
        except Exception as error:
            if not is_connection_error(error):
                raise
            raise self.transient(error, action) from error
        try:
            await _exact_intervals(conn)
        except BaseException as error:
            conn.terminate()
            if isinstance(error, Exception) and is_connection_error(error):
                raise self.transient(error, action) from error
            raise
        return conn

    async def _scan(self) -> AsyncIterator[Row]:
        conn = await self._connect("scan")
        try:
            async with conn.transaction(readonly=True, isolation="repeatable_read"):
                try:
                    key_types = await _probe_key_types(conn, self.key_type_probe_sql())
                    scan = self.scan_sql(key_types)
                    cursor = conn.cursor(scan, prefetch=self.scan_batch_size)
                    async for record in cursor:
                        yield dict(record)
                except (ValueError, OverflowError) as error:
                    if isinstance(error, asyncpg.DataError):
                        raise
                    # A page of rows is decoded at once: which key holds the value is unknown,
                    # so the load fails, naming the table and what to do.
                    raise UndecodableRow(
                        f"PostgreSQL {self.relation_name()}: a row of the scan holds a value "
                        f"Python cannot hold ({type(error).__name__}: {error}); select it as "
                        "text (query=... with col::text)"
                    ) from error
                except Exception as error:
                    if not (is_connection_error(error) or is_retryable_statement_error(error)):
                        raise  # a standby's conflict with recovery meets long scans the most
                    raise self.transient(error, "scan") from error
        finally:
            conn.terminate()  # never wait on a connection that may have stopped answering


def _interval_in(value: tuple[int, int, int]) -> datetime.timedelta:
    """An ``interval`` as a ``timedelta``, when it has no months: asyncpg's own decoder counts
    a month as 30 days and a year as 365 (``'1 mon'`` came back as 30 days)."""
    months, days, microseconds = value
    if months:
        raise ValueError(
            f"the interval of {months} month(s), {days} day(s) and {microseconds} µs has "
            "months, which no fixed number of days is"
        )
    return datetime.timedelta(days=days, microseconds=microseconds)


def _interval_out(value: datetime.timedelta) -> tuple[int, int, int]:
    return (0, value.days, value.seconds * 1_000_000 + value.microseconds)


async def _exact_intervals(conn: asyncpg.Connection) -> None:
    try:
        await conn.set_type_codec(
            "interval",
            schema="pg_catalog",
            encoder=_interval_out,
            decoder=_interval_in,
            format="tuple",
        )
    except (asyncpg.PostgresError, ValueError) as error:  # a server that is PostgreSQL-like
        if is_connection_error(error):
            raise
        log.warning(
            "PostgreSQL: the interval codec could not be set (%s: %s); an interval with "
            "months comes as asyncpg decodes it (30 days a month)",
            type(error).__name__,
            error,
        )


def _asyncpg_options(c: PostgresConnector, *, lookups: bool = False) -> dict[str, Any]:
    """asyncpg connection options shared by the lookup pool, the scan and the schema check.

    For ``lookups``, the server ends a statement itself just after ``command_timeout``
    (``statement_timeout``): a connection the client gave up on is terminated, and asyncpg's
    cancel request may never leave (Spark's worker loop stands still between batches), so the
    server went on running the statement, or waiting on a lock, while the pool opened a
    replacement: under a long lock, every job added sessions until the server refused clients.
    A scan's statement may rightly run longer (its first page of a heavy query) and is one."""
    settings = {"application_name": c.application_name, "default_transaction_read_only": "on"}
    if lookups and c.command_timeout is not None:
        settings["statement_timeout"] = str(int(c.command_timeout * 1000) + _SERVER_GRACE_MS)
    return {
        "timeout": c.connect_timeout,
        "command_timeout": c.command_timeout,
        "server_settings": settings,
    }


#: How much later than the client's ``command_timeout`` the server ends a lookup's statement:
#: the client's timeout comes first, with its own message.
_SERVER_GRACE_MS = 500


def _text_cast(key_types: Sequence[str], position: int) -> str:
    """``::text::<type>`` for a :data:`_TEXT_BOUND` key column, else ``''``."""
    if position < len(key_types) and key_types[position] in _TEXT_BOUND:
        return f"::text::{_TEXT_BOUND[key_types[position]]}"
    return ""


def _as_key_text(pg_type: str) -> Any:
    """How a key value of a :data:`_TEXT_BOUND` column is written: as asyncpg would have read
    it (a datetime into a date column is its day; a naive datetime into a timestamptz is the
    process's local time, as its ``astimezone``), in the server's text. A value of another
    type, or one with no UTC time, is left as it is: asyncpg then refuses it (a text
    parameter) with that key's own error, a batch's other keys answered."""
    if pg_type == "uuid":
        return lambda v: v if type(v) is str else str(v) if isinstance(v, uuid.UUID) else v
    if pg_type == "date":
        return _date_text
    if pg_type == "timestamp with time zone":
        return _utc_text
    return lambda v: (  # timestamp without time zone: a naive datetime only
        v.isoformat() if isinstance(v, datetime.datetime) and v.tzinfo is None else v
    )


def _date_text(value: Any) -> Any:
    if isinstance(value, datetime.datetime):
        return value.date().isoformat()
    return value.isoformat() if isinstance(value, datetime.date) else value


def _utc_text(value: Any) -> Any:
    if not isinstance(value, datetime.datetime):
        return value
    try:
        return value.astimezone(datetime.UTC).isoformat()
    except (ValueError, OverflowError):  # datetime.min in a zone east of UTC: no such instant
        return value


async def _probe_key_types(conn: asyncpg.Connection, probe_sql: str) -> list[str]:
    """The ``format_type`` names of the key columns ``probe_sql`` selects."""
    statement = await conn.prepare(probe_sql)
    oids = [a.type.oid for a in statement.get_attributes()]
    rows = await conn.fetch(
        "SELECT format_type(t.oid, NULL) AS name FROM unnest($1::oid[]) "
        "WITH ORDINALITY AS t(oid, ord) ORDER BY t.ord",
        oids,
    )
    return [r["name"] for r in rows]


def _cast_name(pg_type: str) -> str:
    """A ``format_type`` name (``character``, ``integer[]``) as a cast takes it unconstrained."""
    base, bracket, dims = pg_type.partition("[")
    return _CAST_NAMES.get(base, base) + bracket + dims


def _host_port(host: str) -> str:
    """``host:port`` with PostgreSQL's default port made explicit (``[::1]`` stays bracketed)."""
    tail = host.rsplit("]", 1)[-1]
    return host if ":" in tail else f"{host}:5432"


def _integral_key(value: Any, bound: int) -> bool:
    """Whether an integral key column (values in ``[-bound, bound)``) can hold ``value``
    exactly; a value of another type is left to the driver's encoder (its error names it)."""
    if type(value) is int:  # the usual key first
        return -bound <= value < bound
    if isinstance(value, float):
        return value.is_integer() and -bound <= value < bound
    if isinstance(value, Decimal):
        return value.is_finite() and value == value.to_integral_value() and -bound <= value < bound
    if isinstance(value, int):
        return -bound <= value < bound
    return True


def _holds_nul(value: Any) -> bool:
    """Whether ``value`` is text holding a NUL, which no PostgreSQL value holds (the server
    refuses it in a parameter): a key with one is a miss, never sent."""
    return type(value) is str and "\x00" in value


def _group(
    keys: Sequence[Key], records: Sequence[Any], targets: Sequence[Sequence[int]] | None
) -> list[Collection[Row] | BaseException]:
    """Results aligned with ``keys`` from rows tagged (last column) with the ordinal of their
    array element: element ``o`` is for ``keys[i]`` for each ``i`` in ``targets[o - 1]``
    (``targets`` None: element ``o`` is ``keys[o - 1]``)."""
    out: list[list[Row]] = [[] for _ in keys]
    if not records:
        return list(out)
    names = list(records[0].keys())[:-1]  # zip drops the tag; a column may share its name
    for record in records:
        row = dict(zip(names, record, strict=False))
        if targets is None:
            out[record[-1] - 1].append(row)
            continue
        indices = targets[record[-1] - 1]
        for i in indices:
            out[i].append(row if len(indices) == 1 else dict(row))
    return list(out)


async def _release(pool: asyncpg.Pool, conn: Any) -> None:
    """Give ``conn`` back; a connection that fails its reset is dropped, not reported: the
    query's outcome stands, and the pool opens a replacement when next needed."""
    try:
        await pool.release(conn)
    except Exception as error:
        if not is_connection_error(error):
            raise
        with contextlib.suppress(asyncpg.InterfaceError):
            conn.terminate()


class _PostgresLookup(AsyncLookupFunction):
    """An asyncpg pool per function instance, opened lazily when opening it failed."""

    def __init__(self, connector: PostgresConnector) -> None:
        self.connector = connector
        self.pool: asyncpg.Pool | None = None
        self.batch_sql: str | None = None
        self.point_sql = connector.point_sql()
        # (position, bound) of each integral key column, known once the pool has opened
        self.integral: list[tuple[int, int]] = []
        # (position, writer) of each key column bound as text (_TEXT_BOUND), known likewise
        self.as_text: list[tuple[int, Any]] = []
        self._opening: asyncio.Lock | None = None

    async def open(self) -> None:
        """Open the pool; a failure a retry may fix is left to the first lookup (its failure
        retry then covers the open), any other one (bad password, no such table) raises."""
        with contextlib.suppress(TransientError):
            await self._pool()

    async def _pool(self) -> asyncpg.Pool:
        pool = self.pool
        if pool is not None:
            return pool
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self.pool is None:
                self.pool = await self._open_pool()
            return self.pool

    async def _open_pool(self) -> asyncpg.Pool:
        c = self.connector
        try:
            pool = await asyncpg.create_pool(
                c.url,
                min_size=1,
                max_size=c.pool_size,
                init=_exact_intervals,
                **_asyncpg_options(c, lookups=True),
            )
        except Exception as error:
            if not is_connection_error(error):
                raise
            raise c.transient(error, "connect") from error
        try:
            key_types = await self._key_types(pool)
            self.batch_sql = c.batch_sql(key_types)
            self.point_sql = c.point_sql(key_types)
            self.as_text = [
                (i, _as_key_text(t)) for i, t in enumerate(key_types) if t in _TEXT_BOUND
            ]
            self.integral = [
                (i, _INTEGRAL_BOUNDS[t]) for i, t in enumerate(key_types) if t in _INTEGRAL_BOUNDS
            ]
        except BaseException as error:
            pool.terminate()
            if isinstance(error, Exception) and is_connection_error(error):
                raise c.transient(error, "key type probe") from error
            raise
        return pool

    async def _key_types(self, pool: asyncpg.Pool) -> list[str]:
        async with pool.acquire() as conn:
            return await _probe_key_types(conn, self.connector.key_type_probe_sql())

    async def _fetch(self, sql: str, args: Sequence[Any], action: str) -> list[Any]:
        c = self.connector
        pool = self.pool if self.pool is not None else await self._pool()
        try:
            conn = await pool.acquire()
        except Exception as error:
            if not is_connection_error(error):
                raise
            raise c.transient(error, action) from error
        try:
            records: list[Any] = await conn.fetch(sql, *args)
            return records
        except (ValueError, OverflowError) as error:
            if isinstance(error, asyncpg.DataError):  # a key the column's type cannot take
                raise
            # a value asyncpg cannot give as Python's (a BC date, the year 10000)
            raise UndecodableRow(
                f"PostgreSQL {c.relation_name()}: a row of the {action} holds a value Python "
                f"cannot hold ({type(error).__name__}: {error}); select it as text "
                "(query=... with col::text)"
            ) from error
        except BaseException as error:
            connection_failed = isinstance(error, Exception) and is_connection_error(error)
            if is_retryable_statement_error(error):
                raise c.transient(error, action) from error
            if connection_failed or isinstance(error, asyncio.CancelledError):
                # Abandoned, not cancelled or reset: on a blackholed connection either would
                # wait for the server. The pool opens a replacement when next needed. (A
                # connection lost mid-query is back in the pool already: nothing to end.)
                with contextlib.suppress(asyncpg.InterfaceError):
                    conn.terminate()
            if connection_failed:
                raise c.transient(error, action) from error
            raise
        finally:
            await _release(pool, conn)

    async def async_lookup(self, key: Key) -> Collection[Row]:
        key = tuple(key)
        c = self.connector
        if len(key) != len(c.key_columns):
            raise ConfigurationError("key", key, f"a tuple for key columns {list(c.key_columns)}")
        if has_null(key):
            return []
        if self.pool is None:
            await self._pool()  # the check below needs the probed key types
        if not self._holdable(key):
            return []  # an integral key column holds no such value: nothing matches
        args: Sequence[Any] = key
        if self.as_text:
            args = list(key)
            for i, write in self.as_text:
                args[i] = write(args[i])
        return [dict(r) for r in await self._fetch(self.point_sql, args, "lookup")]

    def _holdable(self, key: Key) -> bool:
        """Whether each integral key column can hold its part of ``key`` exactly, and no text
        holds a NUL (no PostgreSQL value does; the server refuses it in a parameter)."""
        return all(_integral_key(key[i], bound) for i, bound in self.integral) and not any(
            map(_holds_nul, key)
        )

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
        if all(has_null(k) for k in keys):
            return [[] for _ in keys]
        with contextlib.suppress(*_ONE_KEY_ERRORS, UndecodableRow):
            return await self._batch(keys, width)
        # One key the server (or asyncpg) cannot read as the column's type (an unknown enum
        # label, a malformed uuid, a name over 63 bytes), or one row asyncpg cannot decode,
        # failed the whole statement: each key is looked up alone, so that its error is its
        # own, as a point lookup's would be.
        distinct = list(dict.fromkeys(keys))
        outcomes = await asyncio.gather(
            *(self.async_lookup(k) for k in distinct), return_exceptions=True
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
                raise outcome
        by_key = dict(zip(distinct, outcomes, strict=True))
        return [by_key[k] for k in keys]

    async def _batch(
        self, keys: Sequence[Key], width: int
    ) -> Sequence[Collection[Row] | BaseException]:
        await self._pool()  # the batch statement needs the probed key types
        assert self.batch_sql is not None
        if width == 1:
            values, targets = self._distinct(keys)
            if not values:
                return [[] for _ in keys]
            if self.as_text:
                write = self.as_text[0][1]
                values = [write(v) for v in values]
            records = await self._fetch(self.batch_sql, [values], "batch lookup")
            return _group(keys, records, targets)
        # A NULL-containing key (or one an integral column cannot hold) is sent as NULLs: `=`
        # never matches, positions stay aligned.
        sent = [None if has_null(k) or not self._holdable(k) else k for k in keys]
        args = [[None if k is None else k[i] for k in sent] for i in range(width)]
        for i, write in self.as_text:
            args[i] = [None if v is None else write(v) for v in args[i]]
        records = await self._fetch(self.batch_sql, args, "batch lookup")
        return _group(keys, records, None)

    def _distinct(self, keys: Sequence[Key]) -> tuple[list[Any], list[list[int]]]:
        """The distinct values of single-column ``keys`` to send (NULLs and values an integral
        key column cannot hold left out), and for each the positions of the keys that have it."""
        bound = self.integral[0][1] if self.integral else 0
        ordinals: dict[Any, int] = {}
        targets: list[list[int]] = []
        for i, (value,) in enumerate(keys):
            if value is None:
                continue
            o = ordinals.get(value)
            if o is not None:
                targets[o].append(i)
            elif (not bound or _integral_key(value, bound)) and not _holds_nul(value):
                ordinals[value] = len(targets)
                targets.append([i])
        return list(ordinals), targets

    async def close(self) -> None:
        if self.pool is not None:
            pool, self.pool = self.pool, None
            try:
                await asyncio.wait_for(pool.close(), self.connector.connect_timeout)
            except Exception as error:
                if not is_connection_error(error):  # TimeoutError included
                    raise
                pool.terminate()
