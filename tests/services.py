"""The base of the tests' HTTP services: a small aiohttp app on 127.0.0.1 (a free port), served by
its own event loop in a daemon thread, for clients that run elsewhere (Spark's Python workers,
another loop). A service subclasses :class:`BackgroundService` and adds its routes."""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any, Self

from aiohttp import web


class BackgroundService:
    """Start with :meth:`start` (or ``with``), stop with :meth:`stop`; ``url`` is its base URL.

    ``sock``: a socket already bound to the port to serve on (the service listens on it and
    closes it when it stops: it starts once); without it, any free port.

    It pickles without its loop, thread, lock and socket, so a function sent to Spark's workers
    may hold it (for its URL); the copy there serves nothing."""

    name = "test-service"

    def __init__(self, sock: socket.socket | None = None) -> None:
        self._sock = sock
        self.port = 0 if sock is None else int(sock.getsockname()[1])
        self.lock = threading.Lock()  # for state the routes and the test share
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def routes(self, app: web.Application) -> None:
        """Add the service's routes to ``app``."""
        raise NotImplementedError

    def start(self) -> Self:
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            loop = self._loop = asyncio.new_event_loop()
            app = web.Application()
            self.routes(app)
            runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
            try:
                loop.run_until_complete(runner.setup())
                site: web.BaseSite = (
                    web.TCPSite(runner, "127.0.0.1", self.port)  # 0: any free port
                    if self._sock is None
                    else web.SockSite(runner, self._sock)
                )
                loop.run_until_complete(site.start())
                self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            except BaseException as error:
                failure.append(error)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=serve, name=self.name, daemon=True)
        self._thread.start()
        if not ready.wait(10) or failure:
            raise RuntimeError(f"{self.name} did not start") from (failure[0] if failure else None)
        return self

    def stop(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in ("lock", "_loop", "_thread", "_sock"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.lock = threading.Lock()
        self._loop = self._thread = None
        self._sock = None
