"""The rate-limit design's trade-off, measured (docs/design.md "Rate limits").

``python -m benchmarks.rate_share`` runs, in one process:

1. **Driver shares, balanced vs skewed input.** Four tasks (asyncio tasks, each with the
   limiter a Spark task gets: ``RateLimitedLookup`` at R/4 over an ``HttpConnector``) look up
   1600 keys on a local counting service. Balanced: 400 keys each; skewed: 100, 100, 100,
   1300. The job's average rate is what the service counted (total / first-to-last request).
2. **What coordination through a store would cost per call**: the median latency of one
   token-bucket acquire as a Lua script on the machine's Redis (one round trip per call, what
   tasks sharing one bucket need), against the in-process limiter's ``take`` (the baseline,
   same run).
"""

from __future__ import annotations

import asyncio
import statistics
import time

from asyncio_lookup.connectors import HttpConnector
from asyncio_lookup.lookup.rate import TaskRate
from asyncio_lookup.lookup.rate_control import TokenBucket
from asyncio_lookup.lookup.rate_limit import RateLimitedLookup
from tests.spark.rate_servers import CountingService, windows

R = 200.0
TASKS = 4

# A token bucket in Redis: KEYS[1] holds tokens and the time they were counted at.
BUCKET_LUA = """
local rate, burst, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens, at = tonumber(state[1]) or burst, tonumber(state[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
local wait = 0
if tokens >= 1 then tokens = tokens - 1 else wait = (1 - tokens) / rate end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'at', now)
return tostring(wait)
"""


async def _job(url: str, sizes: list[int]) -> None:
    async def task(first: int, n: int) -> None:
        fn = RateLimitedLookup(
            HttpConnector(f"{url}/items/{{id}}").async_lookup_function(), TaskRate(R / TASKS)
        )
        await fn.open()
        try:
            await asyncio.gather(*(fn.async_lookup((k,)) for k in range(first, first + n)))
        finally:
            await fn.close()

    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    await asyncio.gather(*(task(s, n) for s, n in zip(starts, sizes, strict=True)))


def shares(sizes: list[int]) -> tuple[float, int]:
    with CountingService() as service:
        asyncio.run(_job(service.url, sizes))
        seen = windows(service.times)
    return seen.average, seen.max_per_second


def redis_acquire_latency(n: int = 2000) -> tuple[float, float]:
    import redis

    client = redis.Redis(host="127.0.0.1", port=6379, db=15)
    script = client.register_script(BUCKET_LUA)
    key = "asyncio_lookup:bench:bucket"
    client.delete(key)
    remote = []
    for _ in range(n):
        started = time.perf_counter()
        script(keys=[key], args=[1e9, 1e9, time.time()])
        remote.append(time.perf_counter() - started)
    client.delete(key)
    bucket = TokenBucket(1e9, 1e9, time.monotonic())
    local = []
    for _ in range(n):
        started = time.perf_counter()
        bucket.take(time.monotonic())
        local.append(time.perf_counter() - started)
    return statistics.median(remote) * 1e6, statistics.median(local) * 1e6


def main() -> None:
    balanced, balanced_max = shares([400] * TASKS)
    skewed, skewed_max = shares([100, 100, 100, 1300])
    print(f"R = {R:g}/s over {TASKS} tasks, 1600 keys")
    print(f"balanced: average {balanced:.1f}/s ({balanced / R:.2f} R), max 1 s {balanced_max}")
    print(f"skewed:   average {skewed:.1f}/s ({skewed / R:.2f} R), max 1 s {skewed_max}")
    remote, local = redis_acquire_latency()
    print(f"acquire: Redis Lua bucket {remote:.0f} us median, in process {local:.2f} us median")


if __name__ == "__main__":
    main()
