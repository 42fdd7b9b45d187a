"""The client's request path against its floor: CPU per request, user and kernel apart.

Each run is a child process on uvloop keeping ``capacity`` point lookups in flight against a
server in its own process (:mod:`benchmarks.server_process`), for ``requests`` requests after
a warm-up that opens the connections. Clients:

- ``floor``: what any HTTP/1.1 client must do and nothing more: per connection an
  ``asyncio.Protocol`` that writes a pre-formatted ``GET`` and, when the answer is complete
  (``Content-Length`` found with ``bytes.find``), writes the next. One ``send`` and one
  ``recv`` per request, no parsing of headers, no futures, no JSON, no timeouts;
- ``await``: the floor plus what any coroutine-based client pays: the protocol resolves a
  future per request and ``capacity`` coroutines ``await`` it (a task wake-up per request);
- ``fetch``: the library's ``Http11Client.fetch`` (the protocol, the pool, the timeouts);
- ``lookup``: ``HttpConnector``'s async lookup function with the default ``asyncio`` client
  (``fetch`` plus the URL, JSON decoding and the row), what ``lookup_join`` calls per row.

CPU is ``getrusage`` of the child: ``user`` (Python, the loop, the parsers) and ``sys`` (the
kernel: ``send``/``recv``/``epoll`` and, on loopback, the TCP stack's work for both ends of
what this process sends). Interleaved runs, medians.

``python -m benchmarks.client_path [--server latency|aiohttp] [--latency 0.01] [--requests
30000] [--repeats 5] [--clients floor,await,fetch,lookup]``; ``fetch@DIR`` runs ``fetch`` with the
package imported from ``DIR`` (e.g. ``git archive`` of an older commit), for a before/after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CLIENTS = ("floor", "await", "fetch", "lookup")


def whole_answer(buffer: bytes) -> bool:
    """Whether ``buffer`` holds a whole answer (headers and a Content-Length body): the bare
    protocol of the floor clients, no more parsing than that."""
    end = buffer.find(b"\r\n\r\n")
    at = buffer.find(b"Content-Length: ")
    if end < 0 or at < 0:
        return False
    length = int(buffer[at + 16 : buffer.find(b"\r\n", at)])
    return len(buffer) >= end + 4 + length


def measure(base_url: str, client: str, capacity: int, requests: int) -> dict[str, float]:
    """One child run; ``client@DIR`` runs ``client`` with the package imported from ``DIR``
    (another checkout's code: a before/after comparison on the same server)."""
    client, _, code = client.partition("@")
    env = {**os.environ, "CLIENT_PATH_CODE": code} if code else None
    out = subprocess.run(
        [sys.executable, __file__, "--child", base_url, client, str(capacity), str(requests)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=env,
    )
    lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"client_path child failed: {out.stderr[-2000:]}")
    figures: dict[str, float] = json.loads(lines[-1])
    return figures


def _child(base_url: str, client: str, capacity: int, requests: int) -> dict[str, Any]:
    import asyncio
    import gc

    from benchmarks.ceiling import GC_YOUNG_THRESHOLD

    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])  # as in the Spark worker
    import random
    import resource
    import time

    from asyncio_lookup.runtime.loop import new_event_loop

    def usage() -> tuple[float, float]:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime, r.ru_stime

    rng = random.Random(5)
    keys = [rng.randrange(100_000) for _ in range(requests + capacity * 4)]
    host, port = base_url.removeprefix("http://").split(":")

    async def floor(n: int) -> None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        state = {"left": n, "next": 0}
        head = b"GET /customers/%d HTTP/1.1\r\nHost: " + f"{host}:{port}".encode() + b"\r\n\r\n"

        class Floor(asyncio.Protocol):
            def connection_made(self, transport: Any) -> None:
                self.transport, self.buffer = transport, b""
                self.ask()

            def ask(self) -> None:
                if state["next"] >= n:
                    return
                key = keys[state["next"]]
                state["next"] += 1
                self.transport.write(head % key)

            def data_received(self, data: bytes) -> None:
                buffer = self.buffer + data if self.buffer else data
                if not whole_answer(buffer):
                    self.buffer = buffer
                    return
                self.buffer = b""
                state["left"] -= 1
                if state["left"] == 0:
                    done.set_result(None)
                self.ask()

        transports = []
        for _ in range(min(capacity, n)):
            transport, _ = await loop.create_connection(Floor, host, int(port))
            transports.append(transport)
        await done
        for transport in transports:
            transport.close()

    async def awaited(n: int) -> None:
        loop = asyncio.get_running_loop()
        head = b"GET /customers/%d HTTP/1.1\r\nHost: " + f"{host}:{port}".encode() + b"\r\n\r\n"

        class Awaited(asyncio.Protocol):
            waiter: asyncio.Future[None]  # set by ask(), before any answer can arrive

            def connection_made(self, transport: Any) -> None:
                self.transport, self.buffer = transport, b""

            def ask(self, key: int) -> asyncio.Future[None]:
                self.waiter = waiter = loop.create_future()
                self.transport.write(head % key)
                return waiter

            def data_received(self, data: bytes) -> None:
                buffer = self.buffer + data if self.buffer else data
                if not whole_answer(buffer):
                    self.buffer = buffer
                    return
                self.buffer = b""
                self.waiter.set_result(None)

        pending = iter(keys)

        async def worker(count: int) -> None:
            _, protocol = await loop.create_connection(Awaited, host, int(port))
            for _ in range(count):
                await protocol.ask(next(pending))
            protocol.transport.close()

        await asyncio.gather(*(worker(n // capacity) for _ in range(capacity)))

    async def main() -> dict[str, Any]:
        if client in ("floor", "await"):
            run = floor if client == "floor" else awaited
            await run(capacity * 2)
            u0, s0, w0 = *usage(), time.perf_counter()
            await run(requests)
            u1, s1, w1 = *usage(), time.perf_counter()
        else:
            from asyncio_lookup.connectors import HttpConnector

            connector = HttpConnector(
                f"{base_url}/customers/{{id}}", ["id"], max_connections=capacity, timeout=60
            )
            fn = connector.async_lookup_function()
            await fn.open()
            raw = fn.client.client if client == "fetch" else None  # type: ignore[attr-defined]
            pending = iter(keys)

            async def worker(count: int) -> None:
                if raw is not None:
                    fetch = raw.fetch
                    for _ in range(count):
                        await fetch("GET", f"{base_url}/customers/{next(pending)}")
                else:
                    lookup = fn.async_lookup
                    for _ in range(count):
                        await lookup((next(pending),))

            await asyncio.gather(*(worker(2) for _ in range(capacity)))
            u0, s0, w0 = *usage(), time.perf_counter()
            await asyncio.gather(*(worker(requests // capacity) for _ in range(capacity)))
            u1, s1, w1 = *usage(), time.perf_counter()
            await fn.close()
        return {
            "user_us": (u1 - u0) / requests * 1e6,
            "sys_us": (s1 - s0) / requests * 1e6,
            "cpu_us": (u1 - u0 + s1 - s0) / requests * 1e6,
            "rate": requests / (w1 - w0),
        }

    loop = new_event_loop()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def main(argv: list[str] | None = None) -> None:
    from benchmarks.server_process import ServerProcess

    parser = argparse.ArgumentParser(prog="python -m benchmarks.client_path")
    parser.add_argument("--server", choices=("latency", "aiohttp"), default="latency")
    parser.add_argument("--latency", type=float, default=0.010)
    parser.add_argument("--capacity", type=int, default=100)
    parser.add_argument("--requests", type=int, default=30_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--clients", default=",".join(CLIENTS))
    args = parser.parse_args(argv)
    clients = args.clients.split(",")
    runs: dict[str, list[dict[str, float]]] = {c: [] for c in clients}
    with ServerProcess(args.server, args.latency) as server:
        for _ in range(args.repeats):
            for client in clients:
                runs[client].append(measure(server.base_url, client, args.capacity, args.requests))
    print(
        f"{args.server} server, {args.latency * 1e3:g} ms, {args.capacity} in flight, "
        f"{args.requests:,} requests, medians of {args.repeats}:"
    )
    for client in clients:
        med = {k: statistics.median(r[k] for r in runs[client]) for k in runs[client][0]}
        each = ", ".join(f"{r['cpu_us']:.1f}" for r in runs[client])
        print(
            f"  {client:<7} {med['cpu_us']:6.1f} µs/request (user {med['user_us']:5.1f}, "
            f"sys {med['sys_us']:5.1f}), {med['rate']:,.0f} requests/s  [runs {each}]",
            flush=True,
        )


if __name__ == "__main__":
    if os.environ.get("CLIENT_PATH_CODE"):
        sys.path.insert(0, os.environ["CLIENT_PATH_CODE"])
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(_child(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))))
        raise SystemExit(0)
    main()
