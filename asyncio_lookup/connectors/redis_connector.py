"""Redis as a dim table, read with ``redis.asyncio`` (the sync mode runs the same code).

One key per dim key, named by a template (``"customer:{id}"``). The value is

- ``json``: a string holding one JSON object (the row); batched with ``MGET``;
- ``json_list``: a string holding a JSON list of objects (several rows per key); ``MGET``;
- ``hash``: a hash (``HGETALL``; field values are strings); batched with a pipeline.

Each returned row carries the key columns of its key, whatever the value holds under those
names: the lookup key for point and batch lookups; for a scan (``SCAN MATCH`` in batches) the
key parsed back from the key name, as strings unless ``key_types`` names a converter
(``{"id": int}``). So point, batch and FULL-cache lookups agree, and a row never joins another
key than its key name's. A scan skips a key name that does not parse or convert (another
table's key sharing the prefix, ``customer:1:orders`` for ``customer:{id}`` with ``int`` ids).
A composite key is unambiguous: a value holding the character that follows its placeholder is
an error for that key (:class:`~asyncio_lookup.connectors.keys.KeyTemplate`). A key holding
another Redis type than ``value_format`` reads is a :class:`DataFormatError` naming it, in a
batch too (``MGET`` answers it as missing: :meth:`RedisConnector.mark_wrong_types` asks), and a
scan skips it (another table's key under the prefix). A
value that is not UTF-8 text is a :class:`DataFormatError` naming its key. hiredis is used by
redis-py automatically when installed.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import hashlib
import json
import logging
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Iterator,
    Mapping,
    Sequence,
)
from decimal import Decimal
from typing import Any, TypeVar, cast

import redis.asyncio
import redis.exceptions
from redis.asyncio.connection import parse_url
from redis.backoff import NoBackoff
from redis.client import NEVER_DECODE
from redis.retry import Retry

from asyncio_lookup.connectors._args import MAX_POOL, count, optional_seconds, text
from asyncio_lookup.connectors._secrets import mask_url, redact, url_secrets
from asyncio_lookup.connectors.keys import KeyTemplate, has_null, key_dict, key_text
from asyncio_lookup.connectors.source import AsyncFirstSource
from asyncio_lookup.errors import ConfigurationError, DataFormatError, TransientError
from asyncio_lookup.lookup.functions import AsyncLookupFunction, FailedKey, Key, Row
from asyncio_lookup.validation import REDIS_URL_ALLOWED, redis_url_problem

log = logging.getLogger(__name__)
T = TypeVar("T")

VALUE_FORMATS = ("json", "json_list", "hash")
_TRANSIENT = (
    redis.exceptions.ConnectionError,  # LOADING (BusyLoadingError) included
    redis.exceptions.TimeoutError,
    redis.exceptions.ClusterDownError,  # CLUSTERDOWN, MASTERDOWN: a failover under way
    redis.exceptions.TryAgainError,  # TRYAGAIN: a slot migrating
    TimeoutError,
    OSError,
)
# subclasses of ConnectionError that a retry cannot fix
_PERMANENT = (redis.exceptions.AuthenticationError, redis.exceptions.AuthorizationError)
# uvloop raises RuntimeError ("unable to perform operation on <TCPTransport closed=True>") when a
# pooled connection was reset by the peer; redis-py drops that connection, a retry gets another.
_CAUGHT = (*_TRANSIENT, RuntimeError, redis.exceptions.ResponseError)


def _asks_to_try_again(error: redis.exceptions.ResponseError) -> bool:
    """A failover's answer (MASTERDOWN, CLUSTERDOWN, TRYAGAIN) or BUSY: a script runs too long."""
    return isinstance(error, _TRANSIENT) or str(error).startswith("BUSY ")


def _reraise_unless_transient(error: BaseException) -> None:
    if isinstance(error, RuntimeError) and "closed" not in str(error):
        raise error
    if isinstance(error, redis.exceptions.ResponseError) and not _asks_to_try_again(error):
        raise error


def _wrong_type(error: BaseException) -> bool:
    """The reply to a read of a key that holds another Redis type."""
    return isinstance(error, redis.exceptions.ResponseError) and str(error).startswith("WRONGTYPE")


def _wrong_type_error(redis_key: str, value_format: str) -> DataFormatError:
    held = "a string" if value_format == "hash" else "a hash or another non-string type"
    return DataFormatError(
        f"Redis key {redis_key!r} holds {held}, not what value_format={value_format!r} reads: "
        "is value_format right?"
    )


