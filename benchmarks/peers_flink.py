"""PyFlink's ``AsyncDataStream.ordered_wait`` over the same server and keys: the peer the
library's ``AsyncDataStream`` follows (run by :mod:`benchmarks.peers` in ``.venv-peers``).

The job: the keys (``benchmarks.data.uniform_keys``, the Spark jobs' keys) as a bounded
collection, parallelism 2, ``ordered_wait`` with capacity 100 and an ``AsyncFunction`` that
GETs ``/customers/{id}`` through one aiohttp session per task (PyFlink runs the function's
coroutines on its own asyncio loop, one per task), JSON-decodes it and returns the joined row
as a typed tuple, into a discarding sink on the JVM (``DiscardingSink``: the rows cross back
to Java, as Spark's rows reach its ``noop`` sink).

Protocol (stdin/stdout, as :mod:`benchmarks.peers` drives it): after a warm-up job it prints
``ready``; each ``go <rows>`` runs one job over the first ``rows`` keys and prints
``{"rows": n, "wall_s": t}``. Only this interpreter needs PyFlink; the project's package is not
imported.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CAPACITY = 100
PARALLELISM = 2
N_CUSTOMERS = 100_000


def _job(env: Any, base_url: str, keys: list[int]) -> None:
    from pyflink.common import Time, Types
    from pyflink.datastream import AsyncDataStream
    from pyflink.datastream.connectors.base import Sink
    from pyflink.datastream.functions import AsyncFunction
    from pyflink.java_gateway import get_gateway

    class Lookup(AsyncFunction):  # type: ignore[misc]
        def __init__(self, base_url: str) -> None:
            self.base_url = base_url
            self.session: Any = None

        async def async_invoke(self, value: int) -> list[tuple[Any, ...]]:
            import aiohttp

            if self.session is None:  # on PyFlink's loop (open() runs before it exists)
                self.session = aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(limit=CAPACITY)
                )
            async with self.session.get(f"{self.base_url}/customers/{value}") as response:
                if response.status == 404:
                    return []
                response.raise_for_status()
                c = json.loads(await response.read())
            return [(value, c["id"], c["name"], c["country"], c["segment"], c["credit_limit"])]

        def close(self) -> None:
            self.session = None  # its loop is gone with the task

    row_type = Types.TUPLE([Types.INT(), Types.INT(), Types.STRING(), Types.STRING(),
                            Types.STRING(), Types.DOUBLE()])
    source = env.from_collection(keys, type_info=Types.INT())
    joined = AsyncDataStream.ordered_wait(
        source, Lookup(base_url), Time.seconds(60), CAPACITY, row_type
    )
    jvm = get_gateway().jvm
    joined.sink_to(Sink(jvm.org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink()))
    env.execute("pyflink-async-lookup")


def main(base_url: str, max_rows: int) -> None:
    from pyflink.common import Configuration
    from pyflink.datastream import StreamExecutionEnvironment

    from benchmarks.data import uniform_keys

    keys = [int(k) for k in uniform_keys(max_rows, N_CUSTOMERS, seed=11)]
    config = Configuration()
    config.set_string("python.executable", sys.executable)  # the workers: this venv's Python
    config.set_string("python.client.executable", sys.executable)
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_parallelism(PARALLELISM)
    _job(env, base_url, keys[:400])  # warm-up: the JVM, the Python workers' first start
    print("ready", flush=True)
    for line in sys.stdin:
        command, _, rows = line.strip().partition(" ")
        if command != "go":
            break
        n = min(int(rows), len(keys))
        start = time.perf_counter()
        _job(env, base_url, keys[:n])
        print(json.dumps({"rows": n, "wall_s": time.perf_counter() - start}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
