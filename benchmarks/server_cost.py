"""CPU per request of the latency server (:class:`benchmarks.servers.LatencyServer`).

The server runs in this process, as in the harness; a child process keeps ``capacity`` point
lookups in flight on ``capacity`` connections. The figure is the server thread's own CPU time
(``time.thread_time()`` read on its loop) over the requests it answered; medians of
``--repeats`` runs. The cost per request falls as the rate rises (more requests per loop wake-up),
so the client matters:

- ``--client aiohttp`` (default): plain aiohttp on uvloop for ``--seconds`` after a warm-up that
  opens the connections (2-3,000 requests/s here);
- ``--client pyreqwest``: the http-clients scenario's child, ``HttpConnector(client="pyreqwest")``,
  30,000 lookups (6-7,000 requests/s here).

``python -m benchmarks.server_cost [--client aiohttp|pyreqwest] [--seconds 5] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.servers import LatencyServer, Profile

# (in flight, latency): the settings of the http-clients and spark-lookup-join scenarios
SETTINGS = ((100, 0.010), (1000, 0.100))


def measure(server: Any, capacity: int, latency: float, seconds: float) -> dict[str, float]:
    """One run against a started ``server``: its CPU µs per request and the requests per s."""
    server.configure(Profile(latency=latency))
    child = subprocess.Popen(
        [sys.executable, __file__, "--child", server.base_url, str(capacity), str(seconds)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError("the client child failed")
        before, requests_before = _server_cpu(server), server.stats().get("requests", 0)
        child.stdin.write("go\n")
        child.stdin.flush()
        figures = json.loads(child.stdout.readline())
        spent = _server_cpu(server) - before
        answered = server.stats().get("requests", 0) - requests_before
    finally:
        child.wait(60)
    return {"cpu_us_per_request": spent / answered * 1e6, "requests_per_s": figures["rate"]}


def measure_connector(server: Any, capacity: int, latency: float) -> dict[str, float]:
    """One run of the http-clients scenario's pyreqwest child against a started ``server``."""
    from benchmarks import http_clients

    server.configure(Profile(latency=latency))
    before = _server_cpu(server)
    figures = http_clients._child(server.base_url, "pyreqwest", capacity, 30_000)
    spent = _server_cpu(server) - before
    return {"cpu_us_per_request": spent / server.stats()["requests"] * 1e6,
            "requests_per_s": figures["rate"]}


def _server_cpu(server: Any) -> float:
    """The CPU seconds the server's thread has used, read on its own loop."""
    return asyncio.run_coroutine_threadsafe(_thread_time(), server._loop).result(10)


async def _thread_time() -> float:
    return time.thread_time()


def _child(base_url: str, capacity: int, seconds: float) -> None:
    import random

    import aiohttp
    import uvloop

    async def main() -> dict[str, float]:
        connector = aiohttp.TCPConnector(limit=capacity)
        async with aiohttp.ClientSession(connector=connector) as session:
            deadline = 0.0
            done = 0

            async def worker(seed: int, until_deadline: bool) -> None:
                nonlocal done
                rng = random.Random(seed)
                while True:
                    async with session.get(f"{base_url}/customers/{rng.randrange(100_000)}") as r:
                        await r.read()
                    if not until_deadline:
                        return
                    done += 1
                    if time.perf_counter() >= deadline:
                        return

            await asyncio.gather(*(worker(i, False) for i in range(capacity)))
            print("ready", flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
            start = time.perf_counter()
            deadline = start + seconds
            await asyncio.gather(*(worker(capacity + i, True) for i in range(capacity)))
            return {"rate": done / (time.perf_counter() - start)}

    print(json.dumps(uvloop.run(main())), flush=True)


def main(argv: list[str] | None = None, server_class: Any = LatencyServer) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.server_cost")
    parser.add_argument("--client", choices=("aiohttp", "pyreqwest"), default="aiohttp")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    with server_class(n_customers=100_000) as server:
        for capacity, latency in SETTINGS:
            runs = [
                measure(server, capacity, latency, args.seconds) if args.client == "aiohttp"
                else measure_connector(server, capacity, latency)
                for _ in range(args.repeats)
            ]
            cpu = statistics.median(r["cpu_us_per_request"] for r in runs)
            rate = statistics.median(r["requests_per_s"] for r in runs)
            each = [round(r["cpu_us_per_request"], 1) for r in runs]
            print(f"{capacity:>5} in flight, {latency * 1e3:g} ms: {cpu:6.1f} µs CPU per request "
                  f"({rate:,.0f} requests/s; runs {each})", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    else:
        main()