def _text(redis_key: str, raw: bytes) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError as error:
        raise DataFormatError(
            f"Redis key {redis_key!r} does not hold UTF-8 text ({error})"
        ) from None


def _callable_name(convert: Callable[..., Any]) -> str:
    """A converter named the same in every process: module and name, and for a function its
    bytecode's digest (two lambdas differ); a ``functools.partial`` with its arguments."""
    if isinstance(convert, functools.partial):
        bound = [repr(a) for a in convert.args]
        bound += [f"{k}={v!r}" for k, v in sorted(convert.keywords.items())]
        return f"{_callable_name(convert.func)}({', '.join(bound)})"
    name = f"{getattr(convert, '__module__', '') or ''}.{getattr(convert, '__qualname__', '')}"
    if not name.strip("."):
        name = f"{type(convert).__module__}.{type(convert).__qualname__}"
    code = getattr(convert, "__code__", None)
    if code is not None:
        name += ":" + hashlib.sha256(code.co_code).hexdigest()[:16]
    return name


_TEXT_TYPES = ("string", "varchar", "char")


def _key_samples(name: str) -> list[Any]:
    """Key values of the declared type (Spark's simple string) as a task hands them to a
    lookup, or [] for a type without them here: two or three each, a converter that reads
    one of them back wrong (``bool`` reads ``'False'`` as True) is found."""
    base = name.split("(", 1)[0]
    if base in ("tinyint", "smallint", "int", "integer", "bigint", "long"):
        return [7, -7, 0]
    if base in ("float", "double"):
        return [1.5, -0.25, 0.0]
    if base == "decimal":
        scale = int(name.split(",")[1].rstrip(")")) if "," in name else 0
        digits = "0" * scale
        return [
            Decimal(f"7.{digits}" if scale else "7"),
            Decimal(f"-7.{digits}" if scale else "-7"),
        ]
    if base == "date":
        return [datetime.date(2024, 1, 5), datetime.date(1999, 12, 31)]
    if base == "timestamp":
        return [datetime.datetime(2024, 1, 5, 1, 2, 3, 456789, tzinfo=datetime.UTC)]
    if base == "timestamp_ntz":
        return [datetime.datetime(2024, 1, 5, 1, 2, 3), datetime.datetime(1999, 12, 31, 23)]
    if base == "boolean":
        return [True, False]
    if base in _TEXT_TYPES:
        return ["k7", "K 7"]
    return []


def _type_name(kind: Any) -> str:
    """A declared type's name: Spark's simple string, or the text given, in lower case."""
    return str(kind.simpleString() if hasattr(kind, "simpleString") else kind).lower()


