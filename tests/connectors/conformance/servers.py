"""Third-party HTTP servers as subprocesses on free 127.0.0.1 ports, stopped by process group.

:data:`SERVERS` names each server and what it can do (``CAN``): a case runs on the servers
that can serve it, so no case is skipped anywhere and the package docstring's table is this
one's mirror.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

APPS = Path(__file__).parent / "apps"
PY = sys.executable
NODE = shutil.which("node")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

#: what a server can send besides the common cases
INTERIM = "1xx"  # interim answers before the final one
IDLE = "idle"  # closes an idle kept-alive connection after ~1 s (configured)
GHOST = "ghost"  # can write a second answer nobody asked for (a broken server)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _uvicorn(http: str) -> Callable[[int], list[str]]:
    return lambda port: [
        PY,
        "-m",
        "uvicorn",
        "asgi_app:app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--http",
        http,
        "--timeout-keep-alive",
        "1",
        "--no-access-log",
        "--log-level",
        "warning",
        "--lifespan",
        "off",
    ]


def _gunicorn(worker: str) -> Callable[[int], list[str]]:
    workers = ["-w", "3"] if worker == "sync" else ["-w", "1", "--threads", "16"]
    return lambda port: [
        PY,
        "-m",
        "gunicorn",
        "wsgi_app:app",
        "-b",
        f"127.0.0.1:{port}",
        "-k",
        worker,
        *workers,
        "--keep-alive",
        "1",
        "--log-level",
        "warning",
        "--graceful-timeout",
        "1",
    ]


#: name -> (command for a port, capabilities)
SERVERS: dict[str, tuple[Callable[[int], list[str]], frozenset[str]]] = {
    "uvicorn-h11": (_uvicorn("h11"), frozenset({IDLE})),
    "uvicorn-httptools": (_uvicorn("httptools"), frozenset({IDLE})),
    "hypercorn": (
        lambda port: [
            PY,
            "-m",
            "hypercorn",
            "asgi_app:app",
            "--bind",
            f"127.0.0.1:{port}",
            "--keep-alive",
            "1",
            "--log-level",
            "warning",
        ],
        frozenset({IDLE}),
    ),
    "gunicorn-sync": (_gunicorn("sync"), frozenset()),  # a connection per request
    "gunicorn-gthread": (_gunicorn("gthread"), frozenset({IDLE})),
    "waitress": (
        lambda port: [
            PY,
            "-m",
            "waitress",
            f"--listen=127.0.0.1:{port}",
            "--threads=16",
            "--channel-timeout=1",
            "--cleanup-interval=1",
            "wsgi_app:app",
        ],
        frozenset({IDLE}),
    ),
    "aiohttp": (lambda port: [PY, "aiohttp_app.py", str(port)], frozenset({INTERIM, IDLE, GHOST})),
    "stdlib-1.0": (lambda port: [PY, "stdlib_app.py", str(port), "HTTP/1.0"], frozenset()),
    "stdlib-1.1": (
        lambda port: [PY, "stdlib_app.py", str(port), "HTTP/1.1"],
        frozenset({INTERIM, IDLE, GHOST}),
    ),
    "node": (
        lambda port: [NODE or "node", "node_app.js", str(port)],
        frozenset({INTERIM, IDLE, GHOST}),
    ),
}


def servers_that(*can: str) -> list[str]:
    return [name for name, (_, caps) in SERVERS.items() if set(can) <= caps]


class PortTaken(RuntimeError):
    """A server exited because its port was taken before it could bind it."""


class Server:
    """One server process (a process group: gunicorn's workers go with their master)."""

    def __init__(
        self,
        name: str,
        argv: Callable[[int], list[str]],
        port: int | None = None,
        tls: bool = False,
        more_ports: tuple[int, ...] = (),
        moved: Callable[[Server], None] | None = None,
    ):
        self.name = name
        self.argv = argv
        self.port = port or free_port()
        self.tls = tls
        self.more_ports = more_ports  # other ports the process listens on, waited for too
        self.moved = moved  # told when the ports change (one was taken before the server bound it)
        self.process: subprocess.Popen[bytes] | None = None
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - the server's output, read by tests

    @property
    def base(self) -> str:
        if self.tls:
            return f"https://localhost:{self.port}"  # the name in its certificate
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Server:
        env = {**os.environ, "PYTHONPATH": str(APPS), "CONFORMANCE_SERVER": self.name}
        self.process = subprocess.Popen(
            self.argv(self.port),
            cwd=APPS,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self

    def wait_ready(self, timeout: float = 30.0, attempts: int = 3) -> Server:
        """Until the port accepts; fails with the server's output if it exits first. A port
        another process took between ``free_port()`` and the server's bind (a client's
        ephemeral port, another worker's server) is picked again, up to ``attempts`` times."""
        for attempt in range(attempts):
            try:
                return self._wait_ready(timeout)
            except PortTaken:
                if attempt == attempts - 1:
                    raise
                self.port = free_port()
                self.more_ports = tuple(free_port() for _ in self.more_ports)
                if self.moved is not None:
                    self.moved(self)
                self.start()
        raise AssertionError("unreachable")

    def _wait_ready(self, timeout: float) -> Server:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        waiting = [self.port, *self.more_ports]
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                code, output = self.process.returncode, self.output()
                taken = any(m in output.lower() for m in ("address already in use", "eaddrinuse"))
                raise (PortTaken if taken else RuntimeError)(
                    f"{self.name} exited ({code}): {output}"
                )
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", waiting[0]), timeout=0.5),
            ):
                waiting.pop(0)
                if not waiting:
                    return self
                continue
            time.sleep(0.02)
        raise RuntimeError(
            f"{self.name} did not listen on {self.port} in {timeout}s: {self.output()}"
        )

    def output(self, tail: int | None = 2000) -> str:
        """What the server printed (the last ``tail`` bytes; all with ``None``)."""
        self.log.seek(0)
        data = self.log.read()
        return (data if tail is None else data[-tail:]).decode("utf-8", "replace")

    def stop(self, grace: float = 2.0) -> None:
        """SIGTERM to the process group, SIGKILL after ``grace`` seconds."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)
            try:
                process.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # what the group leader left behind

    def restart(self) -> None:
        self.stop(grace=0.5)
        self.start().wait_ready()
