"""The shared store on Redis (``redis://``, ``rediss://``, ``unix://``), with ``redis.asyncio``.

A read is one ``EVALSHA`` of :data:`READ_SCRIPT` over the batch: for each key its value, else
``SET lease NX PX`` (1: the caller's now, or no lease to be had: the store refuses writes;
0: another process's). A write is one pipeline of
``SET key value PX ttl`` and one :data:`RELEASE_SCRIPT`, which drops only the leases that still
hold the caller's token (a lease that expired and was taken by another process stays its
holder's). No retries in redis-py: a failed call
is the tier's to count; it then goes to the service (a shared cache is an optimisation).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import redis
import redis.asyncio
from redis.backoff import NoBackoff
from redis.retry import Retry

from asyncio_lookup.lookup.l2.settings import mask_password
from asyncio_lookup.lookup.l2.store import ReadResult

#: KEYS: value key, lease key, value key, lease key, ...; ARGV: lease ms (0: none), token.
READ_SCRIPT = """
local out = {}
local lease = tonumber(ARGV[1])
for i = 1, #KEYS, 2 do
  local value = redis.call('GET', KEYS[i])
  if value then
    out[#out + 1] = value
  elseif lease == 0 then
    out[#out + 1] = 1
  else
    -- pcall: a store that refuses writes (maxmemory reached under 'noeviction') still
    -- answers this batch's hits; its error (a table, true in Lua) loads the key, no lease
    local taken = redis.pcall('SET', KEYS[i + 1], ARGV[2], 'NX', 'PX', lease)
    out[#out + 1] = taken and 1 or 0
  end
end
return out
"""

#: KEYS: lease keys; ARGV: token. Compare-and-delete, so a lease is only ever dropped by its holder.
RELEASE_SCRIPT = """
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('DEL', KEYS[i])
  end
end
return 0
"""

_LEASE_SUFFIX = b"#lease"
#: A connection may take this long to open (TLS, a loaded host); each command then has the
#: tier's timeout.
CONNECT_TIMEOUT = 1.0
SOCKET_BACKSTOP = 5.0


def lease_key(key: bytes) -> bytes:
    return key + _LEASE_SUFFIX


def _options(timeout: float) -> dict[str, Any]:
    return {
        # The tier bounds each call by the timeout (lookup/l2/deadline.py: an answer that
        # came while the worker's loop stood still is not a timeout); redis-py's own bound,
        # which has no such grace, is only a backstop.
        "socket_timeout": max(timeout, SOCKET_BACKSTOP),
        "socket_connect_timeout": max(timeout, CONNECT_TIMEOUT),
        "retry": Retry(NoBackoff(), 0),
        "client_name": "asyncio-lookup-shared-cache",
    }


class RedisStore:
    """One table's connection pool to the shared Redis, on the loop that first uses it."""

    def __init__(self, url: str, timeout: float) -> None:
        self.url = url
        self.timeout = timeout
        self._client: redis.asyncio.Redis | None = None
        self._script: Any = None

    def __repr__(self) -> str:
        return f"RedisStore({mask_password(self.url)!r})"

    def _connect(self) -> tuple[redis.asyncio.Redis, Any]:
        if self._client is None:
            pool = redis.asyncio.ConnectionPool.from_url(self.url, **_options(self.timeout))
            self._client = redis.asyncio.Redis.from_pool(pool)
            self._script = self._client.register_script(READ_SCRIPT)
        return self._client, self._script

    async def connect(self) -> None:
        client, _ = self._connect()
        await client.script_load(READ_SCRIPT)  # opens a connection; EVALSHA finds the script

    async def read(self, keys: Sequence[bytes], lease_ms: int, token: bytes) -> list[ReadResult]:
        _, script = self._connect()
        flat: list[bytes] = []
        for key in keys:
            flat.append(key)
            flat.append(lease_key(key))
        answers = await script(keys=flat, args=[lease_ms, token])
        return [a if isinstance(a, bytes) else a == 1 for a in answers]

    async def write(
        self,
        entries: Sequence[tuple[bytes, bytes]],
        ttl_ms: int,
        release: Sequence[bytes],
        token: bytes,
    ) -> int:
        client, _ = self._connect()
        pipe = client.pipeline(transaction=False)
        sent = 0
        for key, value in entries:
            pipe.set(key, value, px=ttl_ms)
            sent += len(key) + len(value)
        if release:
            # EVAL, not EVALSHA: a pipeline cannot reload a flushed script, and the text is short
            pipe.eval(RELEASE_SCRIPT, len(release), *(lease_key(key) for key in release), token)
        await pipe.execute()
        return sent

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()


class RedisAdmin:
    """The driver's handle: clears a namespace with ``SCAN`` + ``UNLINK`` (no blocking KEYS)."""

    def __init__(self, url: str, timeout: float) -> None:
        self.url = url
        self._client = redis.Redis.from_url(url, **_options(max(timeout, 5.0)))

    def clear(self, pattern: bytes) -> int:
        deleted = 0
        batch: list[bytes] = []
        for key in self._client.scan_iter(match=pattern, count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                deleted += cast(int, self._client.unlink(*batch))
                batch.clear()
        if batch:
            deleted += cast(int, self._client.unlink(*batch))
        return deleted

    def close(self) -> None:
        self._client.close()