class RedisConnector(AsyncFirstSource):
    """A dim table stored in Redis under ``key_template`` keys. Picklable; opens on the executor.

    ``max_connections`` bounds the connections (and calls in flight) of each executor process;
    a lookup waits at most ``pool_timeout`` seconds for one (``None``: no limit).
    ``socket_timeout`` bounds connecting and each reply.
    """

    def __init__(
        self,
        url: str,
        key_template: str,
        key_columns: Sequence[str] | str | None = None,
        *,
        value_format: str = "json",
        key_types: Mapping[str, Callable[[str], Any]] | None = None,
        max_connections: int = 16,
        socket_timeout: float | None = 5.0,
        client_name: str = "asyncio-lookup",
        scan_count: int = 1000,
        pool_timeout: float | None = 20.0,
    ) -> None:
        problem = redis_url_problem(url) if isinstance(url, str) else "not text"
        if problem is not None:
            raise ConfigurationError("url", mask_url(str(url)), REDIS_URL_ALLOWED, problem)
        self.url = url
        self.template = KeyTemplate(key_template, "key_template")
        self.key_columns = self.template.key_columns(key_columns)
        if value_format not in VALUE_FORMATS:
            raise ConfigurationError("value_format", value_format, " | ".join(VALUE_FORMATS))
        self.value_format = value_format
        self.key_types = dict(key_types or {})
        not_callable = sorted(c for c, f in self.key_types.items() if not callable(f))
        if not_callable:
            raise ConfigurationError(
                "key_types",
                {c: self.key_types[c] for c in not_callable},
                "a function per key column, from the key's text to its value (int, float, ...)",
            )
        unknown = sorted(set(self.key_types) - set(self.key_columns))
        if unknown:
            raise ConfigurationError(
                "key_types", unknown, f"converters for key columns {list(self.key_columns)}"
            )
        self.max_connections = count("max_connections", max_connections, maximum=MAX_POOL)
        self.socket_timeout = optional_seconds("socket_timeout", socket_timeout)
        self.client_name = text("client_name", client_name)
        if not all("!" <= c <= "~" for c in self.client_name):  # CLIENT SETNAME refuses it
            raise ConfigurationError(
                "client_name", client_name, "printable ASCII without spaces (my-lookup-job)"
            )
        self.scan_count = count("scan_count", scan_count)
        self.pool_timeout = optional_seconds("pool_timeout", pool_timeout)

    def __repr__(self) -> str:
        return (
            f"RedisConnector(url={mask_url(self.url)!r}, key_template={self.template.template!r}, "
            f"key_columns={list(self.key_columns)}, value_format={self.value_format!r})"
        )

    @property
    def cache_identity(self) -> str:
        """Stable text that changes with the answers: server (password hashed), db, keys, format."""
        try:
            server: dict[str, Any] = dict(parse_url(self.url))
        except ValueError:
            server = {"url": self.url}
        for name, value in list(server.items()):
            if isinstance(value, type):
                server[name] = value.__name__
            elif value is not None and ("password" in name or name == "url"):
                server[name] = "sha256:" + hashlib.sha256(str(value).encode()).hexdigest()
        if "host" in server:
            server.setdefault("port", 6379)
        server.setdefault("db", 0)
        return json.dumps(
            {
                "connector": "redis",
                "server": server,
                "key_template": self.template.template,
                "key_columns": list(self.key_columns),
                "value_format": self.value_format,
                "key_types": {c: _callable_name(f) for c, f in sorted(self.key_types.items())},
            },
            sort_keys=True,
            default=str,
        )

    @property
    def target(self) -> str:
        """What run-time errors name: the server and the key pattern (password masked)."""
        return f"Redis {mask_url(self.url)}, keys {self.template.template!r}"

    # -- LookupTableSource -------------------------------------------------------------------

    def async_lookup_function(self) -> AsyncLookupFunction:
        return _RedisLookup(self)

    # -- shared helpers ----------------------------------------------------------------------

    def client(self) -> redis.asyncio.Redis:
        # The plain pool is faster than the blocking one; callers bound concurrency themselves
        # (a semaphore of max_connections) so it never runs out of connections.
        # No retries inside redis-py: failures surface as TransientError and go through the
        # lookup layer's `lookup.max-retries`; a broken connection is dropped from the pool.
        pool = redis.asyncio.ConnectionPool.from_url(
            self.url,
            decode_responses=True,
            max_connections=self.max_connections,
            socket_timeout=self.socket_timeout,
            socket_connect_timeout=self.socket_timeout,
            client_name=self.client_name,
            retry=Retry(NoBackoff(), 0),
        )
        return redis.asyncio.Redis.from_pool(pool)

    def redis_key(self, key: Key) -> str:
        """The key name of ``key``; :class:`DataFormatError` when the template cannot write it
        unambiguously (a value holding its separator)."""
        return self.template.format(key_dict(self.key_columns, key), key_text)

    def transient(self, error: BaseException, action: str) -> TransientError:
        message = redact(
            f"Redis {action} failed on {mask_url(self.url)}: {type(error).__name__}: {error}",
            url_secrets(self.url),
        )
        log.debug("%s", message)  # per attempt; the error that ends the retries says it once
        return TransientError(message)

    def decode(
        self, key_values: Mapping[str, Any], raw: Any, redis_key: str
    ) -> list[dict[str, Any]]:
        """Rows from one stored value (``None`` is a miss), with the key columns filled in."""
        if raw is None or raw == {}:
            return []
        if self.value_format == "hash":
            rows: list[dict[str, Any]] = [dict(raw)]
        else:
            try:
                value = json.loads(raw)
            except (TypeError, ValueError) as error:
                raise DataFormatError(
                    f"Redis key {redis_key!r} does not hold JSON ({error})"
                ) from error
            expected = list if self.value_format == "json_list" else dict
            if not isinstance(value, expected) or (
                expected is list and not all(isinstance(r, dict) for r in value)
            ):
                what = "a JSON list of objects" if expected is list else "a JSON object"
                raise DataFormatError(
                    f"Redis key {redis_key!r} holds {type(value).__name__}, "
                    f"value_format={self.value_format!r} expects {what}"
                )
            rows = [dict(r) for r in value] if isinstance(value, list) else [dict(value)]
        for row in rows:
            row.update(key_values)  # the key's columns, not what the value holds under them
        return rows

    def check_schema(self, fields: Sequence[tuple[str, Any]] | Mapping[str, Any]) -> None:
        """Refuse, for ``value_format='hash'``, a field other than a key column declared other
        than STRING: every field of a hash is text, so every row would fail in the tasks. No
        server is asked."""
        if self.value_format != "hash":
            return
        for column, kind in fields.items() if isinstance(fields, Mapping) else fields:
            name = _type_name(kind)
            if column not in self.key_columns and name.split("(", 1)[0] not in _TEXT_TYPES:
                raise ConfigurationError(
                    "value_format",
                    "hash",
                    f"fields of a hash declared STRING ({column!r} is {name}: cast it after "
                    "the join), or value_format='json'",
                    "every field of a Redis hash is text",
                )

    def check_full_cache(self, fields: Sequence[tuple[str, Any]]) -> None:
        """Refuse a FULL cache whose key columns are declared other than STRING without a
        ``key_types`` converter: the scan reads them from key names as text, which no INT
        (DATE, ...) key equals, so every lookup would fail in the tasks."""
        declared = dict(fields)
        for column in self.key_columns:
            kind: Any = declared.get(column)
            if kind is None:
                continue
            if column in self.key_types:
                self._check_key_type(column, _type_name(kind))
                continue
            name = _type_name(kind)
            if name.split("(", 1)[0] not in _TEXT_TYPES:
                raise ConfigurationError(
                    "key_types",
                    {c: _callable_name(f) for c, f in sorted(self.key_types.items())},
                    f"a converter for key column {column!r} ({{{column!r}: int}} for an INT "
                    "key), or the column declared STRING",
                    f"a FULL cache reads {column!r} from key names as text, which no {name} key "
                    "equals",
                )

    def _check_key_type(self, column: str, name: str) -> None:
        """Refuse a converter that does not read the name a lookup of a ``name`` key writes
        back as that key (``float`` for an INT key reads ``7`` as 7.0, whose name is
        ``7.0``): the FULL cache would miss every row a point lookup finds."""
        convert = self.key_types[column]
        for sample in _key_samples(name):
            self._check_key_sample(column, name, convert, sample)

    def _check_key_sample(
        self, column: str, name: str, convert: Callable[[str], Any], sample: Any
    ) -> None:
        written = key_text(sample)
        try:
            read = convert(written)
            same = read == sample and key_text(read) == written
        except (ValueError, TypeError, ArithmeticError) as error:
            read, same = f"{type(error).__name__}: {error}", False
        if not same:
            raise ConfigurationError(
                "key_types",
                {column: _callable_name(convert)},
                f"a converter that reads the name a lookup of a {name} key writes back as that "
                f"key ({{{column!r}: int}} for an INT key)",
                f"a lookup of the {name} key {sample!r} reads the name {written!r}, which the "
                f"converter reads as {read!r}: a FULL cache would miss every row a point "
                "lookup finds",
            )

    def full_cache_key(self, values: Mapping[str, Any]) -> str:
        """The key name a point lookup of ``values`` reads: a FULL cache indexes the scanned
        rows by it and finds a lookup's rows by it, so it joins exactly what a point lookup
        joins (``1.5`` and ``1.50``, ``7`` and ``7.0``, a time in two offsets: distinct names,
        distinct rows, whatever ``key_types`` gives)."""
        missing = [c for c in self.key_columns if c not in values]
        if missing:
            raise ConfigurationError(
                "key_columns",
                list(values),
                f"every column of the key template {list(self.key_columns)}",
                reason=f"a key name needs {missing} too",
            )
        return self.template.format(values, key_text)

    def parse_key(self, redis_key: str) -> dict[str, Any] | None:
        """The key columns of a scanned key name; ``None`` for a name that the template does
        not match, that ``key_types`` cannot convert (another table's key sharing the prefix),
        or that is not the name a lookup of the converted key reads (``007`` or ``+7`` for the
        int 7, whose name is ``7``): a scanned row joins only the key whose name it has."""
        match = self.template.parser().match(redis_key)
        if match is None:
            return None
        values: dict[str, Any] = match.groupdict()
        if not self.key_types:
            return values
        for column, convert in self.key_types.items():
            try:
                values[column] = convert(values[column])
            except (ValueError, TypeError, ArithmeticError):
                return None
        try:
            if self.template.format(values, key_text) != redis_key:
                return None
        except DataFormatError:
            return None
        return values

    async def _scan(self) -> AsyncIterator[Row]:
        client = self.client()
        pattern, seen = self.template.glob(), set()
        try:
            cursor = 0
            while True:
                try:
                    cursor, keys = await self._scan_step(client, cursor, pattern)
                    keys = [k for k in keys if k not in seen]
                    seen.update(keys)
                    values = await self.fetch(client, keys)
                except _PERMANENT:
                    raise
                except _CAUGHT as error:
                    _reraise_unless_transient(error)
                    raise self.transient(error, "scan") from error
                for row in self._scan_rows(keys, values):
                    yield row
                if cursor == 0:
                    return
        finally:
            await client.aclose()

    async def _scan_step(
        self, client: redis.asyncio.Redis, cursor: int, pattern: str
    ) -> tuple[int, list[str]]:
        """One ``SCAN`` step; key names that are not UTF-8 text (not ours) are left out."""
        try:
            step = await client.scan(cursor, match=pattern, count=self.scan_count)
            return int(step[0]), list(step[1])
        except UnicodeDecodeError:  # redis-py dropped that connection; read the bytes again
            cursor, names = await cast(Any, client).execute_command(
                "SCAN", cursor, "MATCH", pattern, "COUNT", self.scan_count, **{NEVER_DECODE: True}
            )
        keys = []
        for name in names:
            try:
                keys.append(name.decode())
            except UnicodeDecodeError:
                continue
        return cursor, keys

    def _scan_rows(self, keys: Sequence[str], values: Sequence[Any]) -> Iterator[Row]:
        for redis_key, raw in zip(keys, values, strict=True):
            if _wrong_type(raw):  # not one of ours
                continue
            key_values = self.parse_key(redis_key)
            if key_values is None:  # not one of ours, whatever it holds (binary: no error)
                continue
            if isinstance(raw, Exception):  # fails its key's lookups only, as a point lookup
                yield FailedKey(key_values, raw)
                continue
            try:
                rows = self.decode(key_values, raw, redis_key)
            except DataFormatError as error:
                yield FailedKey(key_values, error)
                continue
            yield from rows

    async def fetch(self, client: redis.asyncio.Redis, keys: Sequence[str]) -> list[Any]:
        """The values of ``keys`` (``MGET`` or a pipeline of ``HGETALL``); a key's value that
        is not UTF-8 text is a :class:`DataFormatError` naming it, in its place."""
        if not keys:
            return []
        try:
            return await self._fetch(client, keys, {})
        except UnicodeDecodeError:  # redis-py dropped that connection; read the bytes again
            raw = await self._fetch(client, keys, {NEVER_DECODE: True})
        return [self._decoded(k, v) for k, v in zip(keys, raw, strict=True)]

    async def _fetch(
        self, client: redis.asyncio.Redis, keys: Sequence[str], options: dict[str, Any]
    ) -> list[Any]:
        if self.value_format != "hash":
            return list(await cast(Any, client).execute_command("MGET", *keys, **options))
        pipe = client.pipeline(transaction=False)
        for k in keys:
            cast(Any, pipe).execute_command("HGETALL", k, **options)
        values = list(await pipe.execute(raise_on_error=False))
        for value in values:  # a failover's or a busy server's answer: the whole call is retried
            if isinstance(value, redis.exceptions.ResponseError) and _asks_to_try_again(value):
                raise value
        return values

    async def mark_wrong_types(
        self, client: redis.asyncio.Redis, keys: Sequence[str], values: list[Any]
    ) -> None:
        """In ``values`` (``MGET``'s), a WRONGTYPE error in place of each missing key that holds
        another Redis type, as a point ``GET`` answers it: ``MGET`` answers it as missing. One
        ``EXISTS`` for the batch's missing keys, and ``TYPE`` of each only if one exists."""
        missing = [i for i, value in enumerate(values) if value is None]
        if not missing or not await client.exists(*(keys[i] for i in missing)):
            return
        pipe = client.pipeline(transaction=False)
        for i in missing:
            pipe.type(keys[i])
        for i, held in zip(missing, await pipe.execute(), strict=True):
            held = held.decode() if isinstance(held, bytes) else str(held)
            if held not in ("string", "none"):  # 'none': deleted since, a miss
                values[i] = redis.exceptions.ResponseError(f"WRONGTYPE key holds a {held}")

    @staticmethod
    def _decoded(redis_key: str, raw: Any) -> Any:
        try:
            if isinstance(raw, bytes):
                return _text(redis_key, raw)
            if isinstance(raw, dict):
                return {_text(redis_key, f): _text(redis_key, v) for f, v in raw.items()}
        except DataFormatError as error:
            return error
        return raw

    def results(
        self, keys: Sequence[Key], redis_keys: Sequence[str | None], values: Sequence[Any]
    ) -> list[Collection[Row] | BaseException]:
        out: list[Collection[Row] | BaseException] = []
        fetched = iter(values)
        for key, redis_key in zip(keys, redis_keys, strict=True):
            if redis_key is None:
                out.append([])
                continue
            raw = next(fetched)
            if isinstance(raw, Exception):
                out.append(
                    _wrong_type_error(redis_key, self.value_format) if _wrong_type(raw) else raw
                )
                continue
            try:
                out.append(self.decode(key_dict(self.key_columns, key), raw, redis_key))
            except DataFormatError as error:
                out.append(error)
        return out


