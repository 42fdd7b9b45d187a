"""HTTP clients inside ``HttpConnector``: CPU per request, latency, connections (issue 14).

Candidates: the library's three clients, ``asyncio`` (its own HTTP/1.1 on asyncio protocols, the
default), ``aiohttp`` (the optional extra and the conformance reference) and ``pyreqwest`` (Rust
reqwest, the optional extra). Each run is a child process that opens ``HttpConnector``'s async
lookup function with that client on uvloop and keeps ``capacity`` point lookups in flight
against the latency server (in this process, so its CPU is not the client's) until
``requests`` are answered. The
child reports its own CPU time (user + system of every thread: pyreqwest's tokio thread
included) per request, the lookups' p50/p99 latency and its throughput; the server counts the
connections it saw. Clients are interleaved, medians of ``ctx.repeats`` runs.

Run on its own: ``python -m benchmarks http-clients`` (``--quick`` for a smoke run); the table
of features (HTTP/2, TLS, proxies, wheels) below the measurements is the clients' documented
behaviour as configured by the connector, not measured here.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import Context, ScenarioResult, Target
from benchmarks.servers import Profile

CLIENTS = ("asyncio", "pyreqwest", "aiohttp")
# (capacity, server latency): 100 in flight at 10 ms, 1,000 in flight at 100 ms
SETTINGS = ((100, 0.010), (1000, 0.100))

FEATURES = [
    ("engine",
     "asyncio Protocol, llhttp (httptools, C) parser, one future per request; orjson",
     "Rust reqwest + hyper on a tokio thread; JSON decoded in Rust",
     "Python + C (llhttp parser) streams and a task per request"),
    ("connection reuse", "keep-alive pool, `max_connections` per process, kept-alive race "
     "retried once", "keep-alive pool, `max_connections` in flight, as many idle kept",
     "keep-alive pool, `max_connections` per process"),
    ("HTTP/2", "no (HTTP/1.1)", "yes, negotiated by ALPN over TLS (HTTP/1.1 on plain http://)",
     "no (HTTP/1.1)"),
    ("timeout per request", "one loop timer for all requests (`DeadlineQueue`)",
     "total per-request timeout in Rust", "one loop timer for all requests (`Deadlines`)"),
    ("TLS", "Python `ssl` (OpenSSL), system CAs, `SSL_CERT_FILE`", "rustls",
     "Python `ssl` (OpenSSL), system CAs"),
    ("proxies from the environment", "`HTTP(S)_PROXY`, `NO_PROXY`; CONNECT for https",
     "`HTTP(S)_PROXY`, `ALL_PROXY`, `NO_PROXY` (reqwest's default)",
     "`HTTP(S)_PROXY`, `NO_PROXY` (trust_env)"),
    ("wheels", "httptools and orjson: CPython Linux x86-64/aarch64 (glibc, musl), macOS, "
     "Windows", "CPython 3.11+ Linux x86-64/aarch64 (glibc), macOS x86-64/arm64, Windows; "
     "no musl", "CPython Linux x86-64/aarch64 (glibc, musl), macOS, Windows"),
    ("URL sent as given", "yes", "WHATWG parsing removes `%2E`/`%2E%2E` path segments: those "
     "keys go through the asyncio client", "yes (`yarl.URL(encoded=True)`)"),
]


def _sizes(ctx: Context, capacity: int) -> int:
    if ctx.quick:
        return 2_000
    return 20_000 if capacity <= 100 else 30_000


def run(ctx: Context) -> ScenarioResult:
    result = ScenarioResult("http-clients", "HTTP clients inside HttpConnector")
    server = ctx.server()
    ctx.begin("http clients", len(SETTINGS) * len(CLIENTS) * ctx.repeats)
    medians: dict[tuple[int, str], dict[str, float]] = {}
    for capacity, latency in SETTINGS:
        server.configure(Profile(latency=latency))
        requests = _sizes(ctx, capacity)
        runs: dict[str, list[dict[str, float]]] = {c: [] for c in CLIENTS}
        for _ in range(ctx.repeats):
            for client in CLIENTS:
                server.reset()
                figures = _child(server.base_url, client, capacity, requests)
                figures["connections"] = server.stats().get("connections", 0)
                runs[client].append(figures)
                ctx.advance(f"{client} capacity {capacity}")
        for client in CLIENTS:
            med = {k: statistics.median(r[k] for r in runs[client]) for k in runs[client][0]}
            medians[(capacity, client)] = med
            little = capacity / latency
            result.add_row(
                capacity=capacity, latency_ms=latency * 1000, client=client, requests=requests,
                cpu_us_per_request=med["cpu_s"] / requests * 1e6,
                p50_ms=med["p50_ms"], p99_ms=med["p99_ms"], requests_per_s=med["rate"],
                little_efficiency=med["rate"] / little, connections=med["connections"],
            )
            ctx.log(f"  {client:<10} capacity {capacity:>5}: "
                    f"{med['cpu_s'] / requests * 1e6:6.1f} µs CPU/request, "
                    f"p99 {med['p99_ms']:.1f} ms, {med['rate']:,.0f} requests/s")
    for capacity, _ in SETTINGS:
        mine = medians[(capacity, "asyncio")]
        for other in ("pyreqwest", "aiohttp"):
            them = medians[(capacity, other)]
            result.targets.append(Target(
                f"asyncio / {other} CPU per request at capacity {capacity}",
                mine["cpu_s"] / them["cpu_s"], maximum=1.0,
                detail=f"{mine['cpu_s'] / _sizes(ctx, capacity) * 1e6:.1f} vs "
                       f"{them['cpu_s'] / _sizes(ctx, capacity) * 1e6:.1f} µs",
            ))
    result.notes.append(
        "Each run is a child process (uvloop) driving HttpConnector's async lookup function "
        "with `capacity` lookups in flight; cpu_us_per_request is that process's CPU (all its "
        "threads) per request; the latency server runs in the harness process, so its CPU is "
        "not the client's (a raw asyncio server: about 40 µs per request at the pyreqwest "
        "client's rates, see benchmarks/servers.py)."
    )
    result.notes.append(
        "Features (documented behaviour as the connector configures each client):\n\n"
        "| | asyncio | pyreqwest | aiohttp |\n|---|---|---|---|\n"
        + "\n".join(f"| {name} | {a} | {p} | {h} |" for name, a, p, h in FEATURES)
    )
    return result


def _child(base_url: str, client: str, capacity: int, requests: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", base_url, client, str(capacity), str(requests)],
        capture_output=True, text=True, timeout=600, check=False,
    )
    lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"http-clients child failed: {out.stderr[-2000:]}")
    figures: dict[str, float] = json.loads(lines[-1])
    return figures


def _run_child(base_url: str, client: str, capacity: int, requests: int) -> dict[str, Any]:
    """Open the connector's lookup function, warm it up, then time ``requests`` lookups."""
    import asyncio
    import resource
    import time

    from asyncio_lookup.connectors import HttpConnector
    from asyncio_lookup.runtime.loop import new_event_loop

    def cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    async def main() -> dict[str, Any]:
        connector = HttpConnector(
            f"{base_url}/customers/{{id}}", ["id"], max_connections=capacity,
            client=client,
            timeout=60,  # the shared machine can stall the server: measure, do not fail
        )
        fn = connector.async_lookup_function()
        await fn.open()
        latencies: list[float] = []

        async def worker(keys: range) -> None:
            lookup, clock = fn.async_lookup, time.perf_counter
            for key in keys:
                start = clock()
                rows = await lookup((key % 100_000,))
                latencies.append(clock() - start)
                assert rows

        async def wave(n: int) -> None:
            per = n // capacity
            await asyncio.gather(*(worker(range(i * per, (i + 1) * per)) for i in range(capacity)))

        try:
            await wave(capacity * 2)
            latencies.clear()
            cpu0, wall0 = cpu(), time.perf_counter()
            await wave(requests)
            spent, wall = cpu() - cpu0, time.perf_counter() - wall0
        finally:
            await fn.close()
        latencies.sort()
        done = len(latencies)
        return {
            "cpu_s": spent * requests / done,
            "rate": done / wall,
            "p50_ms": latencies[done // 2] * 1e3,
            "p99_ms": latencies[int(done * 0.99)] * 1e3,
        }

    loop = new_event_loop()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        base, name, cap, n = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
        print(json.dumps(_run_child(base, name, cap, n)), flush=True)
        raise SystemExit(0)
    from benchmarks.cli import main as cli_main

    raise SystemExit(cli_main(["http-clients", *sys.argv[1:]]))
