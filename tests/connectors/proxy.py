"""A loopback TCP proxy in front of a real server that injects network faults on command.

What clients see, per fault (every method is thread-safe; the proxy runs its own event loop):

- ``restart(downtime)``: every connection closed, new ones refused for ``downtime`` seconds, then
  accepted again on the same port -- a server restart (blocks for ``downtime``);
- ``refuse()`` / ``accept()``: stop listening (a connect is refused, ``ECONNREFUSED``) / listen
  again on the same port; ``refuse(cut=True)`` also cuts the open connections;
- ``drop()``: every open connection reset (TCP RST) at once, new ones still accepted;
- ``drop_storm(duration, every)``: ``drop()`` every ``every`` seconds for ``duration`` (blocks);
- ``blackhole(True)`` / ``blackhole(False)``: connections are accepted but nothing is
  forwarded either way until ``blackhole(False)`` -- a network partition; the bytes held
  meanwhile are delivered after it (as TCP retransmission would), unless a side gave up first;
- ``silence()``: the connections open now go quiet for good (neither closed nor answered, as
  after a lost firewall/NAT entry); new connections work.

Counters tell a test what its clients did: ``connections`` (accepted), ``requests`` (chunks
read from clients and forwarded: about one per command for request/response protocols),
``upstream_failures`` (server unreachable: the client is cut), ``dropped`` (connections cut by
a fault), ``held`` (chunks and connections a blackhole delayed); a test starts a fault when
they reach a value. The shared servers behind it keep running for everyone else.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
from collections.abc import Coroutine
from typing import Any


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.connections = 0
        self.requests = 0
        self.upstream_failures = 0
        self.dropped = 0
        self.held = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.AbstractServer | None = None
        # client side -> server side (None until connected) of every proxied connection
        self._links: dict[asyncio.StreamWriter, asyncio.StreamWriter | None] = {}
        self._handlers: set[asyncio.Task[None]] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._generation = 0  # connections of an older generation than this are silenced
        self._silenced_before = 0

    def __enter__(self) -> TcpProxy:
        self._thread.start()
        self._call(self._listen())
        return self

    def __exit__(self, *exc: object) -> None:
        self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    # -- faults --------------------------------------------------------------------------------

    def restart(self, downtime: float = 0.2) -> None:
        """Cut every connection now; refuse connections for ``downtime`` seconds (blocking)."""
        self._call(self._stop())
        threading.Event().wait(downtime)
        self._call(self._listen())

    def refuse(self, cut: bool = False) -> None:
        """Stop listening: connects are refused until :meth:`accept`; ``cut`` also resets the
        open connections."""
        self._call(self._stop(cut=cut))

    def accept(self) -> None:
        """Listen again, on the same port."""
        self._call(self._listen())

    def drop(self) -> int:
        """Reset every open connection now, with a TCP RST (still listening); returns how
        many were cut."""
        return self._call(self._cut(reset=True))

    def drop_storm(self, duration: float, every: float = 0.05) -> int:
        """:meth:`drop` every ``every`` seconds for ``duration`` seconds (blocking); returns
        the number of connections cut."""
        cut, end = 0, time.monotonic() + duration
        while time.monotonic() < end:
            cut += self.drop()
            threading.Event().wait(every)
        return cut

    def blackhole(self, on: bool = True) -> None:
        """Stop (``True``) or resume (``False``) passing bytes on every connection, old and
        new; resuming delivers what was held."""
        flowing = self._flowing
        self._loop.call_soon_threadsafe(flowing.clear if on else flowing.set)

    def silence(self) -> None:
        """Every connection open now stops passing bytes, for good; new ones work."""

        def silence() -> None:
            self._silenced_before = self._generation = self._generation + 1

        self._loop.call_soon_threadsafe(silence)

    # -- observation ---------------------------------------------------------------------------

    @property
    def open_connections(self) -> int:
        """Client connections currently proxied (or held)."""
        return len(self._handlers)

    # -- the loop's side -----------------------------------------------------------------------

    def _call(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(10)

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
            self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self, cut: bool = True) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        if cut:
            await self._cut()

    async def _cut(self, reset: bool = False) -> int:
        links, self._links = self._links, {}
        close = _reset if reset else _abort
        for client, server in links.items():
            close(client)
            if server is not None:
                close(server)
        self.dropped += len(links)
        return len(links)

    async def _close(self) -> None:
        await self._stop()
        self._flowing.set()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self.connections += 1
        generation = self._generation
        self._links[writer] = None
        try:
            if not self._flowing.is_set():
                self.held += 1
                await self._flowing.wait()
            if writer not in self._links:
                return  # cut while held
            try:
                up_reader, up_writer = await asyncio.open_connection(*self.target)
            except OSError:
                self.upstream_failures += 1
                _abort(writer)
                return
            if writer not in self._links:
                _abort(up_writer)
                return  # cut while connecting
            self._links[writer] = up_writer
            await asyncio.gather(
                self._pump(reader, up_writer, generation, upstream=True),
                self._pump(up_reader, writer, generation, upstream=False),
            )
        except asyncio.CancelledError:
            _abort(writer)  # the proxy is closing
        finally:
            self._links.pop(writer, None)
            self._handlers.discard(task)

    async def _pump(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, generation: int, upstream: bool
    ) -> None:
        with contextlib.suppress(OSError, asyncio.CancelledError):
            while data := await src.read(65536):
                if not self._flowing.is_set():
                    self.held += 1
                    await self._flowing.wait()
                if generation < self._silenced_before:
                    continue  # silenced: the bytes go nowhere, the socket stays open
                if dst.transport.is_closing():
                    break
                if upstream:
                    self.requests += 1
                dst.write(data)
                await dst.drain()
        dst.transport.abort()


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close at once, unsent bytes dropped (a FIN, or an RST if unread bytes remain)."""
    writer.transport.abort()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP reset (SO_LINGER 0), as a crashed peer or a dropped NAT entry does."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