class _RedisLookup(AsyncLookupFunction):
    def __init__(self, connector: RedisConnector) -> None:
        self.connector = connector
        self.client: redis.asyncio.Redis | None = None
        self.slots: asyncio.Semaphore | None = None

    async def open(self) -> None:
        if self.client is None:
            self.slots = asyncio.Semaphore(self.connector.max_connections)
            self.client = self.connector.client()

    async def _client(self) -> redis.asyncio.Redis:
        if self.client is None:
            await self.open()
        assert self.client is not None
        return self.client

    async def _wait_for_slot(self, slots: asyncio.Semaphore) -> None:
        """A connection of the pool when all are busy, waiting at most ``pool_timeout``."""
        timeout = self.connector.pool_timeout
        if timeout is None:
            await slots.acquire()
            return
        try:
            await asyncio.wait_for(slots.acquire(), timeout)
        except TimeoutError:
            raise TimeoutError(f"no free connection within {timeout:g} s (pool_timeout)") from None

    async def _on_connection(self, action: str, call: Callable[[], Awaitable[T]]) -> T:
        """``call()`` holding one of the pool's connections; a connection failure is a
        :class:`TransientError` (the failure retry's to handle)."""
        slots = self.slots
        assert slots is not None
        try:
            if slots.locked():
                await self._wait_for_slot(slots)
            else:
                await slots.acquire()
            try:
                return await call()
            finally:
                slots.release()
        except _PERMANENT:
            raise
        except _CAUGHT as error:
            _reraise_unless_transient(error)
            raise self.connector.transient(error, action) from error

    async def async_lookup(self, key: Key) -> Collection[Row]:
        key = tuple(key)
        if has_null(key):
            return []
        client = await self._client()
        c = self.connector
        redis_key = c.redis_key(key)
        command = client.hgetall if c.value_format == "hash" else client.get
        try:
            raw = await self._on_connection("lookup", lambda: cast(Any, command)(redis_key))
        except redis.exceptions.ResponseError as error:
            if _wrong_type(error):  # another Redis type: value_format is likely wrong
                raise _wrong_type_error(redis_key, c.value_format) from None
            raise
        except UnicodeDecodeError as error:
            raise DataFormatError(
                f"Redis key {redis_key!r} does not hold UTF-8 text ({error})"
            ) from None
        return c.decode(key_dict(c.key_columns, key), raw, redis_key)

    async def async_lookup_batch(
        self, keys: Sequence[Key]
    ) -> Sequence[Collection[Row] | BaseException]:
        keys = [tuple(k) for k in keys]
        client = await self._client()
        c = self.connector
        refused: dict[int, DataFormatError] = {}
        try:
            redis_keys = [None if has_null(k) else c.redis_key(k) for k in keys]
        except DataFormatError:  # an ambiguous key: an error for that key only
            redis_keys = []
            for i, k in enumerate(keys):
                try:
                    redis_keys.append(None if has_null(k) else c.redis_key(k))
                except DataFormatError as error:
                    refused[i] = error
                    redis_keys.append(None)
        wanted = [k for k in redis_keys if k is not None]

        async def fetch() -> list[Any]:
            values = await c.fetch(client, wanted)
            if c.value_format != "hash":
                await c.mark_wrong_types(client, wanted, values)
            return values

        values = await self._on_connection("batch lookup", fetch)
        results = c.results(keys, redis_keys, values)
        for i, refusal in refused.items():
            results[i] = refusal
        return results

    async def close(self) -> None:
        if self.client is not None:
            client, self.client = self.client, None
            await client.aclose()
