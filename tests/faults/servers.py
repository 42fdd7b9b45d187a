"""Private servers for the fault tests, each on its own free loopback port and restartable on it.

- :class:`RedisServer`: a ``redis-server`` process without persistence except one explicit
  ``SAVE`` after loading, so a restart comes back with the same (static) data;
- :class:`PostgresServer`: a cluster made by ``initdb`` in a temporary directory (trust auth,
  no fsync), run as the ``postgres`` OS user when the tests run as root;
- :class:`HttpLookupService`: an aiohttp dim service in a thread of the test process.

Each has ``start()``, ``stop()`` and ``restart(downtime)``; the shared servers on 6379/5432 are
never touched.
"""

from __future__ import annotations

import asyncio
import glob
import os
import pwd
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import psycopg
import redis
from aiohttp import web


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(ready: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``ready()`` every 20 ms until it is true; ``TimeoutError`` naming ``what`` if not."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not ready within {timeout:g} s")
        time.sleep(0.02)


def find_binary(name: str, patterns: Iterable[str] = ()) -> str | None:
    """``name`` on PATH or the newest match of ``patterns`` (globs), else None."""
    found = shutil.which(name)
    if found:
        return found
    matches = sorted(m for pattern in patterns for m in glob.glob(pattern))
    return matches[-1] if matches else None


class RedisServer:
    """``redis-server --port P --save "" --appendonly no`` in ``workdir``."""

    def __init__(self, binary: str, workdir: Path) -> None:
        self.binary = binary
        self.workdir = workdir
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.startup_seconds = 0.0  # how long the last start took, until it answered

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def start(self) -> None:
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.workdir),
            "--dbfilename", "dump.rdb",
            "--logfile", str(self.workdir / "redis.log"),
        ]  # fmt: skip
        started = time.monotonic()
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(self._answers, 20, f"redis-server on port {self.port}")
        self.startup_seconds = time.monotonic() - started

    def _answers(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            log = (self.workdir / "redis.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"redis-server exited with {self.process.returncode}: {log}")
        try:
            with self.client() as client:
                return bool(client.ping())
        except redis.exceptions.RedisError:
            return False

    def load(self, values: Mapping[str, str]) -> None:
        """Store ``values`` and snapshot them: every later start loads the same data."""
        with self.client() as client:
            client.flushall()
            client.mset(dict(values))
            client.save()

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(20)
            self.process = None

    def restart(self, downtime: float = 0.0) -> None:
        self.stop()
        time.sleep(downtime)
        self.start()

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class PostgresServer:
    """A throw-away PostgreSQL cluster in ``workdir``, database ``postgres``, trust auth."""

    def __init__(self, bindir: str, workdir: Path) -> None:
        self.bindir = Path(bindir)
        self.workdir = workdir
        self.data = workdir / "data"
        self.port = free_port()
        self.startup_seconds = 0.0
        self._user: dict[str, Any] = {}
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            owner = pwd.getpwnam("postgres")
            self._user = {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []}
            os.chown(workdir, owner.pw_uid, owner.pw_gid)

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        done = subprocess.run(
            [str(self.bindir / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            cwd=self.workdir,
            check=False,
            timeout=120,
            **self._user,
        )
        if done.returncode != 0:
            log = self.workdir / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{args[0]} failed: {done.stdout}{done.stderr}{tail}")

    def init(self) -> None:
        self._run(
            "initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres",
            "-E", "UTF8", "--locale=C", "--no-sync",
        )  # fmt: skip

    def start(self) -> None:
        options = " ".join(
            [
                f"-p {self.port}",
                "-c listen_addresses=127.0.0.1",
                f"-c unix_socket_directories={self.workdir}",
                "-c fsync=off",
                "-c synchronous_commit=off",
                "-c full_page_writes=off",
                "-c max_connections=200",
                "-c shared_buffers=32MB",
            ]
        )
        log = str(self.workdir / "server.log")
        started = time.monotonic()
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", log, "-o", options, "-w", "-t", "60", "start"
        )
        self.startup_seconds = time.monotonic() - started

    def stop(self, mode: str = "fast") -> None:
        """``fast``: disconnect sessions, shut down cleanly; ``immediate``: as a crash."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def restart(self, downtime: float = 0.0) -> None:
        self.stop()
        time.sleep(downtime)
        self.start()

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def execute(self, sql: str, rows: Iterable[tuple[Any, ...]] = ()) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            rows = list(rows)
            if rows:
                with conn.cursor() as cur:
                    cur.executemany(sql, rows)
            else:
                conn.execute(sql)  # type: ignore[arg-type]


class HttpLookupService:
    """A dim service: ``POST /dim/batch`` with ``{"keys": [{"id": 1}, ...]}`` answers the rows
    of those ids (a JSON list). Counts requests and keys. Runs in a thread of this process."""

    def __init__(self) -> None:
        self.port = free_port()
        self.rows: dict[int, dict[str, Any]] = {}
        self.requests = 0
        self.keys = 0
        self.startup_seconds = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    @property
    def batch_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/dim/batch"

    @property
    def point_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/dim/{{id}}"

    async def _batch(self, request: web.Request) -> web.Response:
        body = await request.json()
        ids = [int(key["id"]) for key in body["keys"]]
        self.requests += 1
        self.keys += len(ids)
        return web.json_response([self.rows[i] for i in ids if i in self.rows])

    async def _point(self, request: web.Request) -> web.Response:
        self.requests += 1
        self.keys += 1
        row = self.rows.get(int(request.match_info["id"]))
        return web.json_response(row, status=200 if row is not None else 404)

    def start(self) -> None:
        """Serve on this service's port (the same one after a restart)."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(
                target=self._loop.run_forever, name="http-lookup-service", daemon=True
            )
            self._thread.start()
        started = time.monotonic()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(20)
        self.startup_seconds = time.monotonic() - started

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_post("/dim/batch", self._batch)
        app.router.add_get("/dim/{id}", self._point)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port, reuse_address=True).start()
        self._runner = runner

    def stop(self) -> None:
        """Close the listening socket and every connection (the thread stays for a restart)."""
        if self._loop is not None and self._runner is not None:
            runner, self._runner = self._runner, None
            asyncio.run_coroutine_threadsafe(runner.cleanup(), self._loop).result(20)

    def restart(self, downtime: float = 0.0) -> None:
        self.stop()
        time.sleep(downtime)
        self.start()

    def running(self) -> bool:
        return self._runner is not None

    def close(self) -> None:
        self.stop()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            if self._thread is not None:
                self._thread.join(10)
            self._loop.close()
            self._loop = None
