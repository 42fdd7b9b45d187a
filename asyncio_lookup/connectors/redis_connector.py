"""Redis as a dim table, read with ``redis.asyncio`` (the sync mode runs the same code).

One key per dim key, named by a template (``"customer:{id}"``). The value is

- ``json``: a string holding one JSON object (the row); batched with ``MGET``;
- ``json_list``: a string holding a JSON list of objects (several rows per key); ``MGET``;
- ``hash``: a hash (``HGETALL``; field values are strings); batched with a pipeline.

Each returned row also carries the key columns (unless the value already has them). A scan
(``SCAN MATCH`` in batches) parses the key columns back from the key name: they come back as
strings unless ``key_types`` names a converter (``{"id": int}``), and a composite template is
only unambiguous when its values do not contain the literal between two placeholders; store
the key columns inside the value when that matters (values win over the parsed key).
hiredis is used by redis-py automatically when installed.
"""

from __future__ import annotations

import asyncio
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
from typing import Any, TypeVar, cast

import redis.asyncio
import redis.exceptions
from redis.backoff import NoBackoff
from redis.retry import Retry

from asyncio_lookup.connectors._args import MAX_POOL, count, optional_seconds, text
from asyncio_lookup.connectors._secrets import mask_url, redact, url_secrets
from asyncio_lookup.connectors.keys import KeyTemplate, has_null, key_dict
from asyncio_lookup.connectors.source import AsyncFirstSource
from asyncio_lookup.errors import ConfigurationError, DataFormatError, TransientError
from asyncio_lookup.lookup.functions import AsyncLookupFunction, Key, Row

log = logging.getLogger(__name__)
T = TypeVar("T")

VALUE_FORMATS = ("json", "json_list", "hash")
_TRANSIENT = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    TimeoutError,
    OSError,
)
# subclasses of ConnectionError that a retry cannot fix
_PERMANENT = (redis.exceptions.AuthenticationError, redis.exceptions.AuthorizationError)
# uvloop raises RuntimeError ("unable to perform operation on <TCPTransport closed=True>") when a
# pooled connection was reset by the peer; redis-py drops that connection, a retry gets another.
_CAUGHT = (*_TRANSIENT, RuntimeError)


def _reraise_unless_transient(error: BaseException) -> None:
    if isinstance(error, RuntimeError) and "closed" not in str(error):
        raise error


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
        if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
            raise ConfigurationError(
                "url", mask_url(str(url)), "a redis://, rediss:// (TLS) or unix:// URL"
            )
        self.url = url
        self.template = KeyTemplate(key_template, "key_template")
        self.key_columns = self.template.key_columns(key_columns)
        if value_format not in VALUE_FORMATS:
            raise ConfigurationError("value_format", value_format, " | ".join(VALUE_FORMATS))
        self.value_format = value_format
        self.key_types = dict(key_types or {})
        unknown = sorted(set(self.key_types) - set(self.key_columns))
        if unknown:
            raise ConfigurationError(
                "key_types", unknown, f"converters for key columns {list(self.key_columns)}"
            )
        self.max_connections = count("max_connections", max_connections, maximum=MAX_POOL)
        self.socket_timeout = optional_seconds("socket_timeout", socket_timeout)
        self.client_name = text("client_name", client_name)
        self.scan_count = count("scan_count", scan_count)
        self.pool_timeout = optional_seconds("pool_timeout", pool_timeout)

    def __repr__(self) -> str:
        return (
            f"RedisConnector(url={mask_url(self.url)!r}, key_template={self.template.template!r}, "
            f"key_columns={list(self.key_columns)}, value_format={self.value_format!r})"
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
        return self.template.format(key_dict(self.key_columns, key), str)

    def transient(self, error: BaseException, action: str) -> TransientError:
        message = redact(
            f"Redis {action} failed on {mask_url(self.url)}: {type(error).__name__}: {error}",
            url_secrets(self.url),
        )
        log.debug("%s", message)  # per attempt; the error that ends the retries says it once
        return TransientError(message)

    def decode(self, key_values: Mapping[str, Any], raw: Any, redis_key: str) -> list[Row]:
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
            for column, v in key_values.items():
                row.setdefault(column, v)
        return list(rows)

    def parse_key(self, redis_key: str) -> dict[str, Any] | None:
        match = self.template.parser().match(redis_key)
        if match is None:
            return None
        values: dict[str, Any] = match.groupdict()
        for column, convert in self.key_types.items():
            values[column] = convert(values[column])
        return values

    async def _scan(self) -> AsyncIterator[Row]:
        client = self.client()
        pattern, seen = self.template.glob(), set()
        try:
            cursor = 0
            while True:
                try:
                    cursor, keys = await client.scan(cursor, match=pattern, count=self.scan_count)
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

    def _scan_rows(self, keys: Sequence[str], values: Sequence[Any]) -> Iterator[Row]:
        for redis_key, raw in zip(keys, values, strict=True):
            if isinstance(raw, redis.exceptions.ResponseError):  # WRONGTYPE: not one of ours
                continue
            key_values = self.parse_key(redis_key)
            if key_values is None:
                continue
            yield from self.decode(key_values, raw, redis_key)

    async def fetch(self, client: redis.asyncio.Redis, keys: Sequence[str]) -> list[Any]:
        if not keys:
            return []
        if self.value_format != "hash":
            return list(await client.mget(keys))
        pipe = client.pipeline(transaction=False)
        for k in keys:
            pipe.hgetall(k)
        return list(await pipe.execute(raise_on_error=False))

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
                out.append(raw)
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
        raw = await self._on_connection("lookup", lambda: cast(Any, command)(redis_key))
        return c.decode(key_dict(c.key_columns, key), raw, redis_key)

    async def async_lookup_batch(
        self, keys: Sequence[Key]
    ) -> Sequence[Collection[Row] | BaseException]:
        keys = [tuple(k) for k in keys]
        client = await self._client()
        c = self.connector
        redis_keys = [None if has_null(k) else c.redis_key(k) for k in keys]
        wanted = [k for k in redis_keys if k is not None]
        values = await self._on_connection("batch lookup", lambda: c.fetch(client, wanted))
        return c.results(keys, redis_keys, values)

    async def close(self) -> None:
        if self.client is not None:
            client, self.client = self.client, None
            await client.aclose()
