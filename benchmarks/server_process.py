"""A customer service in its own process, so its CPU is measured apart from the client's.

Two servers answer the same ``GET /customers/{id}`` with the same JSON rows after the same
injected latency:

- ``latency``: the bench's own :class:`benchmarks.servers.LatencyServer` (a raw
  ``asyncio.Protocol`` on uvloop, llhttp parser, responses built once: as cheap as the bench
  can make a server);
- ``aiohttp``: an ``aiohttp.web`` application, the kind of server users run (one handler,
  ``await asyncio.sleep(latency)``, the row's JSON as the body; on uvloop, access log off,
  which is how it is deployed behind gunicorn's ``GunicornUVLoopWebWorker``).

The parent talks to the child over its stdin/stdout, one JSON line per command (``stats``,
``reset``, ``latency <seconds>``), so the control channel costs the server nothing while it
serves. :meth:`ServerProcess.cpu_s` reads the child's CPU time (user + system, all threads)
from ``/proc`` through psutil.

``python -m benchmarks.server_process latency|aiohttp [latency_s]`` runs one by hand; it prints
``PORT <n>`` and then serves until stdin closes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

KINDS = ("latency", "aiohttp")
TITLES = {
    "latency": "bench's raw asyncio server",
    "aiohttp": "aiohttp.web (third-party)",
}


class ServerProcess:
    """A server of kind ``latency`` or ``aiohttp`` in a child process (context manager)."""

    def __init__(self, kind: str, latency: float = 0.0, n_customers: int = 100_000) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown server kind {kind!r}; choose from {KINDS}")
        self.kind = kind
        self.latency = latency
        self.n_customers = n_customers
        self.port = 0
        self._child: subprocess.Popen[str] | None = None
        self._process: Any = None  # psutil.Process of the child

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self._child is not None
        return self._child.pid

    def start(self) -> ServerProcess:
        import psutil

        self._child = subprocess.Popen(
            [sys.executable, __file__, self.kind, repr(self.latency), str(self.n_customers)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
        )
        line = self._read()
        if not line.startswith("PORT "):
            self.stop()
            raise RuntimeError(f"the {self.kind} server did not start: {line!r}")
        self.port = int(line.split()[1])
        self._process = psutil.Process(self._child.pid)
        return self

    def stop(self) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        try:
            if child.stdin is not None:
                child.stdin.close()
            child.wait(15)
        except (OSError, subprocess.TimeoutExpired):
            child.kill()
            child.wait(15)

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- control ---------------------------------------------------------------------------------

    def configure(self, latency: float) -> None:
        self._command(f"latency {latency!r}")
        self.latency = latency

    def reset(self) -> None:
        self._command("reset")

    def stats(self) -> dict[str, int]:
        stats: dict[str, int] = self._command("stats")
        return stats

    def cpu_s(self) -> float:
        """The child's CPU seconds so far (user + system, every thread)."""
        times = self._process.cpu_times()
        return float(times.user + times.system)

    def _command(self, command: str) -> Any:
        assert self._child is not None and self._child.stdin is not None
        self._child.stdin.write(command + "\n")
        self._child.stdin.flush()
        return json.loads(self._read())

    def _read(self) -> str:
        assert self._child is not None and self._child.stdout is not None
        return self._child.stdout.readline().strip()


# -- the child ---------------------------------------------------------------------------------


class _AiohttpServer:
    """The ``aiohttp.web`` customer service on its own uvloop in a thread."""

    def __init__(self, latency: float, n_customers: int) -> None:
        self.latency = latency
        self.n_customers = n_customers
        self.requests = 0
        self.found = 0
        self.port = 0
        self._ready = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._serve, name="aiohttp-server", daemon=True).start()
        self._ready.wait(60)

    def _serve(self) -> None:
        import asyncio

        import uvloop
        from aiohttp import web

        from benchmarks.data import customer_row

        rows = [json.dumps(customer_row(i)).encode() for i in range(self.n_customers)]
        not_found = json.dumps({"error": "not found"}).encode()

        async def customer(request: web.Request) -> web.Response:
            self.requests += 1
            if self.latency > 0:
                await asyncio.sleep(self.latency)
            try:
                row = rows[int(request.match_info["id"])]
            except (ValueError, IndexError):
                return web.Response(status=404, body=not_found, content_type="application/json")
            self.found += 1
            return web.Response(body=row, content_type="application/json")

        async def main() -> None:
            app = web.Application()
            app.router.add_get("/customers/{id}", customer)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
            await site.start()
            sockets = getattr(site._server, "sockets", None)  # an asyncio (or uvloop) Server
            assert sockets
            self.port = sockets[0].getsockname()[1]
            self._ready.set()
            await asyncio.Event().wait()

        uvloop.run(main())

    def stats(self) -> dict[str, int]:
        return {"requests": self.requests, "found": self.found}

    def reset(self) -> None:
        self.requests = self.found = 0


def _child(kind: str, latency: float, n_customers: int, stdin: IO[str], stdout: IO[str]) -> None:
    server: Any
    if kind == "latency":
        from benchmarks.servers import LatencyServer, Profile

        server = LatencyServer(n_customers, Profile(latency=latency)).start()
    else:
        server = _AiohttpServer(latency, n_customers)
        server.start()

    def answer(value: Any) -> None:
        stdout.write(json.dumps(value) + "\n")
        stdout.flush()

    stdout.write(f"PORT {server.port}\n")
    stdout.flush()
    for line in stdin:
        command, _, argument = line.strip().partition(" ")
        if command == "stats":
            answer(server.stats())
        elif command == "reset":
            server.reset()
            answer({})
        elif command == "latency":
            if kind == "latency":
                server.configure(Profile(latency=float(argument)))
            else:
                server.latency = float(argument)
                server.reset()
            answer({})
        else:
            answer({"error": f"unknown command {command!r}"})


if __name__ == "__main__":
    _child(sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.stdin, sys.stdout)
