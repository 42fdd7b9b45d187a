"""Content codings in the asyncio HTTP client: what a gzip answer costs the client (issue 21).

The client advertises ``Accept-Encoding: gzip, deflate``; a server that honours it makes the
client inflate every body. Measured here: the client's CPU per request (this process, user +
system) for identity and gzip bodies of a small JSON row (~150 bytes, what a point lookup
gets) and a large one (~50 KB), against a server in another process that answers every request
with a pre-built response (so no variant pays the server's compression). Variants are
interleaved, medians of ``repeats`` runs.

Run: ``python -m benchmarks.http_compression [--requests 20000] [--repeats 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import multiprocessing
import resource
import statistics
import time
from typing import Any

SMALL = json.dumps(
    {
        "id": 12345,
        "name": "Ada Lovelace",
        "country": "UK",
        "tier": "gold",
        "since": "2015-06-01",
        "score": 0.93,
        "tags": ["a", "b"],
    }
).encode()
LARGE = json.dumps([{"id": i, "name": f"customer-{i}", "note": "x" * 20} for i in range(1000)])[
    :50_000
].encode()


def _responses() -> dict[bytes, bytes]:
    def response(body: bytes, coding: bytes | None) -> bytes:
        extra = b"Content-Encoding: %s\r\n" % coding if coding else b""
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
        return head % len(body) + extra + b"\r\n" + body

    return {
        b"/small/identity": response(SMALL, None),
        b"/small/gzip": response(gzip.compress(SMALL), b"gzip"),
        b"/large/identity": response(LARGE, None),
        b"/large/gzip": response(gzip.compress(LARGE), b"gzip"),
    }


def _serve(port_out: Any) -> None:
    import uvloop

    responses = _responses()

    class Server(asyncio.Protocol):
        def connection_made(self, transport: Any) -> None:
            self.transport, self.buffer = transport, b""

        def data_received(self, data: bytes) -> None:
            self.buffer += data
            while b"\r\n\r\n" in self.buffer:
                head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
                self.transport.write(responses[head.split(b" ", 2)[1]])

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Server, "127.0.0.1", 0)
        port_out.send(server.sockets[0].getsockname()[1])
        await asyncio.Event().wait()

    uvloop.run(main())


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _run(port: int, path: str, requests: int, capacity: int) -> tuple[float, float]:
    from asyncio_lookup.connectors.http11 import Http11Client

    client = Http11Client(capacity, 30.0, {"Accept": "application/json"})
    url = f"http://127.0.0.1:{port}{path}"

    async def worker(n: int) -> None:
        for _ in range(n):
            status, _, body = await client.fetch("GET", url)
            assert status == 200 and body[:1] in (b"{", b"[")

    await asyncio.gather(*(worker(10) for _ in range(capacity)))  # warm the pool
    start_cpu, start = _cpu(), time.perf_counter()
    await asyncio.gather(*(worker(requests // capacity) for _ in range(capacity)))
    cpu, wall = _cpu() - start_cpu, time.perf_counter() - start
    await client.close()
    return cpu / requests * 1e6, requests / wall


def main() -> None:
    import uvloop

    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--capacity", type=int, default=50)
    parser.add_argument(
        "--paths", default="/small/identity,/small/gzip,/large/identity,/large/gzip"
    )
    args = parser.parse_args()
    receive, send = multiprocessing.Pipe(duplex=False)
    server = multiprocessing.Process(target=_serve, args=(send,), daemon=True)
    server.start()
    port = receive.recv()
    paths = args.paths.split(",")
    cpu: dict[str, list[float]] = {p: [] for p in paths}
    rate: dict[str, list[float]] = {p: [] for p in paths}
    try:
        for _ in range(args.repeats):
            for path in paths:
                requests = args.requests if "small" in path else args.requests // 5
                c, r = uvloop.run(_run(port, path, requests, args.capacity))
                cpu[path].append(c)
                rate[path].append(r)
    finally:
        server.terminate()
    print(f"client CPU per request (µs), medians of {args.repeats}, capacity {args.capacity}")
    for path in paths:
        print(
            f"  {path:18} {statistics.median(cpu[path]):7.1f} µs"
            f"  {statistics.median(rate[path]):9,.0f} req/s"
            f"  (CPU min {min(cpu[path]):.1f}, max {max(cpu[path]):.1f})"
        )
    for size in ("small", "large"):
        if f"/{size}/gzip" not in cpu or f"/{size}/identity" not in cpu:
            continue
        ratio = statistics.median(cpu[f"/{size}/gzip"]) / statistics.median(
            cpu[f"/{size}/identity"]
        )
        print(f"  {size}: gzip costs {ratio:.2f}x identity's client CPU per request")


if __name__ == "__main__":
    main()
