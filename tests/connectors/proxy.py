"""A TCP proxy in front of a real server, to "restart" it for one test without touching it.

``restart(downtime)`` drops every proxied connection mid-flight and refuses new ones for
``downtime`` seconds, then accepts again on the same port - what clients see when a server
restarts. ``blackhole(True)`` keeps connections open but stops passing bytes (new ones are
accepted and go nowhere either) until ``blackhole(False)``, when the held bytes flow on - a
network partition shorter than TCP's own timeouts. ``silence()`` makes the connections open now
go quiet for good (neither closed nor answered, as after a lost firewall/NAT state) while new
connections work. The shared Redis/PostgreSQL servers keep
running for everyone else.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._generation = 0  # connections of an older generation than this are silenced
        self._silenced_before = 0

    def __enter__(self) -> TcpProxy:
        self._thread.start()
        self._call(self._listen())
        return self

    def __exit__(self, *exc: object) -> None:
        self._call(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def restart(self, downtime: float = 0.2) -> None:
        """Cut every connection now; refuse connections for ``downtime`` seconds (blocking)."""
        self._call(self._stop())
        threading.Event().wait(downtime)
        self._call(self._listen())

    def blackhole(self, on: bool) -> None:
        """Stop (``True``) or resume (``False``) passing bytes on every connection."""
        flowing = self._flowing
        self._loop.call_soon_threadsafe(flowing.clear if on else flowing.set)

    def silence(self) -> None:
        """Every connection open now stops passing bytes, for good; new ones work."""

        def cut() -> None:
            self._silenced_before = self._generation = self._generation + 1

        self._loop.call_soon_threadsafe(cut)

    def _call(self, coroutine: object) -> None:
        asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(10)  # type: ignore[arg-type]

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        generation = self._generation
        await self._flowing.wait()
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while data := await src.read(65536):
                    await self._flowing.wait()
                    if generation < self._silenced_before:
                        continue  # silenced: the bytes go nowhere, the socket stays open
                    dst.write(data)
                    await dst.drain()
            dst.transport.abort()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
        self._writers.difference_update((writer, up_writer))
